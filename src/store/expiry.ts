// NIP-40: expired events are never served (queries filter on expires_at) and are removed here.
import type pg from 'pg';
import { deleteEventsWhere } from './batched-delete.js';

/** Deletes expired events in small batches (short locks); returns how many were removed. */
export function deleteExpiredEvents(pool: pg.Pool, now: number, batchSize = 1000): Promise<number> {
  return deleteEventsWhere(pool, 'expires_at IS NOT NULL AND expires_at <= $1', [now], batchSize);
}
