// Live fan-out (protocol.md 1.8-1.9): after EOSE a subscription receives every new matching event,
// exactly once, whatever connection published it; since/until apply, limit does not; and nothing
// committed while the stored part is being sent is lost.
import type { PoolClient } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatch } from '../../src/store/write.js';
import { TestClient } from '../support/client.js';
import { unique } from '../support/events.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let publisher: TestClient;
beforeAll(async () => {
  // Without the hot tier: a test below holds the REQ's database connection (pool.connect), which the
  // tier's feed reads would take instead (test/relay/hot-tier.test.ts covers the tier).
  relay = await startTestRelay({ HOT_TIER_MB: '0' });
  publisher = await TestClient.connect(relay.url);
});
afterAll(async () => {
  publisher.close();
  await relay.close();
});

async function connectAll(n: number): Promise<TestClient[]> {
  return Promise.all(Array.from({ length: n }, () => TestClient.connect(relay.url)));
}

async function publishOk(e: NostrEvent): Promise<void> {
  expect(await publisher.publish(e)).toEqual([true, '']);
}

describe('live fan-out', () => {
  it('delivers a new event to every matching subscription on every connection, and not to the others', async () => {
    const [alice, bob] = [newSigner(), newSigner()];
    const tag = unique();
    const watchers = await connectAll(3);
    for (const w of watchers) {
      await w.query('by-author', { authors: [alice.pubkey] });
      await w.query('by-tag', { '#t': [tag] });
      await w.query('other-author', { authors: [bob.pubkey] });
      await w.query('other-kind', { authors: [alice.pubkey], kinds: [7] });
    }
    const e = alice.sign({ kind: 1, tags: [['t', tag]] });
    await publishOk(e);
    await Promise.all(watchers.map((w) => w.sync()));
    for (const w of watchers) {
      expect(w.liveEvents('by-author')).toEqual([e]);
      expect(w.liveEvents('by-tag')).toEqual([e]);
      expect(w.liveEvents('other-author')).toEqual([]);
      expect(w.liveEvents('other-kind')).toEqual([]);
      w.close();
    }
  });

  it('sends an event once per subscription even when several of its filters match', async () => {
    const alice = newSigner();
    const tag = unique();
    const [w] = await connectAll(1);
    const e = alice.sign({ kind: 1, tags: [['t', tag], ['p', alice.pubkey]] });
    await w.query('many', { authors: [alice.pubkey] }, { '#t': [tag] }, { kinds: [1], '#p': [alice.pubkey] }, { ids: [e.id] });
    await publishOk(e);
    await w.sync();
    expect(w.liveEvents('many')).toEqual([e]);
    w.close();
  });

  it('delivers to a subscription on the publisher\'s own connection, after its OK', async () => {
    const alice = newSigner();
    await publisher.query('own', { authors: [alice.pubkey] });
    const e = alice.sign({});
    const from = publisher.mark;
    await publishOk(e);
    await publisher.sync();
    const replies = publisher.messages.slice(from).filter((m) => m[0] !== 'COUNT');
    expect(replies).toEqual([['OK', e.id, true, ''], ['EVENT', 'own', e]]);
    publisher.send(['CLOSE', 'own']);
  });

  it('does not deliver a duplicate again', async () => {
    const alice = newSigner();
    const [w] = await connectAll(1);
    await w.query('dup', { authors: [alice.pubkey] });
    const e = alice.sign({});
    await publishOk(e);
    expect(await publisher.publish(e)).toEqual([true, expect.stringMatching(/^duplicate: /)]);
    await w.sync();
    expect(w.liveEvents('dup')).toEqual([e]);
    w.close();
  });

  it('stores and broadcasts once an event published on 10 connections at the same time', async () => {
    const alice = newSigner();
    const [w, ...senders] = await connectAll(11);
    await w.query('same', { authors: [alice.pubkey] });
    const e = alice.sign({});
    const acks = await Promise.all(senders.map((c) => c.publish(e)));
    expect(acks.filter(([ok, reason]) => ok && reason === '')).toHaveLength(1);
    expect(acks.filter(([ok, reason]) => ok && reason.startsWith('duplicate: '))).toHaveLength(9);
    await w.sync();
    expect(w.liveEvents('same')).toEqual([e]);
    const { rows } = await relay.db.pool.query('SELECT count(*)::int AS n FROM events WHERE id = $1', [Buffer.from(e.id, 'hex')]);
    expect(rows[0].n).toBe(1);
    [w, ...senders].forEach((c) => c.close());
  });

  it('does not deliver a refused event', async () => {
    const alice = newSigner();
    const [w] = await connectAll(1);
    await w.query('refused', { authors: [alice.pubkey] });
    expect((await publisher.publish({ ...alice.sign({}), content: 'tampered' }))[0]).toBe(false);
    await w.sync();
    expect(w.liveEvents('refused')).toEqual([]);
    w.close();
  });

  it('applies since and until (inclusive) to live events', async () => {
    const alice = newSigner();
    const t = now();
    const [w] = await connectAll(1);
    await w.query('since', { authors: [alice.pubkey], since: t - 50 });
    await w.query('until', { authors: [alice.pubkey], until: t - 100 });
    const tooOld = alice.sign({ created_at: t - 51 });
    const atSince = alice.sign({ created_at: t - 50 });
    const atUntil = alice.sign({ created_at: t - 100 });
    const afterUntil = alice.sign({ created_at: t - 99 });
    for (const e of [tooOld, atSince, atUntil, afterUntil]) await publishOk(e);
    await w.sync();
    expect(w.liveEvents('since')).toEqual([atSince]);
    expect(w.liveEvents('until')).toEqual([atUntil]);
    w.close();
  });

  it('does not apply limit to live events, and keeps the subscription open after it is reached', async () => {
    const alice = newSigner();
    const [w] = await connectAll(1);
    await publishOk(alice.sign({ created_at: now() - 10 }));
    expect(await w.query('limited', { authors: [alice.pubkey], limit: 1 })).toHaveLength(1);
    const live = [1, 2, 3].map((i) => alice.sign({ content: `live ${i}` }));
    for (const e of live) await publishOk(e);
    await w.sync();
    expect(w.liveEvents('limited')).toEqual(live);
    w.close();
  });

  it('stops delivering when the subscriber disconnects, and others keep receiving', async () => {
    const alice = newSigner();
    const [gone, stays] = await connectAll(2);
    await gone.query('x', { authors: [alice.pubkey] });
    await stays.query('x', { authors: [alice.pubkey] });
    gone.close();
    await gone.closed();
    const e = alice.sign({});
    await publishOk(e);
    await stays.sync();
    expect(stays.liveEvents('x')).toEqual([e]);
    stays.close();
  });
});

describe('events committed between REQ and EOSE', () => {
  it('are neither lost nor sent twice', async () => {
    const alice = newSigner();
    const base = now() - 5_000;
    // 300 stored events (written straight to the store in one transaction, fast) make the stored part of the answer
    // long enough for the 80 events published concurrently to land at every stage of it.
    const stored = Array.from({ length: 300 }, (_, i) => alice.sign({ created_at: base + i, content: `stored ${i}` }));
    await writeBatch(relay.db.pool, stored.map((e) => prepareEvent(e)));

    const [w] = await connectAll(1);
    const fresh = Array.from({ length: 80 }, (_, i) => alice.sign({ created_at: base + 1_000 + i, content: `fresh ${i}` }));
    w.send(['REQ', 'race', { authors: [alice.pubkey], limit: 5000 }]);
    const acks = await Promise.all(fresh.map((e) => publisher.publish(e)));
    expect(acks.every(([ok]) => ok)).toBe(true);
    await w.waitFor((m) => m[0] === 'EOSE' && m[1] === 'race');
    await w.sync();

    const received = w.eventsFor('race').map((e) => e.id);
    expect(received).toHaveLength(380);
    expect(new Set(received)).toEqual(new Set([...stored, ...fresh].map((e) => e.id)));
    w.close();
  });

  it('are sent once when they are both in the stored answer and queued as live', async () => {
    // Holds the REQ's database connection until an event has been committed and broadcast: the event
    // is then queued for the subscription (registered before its query) and also found by the query.
    const pool = relay.db.pool;
    const connect = pool.connect;
    let reqIsWaiting!: () => void;
    const waiting = new Promise<void>((r) => (reqIsWaiting = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    // Only the REQ's call is held: pool.query (the moderation poll, every 500 ms) calls connect with
    // a callback and passes through. Holding it instead would never answer it and leak its client,
    // and the pool's end() in afterAll would wait for that client forever.
    const held = async (...args: unknown[]): Promise<PoolClient> => {
      if (args.length > 0) return (connect as (...a: unknown[]) => Promise<PoolClient>).apply(pool, args);
      pool.connect = connect;
      reqIsWaiting();
      await gate;
      return pool.connect();
    };
    pool.connect = held as typeof pool.connect;

    const alice = newSigner();
    const [w] = await connectAll(1);
    w.send(['REQ', 'both', { authors: [alice.pubkey] }]);
    await waiting;
    const e = alice.sign({});
    await publishOk(e);
    release();
    await w.waitFor((m) => m[0] === 'EOSE' && m[1] === 'both');
    await w.sync();
    expect(w.eventsFor('both')).toEqual([e]);
    w.close();
  });
});
