// Webhooks' transactional outbox: the writer enqueues one delivery per stored event and
// matching endpoint in the transaction that stores the event, so an event acknowledged with
// `OK true` is delivered or still queued, whatever crashes. Endpoints are NIP-01 filters, matched
// with the same matcher as live subscriptions.
//
// Exactness when endpoints change: every writing transaction takes a shared advisory lock and reads
// `webhook_generation`; adding, changing or removing an endpoint takes the same lock exclusively and
// bumps the generation (changeEndpoints). So a change commits either before a batch reads the
// generation (the batch re-reads the endpoints and uses the new ones) or after the batch commits
// (the batch's events were stored before the change). Reading the generation costs one row per batch.
import type pg from 'pg';
import { compileFilter, parseFilter, toMatchable, type Filter, type Matcher } from '../nostr/filter.js';
import { matchableWords, type PreparedEvent } from './prepared-event.js';
import { needsPreparing, prepareSearch } from './search.js';
import { withTransaction, type Outbox } from './write.js';

const LOCK = "hashtextextended('pgrelay:webhook-endpoints', 0)";

/** Limits for endpoint filters: an operator's, so generous; `limit` means nothing to a webhook. */
const ENDPOINT_FILTER_LIMITS = { maxValuesPerArray: 100_000, defaultLimit: 1, maxLimit: 1 };

/** Parses an endpoint's filters (a JSON array of NIP-01 filters), as the CLI checks them too. */
export function parseEndpointFilters(input: unknown): { ok: true; filters: Filter[] } | { ok: false; reason: string } {
  if (!Array.isArray(input) || input.length === 0) return { ok: false, reason: 'filters must be a non-empty JSON array of NIP-01 filters' };
  const filters: Filter[] = [];
  for (const f of input) {
    const parsed = parseFilter(f, ENDPOINT_FILTER_LIMITS);
    if (!parsed.ok) return { ok: false, reason: parsed.reason };
    filters.push(parsed.value);
  }
  return { ok: true, filters };
}

interface Endpoint {
  id: number;
  matchers: Matcher[];
}

export class WebhookOutbox implements Outbox {
  private generation: string | undefined;
  private endpoints: Endpoint[] = [];

  /** Endpoints known to this outbox (as of the last batch). */
  get size(): number {
    return this.endpoints.length;
  }

  /** The generation the endpoints were read at, once prepare() has run. */
  get knownGeneration(): string | undefined {
    return this.generation;
  }

  /**
   * prepare()'s shared lock alone, for a batch that compares the generation itself in the statement
   * that writes it (write.ts writePlainBatch): one statement, nothing that waits for its answer.
   */
  lock(client: pg.PoolClient): Promise<unknown> {
    return client.query(`SELECT pg_advisory_xact_lock_shared(${LOCK})`);
  }

  /**
   * In a writing transaction, before its events are enqueued: takes the shared lock and re-reads the
   * endpoints if they changed since the last batch.
   */
  async prepare(client: pg.PoolClient): Promise<void> {
    const { rows } = await client.query<{ generation: string }>(
      `SELECT generation::text AS generation FROM webhook_generation, pg_advisory_xact_lock_shared(${LOCK})`,
    );
    if (rows[0].generation === this.generation) return;
    const endpoints = await client.query<{ id: number; filters: unknown }>('SELECT id, filters FROM webhook_endpoints ORDER BY id');
    const loaded: Endpoint[] = [];
    for (const e of endpoints.rows) {
      const parsed = parseEndpointFilters(e.filters);
      if (!parsed.ok) continue; // the CLI refuses such filters; one written by hand matches nothing
      if (needsPreparing(parsed.filters)) await prepareSearch(client, parsed.filters);
      loaded.push({ id: e.id, matchers: parsed.filters.map(compileFilter) });
    }
    this.endpoints = loaded;
    this.generation = rows[0].generation;
  }

  /** Enqueues a delivery for each stored event and each endpoint it matches; returns how many. */
  async enqueue(client: pg.PoolClient, stored: PreparedEvent[]): Promise<number> {
    if (this.endpoints.length === 0 || stored.length === 0) return 0;
    const endpointIds: number[] = [];
    const eventIds: Buffer[] = [];
    const payloads: string[] = [];
    for (const p of stored) {
      const m = { ...toMatchable(p.event, p.tags), searchDocument: matchableWords(p) };
      for (const e of this.endpoints) {
        if (!e.matchers.some((match) => match(m))) continue;
        endpointIds.push(e.id);
        eventIds.push(Buffer.from(p.event.id, 'hex'));
        payloads.push(p.raw);
      }
    }
    if (endpointIds.length === 0) return 0;
    await client.query('INSERT INTO webhook_deliveries (endpoint_id, event_id, payload) SELECT * FROM unnest($1::int[], $2::bytea[], $3::text[])', [
      endpointIds,
      eventIds,
      payloads,
    ]);
    return endpointIds.length;
  }

  /**
   * An ephemeral event's deliveries, in a transaction of their own (it is never stored, so no write
   * batch carries them), when this outbox knows of any endpoint (as of its last batch: an endpoint
   * added since applies from the next stored batch).
   */
  async enqueueEphemeral(pool: pg.Pool, event: PreparedEvent): Promise<void> {
    if (this.endpoints.length === 0) return;
    await withTransaction(pool, async (client) => {
      await this.prepare(client);
      await this.enqueue(client, [event]);
    });
  }
}

/**
 * Changes the endpoints in a transaction of its own, holding the outbox lock exclusively and bumping
 * the generation, so that every batch committed afterwards uses the new endpoints (see above).
 */
export async function changeEndpoints<T>(pool: pg.Pool, change: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  return withTransaction(pool, async (client) => {
    await client.query(`SELECT pg_advisory_xact_lock(${LOCK})`);
    const result = await change(client);
    await client.query('UPDATE webhook_generation SET generation = generation + 1');
    return result;
  });
}
