// A REQ's stored events from the hot tier and PostgreSQL together: the filters the tier answers
// exactly come from memory, the rest from the database, merged into one answer in result order,
// each event once (as reqToSql unites filters). Most REQs are all one or all the other.
import type pg from 'pg';
import type { Filter } from '../../nostr/filter.js';
import { streamEvents, type StoredRow } from '../read.js';
import { inResultOrder, type HotTierService } from './service.js';

export type Answered = 'memory' | 'database' | 'mixed';

export async function streamStored(
  tier: HotTierService | undefined,
  database: () => Promise<pg.Pool>,
  filters: Filter[],
  now: number,
  /** `last`: these rows are the whole answer (from memory, or merged): no more calls follow. */
  onRows: (rows: StoredRow[], last?: boolean) => boolean | Promise<boolean>,
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
  // In one call: the caller sends it in chunks, checking the client's backlog before each.
  await onRows(rows, true);
  return plan.rest.length ? 'mixed' : 'memory';
}
