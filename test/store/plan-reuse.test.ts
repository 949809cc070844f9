// REQs with long value lists run as named statements with generic plans (store/prepared-cursor.ts),
// padded to a few list lengths (store/query.ts); filters with several tag letters are driven by the
// letter that matches the fewest rows.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import { parseFilter, type Filter } from '../../src/nostr/filter.js';
import { createPool, openDatabase, type Database } from '../../src/store/database.js';
import { namedCursor, preparedStatementNames } from '../../src/store/prepared-cursor.js';
import { paddedLength, PLAN_REUSE_MIN_VALUES, readPrelude, reqToSql, TAG_COUNT_CAP } from '../../src/store/query.js';
import { streamEvents } from '../../src/store/read.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeEvent } from '../../src/store/write.js';
import { createTestDatabase } from '../support/database.js';
import { ids, newestFirst, randomHex64 } from '../support/events.js';
import { newSigner, now } from '../support/keys.js';
import type pg from 'pg';

const LIMITS = { maxValuesPerArray: 1000, defaultLimit: 500, maxLimit: 5000 };
const filter = (raw: Record<string, unknown>): Filter => {
  const parsed = parseFilter(raw, LIMITS);
  if (!parsed.ok) throw new Error(parsed.reason);
  return parsed.value;
};

describe('padded list lengths', () => {
  it('keeps short lists as they are and rounds long ones up to four sizes per power of two', () => {
    expect([1, 15].map(paddedLength)).toEqual([1, 15]);
    expect([16, 17, 20, 21, 33, 150, 300, 500, 1000].map(paddedLength)).toEqual([16, 20, 20, 24, 40, 160, 320, 512, 1024]);
    for (let n = PLAN_REUSE_MIN_VALUES; n <= 1000; n++) {
      expect(paddedLength(n)).toBeGreaterThanOrEqual(n);
      expect(paddedLength(n)).toBeLessThanOrEqual(n * 1.25);
    }
  });

  it('gives lists of nearby lengths the same SQL text', () => {
    const text = (n: number) => reqToSql([filter({ authors: Array.from({ length: n }, randomHex64), kinds: [1] })], now())!;
    expect(text(150).text).toBe(text(160).text);
    expect(text(150).reusePlan).toBe(true);
    expect(text(161).text).not.toBe(text(160).text);
    expect(text(15).reusePlan).toBe(false);
  });
});

describe('driving tag letter', () => {
  const twoLetters = filter({ '#e': [randomHex64(), randomHex64()], '#p': [randomHex64(), randomHex64(), randomHex64()] });
  const [e, p] = twoLetters.tags;
  const branchesOver = (sql: string) => (sql.match(/t\.value = \$/g) ?? []).length;

  it('is the letter matching the fewest rows, its rows probed against the other letter', () => {
    const sql = reqToSql([twoLetters], now(), { expiredIds: [], tagCounts: new Map([[e, 4000], [p, 12]]) })!.text;
    expect(branchesOver(sql)).toBe(p.values.length);
    expect(sql).toContain('OFFSET 0');
  });

  it('falls back to e before p, and leaves the join to PostgreSQL, when both letters match many rows', () => {
    const sql = reqToSql([twoLetters], now(), { expiredIds: [], tagCounts: new Map([[e, TAG_COUNT_CAP], [p, TAG_COUNT_CAP]]) })!.text;
    expect(branchesOver(sql)).toBe(e.values.length);
    expect(sql).not.toContain('OFFSET 0');
  });
});

describe('on a connection of its own', () => {
  let db: Database;
  let pool: pg.Pool;
  const author = newSigner();
  const others = Array.from({ length: 19 }, randomHex64);
  const written = Array.from({ length: 5 }, (_, i) => author.sign({ kind: 1, created_at: now() - i, tags: [['p', others[i]]] }));

  beforeAll(async () => {
    const url = await createTestDatabase();
    db = await openDatabase(parseConfig({ DATABASE_URL: url, LOG_LEVEL: 'silent' }), createLogger('silent'));
    for (const e of written) await writeEvent(db.pool, prepareEvent(e));
    pool = createPool(db.url, { DB_POOL_SIZE: 1, QUERY_TIMEOUT_MS: 10_000 }, createLogger('silent'));
  });
  afterAll(async () => {
    await pool?.end();
    await db?.close();
  });

  const req = async (filters: Filter[]) => {
    const out: string[] = [];
    await streamEvents(pool, filters, now(), (rows) => (out.push(...rows.map((r) => r.id)), true));
    return out;
  };
  const statements = async () =>
    (await pool.query<{ name: string; generic_plans: string; custom_plans: string }>('SELECT name, generic_plans, custom_plans FROM pg_prepared_statements ORDER BY name')).rows;

  it('prepares a long-list REQ once, runs it with a generic plan, and puts the connection back as it was', async () => {
    const authors = filter({ authors: [author.pubkey, ...others], kinds: [1] });
    const mentions = filter({ '#p': others, kinds: [1] });
    for (let i = 0; i < 3; i++) {
      expect(await req([authors])).toEqual(ids(newestFirst(written)));
      expect(await req([mentions])).toEqual(ids(newestFirst(written)));
    }
    const prepared = await statements();
    expect(prepared).toHaveLength(2);
    for (const s of prepared) expect([Number(s.generic_plans), Number(s.custom_plans)]).toEqual([3, 0]);
    expect((await pool.query('SHOW plan_cache_mode')).rows[0].plan_cache_mode).toBe('auto');
  });

  it('keeps at most `budget` characters of statements per connection, dropping the least recently used', async () => {
    const client = await pool.connect();
    try {
      const run = async (text: string) => {
        const cursor = await namedCursor<{ n: number }>(client, text, [], 2 * 'SELECT 1 AS n'.length);
        const rows = await cursor.read(10);
        await cursor.close();
        return rows[0].n;
      };
      const before = preparedStatementNames(client);
      expect(await run('SELECT 1 AS n')).toBe(1);
      expect(await run('SELECT 2 AS n')).toBe(2);
      expect(await run('SELECT 1 AS n')).toBe(1); // now the most recent
      expect(await run('SELECT 3 AS n')).toBe(3); // evicts SELECT 2 and whatever came before
      const names = preparedStatementNames(client);
      expect(names).toHaveLength(2);
      const onServer = (await client.query<{ name: string }>('SELECT name FROM pg_prepared_statements')).rows.map((r) => r.name);
      expect(onServer.sort()).toEqual([...names].sort());
      expect(names.some((n) => before.includes(n))).toBe(false);
      expect(await run('SELECT 2 AS n')).toBe(2); // parsed again after its eviction
    } finally {
      client.release();
    }
  });

  it('counts each tag letter of a multi-letter filter in the prelude, capped', async () => {
    const f = filter({ '#p': [others[0], others[1]], '#t': ['nothing-here'] });
    const prelude = await readPrelude([f], now(), async (q) => (await pool.query(q.text, q.values)).rows[0]);
    expect([...prelude.tagCounts.values()]).toEqual([2, 0]);
    expect(await req([f])).toEqual([]);
  });
});
