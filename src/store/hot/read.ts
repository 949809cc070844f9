// A REQ's stored events from the hot tier and PostgreSQL together: the filters the tier answers
// exactly come from memory, the rest from the database, merged into one answer in result order,
// each event once (as reqToSql unites filters). Most REQs are all one or all the other.
import type pg from 'pg';
import type { Filter } from '../../nostr/filter.js';
import { streamEvents, type StoredRow } from '../read.js';
import { createdAtOf, resultOrder, type HotTierService } from './service.js';

const BATCH_ROWS = 256;

export type Answered = 'memory' | 'database' | 'mixed';

export async function streamStored(
  tier: HotTierService | undefined,
  database: () => Promise<pg.Pool>,
  filters: Filter[],
  now: number,
  onRows: (rows: StoredRow[]) => boolean | Promise<boolean>,
): Promise<Answered> {
  const plan = tier ? await tier.plan(filters, now) : { rows: [], rest: filters };
  if (plan.rest.length === filters.length) {
    await streamEvents(await database(), filters, now, onRows);
    return 'database';
  }
  let rows: Array<StoredRow & { createdAt: number }> = plan.rows;
  if (plan.rest.length) {
    // Both: the database's part is bounded by its filters' limits, so it is collected, then merged.
    const seen = new Set(rows.map((r) => r.id));
    const more: Array<StoredRow & { createdAt: number }> = [];
    await streamEvents(await database(), plan.rest, now, (batch) => {
      for (const r of batch) if (!seen.has(r.id)) more.push({ ...r, createdAt: createdAtOf(r.raw) });
      return true;
    });
    rows = [...rows, ...more].sort(resultOrder);
  }
  for (let i = 0; i < rows.length; i += BATCH_ROWS) if (!(await onRows(rows.slice(i, i + BATCH_ROWS)))) break;
  return plan.rest.length ? 'mixed' : 'memory';
}
