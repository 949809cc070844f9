import type { Knex } from 'knex';

// ops_checkpoints: where a long operator command (backfill-tags, import-nostream) got to, so a run
// that is interrupted resumes there instead of starting over. One row per operation (and source);
// `position` is the last key fully processed, `counts` the running totals for the final summary.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE TABLE ops_checkpoints (
      name       text        PRIMARY KEY,
      position   text        NOT NULL,
      counts     jsonb       NOT NULL DEFAULT '{}',
      updated_at timestamptz NOT NULL DEFAULT now()
    );
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('DROP TABLE IF EXISTS ops_checkpoints;');
}
