import type { Knex } from 'knex';

// What is deleted from events, for the processes that hold events in memory (the hot tier):
// every DELETE on events (a kind 5, a replaced version, a vanish, a ban's purge, prune, the expiry
// sweep, psql) records the ids it removed, stamped like inserted rows with the transaction's id and
// a number from the same sequence, and sends the transaction's NOTIFY on the events channel. Each
// process reads them as it reads new rows (store/feed.ts), behind the same horizon, so it learns of
// every removal exactly once whoever made it. Rows are swept after ten minutes (feed.ts).
// A statement trigger with a transition table: one INSERT … SELECT per DELETE statement, however many
// rows it removed.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE TABLE event_removals (
      txid       xid8        NOT NULL DEFAULT pg_current_xact_id(),
      seq        bigint      NOT NULL DEFAULT nextval('events_seq'),
      id         bytea       NOT NULL,
      removed_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX event_removals_feed ON event_removals (txid, seq);

    CREATE FUNCTION pgrelay_record_removals() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO event_removals (id) SELECT id FROM removed_rows;
      IF FOUND THEN
        PERFORM pg_notify('pgrelay_events', pg_current_xact_id()::text);
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER events_removals AFTER DELETE ON events REFERENCING OLD TABLE AS removed_rows
      FOR EACH STATEMENT EXECUTE FUNCTION pgrelay_record_removals();
    ALTER TABLE events ENABLE ALWAYS TRIGGER events_removals;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    DROP TRIGGER IF EXISTS events_removals ON events;
    DROP FUNCTION IF EXISTS pgrelay_record_removals();
    DROP TABLE IF EXISTS event_removals;
  `);
}
