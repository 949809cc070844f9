import type { Knex } from 'knex';

// event_tags loses its foreign key to events; what the key did on delete, a trigger does.
//
// The key checked each tag row as it was inserted: one lookup of its event, with a FOR KEY SHARE lock,
// through SPI, per row. Every tag row is written by the writer in the statement that inserts its
// event (store/write.ts: only for the events that statement inserted), or by the importers and
// backfill-tags for events they lock: the check never refused one, and it was an eighth of the
// writer's PostgreSQL CPU under bench:ingest. Removals stay exact for every writer: the statement
// trigger that records the ids a DELETE removed (20261231000001_event_removals) now deletes their tag
// rows in the same statement, as the cascade did, and TRUNCATE events empties event_tags too.
//
// TRUNCATE event_tags from inside a TRUNCATE that empties it too (`TRUNCATE events, event_tags`)
// fails, as the table is in use: an empty one is left alone.
//
// The trigger's DELETE of tag rows is planned at each run (EXECUTE), for the number of ids it is
// given. PL/pgSQL would keep the plan made at a session's first DELETE: one made for a DELETE of many
// events (a scan of the whole of event_tags) would then serve every DELETE after it on that
// connection. An array of the ids would always get an index scan, but cannot hold more than ~29M.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    ALTER TABLE event_tags DROP CONSTRAINT IF EXISTS event_tags_event_id_fkey;

    CREATE OR REPLACE FUNCTION pgrelay_record_removals() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      EXECUTE 'DELETE FROM event_tags t USING removed_rows r WHERE t.event_id = r.id';
      INSERT INTO event_removals (id) SELECT id FROM removed_rows;
      IF FOUND THEN
        PERFORM pg_notify('pgrelay_events', pg_current_xact_id()::text);
      END IF;
      RETURN NULL;
    END $$;

    CREATE FUNCTION pgrelay_truncate_event_tags() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF EXISTS (SELECT FROM event_tags) THEN
        TRUNCATE event_tags;
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER events_truncate_tags AFTER TRUNCATE ON events
      FOR EACH STATEMENT EXECUTE FUNCTION pgrelay_truncate_event_tags();
    ALTER TABLE events ENABLE ALWAYS TRIGGER events_truncate_tags;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    DROP TRIGGER IF EXISTS events_truncate_tags ON events;
    DROP FUNCTION IF EXISTS pgrelay_truncate_event_tags();
    CREATE OR REPLACE FUNCTION pgrelay_record_removals() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO event_removals (id) SELECT id FROM removed_rows;
      IF FOUND THEN
        PERFORM pg_notify('pgrelay_events', pg_current_xact_id()::text);
      END IF;
      RETURN NULL;
    END $$;
    DELETE FROM event_tags t WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.id = t.event_id);
    ALTER TABLE event_tags ADD CONSTRAINT event_tags_event_id_fkey FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE CASCADE;
  `);
}
