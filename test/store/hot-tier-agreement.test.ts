// The hot tier against PostgreSQL and the NIP-01 reference: random REQs and COUNTs over a
// stored data set with replaceable and addressable versions, ties, expirations and deletions give the
// same answer from the tier (where it answers), from PostgreSQL, and from the reference, at several
// window boundaries (tier budgets); the deletions are made in SQL after the fill, so they reach the
// tier through the removal log and the feed, as another writer's would.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import type { FilterLimits } from '../../src/nostr/filter.js';
import { ChangeStream } from '../../src/store/changes.js';
import { openDatabase, type Database } from '../../src/store/database.js';
import { ChangeFeed } from '../../src/store/feed.js';
import { HotTierService } from '../../src/store/hot/service.js';
import { createTestDatabase } from '../support/database.js';
import { tierReq as tierReqOf } from '../support/tier-req.js';
import { until } from '../support/wait.js';
import {
  ABSENT_ID, BASE_TIME, eventsArb, expirationsAround, filtersArb, insertAll, parseAll, privacyArb, PUBKEYS, referenceCount, referenceReq, referenceStored, storeReq, TIME_SPAN, type Privacy,
  type RawFilter,
} from './nip01-reference.js';

const NOW = BASE_TIME + 20;
const LIMITS: FilterLimits = { maxValuesPerArray: 1000, defaultLimit: 25, maxLimit: 60 };
const ids = (events: Array<{ id: string }>) => events.map((e) => e.id);
const log = createLogger('silent');

let db: Database;
let stored: NostrEvent[];
let idPool: string[];
const tiers: Array<{ name: string; service: HotTierService; feed: ChangeFeed }> = [];

const tierReq = (service: HotTierService, filters: RawFilter[], privacy?: Privacy) => tierReqOf(service, db.pool, filters, NOW, LIMITS, privacy);

beforeAll(async () => {
  db = await openDatabase(parseConfig({ DATABASE_URL: await createTestDatabase(), LOG_LEVEL: 'silent' }), log);
  const [written] = fc.sample(eventsArb(expirationsAround(NOW), 2000, 2000), { seed: 20261124, numRuns: 1 });
  await insertAll(db.pool, written, 8);
  const kept = referenceStored(written);
  // Budgets from nothing to everything: the window boundary falls at different created_at values.
  for (const [name, bytes] of [['tiny', 40_000], ['quarter', 400_000], ['half', 1_200_000], ['all', 256 * 2 ** 20]] as const) {
    const changes = new ChangeStream();
    const feed = await new ChangeFeed(db.url, db.pool, changes, log, { removals: true, pollMs: 200 }).start();
    const service = new HotTierService(db.pool, changes, feed, log, bytes).start();
    await until(() => !service.current.filling, `the ${name} tier filled`);
    tiers.push({ name, service, feed });
  }
  // Deleted after the fill, by another writer: the tiers learn it from the removal log.
  const deleted = kept.filter((_, i) => i % 9 === 0).map((e) => e.id);
  await db.pool.query('DELETE FROM events WHERE id = ANY($1::bytea[])', [deleted.map((id) => Buffer.from(id, 'hex'))]);
  const gone = new Set(deleted);
  stored = kept.filter((e) => !gone.has(e.id));
  idPool = stored.slice(0, 60).map((e) => e.id);
}, 180_000);
afterAll(async () => {
  for (const t of tiers) {
    t.service.stop();
    await t.feed.stop();
  }
  await db?.close();
});

describe('the hot tier agrees with PostgreSQL and the reference', () => {
  it('windows differ from tier to tier, and the smaller ones do not hold everything', () => {
    const starts = tiers.map((t) => t.service.current.windowStart);
    expect(starts[0]).toBeGreaterThan(BASE_TIME);
    expect(starts[3]).toBe(-Infinity);
    expect(new Set(starts).size).toBe(4);
  });

  it.each([0, 1, 2, 3])('answers REQ as the reference and PostgreSQL do (tier %i)', async (index) => {
    const { service } = tiers[index];
    const before = service.stats.memory + service.stats.mixed;
    await fc.assert(
      fc.asyncProperty(filtersArb(idPool), async (filters) => {
        const expected = ids(referenceReq(filters, stored, NOW, LIMITS));
        expect(await tierReq(service, filters)).toEqual(expected);
        expect(ids(await storeReq(db.pool, filters, NOW, LIMITS))).toEqual(expected);
      }),
      { numRuns: 80 },
    );
    // Not vacuous: memory answered some of them (all of them could not be, below the window).
    expect(service.stats.memory + service.stats.mixed - before).toBeGreaterThan(index === 0 ? 5 : 40);
  });

  // Profiles, follow lists, relay lists: authors × replaceable kinds only, read from the tier's
  // version-per-author maps (tier.ts) rather than its lists. Versions were replaced in the stream and
  // some deleted after the fill.
  it.each([0, 1, 2, 3])('answers authors × replaceable kinds as the reference and PostgreSQL do (tier %i)', async (index) => {
    const { service } = tiers[index];
    const before = service.stats.memory;
    const time = fc.integer({ min: BASE_TIME - 1, max: BASE_TIME + TIME_SPAN + 1 });
    const filterArb = fc
      .record(
        {
          authors: fc.subarray([...PUBKEYS, ABSENT_ID], { minLength: 1 }),
          kinds: fc.subarray([0, 3, 10002, 10003], { minLength: 1 }),
          since: time,
          until: time,
          limit: fc.integer({ min: 0, max: 20 }),
        },
        { requiredKeys: ['authors', 'kinds'] },
      )
      .map((f) => f as RawFilter);
    await fc.assert(
      fc.asyncProperty(fc.array(filterArb, { minLength: 1, maxLength: 2 }), async (filters) => {
        const expected = ids(referenceReq(filters, stored, NOW, LIMITS));
        expect(await tierReq(service, filters)).toEqual(expected);
        expect(ids(await storeReq(db.pool, filters, NOW, LIMITS))).toEqual(expected);
      }),
      { numRuns: 100 },
    );
    // Not vacuous: memory answered some (22–34 of 100 in the two smaller windows, 61–68, all 100).
    expect(service.stats.memory - before).toBeGreaterThan([10, 10, 30, 99][index]);
  });

  it.each([1, 3])('applies private kinds as the reference does (tier %i)', async (index) => {
    const { service } = tiers[index];
    await fc.assert(
      fc.asyncProperty(filtersArb(idPool), privacyArb, async (filters, privacy) => {
        expect(await tierReq(service, filters, privacy)).toEqual(ids(referenceReq(filters, stored, NOW, LIMITS, privacy)));
      }),
      { numRuns: 100 },
    );
  });

  it.each([0, 2, 3])('counts as the reference does whenever it counts (tier %i)', async (index) => {
    const { service } = tiers[index];
    let counted = 0;
    await fc.assert(
      fc.asyncProperty(filtersArb(idPool), privacyArb, async (filters, privacy) => {
        const n = await service.count(parseAll(filters, LIMITS, privacy), NOW);
        if (n === undefined) return;
        counted++;
        expect(n).toBe(referenceCount(filters, stored, NOW, privacy));
      }),
      { numRuns: 100 },
    );
    if (index === 3) expect(counted).toBe(100);
  });
});
