import type { Knex } from 'knex';

// events: one row per stored event. `raw` is the canonical JSON we send back verbatim, so a REQ never
// re-serialises; it is TEXT, not JSONB, because JSONB reorders keys and cannot hold "\u0000".
// Binary ids and pubkeys halve the size of the hottest indexes.
//
// event_tags: one row per distinct single-letter tag (name, first value) of an event, written in the
// same transaction. `kind` and `created_at` are copied from the event so that a tag filter walks the
// (name, value, created_at DESC, event_id) index already in result order and stops after `limit`
// rows, checking `kind` inside the index instead of visiting every match and sorting it. Rows are
// immutable, like events, so the copies can never go stale.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE TABLE events (
      id          bytea   PRIMARY KEY,
      pubkey      bytea   NOT NULL,
      kind        integer NOT NULL,
      created_at  bigint  NOT NULL,
      -- replaceable kinds: ''; addressable kinds: the first d tag's value; other kinds: NULL
      d_tag       text,
      -- NIP-40 expiration, when the event has one
      expires_at  bigint,
      raw         text    NOT NULL,
      received_at timestamptz NOT NULL DEFAULT now()
    );

    -- authors (+ kinds checked inside the index), newest first
    CREATE INDEX events_pubkey_time ON events (pubkey, created_at DESC, id, kind);
    -- kinds, newest first
    CREATE INDEX events_kind_time ON events (kind, created_at DESC, id);
    -- no ids/authors/kinds/tags: global feed and since/until windows
    CREATE INDEX events_time ON events (created_at DESC, id);
    -- exactly one current version per replaceable (pubkey, kind) or addressable (pubkey, kind, d)
    CREATE UNIQUE INDEX events_replace_key ON events (pubkey, kind, d_tag) WHERE d_tag IS NOT NULL;
    -- the expiry sweep
    CREATE INDEX events_expires_at ON events (expires_at) WHERE expires_at IS NOT NULL;

    CREATE TABLE event_tags (
      event_id   bytea   NOT NULL REFERENCES events (id) ON DELETE CASCADE,
      name       text    NOT NULL,
      value      text    NOT NULL,
      kind       integer NOT NULL,
      created_at bigint  NOT NULL,
      -- also serves the cascade from events and "does this event have tag x=v" checks
      PRIMARY KEY (event_id, name, value)
    );

    -- #x filters: one index range per value, in result order; kind is checked in the index
    CREATE INDEX event_tags_value_time ON event_tags (name, value, created_at DESC, event_id, kind);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('DROP TABLE IF EXISTS event_tags; DROP TABLE IF EXISTS events;');
}
