import type { Knex } from 'knex';

// The operator's lists (NIP-86 management API and `npm run cli -- ban …`): banned and allowed pubkeys,
// banned events, allowed kinds, blocked IP addresses, and the relay information an admin changed.
// They live here so they survive restarts and every relay process on the database applies them.
// Any change to them, by the relay, the CLI or by hand in psql, bumps moderation_state.version in the
// same transaction (a statement trigger); each relay process polls that one row and reloads.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE TABLE moderation_state (
      singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
      version   bigint  NOT NULL
    );
    INSERT INTO moderation_state (version) VALUES (1);

    CREATE FUNCTION bump_moderation_version() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE moderation_state SET version = version + 1;
      RETURN NULL;
    END $$;

    CREATE TABLE banned_pubkeys (
      pubkey     bytea       PRIMARY KEY,
      reason     text,
      created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE allowed_pubkeys (
      pubkey     bytea       PRIMARY KEY,
      reason     text,
      created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE banned_events (
      id         bytea       PRIMARY KEY,
      reason     text,
      created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE allowed_kinds (
      kind       integer     PRIMARY KEY CHECK (kind BETWEEN 0 AND 65535),
      created_at timestamptz NOT NULL DEFAULT now()
    );
    -- an address or a CIDR block, in PostgreSQL's own canonical form
    CREATE TABLE blocked_ips (
      address    cidr        PRIMARY KEY,
      reason     text,
      created_at timestamptz NOT NULL DEFAULT now()
    );
    -- NIP-11 fields an admin changed (name, description, icon): they win over the configuration
    CREATE TABLE relay_info (
      field      text        PRIMARY KEY CHECK (field IN ('name', 'description', 'icon')),
      value      text        NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now()
    );
  `);
  for (const table of ['banned_pubkeys', 'allowed_pubkeys', 'banned_events', 'allowed_kinds', 'blocked_ips', 'relay_info']) {
    await knex.raw(`
      CREATE TRIGGER ${table}_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON ${table}
        FOR EACH STATEMENT EXECUTE FUNCTION bump_moderation_version();
    `);
  }
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    DROP TABLE IF EXISTS banned_pubkeys, allowed_pubkeys, banned_events, allowed_kinds, blocked_ips, relay_info;
    DROP FUNCTION IF EXISTS bump_moderation_version();
    DROP TABLE IF EXISTS moderation_state;
  `);
}
