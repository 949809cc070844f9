// Every configurable limit: each breach gets its prefixed OK false / CLOSED / NOTICE, the value at
// the limit is still accepted, and the connection stays usable afterwards.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { TestClient } from '../support/client.js';
import { getPow, ids, newestFirst, randomHex64, signWithPow, signWithoutPow, unique } from '../support/events.js';
import { newSigner, now, type Signer } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let powRelay: TestRelay;
const clients: TestClient[] = [];
beforeAll(async () => {
  [relay, powRelay] = await Promise.all([
    startTestRelay({
      MAX_MESSAGE_BYTES: '4096',
      MAX_SUBSCRIPTIONS: '3',
      MAX_FILTERS: '2',
      MAX_LIMIT: '3',
      DEFAULT_LIMIT: '2',
      MAX_SUBID_LENGTH: '8',
      MAX_EVENT_TAGS: '3',
      MAX_CONTENT_LENGTH: '5',
      MAX_FILTER_VALUES: '3',
      CREATED_AT_FUTURE_SECONDS: '60',
      CREATED_AT_PAST_SECONDS: '3600',
    }),
    startTestRelay({ MIN_POW_DIFFICULTY: '8' }),
  ]);
});
afterAll(async () => {
  clients.forEach((c) => c.close());
  await Promise.all([relay.close(), powRelay.close()]);
});

async function connect(r = relay): Promise<TestClient> {
  const c = await TestClient.connect(r.url);
  clients.push(c);
  return c;
}

const INVALID = expect.stringMatching(/^invalid: /);

/** The connection still works: an event is accepted and then counted. */
async function expectUsable(c: TestClient): Promise<void> {
  const e = newSigner().sign({ content: 'ok' });
  expect(await c.publish(e)).toEqual([true, '']);
  expect(await c.count('usable', { ids: [e.id] })).toBe(1);
}

/** An event whose ["EVENT", e] message is exactly `bytes` UTF-8 bytes, padded with `pad` in a tag. */
function eventOfMessageSize(s: Signer, bytes: number, pad = 'a'): NostrEvent {
  const created_at = now();
  const build = (value: string) => s.sign({ created_at, tags: [['alt', value]] });
  const size = (e: NostrEvent) => Buffer.byteLength(JSON.stringify(['EVENT', e]));
  const missing = bytes - size(build(''));
  const n = Math.floor(missing / Buffer.byteLength(pad));
  const e = build(pad.repeat(n) + 'a'.repeat(missing - n * Buffer.byteLength(pad)));
  if (size(e) !== bytes) throw new Error(`built ${size(e)} bytes, wanted ${bytes}`);
  return e;
}

describe('MAX_MESSAGE_BYTES (4096)', () => {
  it('accepts an EVENT message of exactly 4096 bytes', async () => {
    const c = await connect();
    expect(await c.publish(eventOfMessageSize(newSigner(), 4096))).toEqual([true, '']);
  });

  it('refuses an EVENT message of 4097 bytes with OK false "invalid:", and the connection stays usable', async () => {
    const c = await connect();
    expect(await c.publish(eventOfMessageSize(newSigner(), 4097))).toEqual([false, INVALID]);
    await expectUsable(c);
  });

  it('counts UTF-8 bytes, not characters', async () => {
    const c = await connect();
    const e = eventOfMessageSize(newSigner(), 4097, 'é'); // fewer than 4096 characters
    expect(JSON.stringify(['EVENT', e]).length).toBeLessThan(4096);
    expect(await c.publish(e)).toEqual([false, INVALID]);
    await expectUsable(c);
  });

  it('refuses an oversized REQ with CLOSED "invalid:" for its subscription id', async () => {
    const c = await connect();
    expect(await c.refused('big', { '#t': ['x'.repeat(5000)] })).toMatch(/^invalid: /);
    await expectUsable(c);
  });

  it('answers another oversized message with a NOTICE', async () => {
    const c = await connect();
    const from = c.mark;
    c.sendRaw('x'.repeat(5000));
    expect(await c.notice(from)).toMatch(/^invalid: /);
    await expectUsable(c);
  });

  // Found by the fuzzer (bench/lib/fuzz.ts): an oversized message is answered for the id it carries,
  // as the same message within the limit would be.
  it('refuses an oversized AUTH with OK false "invalid:" for its event id (NIP-42: every AUTH gets an OK)', async () => {
    const c = await connect();
    const e = newSigner().sign({ kind: 22242, tags: [['relay', relay.url], ['challenge', 'x'.repeat(5000)]] });
    expect(await c.sendAuth(e)).toEqual([false, INVALID]);
    await expectUsable(c);
  });

  it('refuses an oversized NEG-OPEN with NEG-ERR "invalid:" for its id', async () => {
    const c = await connect();
    const from = c.mark;
    c.send(['NEG-OPEN', 'big', { '#t': ['x'.repeat(5000)] }, '61']);
    expect(await c.waitFor((m) => m[0] === 'NEG-ERR' || m[0] === 'NOTICE', 10_000, from)).toEqual(['NEG-ERR', 'big', INVALID]);
    await expectUsable(c);
  });

  it('refuses an oversized NEG-MSG with NEG-ERR "invalid:", which ends that session', async () => {
    const c = await connect();
    let from = c.mark;
    c.send(['NEG-OPEN', 'sync', { kinds: [1] }, '61']);
    expect((await c.waitFor((m) => m[1] === 'sync', 10_000, from))[0]).toBe('NEG-MSG');
    from = c.mark;
    c.send(['NEG-MSG', 'sync', '61' + '00'.repeat(3000)]);
    expect(await c.waitFor((m) => m[0] === 'NEG-ERR' || m[0] === 'NOTICE', 10_000, from)).toEqual(['NEG-ERR', 'sync', INVALID]);
    from = c.mark;
    c.send(['NEG-MSG', 'sync', '61']);
    expect(await c.waitFor((m) => m[1] === 'sync', 10_000, from)).toEqual(['NEG-ERR', 'sync', expect.stringMatching(/^closed: /)]);
  });

  it('an oversized REQ with the id of an open subscription ends it: nothing follows its CLOSED', async () => {
    const c = await connect();
    const s = newSigner();
    await c.query('mine', { authors: [s.pubkey] });
    expect(await c.refused('mine', { '#t': ['x'.repeat(5000)] })).toMatch(/^invalid: /);
    const from = c.mark;
    await c.publish(s.sign({}));
    await c.sync();
    expect(c.eventsFor('mine', from)).toEqual([]);
  });

  it('closes only the offending connection (1009) for a frame beyond twice the limit', async () => {
    const [c, bystander] = [await connect(), await connect()];
    c.send(['EVENT', newSigner().sign({ tags: [['alt', 'x'.repeat(9000)]] })]);
    expect((await c.closed()).code).toBe(1009);
    await expectUsable(bystander);
  });
});

describe('MAX_SUBSCRIPTIONS (3)', () => {
  it('refuses a 4th open subscription with CLOSED "rate-limited:", and the connection stays usable', async () => {
    const c = await connect();
    for (const id of ['s1', 's2', 's3']) expect(await c.query(id, { limit: 0 })).toEqual([]);
    expect(await c.refused('s4', { limit: 0 })).toMatch(/^rate-limited: /);
    await expectUsable(c);
  });

  it('lets a REQ at the limit replace one of its own subscriptions', async () => {
    const c = await connect();
    for (const id of ['s1', 's2', 's3']) await c.query(id, { limit: 0 });
    expect(await c.query('s2', { ids: [] })).toEqual([]);
  });

  it('frees a slot when a subscription is closed', async () => {
    const c = await connect();
    for (const id of ['s1', 's2', 's3']) await c.query(id, { limit: 0 });
    c.send(['CLOSE', 's1']);
    expect(await c.query('s4', { limit: 0 })).toEqual([]);
  });

  it('counts per connection: another connection has its own 3', async () => {
    const [c, d] = [await connect(), await connect()];
    for (const id of ['s1', 's2', 's3']) await c.query(id, { limit: 0 });
    for (const id of ['s1', 's2', 's3']) expect(await d.query(id, { limit: 0 })).toEqual([]);
  });

  it('a refused subscription receives no events', async () => {
    const c = await connect();
    const s = newSigner();
    for (const id of ['s1', 's2', 's3']) await c.query(id, { limit: 0, ids: [] });
    await c.refused('s4', { authors: [s.pubkey] });
    await c.publish(s.sign({}));
    await c.sync();
    expect(c.eventsFor('s4')).toEqual([]);
  });
});

describe('MAX_FILTERS (2)', () => {
  it('refuses a REQ with 3 filters with CLOSED "invalid:" and accepts 2', async () => {
    const c = await connect();
    expect(await c.refused('f', { ids: [] }, { ids: [] }, { ids: [] })).toMatch(/^invalid: /);
    expect(await c.fetch('f', { ids: [] }, { ids: [] })).toEqual([]);
    await expectUsable(c);
  });

  it('refuses a COUNT with 3 filters with CLOSED "invalid:"', async () => {
    const c = await connect();
    await expect(c.count('f', { ids: [] }, { ids: [] }, { ids: [] })).rejects.toThrow(/CLOSED: invalid: /);
    await expectUsable(c);
  });
});

describe('DEFAULT_LIMIT (2) and MAX_LIMIT (3)', () => {
  it('returns default_limit events for a filter without limit, and clamps a larger limit to max_limit', async () => {
    const c = await connect();
    const s = newSigner();
    const events = [1, 2, 3, 4, 5].map((i) => s.sign({ created_at: now() - 100 + i }));
    for (const e of events) await c.publish(e);
    expect(ids(await c.fetch('dl', { authors: [s.pubkey] }))).toEqual(ids(newestFirst(events).slice(0, 2)));
    expect(ids(await c.fetch('ml', { authors: [s.pubkey], limit: 100 }))).toEqual(ids(newestFirst(events).slice(0, 3)));
    expect(ids(await c.fetch('l1', { authors: [s.pubkey], limit: 1 }))).toEqual(ids(newestFirst(events).slice(0, 1)));
  });
});

describe('MAX_SUBID_LENGTH (8)', () => {
  it('refuses a 9-character subscription id with CLOSED "invalid:" and accepts 8', async () => {
    const c = await connect();
    expect(await c.refused('123456789', { ids: [] })).toMatch(/^invalid: /);
    expect(await c.fetch('12345678', { ids: [] })).toEqual([]);
    await expectUsable(c);
  });

  it('applies to COUNT too', async () => {
    const c = await connect();
    await expect(c.count('123456789', { ids: [] })).rejects.toThrow(/CLOSED: invalid: /);
    expect(await c.count('12345678', { ids: [] })).toBe(0);
  });
});

describe('MAX_EVENT_TAGS (3)', () => {
  it('refuses an event with 4 tags with OK false "invalid:" and accepts 3', async () => {
    const c = await connect();
    const s = newSigner();
    expect(await c.publish(s.sign({ tags: [['t', 'a'], ['t', 'b'], ['t', 'c'], ['t', 'd']] }))).toEqual([false, INVALID]);
    expect(await c.publish(s.sign({ tags: [['t', 'a'], ['t', 'b'], ['t', 'c']] }))).toEqual([true, '']);
  });
});

describe('MAX_CONTENT_LENGTH (5 characters)', () => {
  it('counts code points, not UTF-16 units: 5 emoji (10 units) are accepted', async () => {
    const c = await connect();
    expect(await c.publish(newSigner().sign({ content: '😀🎉🚀🌍✨' }))).toEqual([true, '']);
  });

  it('refuses 6 characters with OK false "invalid:"', async () => {
    const c = await connect();
    expect(await c.publish(newSigner().sign({ content: 'abcdef' }))).toEqual([false, INVALID]);
    expect(await c.publish(newSigner().sign({ content: '😀😀😀😀😀😀' }))).toEqual([false, INVALID]);
    await expectUsable(c);
  });
});

describe('MAX_FILTER_VALUES (3)', () => {
  const four = () => [randomHex64(), randomHex64(), randomHex64(), randomHex64()];
  it.each([
    ['ids', () => ({ ids: four() })],
    ['authors', () => ({ authors: four() })],
    ['kinds', () => ({ kinds: [60001, 60002, 60003, 60004] })],
    ['#e', () => ({ '#e': four() })],
    ['#t', () => ({ '#t': [unique(), unique(), unique(), unique()] })],
  ])('refuses 4 values in %s with CLOSED "invalid:" and accepts 3', async (key, filter) => {
    const c = await connect();
    const f = filter() as Record<string, unknown[]>;
    expect(await c.refused('v', f)).toMatch(/^invalid: /);
    expect(await c.fetch('v', { [key]: f[key].slice(0, 3) })).toEqual([]);
  });
});

describe('CREATED_AT_FUTURE_SECONDS (60) and CREATED_AT_PAST_SECONDS (3600)', () => {
  it('refuses created_at more than 60 s ahead with OK false "invalid:" and accepts 30 s ahead', async () => {
    const c = await connect();
    const s = newSigner();
    expect(await c.publish(s.sign({ created_at: now() + 120 }))).toEqual([false, INVALID]);
    expect(await c.publish(s.sign({ created_at: now() + 30 }))).toEqual([true, '']);
  });

  it('refuses created_at more than 3600 s ago with OK false "invalid:" and accepts 1800 s ago', async () => {
    const c = await connect();
    const s = newSigner();
    expect(await c.publish(s.sign({ created_at: now() - 7200 }))).toEqual([false, INVALID]);
    expect(await c.publish(s.sign({ created_at: now() - 1800 }))).toEqual([true, '']);
  });
});

describe('MIN_POW_DIFFICULTY (8)', () => {
  it('refuses an event below the difficulty with OK false "pow: difficulty N is less than 8"', async () => {
    const c = await connect(powRelay);
    const e = signWithoutPow(newSigner(), {}, 8);
    expect(await c.publish(e)).toEqual([false, `pow: difficulty ${getPow(e.id)} is less than 8`]);
  });

  it('accepts an event mined to the difficulty (NIP-13 nonce tag)', async () => {
    const c = await connect(powRelay);
    const e = signWithPow(newSigner(), { content: 'mined' }, 8);
    expect(getPow(e.id)).toBeGreaterThanOrEqual(8);
    expect(await c.publish(e)).toEqual([true, '']);
    expect(await c.fetch('pow', { ids: [e.id] })).toEqual([e]);
  });
});
