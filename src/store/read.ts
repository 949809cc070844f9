// Running REQ and COUNT queries. Rows are streamed through a cursor in small batches, so a large
// answer never sits in memory whole, and the caller can stop early (subscription closed, socket gone).
import type pg from 'pg';
import Cursor from 'pg-cursor';
import type { Filter } from '../nostr/filter.js';
import { hllHex } from '../nostr/hll.js';
import { namedCursor } from './prepared-cursor.js';
import { countToSql, readPrelude, reqToSql, storedQueryFilters } from './query.js';

export interface StoredRow {
  id: string; // hex
  raw: string; // canonical event JSON
}

const BATCH_ROWS = 256;

/**
 * Streams the stored events matching a REQ, newest first. `onRows` returns false to stop reading.
 * Errors (including statement_timeout) propagate to the caller.
 */
export async function streamEvents(
  pool: pg.Pool,
  filters: Filter[],
  now: number,
  onRows: (rows: StoredRow[]) => boolean | Promise<boolean>,
): Promise<void> {
  if (storedQueryFilters(filters).length === 0) return;
  const client = await pool.connect();
  let cursor: Cursor<{ id: Buffer; raw: string }> | undefined;
  let broken = false;
  let genericPlans = false;
  try {
    const prelude = await readPrelude(filters, now, async (q) => (await client.query(q.text, q.values)).rows[0]);
    const sql = reqToSql(filters, now, prelude)!;
    if (sql.reusePlan) {
      // Only for this statement: the pool's other queries keep custom plans.
      genericPlans = true;
      await client.query('SET plan_cache_mode = force_generic_plan');
      cursor = await namedCursor(client, sql.text, sql.values);
    } else cursor = client.query(new Cursor<{ id: Buffer; raw: string }>(sql.text, sql.values));
    for (;;) {
      const rows = await cursor.read(BATCH_ROWS);
      if (rows.length === 0) break;
      const more = await onRows(rows.map((r) => ({ id: r.id.toString('hex'), raw: r.raw })));
      if (!more || rows.length < BATCH_ROWS) break;
    }
  } catch (err) {
    broken = true;
    throw err;
  } finally {
    if (broken) client.release(true);
    // Closing the portal and undoing the plan mode need not hold up the caller (its EOSE): the client
    // returns to the pool only once both are done, so no other query runs with this one's settings.
    else void tidyUp(client, cursor, genericPlans);
  }
}

async function tidyUp(client: pg.PoolClient, cursor: Cursor<unknown> | undefined, genericPlans: boolean): Promise<void> {
  try {
    await cursor?.close();
    if (genericPlans) await client.query('RESET plan_cache_mode');
    client.release();
  } catch (err) {
    client.release(err as Error); // a connection in an unknown state is closed, not reused
  }
}

export async function countEvents(pool: pg.Pool, filters: Filter[], now: number): Promise<number> {
  return (await countWithHll(pool, filters, now)).count;
}

/** NIP-45: the count and, with an offset (nostr/hll.ts hllOffset), the HLL registers as hex. */
export async function countWithHll(pool: pg.Pool, filters: Filter[], now: number, hllOffset?: number): Promise<{ count: number; hll?: string }> {
  const sql = countToSql(filters, now, hllOffset);
  if (!sql) return { count: 0, hll: hllOffset === undefined ? undefined : hllHex([]) };
  const { rows } = await pool.query<{ count: string; hll?: Array<[number, number]> }>(sql.text, sql.values);
  return { count: Number(rows[0].count), hll: rows[0].hll && hllHex(rows[0].hll) };
}
