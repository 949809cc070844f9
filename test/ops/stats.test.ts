import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatStats, storeStats } from '../../src/ops/stats.js';
import type { Database } from '../../src/store/database.js';
import { openTestStore, store, unsignedEvent } from './helpers.js';

let db: Database;

beforeAll(async () => {
  db = await openTestStore();
  await store(db.pool, [
    ...Array.from({ length: 5 }, (_, i) => unsignedEvent({ kind: 1, created_at: 1_700_000_000 + i, content: `n${i}`, tags: [['t', 'a'], ['p', String(i)]] })),
    ...Array.from({ length: 2 }, (_, i) => unsignedEvent({ kind: 7, created_at: 1_700_000_100 + i, content: `r${i}` })),
    unsignedEvent({ kind: 1, created_at: 1_700_000_200, content: 'expired', tags: [['expiration', '1700000300']] }),
  ]);
});
afterAll(async () => {
  await db?.close();
});

describe('stats', () => {
  it('counts events by kind, expired ones and tag rows', async () => {
    const s = await storeStats(db.pool);
    expect(s).toMatchObject({ events: 8, byKind: [{ kind: 1, count: 6 }, { kind: 7, count: 2 }], expired: 1, tagRows: 10, oldest: 1_700_000_000, newest: 1_700_000_200 });
  });

  it('reports table and index sizes', async () => {
    const s = await storeStats(db.pool);
    const events = s.tables.find((t) => t.table === 'events')!;
    expect(events.rows).toBe(8);
    expect(events.totalBytes).toBeGreaterThanOrEqual(events.tableBytes + events.indexBytes);
    expect(events.indexBytes).toBeGreaterThan(0);
    expect(s.tables.find((t) => t.table === 'event_tags')?.rows).toBe(10);
    expect(s.indexes.map((i) => i.index)).toEqual(expect.arrayContaining(['events_pkey', 'events_kind_time', 'event_tags_value_time']));
    expect(s.databaseBytes).toBeGreaterThan(0);
    const text = formatStats(s);
    expect(text).toMatch(/events\s+8 \(1 expired/);
    expect(text).toMatch(/event_tags_value_time/);
  });
});
