// The whole REQ and COUNT path: socket → filter parsing → SQL → stored JSON back on the socket
// (protocol.md 1.9, 5, 7). Expired events are written straight to the store, as the relay refuses
// to accept them once expired.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeEvent } from '../../src/store/write.js';
import { TestClient } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { eventsArb, filtersArb, insertAll, referenceCount, referenceReq, referenceStored, resultOrder } from './nip01-reference.js';

const ids = (events: NostrEvent[]) => events.map((e) => e.id);

/** A REQ's stored events, then CLOSE: a connection may hold only so many subscriptions. */
async function req(client: TestClient, subId: string, ...filters: object[]): Promise<NostrEvent[]> {
  const found = await client.query(subId, ...filters);
  client.send(['CLOSE', subId]);
  return found;
}

async function count(client: TestClient, subId: string, ...filters: object[]): Promise<number> {
  const from = client.messages.length;
  client.send(['COUNT', subId, ...filters]);
  const reply = await client.waitFor((m) => (m[0] === 'COUNT' || m[0] === 'CLOSED') && m[1] === subId, 10_000, from);
  if (reply[0] === 'CLOSED') throw new Error(`CLOSED: ${reply[2]}`);
  return (reply[2] as { count: number }).count;
}

describe('fixed cases', () => {
  let relay: TestRelay;
  let client: TestClient;
  beforeAll(async () => {
    relay = await startTestRelay();
    client = await TestClient.connect(relay.url);
  });
  afterAll(async () => {
    client?.close();
    await relay?.close();
  });

  /** Publishes over the socket and checks every OK. */
  async function publishAll(events: NostrEvent[]): Promise<void> {
    for (const e of events) expect(await client.publish(e)).toEqual([true, '']);
  }

  it('sends stored events newest first, ties on created_at by lowest id', async () => {
    const alice = newSigner();
    const t = now() - 100;
    const events = [t, t, t, t, t - 1, t - 1, t - 2].map((created_at, i) => alice.sign({ created_at, content: `${i}` }));
    await publishAll(events);
    expect(ids(await client.query('order', { authors: [alice.pubkey] }))).toEqual(ids([...events].sort(resultOrder)));
  });

  it("applies each filter's limit to that filter's newest matches", async () => {
    const [alice, bob] = [newSigner(), newSigner()];
    const t = now() - 100;
    const own = (s: typeof alice) => [0, 1, 2, 3].map((i) => s.sign({ created_at: t - i }));
    const [a, b] = [own(alice), own(bob)];
    await publishAll([...a, ...b]);
    const found = await client.query('limits', { authors: [alice.pubkey], limit: 2 }, { authors: [bob.pubkey], limit: 1 });
    expect(ids(found)).toEqual(ids([a[0], b[0], a[1]].sort(resultOrder)));
  });

  it('sends an event matching two filters once', async () => {
    const alice = newSigner();
    const events = [alice.sign({ tags: [['t', 'twice']] }), alice.sign({ created_at: now() - 1 })];
    await publishAll(events);
    const found = await client.query('dedupe', { ids: [events[0].id] }, { authors: [alice.pubkey] }, { '#t': ['twice'] });
    expect(ids(found)).toEqual(ids([...events].sort(resultOrder)));
  });

  it('never sends an expired event, and an expired event takes no limit slot', async () => {
    const alice = newSigner();
    const older = alice.sign({ created_at: now() - 10 });
    const expired = alice.sign({ created_at: now(), tags: [['expiration', String(now() - 1)]] });
    await publishAll([older]);
    expect(await writeEvent(relay.db.pool, prepareEvent(expired))).toEqual({ status: 'stored' });
    expect(await client.query('expired', { authors: [alice.pubkey], limit: 1 })).toEqual([older]);
  });

  it('answers limit 0 with EOSE and no stored events', async () => {
    const alice = newSigner();
    await publishAll([alice.sign({})]);
    expect(await client.query('zero', { authors: [alice.pubkey], limit: 0 })).toEqual([]);
  });

  it('sends the event back exactly as it was published', async () => {
    const alice = newSigner();
    const event = alice.sign({ content: 'a "quote" \\ \n \u0000 \u2028 😀 </', tags: [['t', 'x', 'extra'], ['alt', 'é']] });
    await publishAll([event]);
    const from = client.messages.length;
    client.send(['REQ', 'exact', { ids: [event.id] }]);
    await client.waitFor((m) => m[0] === 'EOSE' && m[1] === 'exact', 10_000, from);
    expect(client.eventsFor('exact', from)).toEqual([event]);
  });

  it('COUNTs an event matching two filters once and leaves expired events out', async () => {
    const alice = newSigner();
    const live = [alice.sign({ tags: [['t', 'counted']] }), alice.sign({ created_at: now() - 1 })];
    const expired = alice.sign({ created_at: now() - 2, tags: [['expiration', String(now() - 1)]] });
    await publishAll(live);
    await writeEvent(relay.db.pool, prepareEvent(expired));
    expect(await count(client, 'count', { authors: [alice.pubkey], limit: 1 }, { '#t': ['counted'] })).toBe(2);
  });

  it('answers a tag value containing NUL with EOSE and no events, not an error', async () => {
    expect(await client.query('nul', { '#t': ['a\u0000b'] })).toEqual([]);
  });

  it('does not match a lone surrogate in a filter to an event tagged U+FFFD', async () => {
    const alice = newSigner();
    await publishAll([alice.sign({ tags: [['t', '\ufffd']] })]);
    expect(await client.query('surrogate', { authors: [alice.pubkey], '#t': ['\ud800'] })).toEqual([]);
  });

  it('refuses an unknown filter key with CLOSED unsupported:', async () => {
    expect(await client.refused('unknown', { kinds: [1], fulltext: 'x' })).toMatch(/^unsupported: /);
  });
});

describe('random filters over the socket', () => {
  let relay: TestRelay;
  let client: TestClient;
  let stored: NostrEvent[];
  // The relay reads the clock itself, so expirations stay an hour or more away from it.
  const t = now();
  const expirations = [t - 100000, t - 3600, t + 3600, t + 100000];

  beforeAll(async () => {
    relay = await startTestRelay({ DEFAULT_LIMIT: '25', MAX_LIMIT: '60' });
    client = await TestClient.connect(relay.url);
    const [written] = fc.sample(eventsArb(expirations, 300, 300), { seed: 45, numRuns: 1 });
    await insertAll(relay.db.pool, written, 8);
    stored = referenceStored(written);
  });
  afterAll(async () => {
    client?.close();
    await relay?.close();
  });

  const limits = { maxValuesPerArray: 1000, defaultLimit: 25, maxLimit: 60 };
  let sub = 0;

  it('answers REQ with the events of the reference, in the same order', async () => {
    await fc.assert(
      fc.asyncProperty(filtersArb(ids(stored.slice(0, 30))), async (filters) => {
        const found = await req(client, `p${sub++}`, ...filters);
        const expected = referenceReq(filters, stored, now(), limits);
        expect(ids(found)).toEqual(ids(expected));
        expect(found).toEqual(expected);
      }),
      { numRuns: 100 },
    );
  });

  it('answers COUNT with the number of the reference', async () => {
    await fc.assert(
      fc.asyncProperty(filtersArb(ids(stored.slice(0, 30))), async (filters) => {
        expect(await count(client, `c${sub++}`, ...filters)).toBe(referenceCount(filters, stored, now()));
      }),
      { numRuns: 100 },
    );
  });
});
