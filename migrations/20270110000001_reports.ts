import type { Knex } from 'knex';

// The moderation queue fed by NIP-56 reports (src/store/reports.ts).
//
// reports: every kind 1984 event the relay has read once, whoever wrote it, and whether its author
// was trusted then. A report is judged once: by the relay processes as its commit reaches them, or,
// for one stored while no relay ran, by the catch-up at the next start (a report not in this table).
//
// report_targets: what a trusted report names (an event, or a pubkey when it names no event), with
// its report type. An admin's decision clears the rows it covers (`cleared_at`): allowevent and
// dismisspubkeyreports do it by hand; a ban does it here, from every path that bans (NIP-86, the
// CLI, psql), by the triggers on banned_events and banned_pubkeys, so banning also empties the entry.
//
// report_queue_state.version moves with every change to report_targets (statement triggers that
// stay quiet when a statement changed nothing, as every relay process inserts the same report and
// all but the first insert nothing); each relay process polls it, as it polls moderation_state.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE TABLE reports (
      id        bytea       PRIMARY KEY,
      reporter  bytea       NOT NULL,
      trusted   boolean     NOT NULL,
      judged_at timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE report_targets (
      report_id   bytea       NOT NULL REFERENCES reports (id) ON DELETE CASCADE,
      target_type text        NOT NULL CHECK (target_type IN ('event', 'pubkey')),
      target      bytea       NOT NULL,
      report_type text        NOT NULL,
      reporter    bytea       NOT NULL,
      reported_at timestamptz NOT NULL DEFAULT now(),
      cleared_at  timestamptz,
      PRIMARY KEY (report_id, target_type, target, report_type)
    );
    CREATE INDEX report_targets_by_target ON report_targets (target_type, target, reporter);

    CREATE TABLE report_queue_state (
      singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
      version   bigint  NOT NULL
    );
    INSERT INTO report_queue_state (version) VALUES (1);

    CREATE FUNCTION bump_report_queue_version() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF EXISTS (SELECT 1 FROM changed_rows) THEN
        UPDATE report_queue_state SET version = version + 1;
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER report_targets_inserted AFTER INSERT ON report_targets REFERENCING NEW TABLE AS changed_rows
      FOR EACH STATEMENT EXECUTE FUNCTION bump_report_queue_version();
    CREATE TRIGGER report_targets_updated AFTER UPDATE ON report_targets REFERENCING NEW TABLE AS changed_rows
      FOR EACH STATEMENT EXECUTE FUNCTION bump_report_queue_version();
    CREATE TRIGGER report_targets_deleted AFTER DELETE ON report_targets REFERENCING OLD TABLE AS changed_rows
      FOR EACH STATEMENT EXECUTE FUNCTION bump_report_queue_version();

    CREATE FUNCTION clear_reports_of_banned_events() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE report_targets t SET cleared_at = now() FROM banned_rows b
       WHERE t.target_type = 'event' AND t.target = b.id AND t.cleared_at IS NULL;
      RETURN NULL;
    END $$;
    CREATE TRIGGER banned_events_clear_reports AFTER INSERT ON banned_events REFERENCING NEW TABLE AS banned_rows
      FOR EACH STATEMENT EXECUTE FUNCTION clear_reports_of_banned_events();

    CREATE FUNCTION clear_reports_of_banned_pubkeys() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE report_targets t SET cleared_at = now() FROM banned_rows b
       WHERE t.target_type = 'pubkey' AND t.target = b.pubkey AND t.cleared_at IS NULL;
      RETURN NULL;
    END $$;
    CREATE TRIGGER banned_pubkeys_clear_reports AFTER INSERT ON banned_pubkeys REFERENCING NEW TABLE AS banned_rows
      FOR EACH STATEMENT EXECUTE FUNCTION clear_reports_of_banned_pubkeys();
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    DROP TRIGGER IF EXISTS banned_events_clear_reports ON banned_events;
    DROP TRIGGER IF EXISTS banned_pubkeys_clear_reports ON banned_pubkeys;
    DROP FUNCTION IF EXISTS clear_reports_of_banned_events();
    DROP FUNCTION IF EXISTS clear_reports_of_banned_pubkeys();
    DROP TABLE IF EXISTS report_targets, reports, report_queue_state;
    DROP FUNCTION IF EXISTS bump_report_queue_version();
  `);
}
