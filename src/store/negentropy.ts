// NIP-77: the snapshot a negentropy session reconciles against, read in one query (query.ts
// negentropyRecordsSql) straight into the columnar set of nostr/negentropy.ts.
import type pg from 'pg';
import type { Filter } from '../nostr/filter.js';
import { NegentropySet } from '../nostr/negentropy.js';
import { negentropyRecordsSql } from './query.js';

/** The records matching `filter`, or the count when it is over `max`. */
export async function readNegentropySet(pool: pg.Pool, filter: Filter, now: number, max: number): Promise<{ set: NegentropySet } | { tooMany: number }> {
  const sql = negentropyRecordsSql(filter, now, max);
  if (!sql) return { set: NegentropySet.fromSorted([], Buffer.alloc(0)) };
  const { rows } = await pool.query<{ n: number; times: Buffer; ids: Buffer }>(sql.text, sql.values);
  const { n, times, ids } = rows[0];
  if (n > max) return { tooMany: n };
  const timestamps = new Float64Array(n);
  for (let i = 0; i < n; i++) timestamps[i] = Number(times.readBigInt64BE(i * 8));
  return { set: NegentropySet.fromSorted(timestamps, ids) };
}
