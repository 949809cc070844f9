import type { Knex } from 'knex';

// Webhooks, the transactional outbox: an endpoint is a URL and NIP-01 filters; a delivery
// row is written in the transaction that stores a matching event (store/outbox.ts), so an event that
// got `OK true` is delivered or still queued, whatever crashes. Deliveries are claimed in batches
// (FOR UPDATE SKIP LOCKED) and hidden until `visible_at` while one process works on them: a claim that
// is never completed comes back. `webhook_generation` changes with every change to the endpoints, so
// a writer knows when to read them again (see outbox.ts for the lock that makes that exact).
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE TABLE webhook_endpoints (
      id         serial      PRIMARY KEY,
      url        text        NOT NULL,
      filters    jsonb       NOT NULL,
      secret     text,
      batch_size int         NOT NULL DEFAULT 1 CHECK (batch_size BETWEEN 1 AND 1000),
      paused     boolean     NOT NULL DEFAULT false,
      created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE webhook_generation (
      only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
      generation bigint  NOT NULL
    );
    INSERT INTO webhook_generation VALUES (true, 0);
    CREATE TABLE webhook_deliveries (
      id          bigserial   PRIMARY KEY,
      endpoint_id int         NOT NULL REFERENCES webhook_endpoints ON DELETE CASCADE,
      event_id    bytea       NOT NULL,
      payload     text        NOT NULL,
      created_at  timestamptz NOT NULL DEFAULT now(),
      visible_at  timestamptz NOT NULL DEFAULT now(),
      attempts    int         NOT NULL DEFAULT 0,
      last_error  text,
      dead        boolean     NOT NULL DEFAULT false
    );
    CREATE INDEX webhook_deliveries_ready ON webhook_deliveries (visible_at, id) WHERE NOT dead;
    CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id);
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('DROP TABLE IF EXISTS webhook_deliveries; DROP TABLE IF EXISTS webhook_generation; DROP TABLE IF EXISTS webhook_endpoints;');
}
