import type { Knex } from 'knex';

// The search index's pending list is merged by the relay beside its writer (src/store/search-pending.ts);
// the index's own limit, at which the inserting transaction merges it itself, becomes the backstop
// for writers that do not. 16 MB instead of PostgreSQL's 4 MB default: a few seconds of writing at
// full speed, and a list a search still scans quickly.
export async function up(knex: Knex): Promise<void> {
  await knex.raw('ALTER INDEX events_search SET (gin_pending_list_limit = 16384)');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('ALTER INDEX events_search RESET (gin_pending_list_limit)');
}
