// The hot tier in a running relay: REQs inside its window are answered from memory, and
// what any writer commits or deletes (this process, another relay process, psql, an import) is in
// the tier before the next REQ that could see it. Relay A holds a tier; relay B, on the same database, none:
// B's answers are PostgreSQL's.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeEvent } from '../../src/store/write.js';
import { TestClient } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { until } from '../support/wait.js';

let a: TestRelay;
let b: TestRelay;
let ca: TestClient;
let cb: TestClient;
beforeAll(async () => {
  a = await startTestRelay({ HOT_TIER_MB: '64' });
  b = await startTestRelay({ HOT_TIER_MB: '0' }, a.config.DATABASE_URL);
  [ca, cb] = [await TestClient.connect(a.url), await TestClient.connect(b.url)];
});
afterAll(async () => {
  ca?.close();
  cb?.close();
  await b?.close();
  await a?.close();
});

const ids = (events: NostrEvent[]) => events.map((e) => e.id);
let sub = 0;
const fetchA = (...filters: object[]) => ca.fetch(`a${++sub}`, ...filters);
const fetchB = (...filters: object[]) => cb.fetch(`b${++sub}`, ...filters);

/** A counter's value in relay A's /metrics (0 while it has none). */
async function counterA(series: string): Promise<number> {
  const text = await (await fetch(`${a.url.replace('ws', 'http')}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return Number(line?.slice(series.length + 1) ?? 0);
}

const answeredFromMemory = () => counterA('pgrelay_hot_tier_reqs_total{answered="memory"}');

async function feedReads(): Promise<{ unchanged: number; full: number }> {
  return { unchanged: await counterA('pgrelay_feed_reads_total{result="unchanged"}'), full: await counterA('pgrelay_feed_reads_total{result="full"}') };
}

describe('hot tier', () => {
  it('answers REQs inside its window from memory, exactly as PostgreSQL does', async () => {
    const [alice, bob] = [newSigner(), newSigner()];
    const t = now();
    const events = [
      ...Array.from({ length: 30 }, (_, i) => alice.sign({ content: `a${i}`, created_at: t - (i % 7), tags: [['t', 'hot'], ['p', bob.pubkey]] })),
      ...Array.from({ length: 20 }, (_, i) => bob.sign({ kind: 7, content: '+', created_at: t - i, tags: [['e', '0'.repeat(63) + (i % 2)]] })),
    ];
    for (const e of events) expect(await ca.publish(e)).toEqual([true, '']);
    const before = await answeredFromMemory();
    for (const filters of [
      [{ authors: [alice.pubkey], limit: 10 }],
      [{ '#t': ['hot'], limit: 5 }, { kinds: [7], limit: 3 }],
      [{ '#p': [bob.pubkey], authors: [alice.pubkey, bob.pubkey], limit: 12 }],
      [{ kinds: [1, 7], since: t - 3 }],
      [{ '#e': ['0'.repeat(64)], limit: 4 }],
    ]) {
      const fromA = await fetchA(...filters);
      expect(ids(fromA)).toEqual(ids(await fetchB(...filters)));
      expect(fromA.length).toBeGreaterThan(0);
    }
    expect((await answeredFromMemory()) - before).toBeGreaterThanOrEqual(4);
    expect(await ca.count('c1', { authors: [alice.pubkey], since: t - 100 })).toBe(30);
  });

  it('answers authors × replaceable kinds from memory whatever the window, and says it can (pgrelay_hot_tier_replaceable_complete)', async () => {
    await until(async () => (await counterA('pgrelay_hot_tier_replaceable_complete')) === 1, 'every replaceable version held');
    const [carol, dave] = [newSigner(), newSigner()];
    const t = now();
    const profiles = [carol.sign({ kind: 0, content: '{"name":"carol"}', created_at: t - 5 }), dave.sign({ kind: 0, content: '{"name":"dave"}', created_at: t - 4 })];
    const newer = carol.sign({ kind: 0, content: '{"name":"carol 2"}', created_at: t - 1 });
    const follows = carol.sign({ kind: 3, content: '', created_at: t - 2, tags: [['p', dave.pubkey]] });
    for (const e of [...profiles, newer, follows]) expect(await ca.publish(e)).toEqual([true, '']);
    const before = await answeredFromMemory();
    for (const filters of [[{ kinds: [0], authors: [carol.pubkey, dave.pubkey] }], [{ kinds: [0, 3], authors: [carol.pubkey], limit: 1 }], [{ kinds: [3], authors: [dave.pubkey] }]]) {
      expect(ids(await fetchA(...filters))).toEqual(ids(await fetchB(...filters)));
    }
    expect(ids(await fetchA({ kinds: [0], authors: [carol.pubkey, dave.pubkey] }))).toEqual([newer.id, profiles[1].id]);
    expect((await answeredFromMemory()) - before).toBe(4);
  });

  it('answers REQs without a feed read each while nothing is written (pgrelay_feed_reads_total)', async () => {
    const before = await feedReads();
    for (let i = 0; i < 20; i++) await fetchA({ kinds: [1], limit: 1 });
    const after = await feedReads();
    // The feed's poll (one a second) may read meanwhile; the REQs themselves start none.
    expect(after.unchanged + after.full - before.unchanged - before.full).toBeLessThan(20);
  });

  it('serves an event another relay process committed in the next REQ', async () => {
    const carol = newSigner();
    const t = now();
    for (let i = 0; i < 20; i++) {
      const e = carol.sign({ content: `from b ${i}`, created_at: t + i });
      expect(await cb.publish(e)).toEqual([true, '']);
      expect(ids(await fetchA({ authors: [carol.pubkey], kinds: [1], limit: 1 }))).toEqual([e.id]);
    }
  });

  it('serves an event written around the relay (psql, an import) in the next REQ', async () => {
    const dave = newSigner();
    const e = dave.sign({ content: 'written directly' });
    await writeEvent(b.db.pool, prepareEvent(e));
    expect(ids(await fetchA({ authors: [dave.pubkey], limit: 1 }))).toEqual([e.id]);
  });

  it('forgets what another writer deleted before the next REQ: a kind 5, a newer version, a vanish, a DELETE in psql', async () => {
    const erin = newSigner();
    const t = now();
    const notes = Array.from({ length: 4 }, (_, i) => erin.sign({ content: `n${i}`, created_at: t - i }));
    for (const e of notes) expect(await ca.publish(e)).toEqual([true, '']);
    const profile1 = erin.sign({ kind: 0, content: '{"name":"one"}', created_at: t - 10 });
    expect(await ca.publish(profile1)).toEqual([true, '']);
    expect(ids(await fetchA({ authors: [erin.pubkey], kinds: [1], limit: 4 }))).toEqual(ids(notes));

    // A deletion request through B.
    expect(await cb.publish(erin.sign({ kind: 5, tags: [['e', notes[0].id]], created_at: t }))).toEqual([true, '']);
    expect(ids(await fetchA({ authors: [erin.pubkey], kinds: [1], limit: 3 }))).toEqual(ids(notes.slice(1)));
    // A newer replaceable version through B: the older one is gone at once.
    const profile2 = erin.sign({ kind: 0, content: '{"name":"two"}', created_at: t - 5 });
    expect(await cb.publish(profile2)).toEqual([true, '']);
    expect(ids(await fetchA({ authors: [erin.pubkey], kinds: [0], limit: 1 }))).toEqual([profile2.id]);
    // Deleted in SQL by someone else.
    await b.db.pool.query('DELETE FROM events WHERE id = $1', [Buffer.from(notes[1].id, 'hex')]);
    expect(ids(await fetchA({ authors: [erin.pubkey], kinds: [1], limit: 2 }))).toEqual(ids(notes.slice(2)));
    // NIP-62 through B: everything of hers up to its created_at.
    expect(await cb.publish(erin.sign({ kind: 62, tags: [['relay', 'ALL_RELAYS']], created_at: t + 1 }))).toEqual([true, '']);
    const left = await fetchA({ authors: [erin.pubkey], limit: 10 });
    expect(left.map((e) => e.kind)).toEqual([62]);
    expect(ids(left)).toEqual(ids(await fetchB({ authors: [erin.pubkey], limit: 10 })));
  });

  it('forgets what its own clients deleted before their next REQ: a kind 5, a newer version, a vanish', async () => {
    const grace = newSigner();
    const t = now();
    const notes = Array.from({ length: 3 }, (_, i) => grace.sign({ content: `g${i}`, created_at: t - i }));
    for (const e of notes) expect(await ca.publish(e)).toEqual([true, '']);
    const list1 = grace.sign({ kind: 30000, tags: [['d', 'friends']], created_at: t - 10 });
    expect(await ca.publish(list1)).toEqual([true, '']);
    expect(ids(await fetchA({ authors: [grace.pubkey], kinds: [1], limit: 3 }))).toEqual(ids(notes));

    expect(await ca.publish(grace.sign({ kind: 5, tags: [['e', notes[0].id]], created_at: t }))).toEqual([true, '']);
    expect(ids(await fetchA({ authors: [grace.pubkey], kinds: [1], limit: 3 }))).toEqual(ids(notes.slice(1)));
    const list2 = grace.sign({ kind: 30000, tags: [['d', 'friends']], created_at: t - 5 });
    expect(await ca.publish(list2)).toEqual([true, '']);
    expect(ids(await fetchA({ ids: [list1.id, list2.id] }))).toEqual([list2.id]);
    expect(await ca.publish(grace.sign({ kind: 62, tags: [['relay', 'ALL_RELAYS']], created_at: t + 1 }))).toEqual([true, '']);
    const left = await fetchA({ authors: [grace.pubkey], limit: 10 });
    expect(left.map((e) => e.kind)).toEqual([62]);
    expect(ids(left)).toEqual(ids(await fetchB({ authors: [grace.pubkey], limit: 10 })));
  });

  it('never serves an expired event from memory', async () => {
    const frank = newSigner();
    const e = frank.sign({ content: 'brief', tags: [['expiration', String(now() + 2)]] });
    expect(await ca.publish(e)).toEqual([true, '']);
    expect(ids(await fetchA({ authors: [frank.pubkey], limit: 1 }))).toEqual([e.id]);
    await new Promise((r) => setTimeout(r, 2500));
    expect(await fetchA({ authors: [frank.pubkey], limit: 1 })).toEqual([]);
  });
});
