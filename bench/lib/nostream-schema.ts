/**
 * nostream's `events` table (its migrations up to today, plus `event_delegator` from older versions):
 * the source `import-nostream` reads. Shared by the benchmark fixture and the import test.
 */
export function nostreamEventsTable(name: string): string {
  return `
    CREATE TABLE ${name} (
      id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
      event_id            bytea NOT NULL UNIQUE,
      event_pubkey        bytea NOT NULL,
      event_kind          integer NOT NULL,
      event_created_at    integer NOT NULL,
      event_content       text NOT NULL,
      event_tags          jsonb,           -- nullable, as in nostream: NULL means no tags
      event_signature     bytea NOT NULL,
      first_seen          timestamp without time zone DEFAULT now(),
      deleted_at          timestamp without time zone,
      event_deduplication jsonb,
      remote_address      text,
      expires_at          integer,
      event_delegator     bytea
    )`;
}
