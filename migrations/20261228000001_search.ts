import type { Knex } from 'knex';

// NIP-50 search (src/nostr/search.ts). `search` holds the words of a searchable event as a tsvector
// built by the relay from its own tokenizer, so the live matcher and PostgreSQL agree; NULL for
// every other kind. Adding a nullable column rewrites nothing. The GIN index is built CONCURRENTLY
// (this migration runs outside a transaction), so writers go on while it builds: on a table of
// millions of rows it takes a while, but it holds no lock that stops inserts. Events stored before
// this migration get their words from `npm run cli -- backfill-search` (src/ops/backfill-search.ts).
export const config = { transaction: false };

export async function up(knex: Knex): Promise<void> {
  await knex.raw('ALTER TABLE events ADD COLUMN IF NOT EXISTS search tsvector');
  // A build interrupted earlier leaves an INVALID index of this name: drop it and build again.
  await knex.raw(`DO $$ BEGIN
    IF EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = 'events_search' AND NOT i.indisvalid) THEN
      DROP INDEX events_search;
    END IF; END $$`);
  await knex.raw('CREATE INDEX CONCURRENTLY IF NOT EXISTS events_search ON events USING gin (search) WHERE search IS NOT NULL');
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('DROP INDEX CONCURRENTLY IF EXISTS events_search');
  await knex.raw('ALTER TABLE events DROP COLUMN IF EXISTS search');
}
