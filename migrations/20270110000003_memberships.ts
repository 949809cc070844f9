import type { Knex } from 'knex';

// Memberships that expire (src/store/memberships.ts): an allow-list entry may carry the moment its
// membership ends. NULL is a membership without end, what every entry was before. An expired entry
// stays on the list, so a relay whose members have all expired stays private.
//
// membership_admissions: what payment processors sent to POST /memberships, one row per request
// applied. A retried request (the same webhook-id or NIP-98 event, or the same payment reference)
// finds its row and gets the first answer instead of adding the days again; kept in the database so
// this holds across relay processes and restarts. It is also the record of who paid for what.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    ALTER TABLE allowed_pubkeys ADD COLUMN expires_at timestamptz;

    CREATE TABLE membership_admissions (
      request_id  text        PRIMARY KEY,
      reference   text        UNIQUE,
      pubkey      bytea       NOT NULL,
      days        integer,
      until       timestamptz,
      expires_at  timestamptz,
      created_at  timestamptz NOT NULL DEFAULT now(),
      CHECK ((days IS NULL) <> (until IS NULL))
    );
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    DROP TABLE IF EXISTS membership_admissions;
    ALTER TABLE allowed_pubkeys DROP COLUMN IF EXISTS expires_at;
  `);
}
