// A REQ answered through the hot tier service (memory where it can, PostgreSQL for the rest), as the
// ids of its rows: what the tier tests compare with PostgreSQL's answer.
import type pg from 'pg';
import type { FilterLimits } from '../../src/nostr/filter.js';
import { streamStored } from '../../src/store/hot/read.js';
import type { HotTierService } from '../../src/store/hot/service.js';
import { parseAll, type Privacy, type RawFilter } from '../store/nip01-reference.js';

export async function tierReq(service: HotTierService, pool: pg.Pool, filters: RawFilter[], now: number, limits: FilterLimits, privacy?: Privacy): Promise<string[]> {
  const out: string[] = [];
  await streamStored(service, async () => pool, parseAll(filters, limits, privacy), now, (rows) => {
    out.push(...rows.map((r) => r.id));
    return true;
  });
  return out;
}
