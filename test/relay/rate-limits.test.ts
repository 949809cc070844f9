// Rate limits (token buckets per client address and per authenticated pubkey) and the client address
// they count against: X-Forwarded-For only from TRUSTED_PROXIES. Clients on other loopback addresses
// (127.0.0.2, 127.0.0.3: Linux routes all of 127/8 to lo) stand for other hosts.
import WebSocket, { type ClientOptions } from 'ws';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { unique } from '../support/events.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { configSchema } from '../../src/config.js';

const alice = newSigner();
let open: TestClient[] = [];
afterEach(() => {
  open.forEach((c) => c.close());
  open = [];
});

async function connect(relay: TestRelay, options: ClientOptions = {}): Promise<TestClient> {
  const c = await TestClient.connect(relay.url, options);
  open.push(c);
  return c;
}

/** The HTTP status of a refused upgrade, or 101 when the WebSocket opened (then closed again). */
function upgradeStatus(relay: TestRelay, options: ClientOptions = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(relay.url, options);
    ws.once('open', () => {
      ws.close();
      resolve(101);
    });
    ws.once('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0);
      res.resume();
    });
    ws.once('error', (err) => (err.message.includes('Unexpected server response') ? undefined : reject(err)));
  });
}

const from = (address: string, headers: Record<string, string> = {}): ClientOptions => ({ localAddress: address, headers });

describe('message budgets', () => {
  let relay: TestRelay;
  beforeAll(async () => {
    // A token every 10 s: what refills while a test runs, however slowly, stays within the bounds.
    relay = await startTestRelay({
      RATE_LIMIT_EVENTS_PER_SECOND: '0.1',
      RATE_LIMIT_EVENTS_BURST: '5',
      RATE_LIMIT_REQS_PER_SECOND: '0.1',
      RATE_LIMIT_REQS_BURST: '5',
      RATE_LIMIT_DISCONNECT_AFTER: '1000',
      RATE_LIMIT_EXEMPT: `127.0.0.4/32,${newSigner().pubkey}`,
    });
  });
  afterAll(() => relay.close());

  it('limits a flood of events from one address while a client at another address is served as usual', async () => {
    const flooder = await connect(relay, from('127.0.0.2'));
    const events = Array.from({ length: 30 }, () => alice.sign({ content: unique('flood') }));
    const started = Date.now();
    events.forEach((e) => flooder.send(['EVENT', e]));
    const oks = await Promise.all(events.map((e) => flooder.waitFor((m) => m[0] === 'OK' && m[1] === e.id)));
    const accepted = oks.filter((m) => m[2] === true).length;
    expect(accepted).toBeGreaterThanOrEqual(5);
    expect(accepted).toBeLessThanOrEqual(5 + Math.ceil((0.1 * (Date.now() - started)) / 1000)); // the burst, plus what refilled meanwhile
    expect(oks.filter((m) => m[2] === false).every((m) => /^rate-limited: /.test(m[3] as string))).toBe(true);

    const neighbour = await connect(relay, from('127.0.0.3'));
    for (let i = 0; i < 5; i++) expect(await neighbour.publish(alice.sign({ content: unique('normal') }))).toEqual([true, '']);
  });

  it('limits REQ and COUNT with CLOSED rate-limited:', async () => {
    const c = await connect(relay, from('127.0.0.5'));
    const replies = [];
    for (let i = 0; i < 12; i++) {
      const mark = c.mark;
      c.send(i % 2 ? ['COUNT', `q${i}`, { kinds: [1] }] : ['REQ', `q${i}`, { kinds: [1], limit: 1 }]);
      replies.push(await c.waitFor((m) => ['EOSE', 'CLOSED', 'COUNT'].includes(m[0]) && m[1] === `q${i}`, 10_000, mark));
      if (i % 2 === 0) c.send(['CLOSE', `q${i}`]);
    }
    const closed = replies.filter((m) => m[0] === 'CLOSED');
    expect(closed.length).toBeGreaterThanOrEqual(6); // 12 less the burst of 5, less one token of refill
    expect(closed.every((m) => /^rate-limited: /.test(m[2] as string))).toBe(true);
  });

  it('charges an authenticated pubkey wherever it connects from', async () => {
    const bob = newSigner();
    const first = await connect(relay, from('127.0.0.6'));
    const second = await connect(relay, from('127.0.0.7'));
    expect(await first.auth(bob)).toEqual([true, '']); // AUTH spends an event token of the address
    expect(await second.auth(bob)).toEqual([true, '']);
    const results = [];
    for (let i = 0; i < 4; i++) results.push((await first.publish(bob.sign({ content: unique('a') })))[0]);
    for (let i = 0; i < 4; i++) results.push((await second.publish(bob.sign({ content: unique('b') })))[0]);
    // Each address had 4 tokens left; bob's own bucket had 5 in all.
    expect(results.filter(Boolean).length).toBeLessThanOrEqual(6);
    expect(results.slice(4).some((ok) => !ok)).toBe(true);
  });

  it('never limits an exempt address', async () => {
    const c = await connect(relay, from('127.0.0.4'));
    const events = Array.from({ length: 30 }, () => alice.sign({ content: unique('exempt') }));
    events.forEach((e) => c.send(['EVENT', e]));
    const oks = await Promise.all(events.map((e) => c.waitFor((m) => m[0] === 'OK' && m[1] === e.id)));
    expect(oks.every((m) => m[2] === true)).toBe(true);
  });
});

describe('a client far over its budget', () => {
  it('is disconnected with a rate-limited: close reason', async () => {
    const relay = await startTestRelay({ RATE_LIMIT_EVENTS_PER_SECOND: '1', RATE_LIMIT_EVENTS_BURST: '2', RATE_LIMIT_DISCONNECT_AFTER: '10' });
    try {
      const c = await connect(relay);
      for (let i = 0; i < 40; i++) c.send(['EVENT', alice.sign({ content: unique('x') })]);
      const closed = await c.closed();
      expect(closed.code).toBe(1008);
      expect(closed.reason).toMatch(/^rate-limited: /);
    } finally {
      await relay.close();
    }
  });
});

describe('the default budgets', () => {
  // The relay as an operator starts it: every limit at its default (test relays otherwise run without).
  const defaults = configSchema.parse({});
  const DEFAULT_LIMITS = Object.fromEntries(
    (['RATE_LIMIT_EVENTS_PER_SECOND', 'RATE_LIMIT_EVENTS_BURST', 'RATE_LIMIT_REQS_PER_SECOND', 'RATE_LIMIT_CONNECTIONS_PER_MINUTE', 'MAX_CONNECTIONS_PER_ADDRESS', 'RATE_LIMIT_DISCONNECT_AFTER', 'MAX_PENDING_EVENTS'] as const).map(
      (name) => [name, String(defaults[name])],
    ),
  );
  let relay: TestRelay;
  beforeAll(async () => {
    relay = await startTestRelay(DEFAULT_LIMITS);
  });
  afterAll(() => relay.close());

  it('accepts a 500-event burst from one client whole, as a client re-broadcasting a history sends it', async () => {
    const c = await connect(relay, from('127.0.0.5'));
    const events = Array.from({ length: 500 }, () => alice.sign({ content: unique('history') }));
    events.forEach((e) => c.send(['EVENT', e]));
    const oks = await Promise.all(events.map((e) => c.waitFor((m) => m[0] === 'OK' && m[1] === e.id, 60_000)));
    expect(oks.filter((m) => m[2] !== true).map((m) => m[3])).toEqual([]);
    expect(await c.count('all', { ids: events.map((e) => e.id) })).toBe(500);
  });

  it('still refuses a flood past the burst, at the sustained rate, and disconnects it', { timeout: 90_000 }, async () => {
    const c = await connect(relay, from('127.0.0.6'));
    const burst = Number(defaults.RATE_LIMIT_EVENTS_BURST);
    const started = Date.now();
    const events = Array.from({ length: burst + 200 }, () => alice.sign({ content: unique('flood') }));
    events.forEach((e) => c.send(['EVENT', e]));
    const closed = await c.closed(60_000);
    const seconds = (Date.now() - started) / 1000;
    expect(closed).toEqual({ code: 1008, reason: expect.stringMatching(/^rate-limited: /) });
    const refused = c.messages.filter((m) => m[0] === 'OK' && m[2] === false);
    expect(refused.length).toBeGreaterThan(Number(defaults.RATE_LIMIT_DISCONNECT_AFTER));
    expect(refused.every((m) => String(m[3]).startsWith('rate-limited: '))).toBe(true);
    // What got in (the flooder is gone before some of its OKs): the burst, plus what refilled while
    // the flood lasted; never the whole flood. Events taken before the disconnect are still stored.
    const reader = await connect(relay, from('127.0.0.7'));
    const ids = events.map((e) => e.id);
    const storedCount = () => reader.count('stored', { ids: ids.slice(0, 800) }, { ids: ids.slice(800) }); // MAX_FILTER_VALUES per list
    await expect.poll(storedCount, { timeout: 30_000 }).toBeGreaterThanOrEqual(burst);
    const stored = await storedCount();
    expect(stored).toBeLessThanOrEqual(burst + Math.ceil(Number(defaults.RATE_LIMIT_EVENTS_PER_SECOND) * seconds) + 1);
    expect(stored + refused.length).toBeLessThanOrEqual(events.length);
  });
});

describe('connections', () => {
  it('refuses an upgrade past MAX_CONNECTIONS_PER_ADDRESS with HTTP 429, and frees the slot on close', async () => {
    const relay = await startTestRelay({ MAX_CONNECTIONS_PER_ADDRESS: '2' });
    try {
      const a = await connect(relay, from('127.0.0.2'));
      await connect(relay, from('127.0.0.2'));
      expect(await upgradeStatus(relay, from('127.0.0.2'))).toBe(429);
      expect(await upgradeStatus(relay, from('127.0.0.3'))).toBe(101);
      a.close();
      await a.closed();
      await expect.poll(() => upgradeStatus(relay, from('127.0.0.2')), { timeout: 5000 }).toBe(101);
    } finally {
      await relay.close();
    }
  });

  it('refuses an address opening connections too fast with HTTP 429', async () => {
    const relay = await startTestRelay({ RATE_LIMIT_CONNECTIONS_PER_MINUTE: '1', RATE_LIMIT_CONNECTIONS_BURST: '3' });
    try {
      const statuses = [];
      for (let i = 0; i < 5; i++) statuses.push(await upgradeStatus(relay, from('127.0.0.2')));
      expect(statuses).toEqual([101, 101, 101, 429, 429]);
      expect(await upgradeStatus(relay, from('127.0.0.3'))).toBe(101);
    } finally {
      await relay.close();
    }
  });
});

describe('the client address behind a proxy', () => {
  it('ignores X-Forwarded-For from a peer that is not a trusted proxy: a forged header buys no new budget', async () => {
    const relay = await startTestRelay({ MAX_CONNECTIONS_PER_ADDRESS: '1' });
    try {
      await connect(relay, from('127.0.0.2', { 'X-Forwarded-For': '198.51.100.1' }));
      expect(await upgradeStatus(relay, from('127.0.0.2', { 'X-Forwarded-For': '198.51.100.2' }))).toBe(429);
    } finally {
      await relay.close();
    }
  });

  it("honours a trusted proxy's X-Forwarded-For: each forwarded client has its own budget", async () => {
    const relay = await startTestRelay({ MAX_CONNECTIONS_PER_ADDRESS: '1', TRUSTED_PROXIES: '127.0.0.2/32' });
    try {
      await connect(relay, from('127.0.0.2', { 'X-Forwarded-For': '198.51.100.1' }));
      expect(await upgradeStatus(relay, from('127.0.0.2', { 'X-Forwarded-For': '198.51.100.2' }))).toBe(101);
      expect(await upgradeStatus(relay, from('127.0.0.2', { 'X-Forwarded-For': '198.51.100.1' }))).toBe(429);
      // A client may prepend anything; the right-most address the proxy added is the one counted.
      expect(await upgradeStatus(relay, from('127.0.0.2', { 'X-Forwarded-For': '198.51.100.9, 198.51.100.1' }))).toBe(429);
      // Not from the trusted proxy: its own address counts, whatever the header.
      await connect(relay, from('127.0.0.3', { 'X-Forwarded-For': '198.51.100.3' }));
      expect(await upgradeStatus(relay, from('127.0.0.3', { 'X-Forwarded-For': '198.51.100.4' }))).toBe(429);
    } finally {
      await relay.close();
    }
  });

  it('keeps TRUST_PROXY=true working as "trust the loopback addresses"', async () => {
    const relay = await startTestRelay({ MAX_CONNECTIONS_PER_ADDRESS: '1', TRUST_PROXY: 'true' });
    try {
      await connect(relay, from('127.0.0.2', { 'X-Forwarded-For': '198.51.100.1' }));
      expect(await upgradeStatus(relay, from('127.0.0.2', { 'X-Forwarded-For': '198.51.100.2' }))).toBe(101);
    } finally {
      await relay.close();
    }
  });
});
