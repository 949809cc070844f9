// The hot tier's wait for freshness (store/hot/service.ts fresh()): before a REQ is answered from
// memory, a feed read that began after the REQ must have finished. The wait gives up (PostgreSQL
// answers) when the database does not read in time, but not when the relay itself was held up.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import { ChangeStream } from '../../src/store/changes.js';
import { openDatabase, type Database } from '../../src/store/database.js';
import { ChangeFeed } from '../../src/store/feed.js';
import { HotTierService } from '../../src/store/hot/service.js';
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
  feed = await new ChangeFeed(db.url, db.pool, changes, log, { removals: true, onRead: () => reads++ }).start();
  service = new HotTierService(db.pool, changes, feed, log, BUDGET, TIMEOUT_MS).start();
  await until(() => !service.current.filling, 'the tier filled');
}, 60_000);

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

  it('REQs that arrive before a read starts share it', async () => {
    await service.fresh();
    const before = reads;
    const waits = Array.from({ length: 50 }, () => service.fresh());
    // The first starts a read; the rest arrive while it is under way and share the next one.
    expect(new Set(waits).size).toBe(2);
    expect(await Promise.all(waits)).toEqual(Array(50).fill(true));
    expect(reads - before).toBe(2);
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
