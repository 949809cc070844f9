// NIP-01 replaceable (0, 3, 10000-19999) and addressable (30000-39999) events: one version per
// (pubkey, kind) or (pubkey, kind, d), the newest created_at winning, ties to the lowest id
// (protocol.md 1.5).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { TestClient } from '../support/client.js';
import { latest } from '../support/events.js';
import { newSigner, now, type Signer } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let client: TestClient;
beforeAll(async () => {
  relay = await startTestRelay();
  client = await TestClient.connect(relay.url);
});
afterAll(async () => {
  client.close();
  await relay.close();
});

const T = now() - 10_000;
const BLOCKED = expect.stringMatching(/^blocked: /);

/** Rows stored for one author and kind (and d, when given), straight from the database. */
async function storedIds(pubkey: string, kind: number, d?: string): Promise<string[]> {
  const { rows } = await relay.db.pool.query(
    `SELECT encode(id, 'hex') AS id FROM events WHERE pubkey = $1 AND kind = $2 AND ($3::text IS NULL OR d_tag = $3) ORDER BY id`,
    [Buffer.from(pubkey, 'hex'), kind, d ?? null],
  );
  return rows.map((r) => r.id);
}

/** Two versions with the same created_at, returned as [lower id, higher id]. */
function tiedPair(s: Signer, template: Partial<NostrEvent>): [NostrEvent, NostrEvent] {
  const a = s.sign({ ...template, content: 'tie a' });
  const b = s.sign({ ...template, content: 'tie b' });
  return a.id < b.id ? [a, b] : [b, a];
}

describe.each([0, 3, 10000, 10002, 19999])('replaceable kind %i', (kind) => {
  it('a newer version replaces the older one', async () => {
    const s = newSigner();
    const v1 = s.sign({ kind, created_at: T, content: 'v1' });
    const v2 = s.sign({ kind, created_at: T + 1, content: 'v2' });
    expect(await client.publish(v1)).toEqual([true, '']);
    expect(await client.publish(v2)).toEqual([true, '']);
    expect(await client.fetch('r', { authors: [s.pubkey], kinds: [kind] })).toEqual([v2]);
    expect(await storedIds(s.pubkey, kind)).toEqual([v2.id]);
  });

  it('an older version is refused with OK false "blocked:" and not served', async () => {
    const s = newSigner();
    const v2 = s.sign({ kind, created_at: T + 1, content: 'v2' });
    const v1 = s.sign({ kind, created_at: T, content: 'v1' });
    expect(await client.publish(v2)).toEqual([true, '']);
    expect(await client.publish(v1)).toEqual([false, BLOCKED]);
    expect(await client.fetch('r', { authors: [s.pubkey], kinds: [kind] })).toEqual([v2]);
    expect(await client.fetch('r', { ids: [v1.id] })).toEqual([]);
  });
});

describe('replaceable events', () => {
  it('on equal created_at keeps the lowest id when the higher id arrives first', async () => {
    const s = newSigner();
    const [low, high] = tiedPair(s, { kind: 10002, created_at: T });
    expect(await client.publish(high)).toEqual([true, '']);
    expect(await client.publish(low)).toEqual([true, '']);
    expect(await client.fetch('tie', { authors: [s.pubkey], kinds: [10002] })).toEqual([low]);
  });

  it('on equal created_at keeps the lowest id when the lowest id arrives first', async () => {
    const s = newSigner();
    const [low, high] = tiedPair(s, { kind: 10002, created_at: T });
    expect(await client.publish(low)).toEqual([true, '']);
    expect(await client.publish(high)).toEqual([false, BLOCKED]);
    expect(await client.fetch('tie', { authors: [s.pubkey], kinds: [10002] })).toEqual([low]);
  });

  it('re-sending the current version is a duplicate', async () => {
    const s = newSigner();
    const v = s.sign({ kind: 0, created_at: T, content: '{"name":"x"}' });
    await client.publish(v);
    expect(await client.publish(v)).toEqual([true, expect.stringMatching(/^duplicate: /)]);
  });

  it('versions of different kinds and different authors coexist', async () => {
    const [a, b] = [newSigner(), newSigner()];
    const events = [a.sign({ kind: 0, created_at: T }), a.sign({ kind: 3, created_at: T }), b.sign({ kind: 0, created_at: T })];
    for (const e of events) expect(await client.publish(e)).toEqual([true, '']);
    const found = await client.fetch('mix', { authors: [a.pubkey, b.pubkey], kinds: [0, 3] });
    expect(new Set(found.map((e) => e.id))).toEqual(new Set(events.map((e) => e.id)));
  });

  it('a replaced version loses its event_tags rows too', async () => {
    const s = newSigner();
    const v1 = s.sign({ kind: 3, created_at: T, tags: [['p', s.pubkey]] });
    const v2 = s.sign({ kind: 3, created_at: T + 1, tags: [['p', s.pubkey]] });
    await client.publish(v1);
    await client.publish(v2);
    const { rows } = await relay.db.pool.query('SELECT count(*)::int AS n FROM event_tags WHERE event_id = $1', [Buffer.from(v1.id, 'hex')]);
    expect(rows[0].n).toBe(0);
    expect(await client.fetch('p', { '#p': [s.pubkey], kinds: [3] })).toEqual([v2]);
  });
});

describe('addressable events', () => {
  const kind = 30023;

  it('a newer version with the same d replaces the older one', async () => {
    const s = newSigner();
    const v1 = s.sign({ kind, created_at: T, tags: [['d', 'post']], content: 'v1' });
    const v2 = s.sign({ kind, created_at: T + 1, tags: [['d', 'post']], content: 'v2' });
    await client.publish(v1);
    expect(await client.publish(v2)).toEqual([true, '']);
    expect(await client.fetch('a', { authors: [s.pubkey], kinds: [kind], '#d': ['post'] })).toEqual([v2]);
    expect(await storedIds(s.pubkey, kind)).toEqual([v2.id]);
  });

  it('an older version with the same d is refused with "blocked:"', async () => {
    const s = newSigner();
    const v2 = s.sign({ kind, created_at: T + 1, tags: [['d', 'post']] });
    await client.publish(v2);
    expect(await client.publish(s.sign({ kind, created_at: T, tags: [['d', 'post']] }))).toEqual([false, BLOCKED]);
    expect(await client.fetch('a', { authors: [s.pubkey], kinds: [kind] })).toEqual([v2]);
  });

  it('different d values coexist', async () => {
    const s = newSigner();
    const one = s.sign({ kind, created_at: T + 1, tags: [['d', 'one']] });
    const two = s.sign({ kind, created_at: T, tags: [['d', 'two']] });
    expect(await client.publish(one)).toEqual([true, '']);
    expect(await client.publish(two)).toEqual([true, '']);
    expect(await client.fetch('a', { authors: [s.pubkey], kinds: [kind] })).toEqual([one, two]);
  });

  it('d values are compared exactly (case-sensitive)', async () => {
    const s = newSigner();
    const lower = s.sign({ kind, created_at: T, tags: [['d', 'post']] });
    const upper = s.sign({ kind, created_at: T + 1, tags: [['d', 'Post']] });
    await client.publish(lower);
    await client.publish(upper);
    expect(await client.fetch('a', { authors: [s.pubkey], kinds: [kind] })).toEqual([upper, lower]);
  });

  it('a missing d tag, a bare ["d"] and ["d", ""] are the same address', async () => {
    const s = newSigner();
    const none = s.sign({ kind, created_at: T, tags: [] });
    const bare = s.sign({ kind, created_at: T + 1, tags: [['d']] });
    const empty = s.sign({ kind, created_at: T + 2, tags: [['d', '']] });
    for (const e of [none, bare, empty]) expect(await client.publish(e)).toEqual([true, '']);
    expect(await client.fetch('a', { authors: [s.pubkey], kinds: [kind] })).toEqual([empty]);
    expect(await client.publish(s.sign({ kind, created_at: T + 1, tags: [] }))).toEqual([false, BLOCKED]);
  });

  it('only the first d tag names the address', async () => {
    const s = newSigner();
    const v1 = s.sign({ kind, created_at: T, tags: [['d', 'x'], ['d', 'y']] });
    const v2 = s.sign({ kind, created_at: T + 1, tags: [['d', 'x']] });
    const other = s.sign({ kind, created_at: T, tags: [['d', 'y']] });
    for (const e of [v1, v2, other]) expect(await client.publish(e)).toEqual([true, '']);
    expect(await client.fetch('a', { authors: [s.pubkey], kinds: [kind] })).toEqual([v2, other]);
  });

  it('the same d under different kinds or authors are different addresses', async () => {
    const [a, b] = [newSigner(), newSigner()];
    const events = [
      a.sign({ kind: 30023, created_at: T, tags: [['d', 'same']] }),
      a.sign({ kind: 30024, created_at: T, tags: [['d', 'same']] }),
      b.sign({ kind: 30023, created_at: T, tags: [['d', 'same']] }),
    ];
    for (const e of events) expect(await client.publish(e)).toEqual([true, '']);
    const found = await client.fetch('a', { authors: [a.pubkey, b.pubkey], '#d': ['same'] });
    expect(new Set(found.map((e) => e.id))).toEqual(new Set(events.map((e) => e.id)));
  });

  it('on equal created_at keeps the lowest id, whatever the arrival order', async () => {
    const s = newSigner();
    const [low, high] = tiedPair(s, { kind, created_at: T, tags: [['d', 'tie']] });
    expect(await client.publish(high)).toEqual([true, '']);
    expect(await client.publish(low)).toEqual([true, '']);
    expect(await client.publish(high)).toEqual([false, BLOCKED]);
    expect(await client.fetch('a', { authors: [s.pubkey], kinds: [kind] })).toEqual([low]);
  });
});

describe('live delivery of versions', () => {
  it('a newer version is broadcast; an older one is not', async () => {
    const s = newSigner();
    const watcher = await TestClient.connect(relay.url);
    const current = s.sign({ kind: 10002, created_at: T + 5 });
    await client.publish(current);
    await watcher.query('w', { authors: [s.pubkey] });
    const older = s.sign({ kind: 10002, created_at: T });
    const newer = s.sign({ kind: 10002, created_at: T + 10 });
    expect(await client.publish(older)).toEqual([false, BLOCKED]);
    expect(await client.publish(newer)).toEqual([true, '']);
    await watcher.sync();
    expect(watcher.liveEvents('w')).toEqual([newer]);
    watcher.close();
  });
});

describe('concurrent replacement', () => {
  /**
   * 20 connections each send a different version at once. created_at takes 5 values, so 4 versions
   * tie on the newest: the survivor must be the lowest id among them.
   */
  async function race(make: (s: Signer, i: number) => NostrEvent): Promise<{ signer: Signer; versions: NostrEvent[]; results: Array<[boolean, string]> }> {
    const signer = newSigner();
    const versions = Array.from({ length: 20 }, (_, i) => make(signer, i));
    const writers = await Promise.all(versions.map(() => TestClient.connect(relay.url)));
    const results = await Promise.all(writers.map((w, i) => w.publish(versions[i])));
    writers.forEach((w) => w.close());
    return { signer, versions, results };
  }

  it('20 writers of one replaceable event leave exactly one version, the right one', async () => {
    const kind = 10050;
    const { signer, versions, results } = await race((s, i) => s.sign({ kind, created_at: T + (i % 5), content: `v${i}` }));
    const winner = latest(versions);
    expect(results[versions.indexOf(winner)]).toEqual([true, '']);
    for (const [ok, reason] of results) if (!ok) expect(reason).toMatch(/^blocked: /);
    expect(await client.fetch('race', { authors: [signer.pubkey], kinds: [kind] })).toEqual([winner]);
    const { rows } = await relay.db.pool.query('SELECT count(*)::int AS n FROM events WHERE kind = $1 AND pubkey = $2', [kind, Buffer.from(signer.pubkey, 'hex')]);
    expect(rows[0].n).toBe(1);
  });

  it('20 writers of one addressable event leave exactly one version, the right one', async () => {
    const kind = 30078;
    const { signer, versions, results } = await race((s, i) => s.sign({ kind, created_at: T + (i % 5), tags: [['d', 'app-state']], content: `v${i}` }));
    const winner = latest(versions);
    expect(results[versions.indexOf(winner)]).toEqual([true, '']);
    expect(await client.fetch('race', { authors: [signer.pubkey], kinds: [kind] })).toEqual([winner]);
    expect(await storedIds(signer.pubkey, kind, 'app-state')).toEqual([winner.id]);
  });
});
