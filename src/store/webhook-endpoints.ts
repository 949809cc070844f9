// Webhook endpoints for the operator (`npm run cli -- webhook`): adding, listing, pausing
// and removing endpoints, looking at their queues, and filling a queue again from stored events.
// Every change to webhook_endpoints goes through changeEndpoints (store/outbox.ts), which takes the
// outbox lock and bumps the generation, so that running relays enqueue for the new endpoints from
// exactly the next batch they write.
import type pg from 'pg';
import type { NostrEvent } from '../nostr/event.js';
import { compileFilter, toMatchable, type MatchableEvent } from '../nostr/filter.js';
import { searchDocument } from '../nostr/search.js';
import { changeEndpoints, parseEndpointFilters } from './outbox.js';
import { needsPreparing, prepareSearch } from './search.js';
import { checkSecret } from './webhook-secret.js';

export { checkSecret, generateSecret } from './webhook-secret.js';

export const MAX_BATCH_SIZE = 1000;

/** Why a URL is refused as an endpoint, or undefined when it is an http(s) URL with a host. */
export function checkEndpointUrl(url: string): string | undefined {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return `not a URL: ${JSON.stringify(url)}`;
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') return `the URL must be http or https (got ${parsed.protocol.slice(0, -1)})`;
  if (!parsed.hostname) return 'the URL has no host';
  return undefined;
}

export interface NewEndpoint {
  url: string;
  /** NIP-01 filters as given (stored as they are: the relays parse them when they load them). */
  filters: unknown[];
  secret: string | null;
  batchSize: number;
}

/** Adds an endpoint; throws on a bad URL, filter, secret or batch size. Returns its id. */
export async function addEndpoint(pool: pg.Pool, endpoint: NewEndpoint): Promise<number> {
  const badUrl = checkEndpointUrl(endpoint.url);
  if (badUrl) throw new Error(badUrl);
  const parsed = parseEndpointFilters(endpoint.filters);
  if (!parsed.ok) throw new Error(`bad filter: ${parsed.reason}`);
  const badSecret = endpoint.secret === null ? undefined : checkSecret(endpoint.secret);
  if (badSecret) throw new Error(badSecret);
  if (!Number.isInteger(endpoint.batchSize) || endpoint.batchSize < 1 || endpoint.batchSize > MAX_BATCH_SIZE)
    throw new Error(`the batch size must be from 1 to ${MAX_BATCH_SIZE}`);
  return changeEndpoints(pool, async (client) => {
    const { rows } = await client.query<{ id: number }>(
      'INSERT INTO webhook_endpoints (url, filters, secret, batch_size) VALUES ($1, $2::jsonb, $3, $4) RETURNING id',
      [endpoint.url, JSON.stringify(endpoint.filters), endpoint.secret, endpoint.batchSize],
    );
    return rows[0].id;
  });
}

export interface EndpointSummary {
  id: number;
  url: string;
  filters: unknown;
  hasSecret: boolean;
  batchSize: number;
  paused: boolean;
  createdAt: Date;
  /** Deliveries waiting (not dead), including those claimed by a worker right now. */
  queued: number;
  dead: number;
  /** Age in seconds of the oldest waiting delivery, or null when none waits. */
  oldestQueuedSeconds: number | null;
}

/** Every endpoint with its queue's counts, in one query. */
export async function listEndpoints(pool: pg.Pool): Promise<EndpointSummary[]> {
  const { rows } = await pool.query<{
    id: number;
    url: string;
    filters: unknown;
    has_secret: boolean;
    batch_size: number;
    paused: boolean;
    created_at: Date;
    queued: string;
    dead: string;
    oldest: number | null;
  }>(
    `SELECT e.id, e.url, e.filters, e.secret IS NOT NULL AS has_secret, e.batch_size, e.paused, e.created_at,
            count(d.id) FILTER (WHERE NOT d.dead) AS queued,
            count(d.id) FILTER (WHERE d.dead) AS dead,
            extract(epoch FROM now() - min(d.created_at) FILTER (WHERE NOT d.dead))::float8 AS oldest
       FROM webhook_endpoints e LEFT JOIN webhook_deliveries d ON d.endpoint_id = e.id
      GROUP BY e.id
      ORDER BY e.id`,
  );
  return rows.map((r) => ({
    id: r.id,
    url: r.url,
    filters: r.filters,
    hasSecret: r.has_secret,
    batchSize: r.batch_size,
    paused: r.paused,
    createdAt: r.created_at,
    queued: Number(r.queued),
    dead: Number(r.dead),
    oldestQueuedSeconds: r.oldest === null ? null : Math.max(0, r.oldest),
  }));
}

/** Pauses or resumes an endpoint (a paused one keeps its queue, which no worker claims). False: no such endpoint. */
export async function setPaused(pool: pg.Pool, id: number, paused: boolean): Promise<boolean> {
  return changeEndpoints(pool, async (client) => {
    const { rowCount } = await client.query('UPDATE webhook_endpoints SET paused = $2 WHERE id = $1', [id, paused]);
    return rowCount === 1;
  });
}

/** Deliveries removed per statement while an endpoint is removed. */
const REMOVE_BATCH = 10_000;

/**
 * Removes an endpoint and its deliveries. Returns how many deliveries were dropped, or undefined when
 * there is no such endpoint. Writers wait for changeEndpoints' exclusive lock, so its queue is not
 * deleted under that lock, however long it is: the endpoint is paused first (no worker claims its
 * deliveries from then on), its queue is deleted in batches of REMOVE_BATCH, each its own short
 * statement, and only the endpoint row and the few deliveries queued meanwhile go under the lock.
 * Interrupted, it leaves the endpoint paused, with what remains of its queue.
 */
export async function removeEndpoint(pool: pg.Pool, id: number): Promise<{ queued: number; dead: number } | undefined> {
  if (!(await setPaused(pool, id, true))) return undefined;
  const dropped = { queued: 0, dead: 0 };
  const count = (rows: Array<{ queued: number; dead: number }>) => ((dropped.queued += rows[0].queued), (dropped.dead += rows[0].dead), rows[0].queued + rows[0].dead);
  // A batch is the endpoint's deliveries up to the id of its LIMIT-th, deleted as one range of the
  // (endpoint_id, id) index. Not `id IN (SELECT … LIMIT n)`: on statistics taken while the queue was
  // empty, PostgreSQL runs that as a nested loop that reads the whole subquery again for each row of
  // the table (32 s for 2,000 of 25,000 rows, measured; 25 ms with current statistics).
  const DELETE = `WITH batch_end AS (SELECT max(id) AS id FROM (SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id LIMIT $2) b),
                  gone AS (DELETE FROM webhook_deliveries WHERE endpoint_id = $1 AND id <= (SELECT id FROM batch_end) RETURNING dead)
                  SELECT count(*) FILTER (WHERE NOT dead)::int AS queued, count(*) FILTER (WHERE dead)::int AS dead FROM gone`;
  while (count((await pool.query<{ queued: number; dead: number }>(DELETE, [id, REMOVE_BATCH])).rows) === REMOVE_BATCH);
  const removed = await changeEndpoints(pool, async (client) => {
    const found = await client.query('SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR UPDATE', [id]);
    if (found.rowCount === 0) return false;
    count((await client.query<{ queued: number; dead: number }>(DELETE, [id, null])).rows); // LIMIT NULL: all
    await client.query('DELETE FROM webhook_endpoints WHERE id = $1', [id]);
    return true;
  });
  return removed ? dropped : undefined;
}

export async function endpointExists(pool: pg.Pool, id: number): Promise<boolean> {
  const { rowCount } = await pool.query('SELECT 1 FROM webhook_endpoints WHERE id = $1', [id]);
  return rowCount === 1;
}

export interface DeliveryRow {
  id: string; // bigint
  eventId: string; // hex
  attempts: number;
  lastError: string | null;
  createdAt: Date;
  visibleAt: Date;
}

/** An endpoint's waiting (or, with `dead`, dead) deliveries, oldest first. */
export async function listDeliveries(pool: pg.Pool, endpointId: number, options: { limit: number; dead: boolean }): Promise<DeliveryRow[]> {
  const { rows } = await pool.query<{ id: string; event_id: string; attempts: number; last_error: string | null; created_at: Date; visible_at: Date }>(
    `SELECT id::text AS id, encode(event_id, 'hex') AS event_id, attempts, last_error, created_at, visible_at
       FROM webhook_deliveries
      WHERE endpoint_id = $1 AND dead = $2
      ORDER BY id
      LIMIT $3`,
    [endpointId, options.dead, options.limit],
  );
  return rows.map((r) => ({ id: r.id, eventId: r.event_id, attempts: r.attempts, lastError: r.last_error, createdAt: r.created_at, visibleAt: r.visible_at }));
}

/** Makes an endpoint's dead deliveries live again, from their first attempt; returns how many. */
export async function redeliverDead(pool: pg.Pool, endpointId: number): Promise<number> {
  const { rowCount } = await pool.query(
    'UPDATE webhook_deliveries SET dead = false, visible_at = now(), attempts = 0 WHERE endpoint_id = $1 AND dead',
    [endpointId],
  );
  return rowCount ?? 0;
}

export interface ReplayOptions {
  /** Events with created_at >= since (unix seconds). */
  since: number;
  /** Events read per page. */
  pageSize?: number;
  /** Deliveries inserted per statement. */
  insertSize?: number;
  signal?: AbortSignal;
  /** The clock, for NIP-40 expiry (unix seconds). */
  now?: number;
}

export interface ReplayResult {
  /** Stored events read (created_at >= since, unexpired). */
  scanned: number;
  /** Deliveries enqueued: the events that match the endpoint's filters. */
  enqueued: number;
  complete: boolean;
}

/**
 * Enqueues again, for one endpoint, every stored and unexpired event with created_at >= since that
 * its filters match (the writer's matcher, in Node). Events are read in pages by (created_at, id)
 * with keyset pagination; a page's deliveries are inserted in statements of `insertSize`, each its
 * own transaction, so a replay stopped halfway keeps what it enqueued. Undefined: no such endpoint.
 */
export async function replayEndpoint(pool: pg.Pool, endpointId: number, options: ReplayOptions): Promise<ReplayResult | undefined> {
  const { rows } = await pool.query<{ filters: unknown }>('SELECT filters FROM webhook_endpoints WHERE id = $1', [endpointId]);
  if (rows.length === 0) return undefined;
  const parsed = parseEndpointFilters(rows[0].filters);
  if (!parsed.ok) throw new Error(`endpoint ${endpointId} has filters the relay refuses (${parsed.reason}): it matches nothing`);
  if (needsPreparing(parsed.filters)) await prepareSearch(pool, parsed.filters);
  const matchers = parsed.filters.map(compileFilter);
  const withSearch = parsed.filters.some((f) => f.search !== undefined);
  const pageSize = options.pageSize ?? 1000;
  const insertSize = options.insertSize ?? 1000;
  const now = options.now ?? Math.floor(Date.now() / 1000);

  const result: ReplayResult = { scanned: 0, enqueued: 0, complete: false };
  let pending: { eventIds: Buffer[]; payloads: string[] } = { eventIds: [], payloads: [] };
  const flush = async () => {
    if (pending.eventIds.length === 0) return;
    await pool.query(
      'INSERT INTO webhook_deliveries (endpoint_id, event_id, payload) SELECT $1, * FROM unnest($2::bytea[], $3::text[])',
      [endpointId, pending.eventIds, pending.payloads],
    );
    result.enqueued += pending.eventIds.length;
    pending = { eventIds: [], payloads: [] };
  };

  // The keyset: (created_at, id) of the last event read. The empty bytea sorts before every id.
  let after: { createdAt: string; id: Buffer } = { createdAt: String(options.since), id: Buffer.alloc(0) };
  for (;;) {
    if (options.signal?.aborted) return result;
    // (created_at is read as text, under another name: ORDER BY would take the output column.)
    const page = await pool.query<{ id: Buffer; ts: string; raw: string }>(
      `SELECT id, created_at::text AS ts, raw FROM events
        WHERE created_at >= $1 AND (created_at, id) > ($1, $2)
          AND (expires_at IS NULL OR expires_at > $3)
        ORDER BY created_at, id
        LIMIT $4`,
      [after.createdAt, after.id, now, pageSize],
    );
    for (const row of page.rows) {
      const event = JSON.parse(row.raw) as NostrEvent;
      const m: MatchableEvent = toMatchable(event);
      if (withSearch) m.searchDocument = searchDocument(event) ?? null;
      if (!matchers.some((match) => match(m))) continue;
      pending.eventIds.push(row.id);
      pending.payloads.push(row.raw);
      if (pending.eventIds.length >= insertSize) await flush();
    }
    result.scanned += page.rows.length;
    if (page.rows.length < pageSize) break;
    const last = page.rows[page.rows.length - 1];
    after = { createdAt: last.ts, id: last.id };
    await flush();
  }
  await flush();
  result.complete = true;
  return result;
}
