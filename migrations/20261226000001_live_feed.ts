import type { Knex } from 'knex';

// Live delivery across processes and hosts (src/store/feed.ts). Every row inserted into events from
// now on carries the id of the transaction that wrote it (`txid`) and a sequence number (`seq`, its
// order within that transaction); one NOTIFY per transaction that stored events names its txid, on
// the channel `pgrelay_events`, after commit. Whoever writes (the relay, a second relay, `import`,
// psql) is announced the same way: the defaults and the trigger do it, not the writer. The trigger
// fires ALWAYS, also under session_replication_role = replica (which a bulk load may set).
// Rows stored before this migration keep NULL in both columns: they are never "new".
// Adding nullable columns and then defaults rewrites nothing, so this is quick on a large table.
//
// relay_ephemeral: ephemeral events too large for a NOTIFY payload (8,000 bytes), kept a minute for
// the other processes to fetch. UNLOGGED: never written to the WAL, emptied by a crash; they are
// ephemeral anyway.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE SEQUENCE events_seq;
    ALTER TABLE events ADD COLUMN seq bigint, ADD COLUMN txid xid8;
    ALTER TABLE events ALTER COLUMN seq SET DEFAULT nextval('events_seq'),
                       ALTER COLUMN txid SET DEFAULT pg_current_xact_id();
    ALTER SEQUENCE events_seq OWNED BY events.seq;
    CREATE INDEX events_feed ON events (txid, seq) WHERE txid IS NOT NULL;

    CREATE FUNCTION pgrelay_notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      -- Once per transaction: identical payloads on one channel within a transaction are folded
      -- into one notification. Statements that inserted nothing (all duplicates) say nothing.
      IF EXISTS (SELECT 1 FROM inserted_rows) THEN
        PERFORM pg_notify('pgrelay_events', pg_current_xact_id()::text);
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER events_notify AFTER INSERT ON events REFERENCING NEW TABLE AS inserted_rows
      FOR EACH STATEMENT EXECUTE FUNCTION pgrelay_notify_events();
    ALTER TABLE events ENABLE ALWAYS TRIGGER events_notify;

    CREATE UNLOGGED TABLE relay_ephemeral (
      id         bigserial   PRIMARY KEY,
      raw        text        NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now()
    );
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    DROP TABLE IF EXISTS relay_ephemeral;
    DROP TRIGGER IF EXISTS events_notify ON events;
    DROP FUNCTION IF EXISTS pgrelay_notify_events();
    DROP INDEX IF EXISTS events_feed;
    ALTER TABLE events DROP COLUMN IF EXISTS seq, DROP COLUMN IF EXISTS txid;
  `);
}
