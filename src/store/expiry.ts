// NIP-40: expired events are never served (queries filter on expires_at) and are removed here.
import type pg from 'pg';

/** Deletes expired events in small batches (short locks); returns how many were removed. */
export async function deleteExpiredEvents(pool: pg.Pool, now: number, batchSize = 1000): Promise<number> {
  let total = 0;
  for (;;) {
    const { rowCount } = await pool.query(
      `DELETE FROM events WHERE id IN (
         SELECT id FROM events WHERE expires_at IS NOT NULL AND expires_at <= $1 LIMIT $2)`,
      [now, batchSize],
    );
    total += rowCount ?? 0;
    if ((rowCount ?? 0) < batchSize) return total;
  }
}
