import type { Knex } from 'knex';

// NIP-62 requests to vanish: one tombstone per pubkey, the newest request's created_at. Events of that
// pubkey up to it, and gift wraps (kind 1059) p-tagging it up to it, were deleted in the transaction
// that stored the request, and the write planner refuses them for ever after (store/plan-batch.ts),
// also in imports. Newer events from the pubkey are accepted.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE TABLE vanished (
      pubkey      bytea       PRIMARY KEY,
      until       bigint      NOT NULL,
      request_id  bytea       NOT NULL,
      vanished_at timestamptz NOT NULL DEFAULT now()
    );
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('DROP TABLE IF EXISTS vanished');
}
