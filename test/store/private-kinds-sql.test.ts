// Private kinds are filtered in SQL through the indexes (store/query.ts sqlFilters): an authenticated
// reader's DM REQ reads that reader's rows, never a scan through everyone else's DMs.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseFilter, type Filter } from '../../src/nostr/filter.js';
import { privateKindsRule } from '../../src/policy/private-kinds.js';
import type { Database } from '../../src/store/database.js';
import { readPrelude, reqToSql } from '../../src/store/query.js';
import { openTestStore, store, unsignedEvent } from '../ops/helpers.js';

const me = randomBytes(32).toString('hex');
const someone = () => randomBytes(32).toString('hex');
const NOW = 1_800_000_000;
const OTHERS = 400;
const MINE = 10; // five to me, five from me

let db: Database;
beforeAll(async () => {
  db = await openTestStore();
  const events = [];
  for (let i = 0; i < OTHERS; i++) events.push(unsignedEvent({ pubkey: someone(), kind: 4, created_at: NOW - i, tags: [['p', someone()]] }));
  for (let i = 0; i < MINE / 2; i++) {
    events.push(unsignedEvent({ pubkey: someone(), kind: 4, created_at: NOW - 1000 - i, tags: [['p', me]] }));
    events.push(unsignedEvent({ pubkey: me, kind: 4, created_at: NOW - 2000 - i, tags: [['p', someone()]] }));
  }
  for (let i = 0; i < 200; i++) events.push(unsignedEvent({ pubkey: someone(), kind: 1, created_at: NOW - i }));
  await store(db.pool, events);
  await db.pool.query('ANALYZE events, event_tags');
});
afterAll(() => db?.close());

const rule = privateKindsRule([4, 1059])!;

/** The filter as the relay runs it for a connection with `readers` authenticated (no readers: no rule). */
function filter(raw: object, readers?: string[]): Filter {
  const parsed = parseFilter(raw, { maxValuesPerArray: 1000, defaultLimit: 500, maxLimit: 5000 });
  if (!parsed.ok) throw new Error(parsed.reason);
  return readers ? rule.narrow!(parsed.value, { origin: 'connection', address: '127.0.0.1', pubkeys: new Set(readers) }) : parsed.value;
}

/** Runs the REQ's SQL under EXPLAIN ANALYZE: the rows it returned and every row its scans read. */
async function explain(filters: Filter[]): Promise<{ returned: number; scanned: number }> {
  const client = await db.pool.connect();
  try {
    const prelude = await readPrelude(filters, NOW, async (q) => (await client.query(q.text, q.values)).rows[0]);
    const sql = reqToSql(filters, NOW, prelude)!;
    const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql.text}`, sql.values);
    type Node = { 'Node Type': string; 'Actual Rows': number; 'Actual Loops': number; Plans?: Node[] };
    const plan: Node = rows[0]['QUERY PLAN'][0].Plan;
    let scanned = 0;
    const walk = (n: Node) => {
      if (/Scan/.test(n['Node Type'])) scanned += n['Actual Rows'] * n['Actual Loops'];
      n.Plans?.forEach(walk);
    };
    walk(plan);
    return { returned: plan['Actual Rows'], scanned };
  } finally {
    client.release();
  }
}

describe('private kinds in SQL', () => {
  it('a reader\'s {kinds:[4]} reads only rows the reader wrote or is tagged in', async () => {
    const { returned, scanned } = await explain([filter({ kinds: [4] }, [me])]);
    expect(returned).toBe(MINE);
    expect(scanned).toBeLessThan(4 * MINE);
  });

  it('{kinds:[4], "#p":[me]} reads only the reader\'s inbox', async () => {
    const narrowed = filter({ kinds: [4], '#p': [me] }, [me]);
    expect(narrowed.privateKinds).toBeUndefined(); // every match names the reader: nothing to narrow
    const { returned, scanned } = await explain([narrowed]);
    expect(returned).toBe(MINE / 2);
    expect(scanned).toBeLessThan(4 * MINE);
  });

  it('the same filter without the rule would read everyone\'s DMs (what the rule saves)', async () => {
    const { returned, scanned } = await explain([filter({ kinds: [4] })]);
    expect(returned).toBe(OTHERS + MINE);
    expect(scanned).toBeGreaterThanOrEqual(OTHERS);
  });

  it('a broad filter from nobody skips private kinds inside the index scan, still in result order', async () => {
    const { returned } = await explain([filter({ limit: 50 }, [])]);
    expect(returned).toBe(50);
    const sql = reqToSql([filter({ limit: 50 }, [])], NOW)!;
    const { rows } = await db.pool.query<{ raw: string }>(sql.text, sql.values);
    expect(rows.map((r) => JSON.parse(r.raw).kind)).toEqual(Array(50).fill(1));
  });
});
