// Property tests: the SQL built by src/store/query.ts answers REQ and COUNT exactly as the NIP-01
// rules say (protocol.md 1.9, 5, 7), checked against the in-memory reference in nip01-reference.ts.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { matchFilter, type FilterLimits } from '../../src/nostr/filter.js';
import { openDatabase, type Database } from '../../src/store/database.js';
import { createTestDatabase } from '../support/database.js';
import {
  BASE_TIME, eventArb, eventsArb, expirationsAround, filterArb, filtersArb, insertAll, longListFiltersArb, parseAll, privacyArb, referenceCount, referenceMatch,
  referenceReq, referenceStored, referenceVisible, storeCount, storeReq, type RawFilter,
} from './nip01-reference.js';

const NOW = BASE_TIME + 20; // inside the created_at range, so expirations fall on both sides of it
const LIMITS: FilterLimits = { maxValuesPerArray: 1000, defaultLimit: 25, maxLimit: 60 };
const ids = (events: NostrEvent[]) => events.map((e) => e.id);

async function openTestStore(): Promise<Database> {
  const url = await createTestDatabase();
  return openDatabase(parseConfig({ DATABASE_URL: url, LOG_LEVEL: 'silent' }), createLogger('silent'));
}

describe('on 3000 stored events', () => {
  let db: Database;
  let stored: NostrEvent[];
  let idPool: string[];

  beforeAll(async () => {
    db = await openTestStore();
    // A fixed data set (the filters vary from run to run); fast-check reports the filter seed on failure.
    const [written] = fc.sample(eventsArb(expirationsAround(NOW), 3000, 3000), { seed: 20261122, numRuns: 1 });
    await insertAll(db.pool, written, 16);
    stored = referenceStored(written);
    idPool = stored.slice(0, 60).map((e) => e.id);
  }, 120_000);
  afterAll(() => db?.close());

  it('stores the regular events and the latest version of each replaceable or addressable key', async () => {
    const { rows } = await db.pool.query<{ id: Buffer }>('SELECT id FROM events');
    expect(new Set(rows.map((r) => r.id.toString('hex')))).toEqual(new Set(ids(stored)));
  });

  it('answers REQ with the events of the reference, in the same order', async () => {
    await fc.assert(
      fc.asyncProperty(filtersArb(idPool), async (filters) => {
        const answer = await storeReq(db.pool, filters, NOW, LIMITS);
        const expected = referenceReq(filters, stored, NOW, LIMITS);
        expect(ids(answer)).toEqual(ids(expected));
        expect(answer).toEqual(expected);
      }),
      { numRuns: 250 },
    );
  });

  it('answers REQ with long value lists the same way (padded, named statements, generic plans)', async () => {
    await fc.assert(
      fc.asyncProperty(longListFiltersArb(idPool), async (filters) => {
        const answer = await storeReq(db.pool, filters, NOW, LIMITS);
        expect(ids(answer)).toEqual(ids(referenceReq(filters, stored, NOW, LIMITS)));
      }),
      { numRuns: 100 },
    );
  });

  it.each<[string, RawFilter[]]>([
    ['one filter', [{ limit: 5000 }]],
    ['two overlapping filters', [{ kinds: [1], limit: 5000 }, { '#t': ['nostr'], limit: 5000 }]],
  ])('streams an answer larger than one cursor batch whole and in order (%s)', async (_, filters) => {
    const wide = { ...LIMITS, maxLimit: 5000 };
    const expected = referenceReq(filters, stored, NOW, wide);
    expect(expected.length).toBeGreaterThan(2 * 256); // rows come in batches of 256
    expect(ids(await storeReq(db.pool, filters, NOW, wide))).toEqual(ids(expected));
  });

  it('answers COUNT with the number of the reference', async () => {
    await fc.assert(
      fc.asyncProperty(filtersArb(idPool), async (filters) => {
        expect(await storeCount(db.pool, filters, NOW, LIMITS)).toBe(referenceCount(filters, stored, NOW));
      }),
      { numRuns: 150 },
    );
  });

  it('answers REQ with private kinds visible only to their authors and p-tagged readers, limit per filter kept', async () => {
    await fc.assert(
      fc.asyncProperty(filtersArb(idPool), privacyArb, async (filters, privacy) => {
        const answer = await storeReq(db.pool, filters, NOW, LIMITS, privacy);
        expect(ids(answer)).toEqual(ids(referenceReq(filters, stored, NOW, LIMITS, privacy)));
      }),
      { numRuns: 100 },
    );
  });

  it('answers COUNT with private kinds counted only where the readers may see them', async () => {
    await fc.assert(
      fc.asyncProperty(filtersArb(idPool), privacyArb, async (filters, privacy) => {
        expect(await storeCount(db.pool, filters, NOW, LIMITS, privacy)).toBe(referenceCount(filters, stored, NOW, privacy));
      }),
      { numRuns: 100 },
    );
  });

  it('answers private-kind REQs with long lists the same way (padded, named statements)', async () => {
    await fc.assert(
      fc.asyncProperty(longListFiltersArb(idPool), privacyArb, async (filters, privacy) => {
        const answer = await storeReq(db.pool, filters, NOW, LIMITS, privacy);
        expect(ids(answer)).toEqual(ids(referenceReq(filters, stored, NOW, LIMITS, privacy)));
      }),
      { numRuns: 60 },
    );
  });
});

describe('on small generated data sets', () => {
  let db: Database;
  beforeAll(async () => {
    db = await openTestStore();
  }, 120_000);
  afterAll(() => db?.close());

  const scenario = eventsArb(expirationsAround(NOW), 40).chain((events) => fc.tuple(fc.constant(events), filtersArb(ids(events))));

  async function storeOnly(events: NostrEvent[]): Promise<NostrEvent[]> {
    await db.pool.query('TRUNCATE events, event_tags');
    await insertAll(db.pool, events);
    return referenceStored(events);
  }

  it('answers REQ with the events of the reference, in the same order', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async ([events, filters]) => {
        const stored = await storeOnly(events);
        expect(ids(await storeReq(db.pool, filters, NOW, LIMITS))).toEqual(ids(referenceReq(filters, stored, NOW, LIMITS)));
      }),
      { numRuns: 60 },
    );
  });

  it('answers COUNT with the number of the reference', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async ([events, filters]) => {
        const stored = await storeOnly(events);
        expect(await storeCount(db.pool, filters, NOW, LIMITS)).toBe(referenceCount(filters, stored, NOW));
      }),
      { numRuns: 60 },
    );
  });
});

describe('live matching', () => {
  it('matchFilter agrees with the reference on every event, so live and stored answers agree', () => {
    fc.assert(
      fc.property(eventArb(expirationsAround(NOW)).chain((e) => fc.tuple(fc.constant(e), filterArb([e.id]))), ([event, filter]) => {
        expect(matchFilter(parseAll([filter], LIMITS)[0], event)).toBe(referenceMatch(filter, event));
      }),
      { numRuns: 3000 },
    );
  });

  it('matchFilter applies private kinds exactly as the reference, so live delivery hides what REQ hides', () => {
    fc.assert(
      fc.property(eventArb(expirationsAround(NOW)).chain((e) => fc.tuple(fc.constant(e), filterArb([e.id]), privacyArb)), ([event, filter, privacy]) => {
        const expected = referenceMatch(filter, event) && referenceVisible(event, privacy);
        expect(matchFilter(parseAll([filter], LIMITS, privacy)[0], event)).toBe(expected);
      }),
      { numRuns: 3000 },
    );
  });
});
