// The hot tier's wait for freshness (store/hot/service.ts fresh()): before a REQ is answered from
// memory, the feed must have read every commit made before the REQ arrived. While it listens and has
// read every commit it heard of, that takes no read (one round trip on its LISTEN connection); a
// commit heard of and not yet read (another writer's, this writer's deletion) is waited for. Reads
// are counted, so the no-wait path is shown by counts, not timing. The wait gives up (PostgreSQL
// answers) when the database does not read in time, but not when the relay itself was held up.
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import type { Filter } from '../../src/nostr/filter.js';
import { ChangeStream } from '../../src/store/changes.js';
import { openDatabase, type Database } from '../../src/store/database.js';
import { ChangeFeed } from '../../src/store/feed.js';
import { HotTierService } from '../../src/store/hot/service.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatchStored } from '../../src/store/write.js';
import { unsignedEvent } from '../ops/helpers.js';
import { createTestDatabase } from '../support/database.js';
import { until } from '../support/wait.js';

const log = createLogger('silent');
const TIMEOUT_MS = 100;
const BUDGET = 16 * 2 ** 20;

let db: Database;
let feed: ChangeFeed;
let service: HotTierService;
let reads = 0;

/** Holds the event loop, as a long garbage collection or a burst of work does. */
function holdEventLoop(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    /* busy */
  }
}

beforeAll(async () => {
  db = await openDatabase(parseConfig({ DATABASE_URL: await createTestDatabase(), LOG_LEVEL: 'silent' }), log);
  const changes = new ChangeStream();
  // A poll too rare to happen during a test: every read counted here has another cause.
  feed = await new ChangeFeed(db.url, db.pool, changes, log, { removals: true, pollMs: 60_000, onRead: () => reads++ }).start();
  service = new HotTierService(db.pool, changes, feed, log, BUDGET, TIMEOUT_MS).start();
  await until(() => !service.current.filling && feed.current, 'the tier filled, the feed listening and read');
}, 60_000);

/** A feed and a tier of their own, whose feed reads wait while `held` (a database that reads slowly). */
async function withHeldReads(run: (t: { feed: ChangeFeed; service: HotTierService; changes: ChangeStream; log: string[]; hold(): void; release(): void }) => Promise<void>): Promise<void> {
  let gate: { open: Promise<void>; release: () => void } | undefined;
  const pool = Object.create(db.pool) as pg.Pool;
  pool.query = (async (...args: Parameters<pg.Pool['query']>) => {
    await gate?.open;
    return (db.pool.query as (...a: unknown[]) => Promise<unknown>)(...args);
  }) as pg.Pool['query'];
  const order: string[] = [];
  const changes = new ChangeStream();
  const ownFeed = await new ChangeFeed(db.url, pool, changes, log, { removals: true, pollMs: 60_000, onRead: () => order.push('read') }).start();
  const ownService = new HotTierService(db.pool, changes, ownFeed, log, BUDGET, 60_000).start();
  try {
    await until(() => !ownService.current.filling && ownFeed.current, 'the tier filled, the feed listening and read');
    order.length = 0; // the reads of its start
    await run({
      feed: ownFeed,
      service: ownService,
      changes,
      log: order,
      hold() {
        let release!: () => void;
        gate = { open: new Promise<void>((r) => (release = r)), release: () => release() };
      },
      release() {
        gate?.release();
        gate = undefined;
      },
    });
  } finally {
    gate?.release();
    ownService.stop();
    await ownFeed.stop();
  }
}

/** The ids the tier answers for `filter` from memory (undefined: it cannot answer it alone). */
async function fromMemory(tier: HotTierService, filter: Partial<Filter>): Promise<string[] | undefined> {
  const plan = await tier.plan([{ tags: [], limit: 500, ...filter }], Math.floor(Date.now() / 1000));
  return plan.rest.length ? undefined : plan.rows.map((r) => r.id);
}

let n = 0;
const note = (t: Partial<Parameters<typeof unsignedEvent>[0]> = {}) => unsignedEvent({ content: `fresh ${++n}`, created_at: 1_700_000_000 + n, ...t });

afterAll(async () => {
  service?.stop();
  await feed?.stop();
  await db?.close();
});

describe('the hot tier waits for a feed read before answering', () => {
  it('answers from memory once a read has finished', async () => {
    expect(await service.fresh()).toBe(true);
  });

  it('still answers from memory when the relay itself was held up past the timeout', async () => {
    const fresh = service.fresh();
    holdEventLoop(4 * TIMEOUT_MS); // the timer is due long before the loop gets to the read's answer
    expect(await fresh).toBe(true);
  });

  it('answers a REQ on an idle relay without a feed read starting', async () => {
    const before = reads;
    const waits = Array.from({ length: 50 }, () => service.fresh());
    // Every REQ that arrives before the LISTEN round trip is sent shares it.
    expect(new Set(waits).size).toBe(1);
    expect(await Promise.all(waits)).toEqual(Array(50).fill(true));
    expect(await service.fresh()).toBe(true);
    expect(reads - before).toBe(0);
  });

  it('after another writer commits, the next REQ waits for a read, and the tier then holds the commit', async () => {
    await withHeldReads(async ({ feed: ownFeed, service: tier, log: order, hold, release }) => {
      hold();
      const e = note();
      await writeBatchStored(db.pool, [prepareEvent(e)]); // another writer: its NOTIFY reaches the feed
      await until(() => !ownFeed.current, 'the commit heard of');
      const fresh = tier.fresh().then((answer) => (order.push('answered'), answer));
      await ownFeed.heardUpToNow();
      await new Promise((r) => setImmediate(r));
      expect(order).toEqual([]); // its read is held: no answer yet
      release();
      expect(await fresh).toBe(true);
      expect(order).toEqual(['read', 'answered']);
      expect(await fromMemory(tier, { ids: [e.id] })).toEqual([e.id]);
    });
  });

  it("after this process's writer stores a deletion request, the next REQ waits for a read that removes what it deleted", async () => {
    await withHeldReads(async ({ feed: ownFeed, service: tier, changes, log: order, hold, release }) => {
      const target = note();
      const stored = await writeBatchStored(db.pool, [prepareEvent(target)], { own: ownFeed });
      changes.publish({ type: 'stored', events: stored.stored, source: 'local' }); // as the writer announces
      expect(await tier.fresh()).toBe(true);
      expect(await fromMemory(tier, { ids: [target.id] })).toEqual([target.id]);
      expect(order).toEqual([]); // its own event took no read

      hold();
      const deletion = note({ kind: 5, tags: [['e', target.id]] });
      const deleted = await writeBatchStored(db.pool, [prepareEvent(deletion)], { own: ownFeed });
      changes.publish({ type: 'stored', events: deleted.stored, source: 'local' });
      await new Promise((r) => setImmediate(r)); // the change stream delivers on the next turn, before any OK is read
      const fresh = tier.fresh().then((answer) => (order.push('answered'), answer));
      await ownFeed.heardUpToNow();
      await new Promise((r) => setImmediate(r));
      expect(order).toEqual([]);
      release();
      expect(await fresh).toBe(true);
      expect(order).toEqual(['read', 'answered']);
      expect(await fromMemory(tier, { ids: [target.id, deletion.id] })).toEqual([deletion.id]);
    });
  });

  it('waits for a read that began after the REQ while the LISTEN connection is down', async () => {
    await withHeldReads(async ({ feed: ownFeed, service: tier, log: order, hold, release }) => {
      const { rows } = await db.pool.query('SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity WHERE application_name = $1', [`pgrelay-listen-${process.pid}`]);
      expect(rows.length).toBeGreaterThan(0);
      await until(() => !ownFeed.listening, 'the LISTEN connection lost');
      hold();
      const fresh = tier.fresh().then((answer) => (order.push('answered'), answer));
      await new Promise((r) => setTimeout(r, 20));
      expect(order.filter((x) => x === 'answered')).toEqual([]);
      release();
      expect(await fresh).toBe(true);
      expect(order.at(-1)).toBe('answered');
      expect(order.filter((x) => x === 'read').length).toBeGreaterThan(0);
    });
  });

  it('gives up after the timeout when the database does not read (PostgreSQL answers the REQ)', async () => {
    const changes = new ChangeStream();
    // A feed whose reads never finish: a database that hangs.
    const stuck = { nextRead: () => new Promise<void>(() => {}), requestRead: () => {}, lastReadAt: Date.now(), reachable: true } as unknown as ChangeFeed;
    const tier = new HotTierService(db.pool, changes, stuck, log, BUDGET, TIMEOUT_MS).start();
    try {
      await until(() => !tier.current.filling, 'the second tier filled');
      const started = performance.now();
      expect(await tier.fresh()).toBe(false);
      expect(performance.now() - started).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
      const plan = await tier.plan([{ tags: [], limit: 10 }], Math.floor(Date.now() / 1000));
      expect(plan.rest).toHaveLength(1); // all of it for PostgreSQL
    } finally {
      tier.stop();
    }
  });

  it('answers from memory at once while the database cannot be read (restarting, failing over)', async () => {
    const changes = new ChangeStream();
    const down = { nextRead: () => new Promise<void>(() => {}), requestRead: () => {}, lastReadAt: Date.now(), reachable: false } as unknown as ChangeFeed;
    const tier = new HotTierService(db.pool, changes, down, log, BUDGET, TIMEOUT_MS).start();
    try {
      await until(() => !tier.current.filling, 'the tier filled');
      expect(await tier.fresh()).toBe(true);
      const plan = await tier.plan([{ tags: [], limit: 10 }], Math.floor(Date.now() / 1000));
      expect(plan.rest).toHaveLength(0); // none of it for PostgreSQL
      expect(tier.stats.unreachable).toBeGreaterThanOrEqual(2);
    } finally {
      tier.stop();
    }
  });

  it('a wait under way when the database stops answering ends in an answer from memory, not PostgreSQL', async () => {
    const changes = new ChangeStream();
    const state = { reachable: true };
    const failing = { nextRead: () => new Promise<void>(() => {}), requestRead: () => {}, lastReadAt: Date.now(), get reachable() { return state.reachable; } } as unknown as ChangeFeed;
    const tier = new HotTierService(db.pool, changes, failing, log, BUDGET, TIMEOUT_MS).start();
    try {
      await until(() => !tier.current.filling, 'the tier filled');
      const fresh = tier.fresh();
      state.reachable = false; // its read failed meanwhile
      expect(await fresh).toBe(true);
    } finally {
      tier.stop();
    }
  });

  it('keeps what it holds through minutes without a feed read while the database cannot be read, and fills again after the first read that follows', async () => {
    const changes = new ChangeStream();
    const feedState = { lastReadAt: Date.now(), reachable: true };
    const stub = { nextRead: () => new Promise<void>(() => {}), requestRead: () => {}, get lastReadAt() { return feedState.lastReadAt; }, set lastReadAt(v: number) { feedState.lastReadAt = v; }, get reachable() { return feedState.reachable; } } as unknown as ChangeFeed;
    const tier = new HotTierService(db.pool, changes, stub, log, BUDGET, TIMEOUT_MS).start();
    const housekeeping = () => (tier as unknown as { housekeeping(): void }).housekeeping();
    try {
      await until(() => !tier.current.filling, 'the tier filled');
      const held = (tier as unknown as { tier: object }).tier;
      // Down, and its last read ten minutes ago: nothing is thrown away.
      feedState.reachable = false;
      feedState.lastReadAt = Date.now() - 10 * 60_000;
      (tier as unknown as { seenReadAt: number }).seenReadAt = feedState.lastReadAt;
      housekeeping();
      expect((tier as unknown as { tier: object }).tier).toBe(held);
      // Back: the first read after the gap starts the tier again (removals may have been swept meanwhile).
      feedState.reachable = true;
      feedState.lastReadAt = Date.now();
      housekeeping();
      expect((tier as unknown as { tier: object }).tier).not.toBe(held);
    } finally {
      tier.stop();
    }
  });
});
