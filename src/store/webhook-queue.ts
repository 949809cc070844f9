// Webhooks' delivery queue, PGMQ-style: deliveries are claimed in batches with FOR UPDATE SKIP
// LOCKED, so several relay processes share the work without claiming the same row, and hidden for a
// short lease while one works on them. The worker renews its leases while its requests run
// (renewLeases), so a worker that dies leaves its claims to come back within one lease. A delivered
// row is deleted; a failed one is made visible again later (backoff), or marked dead. Paused
// endpoints keep their queue and are skipped.
import type pg from 'pg';

export interface ClaimedDelivery {
  id: string; // bigint
  endpointId: number;
  eventId: string; // hex
  payload: string;
  attempts: number; // including this one
  createdAt: Date;
}

/**
 * Claims up to `limit` visible deliveries of enabled endpoints, hidden for `leaseMs`, those
 * visible longest first. Each enabled endpoint's ready deliveries are read on their own
 * (webhook_deliveries_ready_by_endpoint), so a paused endpoint's backlog costs a claim nothing.
 */
export async function claimDeliveries(pool: pg.Pool, limit: number, leaseMs: number): Promise<ClaimedDelivery[]> {
  const { rows } = await pool.query<{ id: string; endpoint_id: number; event_id: Buffer; payload: string; attempts: number; created_at: Date }>(
    `UPDATE webhook_deliveries d SET visible_at = now() + $2 * interval '1 millisecond', attempts = d.attempts + 1
      WHERE d.id IN (
        SELECT r.id FROM webhook_endpoints e CROSS JOIN LATERAL (
          SELECT q.id, q.visible_at FROM webhook_deliveries q
           WHERE q.endpoint_id = e.id AND NOT q.dead AND q.visible_at <= now()
           ORDER BY q.visible_at, q.id LIMIT $1
           FOR UPDATE SKIP LOCKED) r
         WHERE NOT e.paused
         ORDER BY r.visible_at, r.id LIMIT $1)
      RETURNING d.id::text AS id, d.endpoint_id, d.event_id, d.payload, d.attempts, d.created_at`,
    [limit, leaseMs],
  );
  return rows
    .map((r) => ({ id: r.id, endpointId: r.endpoint_id, eventId: r.event_id.toString('hex'), payload: r.payload, attempts: r.attempts, createdAt: r.created_at }))
    .sort((a, b) => (BigInt(a.id) < BigInt(b.id) ? -1 : 1));
}

/**
 * A claim, as the worker holds it: the row, and the attempt its claim counted. Outcomes and renewals
 * apply only while the row is still at that attempt, so a worker that finishes after its lease lapsed
 * and another claimed the row changes nothing.
 */
export type Claim = Pick<ClaimedDelivery, 'id' | 'attempts'>;

const CLAIMS = 'unnest($1::bigint[], $2::int[]) c(id, attempts) WHERE d.id = c.id AND d.attempts = c.attempts';
const claimParams = (claims: Claim[]) => [claims.map((c) => c.id), claims.map((c) => c.attempts)];

/**
 * Still working on these: hidden for another `leaseMs` from now. A row claimed again since (its lease
 * lapsed) is at a later attempt and stays with its new holder; a row whose lease lapsed but that no
 * one claimed is still this claim's and is extended. The UPDATE waits for a claim that has the row
 * locked, then sees its new attempt (READ COMMITTED re-checks the row), so it can never take a row
 * back from a worker that claimed it meanwhile.
 */
export async function renewLeases(pool: pg.Pool, claims: Claim[], leaseMs: number): Promise<number> {
  if (claims.length === 0) return 0;
  const { rowCount } = await pool.query(`UPDATE webhook_deliveries d SET visible_at = now() + $3 * interval '1 millisecond' FROM ${CLAIMS}`, [...claimParams(claims), leaseMs]);
  return rowCount ?? 0;
}

/** Delivered: the rows go. */
export async function completeDeliveries(pool: pg.Pool, claims: Claim[]): Promise<void> {
  if (claims.length) await pool.query(`DELETE FROM webhook_deliveries d USING ${CLAIMS}`, claimParams(claims));
}

/** Failed: visible again after `delayMs`, with the error; or dead (kept, never claimed again). */
export async function failDeliveries(pool: pg.Pool, claims: Claim[], error: string, delayMs: number, dead = false): Promise<void> {
  if (claims.length === 0) return;
  await pool.query(
    `UPDATE webhook_deliveries d SET visible_at = now() + $3 * interval '1 millisecond', last_error = $4, dead = $5 FROM ${CLAIMS}`,
    [...claimParams(claims), delayMs, error.slice(0, 1000), dead],
  );
}

/** Not attempted after all (the endpoint's circuit is open): visible again after `delayMs`, the attempt not counted. */
export async function postponeDeliveries(pool: pg.Pool, claims: Claim[], delayMs: number): Promise<void> {
  if (claims.length === 0) return;
  await pool.query(`UPDATE webhook_deliveries d SET visible_at = now() + $3 * interval '1 millisecond', attempts = d.attempts - 1 FROM ${CLAIMS}`, [...claimParams(claims), delayMs]);
}

export interface EndpointRow {
  id: number;
  url: string;
  secret: string | null;
  batchSize: number;
}

/** The endpoints deliveries go to, and the generation they were read at (outbox.ts). */
export async function readEndpoints(pool: pg.Pool): Promise<{ generation: string; endpoints: Map<number, EndpointRow> }> {
  const { rows } = await pool.query<{ id: number; url: string; secret: string | null; batch_size: number; generation: string }>(
    `SELECT e.id, e.url, e.secret, e.batch_size, g.generation::text AS generation FROM webhook_generation g LEFT JOIN webhook_endpoints e ON true`,
  );
  const endpoints = new Map<number, EndpointRow>();
  for (const r of rows) if (r.id !== null) endpoints.set(r.id, { id: r.id, url: r.url, secret: r.secret, batchSize: r.batch_size });
  return { generation: rows[0]?.generation ?? '0', endpoints };
}

export async function readGeneration(pool: pg.Pool): Promise<string> {
  return (await pool.query<{ generation: string }>('SELECT generation::text AS generation FROM webhook_generation')).rows[0].generation;
}
