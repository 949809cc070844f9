// A REQ's stored events from the hot tier and PostgreSQL together: the filters the tier answers
// exactly come from memory, the rest from the database, merged into one answer in result order,
// each event once (as reqToSql unites filters). Most REQs are all one or all the other.
import type pg from 'pg';
import type { Filter } from '../../nostr/filter.js';
import { streamEvents, type StoredRow } from '../read.js';
import { inResultOrder, type HotTierService } from './service.js';

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
  let rows = plan.rows;
  if (plan.rest.length) {
    // Both: the database's part is bounded by its filters' limits, so it is collected, then merged.
    const more: StoredRow[] = [];
    await streamEvents(await database(), plan.rest, now, (batch) => (more.push(...batch), true));
    rows = inResultOrder([...rows, ...more]);
  }
  for (let i = 0; i < rows.length; i += BATCH_ROWS) if (!(await onRows(rows.slice(i, i + BATCH_ROWS)))) break;
  return plan.rest.length ? 'mixed' : 'memory';
}
