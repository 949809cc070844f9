// NIP-40 expiration (protocol.md section 5): already-expired events are refused; events that expire
// while stored are never served, take no result slot, are not counted, and the sweep removes them.
// Time is the subject here, so this file waits for one short expiry window (about 2 s).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { deleteExpiredEvents } from '../../src/store/expiry.js';
import { TestClient } from '../support/client.js';
import { sleepUntil, unique } from '../support/events.js';
import { newSigner, now, type Signer } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let sweeping: TestRelay; // EXPIRY_SWEEP_SECONDS=1: the relay's own sweep
let client: TestClient;
let sweepingClient: TestClient;

// Published in beforeAll, then the window elapses once for every test below.
let alice: Signer;
let tag: string;
let older: NostrEvent;
let expiring: NostrEvent;
let servedBeforeExpiry: NostrEvent[];
let sweptExpiring: NostrEvent;
let sweptKeeper: NostrEvent;

beforeAll(async () => {
  [relay, sweeping] = await Promise.all([startTestRelay(), startTestRelay({ EXPIRY_SWEEP_SECONDS: '1' })]);
  [client, sweepingClient] = await Promise.all([TestClient.connect(relay.url), TestClient.connect(sweeping.url)]);

  alice = newSigner();
  tag = unique('exp');
  const expiresAt = Math.ceil(Date.now() / 1000 + 2); // 2 to 3 s away: time to publish and check first
  older = alice.sign({ created_at: now() - 100, tags: [['t', tag]], content: 'stays' });
  expiring = alice.sign({ created_at: now() - 50, tags: [['t', tag], ['expiration', String(expiresAt)]], content: 'goes' });
  sweptExpiring = alice.sign({ tags: [['expiration', String(expiresAt)]] });
  sweptKeeper = alice.sign({ tags: [['expiration', String(now() + 3600)]] });
  for (const e of [older, expiring]) expect(await client.publish(e)).toEqual([true, '']);
  for (const e of [sweptExpiring, sweptKeeper]) expect(await sweepingClient.publish(e)).toEqual([true, '']);
  servedBeforeExpiry = await client.fetch('before', { authors: [alice.pubkey], limit: 1 });

  await sleepUntil(expiresAt);
});
afterAll(async () => {
  client.close();
  sweepingClient.close();
  await Promise.all([relay.close(), sweeping.close()]);
});

async function rows(r: TestRelay, table: 'events' | 'event_tags', id: string): Promise<number> {
  const column = table === 'events' ? 'id' : 'event_id';
  const { rows } = await r.db.pool.query(`SELECT count(*)::int AS n FROM ${table} WHERE ${column} = $1`, [Buffer.from(id, 'hex')]);
  return rows[0].n;
}

describe('publishing', () => {
  it('refuses an already expired event with OK false "invalid: event expired"', async () => {
    const e = newSigner().sign({ tags: [['expiration', String(now() - 60)]] });
    expect(await client.publish(e)).toEqual([false, 'invalid: event expired']);
    expect(await rows(relay, 'events', e.id)).toBe(0);
  });

  it('treats an expiration equal to the current second as expired', async () => {
    const e = newSigner().sign({ tags: [['expiration', String(now())]] });
    expect(await client.publish(e)).toEqual([false, 'invalid: event expired']);
  });

  it('accepts and serves an event whose expiration is in the future', async () => {
    const e = newSigner().sign({ tags: [['expiration', String(now() + 3600)]] });
    expect(await client.publish(e)).toEqual([true, '']);
    expect(await client.fetch('future', { ids: [e.id] })).toEqual([e]);
  });

  it('does not broadcast an already expired event', async () => {
    const s = newSigner();
    await client.query('live-exp', { authors: [s.pubkey] });
    await client.publish(s.sign({ tags: [['expiration', String(now() - 1)]] }));
    await client.sync();
    expect(client.liveEvents('live-exp')).toEqual([]);
    client.send(['CLOSE', 'live-exp']);
  });
});

describe('an event that expired while stored', () => {
  it('was served before it expired (the setup is right)', () => {
    expect(servedBeforeExpiry).toEqual([expiring]);
  });

  it('is not served by ids', async () => {
    expect(await client.fetch('ids', { ids: [expiring.id] })).toEqual([]);
  });

  it.each([
    ['authors', () => ({ authors: [alice.pubkey], limit: 1 })],
    ['authors + kinds', () => ({ authors: [alice.pubkey], kinds: [1], limit: 1 })],
    ['#t', () => ({ '#t': [tag], limit: 1 })],
    ['ids of both', () => ({ ids: [expiring.id, older.id], limit: 1 })],
  ])('does not take a result slot: limit 1 returns the next event instead (%s)', async (_, filter) => {
    expect(await client.fetch('slot', filter())).toEqual([older]);
  });

  it('is not served in a REQ with several filters', async () => {
    expect(await client.fetch('multi', { ids: [expiring.id] }, { '#t': [tag] })).toEqual([older]);
  });

  it('is not counted by COUNT', async () => {
    expect(await client.count('count', { authors: [alice.pubkey] })).toBe(1);
    expect(await client.count('count', { ids: [expiring.id] })).toBe(0);
  });

  it('is deleted by the expiry sweep (deleteExpiredEvents), tags included, and the others are kept', async () => {
    expect(await rows(relay, 'events', expiring.id)).toBe(1); // still stored until the sweep
    expect(await deleteExpiredEvents(relay.db.pool, now())).toBe(1);
    expect(await rows(relay, 'events', expiring.id)).toBe(0);
    expect(await rows(relay, 'event_tags', expiring.id)).toBe(0);
    expect(await rows(relay, 'events', older.id)).toBe(1);
  });

  it('is deleted by the relay\'s own periodic sweep (EXPIRY_SWEEP_SECONDS=1)', async () => {
    for (let waited = 0; (await rows(sweeping, 'events', sweptExpiring.id)) > 0; waited += 100) {
      if (waited > 5000) throw new Error('the sweep did not run');
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(await rows(sweeping, 'events', sweptKeeper.id)).toBe(1);
  });
});
