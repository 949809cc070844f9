import type { Knex } from 'knex';

// Webhooks: deliveries ready to send, by endpoint. A claim walks each enabled endpoint's ready
// deliveries on its own (store/webhook-queue.ts), so a paused endpoint's backlog, however long, is
// never read by a claim: with one index over every endpoint, each claim stepped over all of it
// (35,700 → 3,000 rows/s drained beside 100,000 paused rows, docs/benchmarks.md).
// The queue is short-lived data, so a plain CREATE INDEX in the migration's transaction is enough.
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE INDEX webhook_deliveries_ready_by_endpoint ON webhook_deliveries (endpoint_id, visible_at, id) WHERE NOT dead;
    DROP INDEX webhook_deliveries_ready;
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE INDEX webhook_deliveries_ready ON webhook_deliveries (visible_at, id) WHERE NOT dead;
    DROP INDEX webhook_deliveries_ready_by_endpoint;
  `);
}
