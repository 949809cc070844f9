// The hot tier written at stop and read back at start (store/hot/snapshot.ts, restore.ts,
// warm-start.ts, through HotTierService): a tier read back answers as the tier that was written; at start it is checked
// against the database bucket by bucket, so whatever changed while the relay was down (stored,
// deleted, replaced, by anyone) and whatever changes while it reads is in it, exactly as PostgreSQL
// answers; a file it cannot trust (damaged, another format, another budget) means the fill instead.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, truncateSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import type pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import type { FilterLimits } from '../../src/nostr/filter.js';
import { ChangeStream } from '../../src/store/changes.js';
import { openDatabase, type Database } from '../../src/store/database.js';
import { ChangeFeed } from '../../src/store/feed.js';
import { claimSnapshot, snapshotFile } from '../../src/store/hot/restore.js';
import { HotTierService } from '../../src/store/hot/service.js';
import { SnapshotReader, writeSnapshot } from '../../src/store/hot/snapshot.js';
import { Slices } from '../../src/store/hot/snapshot-load.js';
import { HotTier } from '../../src/store/hot/tier.js';
import { prepareEvent, prepareStored } from '../../src/store/prepared-event.js';
import { createTestDatabase } from '../support/database.js';
import { tierReq as tierReqOf } from '../support/tier-req.js';
import { until } from '../support/wait.js';
import { BASE_TIME, eventsArb, expirationsAround, filtersArb, insertAll, parseAll, storeReq, type RawFilter } from './nip01-reference.js';

const NOW = BASE_TIME + 20;
const LIMITS: FilterLimits = { maxValuesPerArray: 1000, defaultLimit: 25, maxLimit: 60 };
const log = createLogger('silent');
const ids = (events: Array<{ id: string }>) => events.map((e) => e.id);

/** A tier holding `raws` (newest first, as the fill reads them), to the end of the table. */
function tierOf(raws: string[], budgetBytes = Infinity): HotTier {
  const tier = new HotTier({ budgetBytes });
  tier.addOlder(raws.map((raw) => prepareStored(raw, false)), true);
  tier.replaceableComplete = true;
  return tier;
}

async function readBack(file: string, budgetBytes = Infinity): Promise<HotTier> {
  const reader = SnapshotReader.open(file);
  try {
    const tier = new HotTier({ budgetBytes });
    const { image } = await reader.read(async () => undefined, (e, bytes) => tier.restoreEvent(e, bytes), 7);
    for (const _ of tier.restoreLists(image));
    return tier;
  } finally {
    reader.close();
  }
}

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pgrelay-snapshot-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('a snapshot file', () => {
  const [events] = fc.sample(eventsArb(expirationsAround(NOW), 400, 400), { seed: 20261201, numRuns: 1 });
  // Canonical JSON from prepareEvent, newest first; content that is not ASCII in some of them.
  const raws = events
    .map((e, i) => prepareEvent({ ...e, content: i % 5 === 0 ? `caf\u00e9 \ud83d\ude00 ${i}` : '' }).raw)
    .sort((a, b) => {
      const x = prepareStored(a, false).event;
      const y = prepareStored(b, false).event;
      return y.created_at - x.created_at || (x.id < y.id ? -1 : 1);
    });

  it('reads back as the tier that was written: same events, same bytes, same answers', async () => {
    const written = tierOf(raws);
    // Tag values of one byte per character and of two (stored as such), shared by two events.
    written.add(prepareEvent({ ...events[0]!, kind: 1, id: 'f'.repeat(64), created_at: BASE_TIME + 50, tags: [['t', '\u65e5\u672c'], ['t', 'caf\u00e9']] }));
    written.add(prepareEvent({ ...events[0]!, kind: 1, id: 'e'.repeat(64), created_at: BASE_TIME + 51, tags: [['t', '\u65e5\u672c']] }));
    const file = join(dir, 'a.snapshot');
    for (const bucketEvents of [1, 16, 8192]) {
      writeSnapshot(file, written.image()!, bucketEvents);
      const read = await readBack(file);
      expect(read.size).toBe(written.size);
      expect(read.bytes).toBe(written.bytes);
      expect(read.windowStart).toBe(-Infinity);
      expect(read.replaceableComplete).toBe(true);
      const idPool = [...ids(events.slice(0, 40)), 'f'.repeat(64)];
      const extra: RawFilter[][] = [[{ '#t': ['\u65e5\u672c'] }], [{ '#t': ['caf\u00e9'] }], [{ ids: ['f'.repeat(64)] }]];
      for (const filters of [...extra, ...fc.sample(filtersArb(idPool), { seed: 5, numRuns: 300 })])
        for (const f of parseAll(filters, LIMITS)) {
          const want = written.answer(f, NOW);
          const got = read.answer(f, NOW);
          expect({ filters, got: got && got.map((e) => [e.id, e.raw]) }).toEqual({ filters, got: want && want.map((e) => [e.id, e.raw]) });
        }
      expect(read.answer(parseAll([{ '#t': ['\u65e5\u672c'] }], LIMITS)[0]!, NOW)!.map((e) => e.id)).toEqual(['e'.repeat(64), 'f'.repeat(64)]);
      expect(read.answer(parseAll([{ '#t': ['caf\u00e9'] }], LIMITS)[0]!, NOW)!.map((e) => e.id)).toEqual(['f'.repeat(64)]);
      expect(read.count(parseAll([{ kinds: [1, 7] }], LIMITS), NOW)).toBe(written.count(parseAll([{ kinds: [1, 7] }], LIMITS), NOW));
    }
  });

  it('keeps the window of a tier that holds only the newest events', async () => {
    const tier = new HotTier({ budgetBytes: Infinity });
    // Cut after a regular event: held, below the window (its second may go on in the rows not read).
    const cut = raws.findIndex((raw, i) => i >= 200 && prepareStored(raw, false).kindClass === 'regular');
    const half = raws.slice(0, cut + 1).map((raw) => prepareStored(raw, false));
    tier.addOlder(half, false);
    const file = join(dir, 'w.snapshot');
    writeSnapshot(file, tier.image()!, 16);
    const read = await readBack(file);
    expect(read.windowStart).toBe(tier.windowStart);
    expect(read.windowStart).toBeGreaterThan(BASE_TIME);
    // Events the fill held below the window (its last, partly read second) are left out.
    expect(read.size).toBe(tier.heldBetween(tier.windowStart, Infinity).length);
    expect(read.size).toBeLessThan(tier.size);
    for (const filters of fc.sample(filtersArb([]), { seed: 6, numRuns: 200 }))
      for (const f of parseAll(filters, LIMITS)) {
        const want = tier.answer(f, NOW);
        const got = read.answer(f, NOW);
        if (want !== undefined && got !== undefined) expect(got.map((e) => e.id)).toEqual(want.map((e) => e.id));
        if (want === undefined) expect(got).toBeUndefined();
      }
  });

  it('is refused when cut short, of another format, or altered', async () => {
    const file = join(dir, 'b.snapshot');
    writeSnapshot(file, tierOf(raws).image()!);
    const whole = SnapshotReader.open(file);
    const { rawBytes } = whole.header;
    whole.close();
    const cut = join(dir, 'cut.snapshot');
    writeFileSync(cut, Buffer.alloc(0));
    expect(() => SnapshotReader.open(cut)).toThrow(/not a hot tier snapshot/);
    truncateSync(file, 1000);
    expect(() => SnapshotReader.open(file)).toThrow(/bytes, its header says/);
    writeFileSync(file, 'PGRHOT1\n\u0004\u0000\u0000\u0000{"a"');
    expect(() => SnapshotReader.open(file)).toThrow();
    expect(rawBytes).toBeGreaterThan(0);
    // An event's created_at changed in its column: its JSON says otherwise.
    writeSnapshot(file, tierOf(raws).image()!);
    const bytes = (await import('node:fs')).readFileSync(file);
    const reader = SnapshotReader.open(file);
    const headerEnd = 12 + bytes.readUInt32LE(8);
    const { strings, stringBytes } = reader.header;
    reader.close();
    const createdAtAt = headerEnd + 5 * strings + stringBytes;
    bytes.writeDoubleLE(bytes.readDoubleLE(createdAtAt) + 1, createdAtAt);
    writeFileSync(file, bytes);
    const altered = SnapshotReader.open(file);
    await expect(altered.read(async () => undefined, () => undefined)).rejects.toThrow(/does not match its JSON|not in order/);
    altered.close();
  });

  it('is refused when a byte of an event\'s content changed on disk (its checksum)', async () => {
    const file = join(dir, 'c.snapshot');
    writeSnapshot(file, tierOf(raws).image()!);
    const intact = SnapshotReader.open(file);
    await expect(intact.read(async () => undefined, () => undefined)).resolves.toBeDefined();
    intact.close();
    // The last event's JSON ends `…","sig":"<128 hex>"}` and the 4-byte checksum follows: change a
    // digit of the signature, which no column repeats.
    const bytes = readFileSync(file);
    const at = bytes.length - 4 - 10;
    expect(String.fromCharCode(bytes[at]!)).toMatch(/[0-9a-f]/);
    bytes[at] = bytes[at] === 0x30 ? 0x31 : 0x30;
    writeFileSync(file, bytes);
    const changed = SnapshotReader.open(file);
    await expect(changed.read(async () => undefined, () => undefined)).rejects.toThrow(/checksum does not match/);
    changed.close();
  });
});

describe('claiming a snapshot', () => {
  it('takes the newest, one per process, and removes what dead processes left', () => {
    const dead = spawnSync(process.execPath, ['-e', '0']).pid!;
    const at = (name: string, seconds: number) => {
      writeFileSync(join(dir, name), 'x');
      utimesSync(join(dir, name), seconds, seconds);
    };
    at('hot-tier.11.snapshot', 1_000);
    at('hot-tier.12.snapshot', 2_000);
    at(`hot-tier.${dead}.loading`, 3_000);
    at(`hot-tier.${dead}.snapshot.${dead}.tmp`, 3_000);
    at('unrelated.snapshot', 4_000);
    const first = claimSnapshot(dir);
    expect(first).toBe(join(dir, `hot-tier.${process.pid}.loading`));
    expect(readdirSync(dir).sort()).toEqual(['hot-tier.11.snapshot', `hot-tier.${process.pid}.loading`, 'unrelated.snapshot'].sort()); // the pid's digits decide the order
    rmSync(first!);
    expect(claimSnapshot(dir)).toBe(first); // the older one next
    rmSync(first!);
    expect(claimSnapshot(dir)).toBeUndefined();
    expect(claimSnapshot(join(dir, 'none'))).toBeUndefined();
    expect(snapshotFile(dir)).toBe(join(dir, `hot-tier.${process.pid}.snapshot`));
  });
});

describe('the read\'s turns of the event loop', () => {
  it('come every few milliseconds while the relay starts, then let the read take most of the thread', () => {
    let clock = 0;
    const slices = new Slices(() => clock);
    const stretch = (othersMs: number): number => {
      slices.next(othersMs);
      let ms = 0;
      while (!slices.due()) clock++, ms++;
      return ms;
    };
    // Starting: whatever the start took in a turn, the read turns again after MIN_MS.
    expect(stretch(0)).toBe(Slices.MIN_MS);
    expect(stretch(50)).toBe(Slices.MIN_MS);
    slices.serving = true;
    // Serving: SHARE times what the rest took (REQs answered by PostgreSQL), within bounds.
    expect(stretch(10)).toBe(Slices.SHARE * 10);
    expect(stretch(0.5)).toBe(Slices.MIN_MS);
    expect(stretch(1_000)).toBe(Slices.MAX_MS);
  });
});

describe('a snapshot read back at start', () => {
  let db: Database;
  let initial: NostrEvent[];
  let later: NostrEvent[];

  beforeAll(async () => {
    db = await openDatabase(parseConfig({ DATABASE_URL: await createTestDatabase(), LOG_LEVEL: 'silent' }), log);
  }, 60_000);
  afterAll(async () => {
    await db?.close();
  });

  beforeEach(async () => {
    await db.pool.query('TRUNCATE events, event_tags');
    [initial, later] = fc.sample(eventsArb(expirationsAround(NOW), 300, 300), { seed: 20261202, numRuns: 2 });
    await insertAll(db.pool, initial, 8);
  });

  async function tableRaws(): Promise<string[]> {
    return (await db.pool.query<{ raw: string }>('SELECT raw FROM events ORDER BY created_at DESC, id')).rows.map((r) => r.raw);
  }

  const tierReq = (service: HotTierService, filters: RawFilter[]) => tierReqOf(service, db.pool, filters, NOW, LIMITS);

  /** A service started on `pool` with `dir` as its snapshot folder; `check` once it has filled. */
  async function started(budgetBytes: number, check: (service: HotTierService) => Promise<void>, pool: pg.Pool = db.pool): Promise<void> {
    const changes = new ChangeStream();
    const feed = await new ChangeFeed(db.url, db.pool, changes, log, { removals: true, pollMs: 50 }).start();
    const service = new HotTierService(pool, changes, feed, log, budgetBytes, 2000, 7, dir).start();
    try {
      await until(() => service.current.filledFrom !== undefined && !service.current.filling, 'the tier filled', 60_000);
      await service.fresh();
      await check(service);
    } finally {
      service.stop();
      await feed.stop();
    }
  }

  /** The service answers as PostgreSQL does, holds what a tier built from the final table holds, and answered from memory. */
  async function agrees(service: HotTierService, seed: number): Promise<void> {
    const raws = await tableRaws();
    const reference = tierOf(raws);
    expect(service.current.events).toBe(reference.size);
    expect(service.current.bytes).toBe(reference.bytes);
    const idPool = [...raws.map((raw) => prepareStored(raw, false).event.id).slice(0, 30), ...ids(initial).slice(0, 10)];
    const before = service.stats.memory;
    for (const filters of fc.sample(filtersArb(idPool), { seed, numRuns: 200 })) expect(await tierReq(service, filters)).toEqual(ids(await storeReq(db.pool, filters, NOW, LIMITS)));
    expect(service.stats.memory).toBeGreaterThan(before);
  }

  it('is written at stop and read back at the next start instead of the fill, and removed once read', async () => {
    await started(64 * 2 ** 20, async (service) => {
      expect(service.current.filledFrom).toBe('database');
    });
    expect(readdirSync(dir)).toEqual([`hot-tier.${process.pid}.snapshot`]);
    await started(64 * 2 ** 20, async (service) => {
      expect(service.current.filledFrom).toBe('snapshot');
      expect(readdirSync(dir)).toEqual([]);
      await agrees(service, 21);
    });
  }, 120_000);

  it('removes at stop the snapshots no process of this start claimed (WORKERS lowered), not those written since', async () => {
    // Once the start has claimed what it reads: a file written before this process started (left by
    // a larger WORKERS), and one written since (a sibling's, at its stop).
    await started(64 * 2 ** 20, async () => {
      const before = (performance.timeOrigin - 60_000) / 1000;
      writeFileSync(join(dir, 'hot-tier.11.snapshot'), 'x');
      utimesSync(join(dir, 'hot-tier.11.snapshot'), before, before);
      writeFileSync(join(dir, 'hot-tier.12.snapshot'), 'x');
    });
    expect(readdirSync(dir).sort()).toEqual(['hot-tier.12.snapshot', `hot-tier.${process.pid}.snapshot`].sort());
  }, 120_000);

  it('takes in what was stored, deleted and replaced while the relay was down, in the buckets that changed', async () => {
    writeSnapshot(join(dir, 'hot-tier.1.snapshot'), tierOf(await tableRaws()).image()!, 4);
    // Another writer, while no relay runs: deletions, and events of every age (new versions among them).
    const { rows } = await db.pool.query<{ id: Buffer }>("SELECT id FROM events ORDER BY md5(id::text || 'x') LIMIT 3");
    await db.pool.query('DELETE FROM events WHERE id = ANY($1::bytea[])', [rows.map((r) => r.id)]);
    await insertAll(db.pool, later.slice(0, 5), 4);
    await started(64 * 2 ** 20, async (service) => {
      expect(service.current.filledFrom).toBe('snapshot');
      await agrees(service, 22);
    });
  }, 120_000);

  it('takes in what other writers do while it reads', async () => {
    writeSnapshot(join(dir, 'hot-tier.1.snapshot'), tierOf(await tableRaws()).image()!, 4);
    await insertAll(db.pool, later.slice(30, 34), 2); // before the start: found by the buckets
    // After the database's figures are taken (the statement snapshot of the check): only the
    // change stream can bring these.
    const writes = async () => {
      const { rows } = await db.pool.query<{ id: Buffer }>("SELECT id FROM events ORDER BY md5(id::text || 'y') LIMIT 8");
      await db.pool.query('DELETE FROM events WHERE id = ANY($1::bytea[])', [rows.map((r) => r.id)]);
      await insertAll(db.pool, later.slice(40, 80), 4);
    };
    let wrote = false;
    const pool = {
      query: db.pool.query.bind(db.pool),
      connect: async () => {
        const client = await db.pool.connect();
        const query = client.query.bind(client) as (text: unknown, values?: unknown) => Promise<unknown>;
        return Object.assign(Object.create(client) as pg.PoolClient, {
          query: async (text: unknown, values?: unknown) => {
            const result = await query(text, values);
            if (typeof text === 'string' && text.includes('get_byte')) {
              await writes();
              wrote = true;
            }
            return result;
          },
          release: (err?: Error | boolean) => client.release(err),
        });
      },
    } as unknown as pg.Pool;
    await started(
      64 * 2 ** 20,
      async (service) => {
        expect(wrote).toBe(true);
        expect(service.current.filledFrom).toBe('snapshot');
        await agrees(service, 23);
      },
      pool,
    );
  }, 120_000);

  it('leaves the file for the next start when stopped before it was read back', async () => {
    writeSnapshot(join(dir, 'hot-tier.1.snapshot'), tierOf(await tableRaws()).image()!, 4);
    const changes = new ChangeStream();
    const feed = await new ChangeFeed(db.url, db.pool, changes, log, { removals: true, pollMs: 50 }).start();
    try {
      const service = new HotTierService(db.pool, changes, feed, log, 64 * 2 ** 20, 2000, 7, dir).start();
      service.stop(); // at once: nothing read back yet, nothing to write
      await until(() => readdirSync(dir).every((name) => name.endsWith('.snapshot')), 'the file given back');
      expect(readdirSync(dir)).toEqual([`hot-tier.${process.pid}.snapshot`]);
      expect(service.current.filledFrom).toBeUndefined();
    } finally {
      await feed.stop();
    }
    await started(64 * 2 ** 20, async (service) => {
      expect(service.current.filledFrom).toBe('snapshot');
      await agrees(service, 26);
    });
  }, 120_000);

  it('fills from the database instead when the file is damaged, for another budget, or mostly out of date', async () => {
    const raws = await tableRaws();
    // Damaged: cut short.
    writeSnapshot(join(dir, 'hot-tier.1.snapshot'), tierOf(raws).image()!, 16);
    truncateSync(join(dir, 'hot-tier.1.snapshot'), 5000);
    await started(64 * 2 ** 20, async (service) => {
      expect(service.current.filledFrom).toBe('database');
      expect(existsSync(join(dir, 'hot-tier.1.snapshot'))).toBe(false);
      await agrees(service, 24);
    });
    rmSync(join(dir, `hot-tier.${process.pid}.snapshot`));
    // Written with more than this budget holds.
    writeSnapshot(join(dir, 'hot-tier.1.snapshot'), tierOf(raws).image()!, 16);
    await started(20_000, async (service) => {
      expect(service.current.filledFrom).toBe('database');
    });
    rmSync(join(dir, `hot-tier.${process.pid}.snapshot`), { force: true });
    // Most of it out of date: another table altogether.
    writeSnapshot(join(dir, 'hot-tier.1.snapshot'), tierOf(raws).image()!, 16);
    await db.pool.query('TRUNCATE events, event_tags');
    await insertAll(db.pool, later, 8);
    await started(64 * 2 ** 20, async (service) => {
      expect(service.current.filledFrom).toBe('database');
      await agrees(service, 25);
    });
  }, 120_000);
});
