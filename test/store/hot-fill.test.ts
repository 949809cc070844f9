// The hot tier's fill (store/hot/fill.ts and HotTierService.fill): one statement read newest first in
// batches, each row prepared from the canonical JSON without parsing content or signature, and what
// other writers commit or delete while it reads (after its snapshot) reconciled through the change
// stream. Whatever the batch size and wherever the changes fall, the tier ends as a tier built at
// once from the final table, and answers exactly like PostgreSQL.
import fc from 'fast-check';
import type pg from 'pg';
import Cursor from 'pg-cursor';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import type { FilterLimits } from '../../src/nostr/filter.js';
import { ChangeStream } from '../../src/store/changes.js';
import { createPool, openDatabase, type Database } from '../../src/store/database.js';
import { ChangeFeed } from '../../src/store/feed.js';
import { prepareHeld, readNewestFirst } from '../../src/store/hot/fill.js';
import { HotTierService } from '../../src/store/hot/service.js';
import { HotTier } from '../../src/store/hot/tier.js';
import { prepareEvent, prepareStored } from '../../src/store/prepared-event.js';
import { createTestDatabase } from '../support/database.js';
import { tierReq as tierReqOf } from '../support/tier-req.js';
import { until } from '../support/wait.js';
import { isReplaceable } from '../../src/nostr/kinds.js';
import { BASE_TIME, eventArb, eventsArb, expirationsAround, filtersArb, insertAll, parseAll, PUBKEYS, referenceStored, resultOrder, storeReq, TIME_SPAN, type RawFilter } from './nip01-reference.js';

const NOW = BASE_TIME + 20;
const LIMITS: FilterLimits = { maxValuesPerArray: 1000, defaultLimit: 25, maxLimit: 60 };
const log = createLogger('silent');
const ids = (events: Array<{ id: string }>) => events.map((e) => e.id);

/** The fields of a prepared event the tier reads (tier.ts hold). */
function heldFields(raw: string, p = prepareHeld(raw)) {
  const { id, pubkey, created_at, kind, tags } = p.event;
  return { id, pubkey, created_at, kind, tags, raw: p.raw, kindClass: p.kindClass, dTag: p.dTag, expiresAt: p.expiresAt, indexed: p.tags };
}

describe('preparing a stored row for the tier', () => {
  it('gives what parsing the whole event gives, for canonical JSON', () => {
    const content = fc.oneof(fc.string(), fc.constantFrom('],"content":"', '\\"],"content":"x', '"}', '\u0000\ud83d\ude00'));
    const tagValue = fc.oneof(fc.string(), fc.constantFrom('],"content":"', 'a\\', '"', '\\u0000'));
    const tags = fc.array(fc.array(fc.oneof(fc.constantFrom('e', 'p', 'd', 't', 'expiration', 'content'), tagValue), { minLength: 1, maxLength: 3 }), { maxLength: 4 });
    fc.assert(
      fc.property(eventArb(expirationsAround(NOW)), content, tags, (event, text, extra) => {
        const raw = prepareEvent({ ...event, content: text, tags: [...event.tags, ...extra] }).raw;
        const whole = heldFields(raw, prepareStored(raw, false));
        expect(heldFields(raw)).toEqual(whole);
      }),
      { numRuns: 500 },
    );
  });

  it('parses a row in any other shape whole', () => {
    const event = fc.sample(eventArb(expirationsAround(NOW)), { seed: 7, numRuns: 1 })[0];
    const reordered = JSON.stringify({ pubkey: event.pubkey, id: event.id, kind: event.kind, created_at: event.created_at, content: 'x', tags: [['t', 'nostr']], sig: event.sig });
    const spaced = JSON.stringify({ ...event, tags: [['d', 'a']] }, null, 1);
    const contentFirst = `{"id":"${event.id}","pubkey":"${event.pubkey}","created_at":${event.created_at},"kind":30023,"content":"],\\"content\\":\\"","tags":[["d","z"]],"sig":"${event.sig}"}`;
    for (const raw of [reordered, spaced, contentFirst]) expect(heldFields(raw)).toEqual(heldFields(raw, prepareStored(raw, false)));
  });
});

describe('the fill', () => {
  let db: Database;
  let stored: NostrEvent[];

  beforeAll(async () => {
    db = await openDatabase(parseConfig({ DATABASE_URL: await createTestDatabase(), LOG_LEVEL: 'silent' }), log);
    const [written] = fc.sample(eventsArb(expirationsAround(NOW), 300, 300), { seed: 20261127, numRuns: 1 });
    await insertAll(db.pool, written, 8);
    stored = referenceStored(written);
  }, 60_000);

  afterAll(async () => {
    await db?.close();
  });

  it('reads every row once, newest first, whatever the batch size', async () => {
    const expected = ids([...stored].sort(resultOrder));
    for (const batchRows of [1, 7, 2000]) {
      const read: string[] = [];
      const end = await readNewestFirst(db.pool, (raws) => (read.push(...raws.map((raw) => prepareHeld(raw).event.id)), true), undefined, batchRows);
      expect(end).toBe(true);
      expect(read).toEqual(expected);
    }
  });

  it('reads for longer than the pool\'s statement timeout', async () => {
    const strict = createPool(db.url, { DB_POOL_SIZE: 2, QUERY_TIMEOUT_MS: 100 }, log);
    try {
      let read = 0;
      const slow = pausingPool(strict, () => new Promise((r) => setTimeout(r, 30)));
      expect(await readNewestFirst(slow, (raws) => ((read += raws.length), true), undefined, 25)).toBe(true);
      expect(read).toBe(stored.length);
    } finally {
      await strict.end();
    }
  });

  it('stops when asked, and gives its connection back', async () => {
    let batches = 0;
    expect(await readNewestFirst(db.pool, () => ++batches < 3, undefined, 10)).toBe(false);
    expect(batches).toBe(3);
    expect(db.pool.totalCount).toBe(db.pool.idleCount);
  });
});

/**
 * A pool whose fill cursor pauses before handing over each batch, for `between(batch)` to change the
 * database meanwhile: after the fill's snapshot, as another writer would.
 */
function pausingPool(pool: pg.Pool, between: (batch: number) => Promise<void>): pg.Pool {
  return {
    query: pool.query.bind(pool),
    connect: async () => {
      const client = await pool.connect();
      const query = client.query.bind(client) as (q: unknown) => unknown;
      return Object.assign(Object.create(client) as pg.PoolClient, {
        query: (q: unknown) => {
          const result = query(q);
          if (q instanceof Cursor) {
            let batch = 0;
            const read = q.read.bind(q);
            q.read = (async (rows: number) => {
              const got = await read(rows);
              await between(batch++);
              return got;
            }) as typeof q.read;
          }
          return result;
        },
        release: (err?: Error | boolean) => client.release(err),
      });
    },
  } as unknown as pg.Pool;
}

describe('what other writers do while the fill reads', () => {
  let db: Database;

  beforeAll(async () => {
    db = await openDatabase(parseConfig({ DATABASE_URL: await createTestDatabase(), LOG_LEVEL: 'silent' }), log);
  }, 60_000);

  afterAll(async () => {
    await db?.close();
  });

  const tierReq = (service: HotTierService, filters: RawFilter[]) => tierReqOf(service, db.pool, filters, NOW, LIMITS);

  /** A table of 240 sampled events; returns 240 more sampled with them, for a test to store meanwhile. */
  async function storeSample(seed: number): Promise<{ initial: NostrEvent[]; later: NostrEvent[] }> {
    await db.pool.query('TRUNCATE events, event_tags');
    const [initial, later] = fc.sample(eventsArb(expirationsAround(NOW), 240, 240), { seed, numRuns: 2 });
    await insertAll(db.pool, initial, 8);
    return { initial, later };
  }

  /**
   * A tier service on a live feed whose fill pauses for `between` before each batch (pausingPool);
   * `check` runs once it has filled and is fresh. The service and the feed stop afterwards.
   */
  async function whileFilling(
    fill: { budgetBytes: number; batchRows: number },
    between: (batch: number, service: HotTierService) => Promise<void>,
    check: (service: HotTierService) => Promise<void>,
  ): Promise<void> {
    const changes = new ChangeStream();
    const feed = await new ChangeFeed(db.url, db.pool, changes, log, { removals: true, pollMs: 50 }).start();
    let service: HotTierService | undefined;
    try {
      service = new HotTierService(pausingPool(db.pool, (batch) => between(batch, service!)), changes, feed, log, fill.budgetBytes, 2000, fill.batchRows).start();
      await until(() => !service!.current.filling, 'the tier filled', 60_000);
      await service.fresh();
      await check(service);
    } finally {
      service?.stop();
      await feed.stop();
    }
  }

  it('is reconciled: deletions, replacements and events older than the window end as a tier built from the final table', async () => {
    const { initial, later } = await storeSample(20261128);
    const windows: number[] = [];
    // Every few batches: delete some stored events (read or not yet), and store events of any age
    // (newer than the window, in the second being read, older: waiting), some replacing others.
    const between = async (batch: number, service: HotTierService) => {
      if (batch === 0 || batch % 4 !== 0 || batch / 4 > 6) return;
      windows.push(service.current.windowStart);
      const { rows } = await db.pool.query<{ id: Buffer }>('SELECT id FROM events ORDER BY md5(id::text || $1) LIMIT 6', [String(batch)]);
      await db.pool.query('DELETE FROM events WHERE id = ANY($1::bytea[])', [rows.map((r) => r.id)]);
      await insertAll(db.pool, later.slice((batch / 4 - 1) * 40, (batch / 4) * 40), 4);
      await service.fresh(); // the feed has brought both
    };
    await whileFilling({ budgetBytes: 64 * 2 ** 20, batchRows: 5 }, between, async (service) => {
      // The changes fell inside the fill: the window was still above the oldest stored second.
      expect(windows.length).toBe(6);
      expect(Math.max(...windows)).toBeLessThan(Infinity);
      expect(Math.min(...windows)).toBeGreaterThan(BASE_TIME);
      expect(service.current.windowStart).toBe(-Infinity);

      const { rows } = await db.pool.query<{ raw: string }>('SELECT raw FROM events ORDER BY created_at DESC, id');
      const final = rows.map((r) => JSON.parse(r.raw) as NostrEvent);
      expect(service.current.events).toBe(final.length);
      const reference = new HotTier({ budgetBytes: Infinity });
      reference.addOlder(rows.map((r) => prepareStored(r.raw, false)), true);
      expect(service.current.bytes).toBe(reference.bytes);

      const idPool = [...ids(final), ...ids(initial).slice(0, 20)];
      for (const filters of fc.sample(filtersArb(idPool), { seed: 11, numRuns: 300 })) {
        const answer = await tierReq(service, filters);
        expect(answer).toEqual(ids(await storeReq(db.pool, filters, NOW, LIMITS)));
        const fromReference = parseAll(filters, LIMITS).map((f) => reference.answer(f, NOW));
        if (filters.length === 1 && fromReference[0]) expect(answer).toEqual(ids(fromReference[0]));
      }
      expect(service.stats.memory).toBeGreaterThan(0);
    });
  }, 120_000);

  it('answers authors × replaceable kinds from memory while the newest-first pass reads, through new versions and deletions', async () => {
    const { later } = await storeSample(20261130);
    const versions = later.filter((e) => isReplaceable(e.kind)); // newer and older than those stored
    const windows: number[] = [];
    let asked = 0;
    let fromMemory = 0;
    const between = async (batch: number, s: HotTierService) => {
      // The first pass over replaceable events is over, the newest-first pass part read.
      if (!s.current.replaceableComplete || s.current.windowStart === Infinity || batch % 3 !== 1) return;
      windows.push(s.current.windowStart);
      await insertAll(db.pool, versions.splice(0, 6), 2);
      const { rows } = await db.pool.query<{ id: Buffer }>('SELECT id FROM events WHERE kind IN (0, 3) ORDER BY md5(id::text || $1) LIMIT 1', [String(batch)]);
      await db.pool.query('DELETE FROM events WHERE id = ANY($1::bytea[])', [rows.map((r) => r.id)]);
      await s.fresh();
      for (const kinds of [[0], [3], [0, 3, 10002]]) {
        const filters: RawFilter[] = [{ authors: PUBKEYS, kinds }];
        const before = s.stats.memory;
        expect(await tierReq(s, filters)).toEqual(ids(await storeReq(db.pool, filters, NOW, LIMITS)));
        asked++;
        fromMemory += s.stats.memory - before;
      }
    };
    await whileFilling({ budgetBytes: 64 * 2 ** 20, batchRows: 5 }, between, async (service) => {
      expect(Math.min(...windows)).toBeGreaterThan(BASE_TIME); // asked before the window reached the oldest events
      expect(asked).toBeGreaterThanOrEqual(9);
      expect(fromMemory).toBe(asked);
      const { rows } = await db.pool.query<{ raw: string }>('SELECT raw FROM events ORDER BY created_at DESC, id');
      const reference = new HotTier({ budgetBytes: Infinity });
      reference.addOlder(rows.map((r) => prepareStored(r.raw, false)), true);
      expect(service.current.events).toBe(rows.length);
      expect(service.current.bytes).toBe(reference.bytes);
      const idPool = rows.map((r) => prepareStored(r.raw, false).event.id);
      for (const filters of fc.sample(filtersArb(idPool), { seed: 13, numRuns: 200 }))
        expect(await tierReq(service, filters)).toEqual(ids(await storeReq(db.pool, filters, NOW, LIMITS)));
    });
  }, 120_000);

  it('stays exact when the budget ends the fill: what it holds answers as PostgreSQL does', async () => {
    const { later } = await storeSample(20261129);
    const between = async (batch: number, service: HotTierService) => {
      if (batch !== 2 && batch !== 5) return;
      const { rows } = await db.pool.query<{ id: Buffer }>('SELECT id FROM events ORDER BY md5(id::text || $1) LIMIT 6', [String(batch)]);
      await db.pool.query('DELETE FROM events WHERE id = ANY($1::bytea[])', [rows.map((r) => r.id)]);
      await insertAll(db.pool, later.slice(batch * 10, batch * 10 + 40), 4);
      await service.fresh();
    };
    await whileFilling({ budgetBytes: 60_000, batchRows: 9 }, between, async (service) => {
      expect(service.current.windowStart).toBeGreaterThan(BASE_TIME);
      expect(service.current.windowStart).toBeLessThanOrEqual(BASE_TIME + TIME_SPAN + 1);
      const { rows } = await db.pool.query<{ id: Buffer }>('SELECT id FROM events');
      const idPool = rows.map((r) => r.id.toString('hex'));
      let fromMemory = 0;
      for (const filters of fc.sample(filtersArb(idPool), { seed: 12, numRuns: 300 })) {
        const before = service.stats.memory;
        expect(await tierReq(service, filters)).toEqual(ids(await storeReq(db.pool, filters, NOW, LIMITS)));
        fromMemory += service.stats.memory - before;
      }
      expect(fromMemory).toBeGreaterThan(0);
    });
  }, 120_000);
});
