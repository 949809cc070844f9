// NIP-42 AUTH (protocol.md 6): a challenge per connection, AUTH events checked strictly (kind, time,
// challenge, relay URL, signature), several pubkeys per connection, kind 22242 never stored nor
// broadcast, and AUTH_REQUIRED for private relays.
import { makeAuthEvent } from 'nostr-tools/nip42';
import { finalizeEvent } from 'nostr-tools/pure';
import { Relay, useWebSocketImplementation } from 'nostr-tools/relay';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { unique } from '../support/events.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

const RELAY_URL = 'wss://relay.example.com/nostr';
const alice = newSigner();
const bob = newSigner();

describe('NIP-42 with RELAY_URL set', () => {
  let relay: TestRelay;
  const clients: TestClient[] = [];
  const connect = async () => {
    const c = await TestClient.connect(relay.url);
    clients.push(c);
    return c;
  };
  beforeAll(async () => {
    relay = await startTestRelay({ RELAY_URL, AUTH_REQUIRED: 'writes' });
  });
  afterAll(async () => {
    clients.forEach((c) => c.close());
    await relay.close();
  });

  it('sends every connection a fresh random challenge as soon as it opens', async () => {
    const [a, b] = [await connect(), await connect()];
    const [ca, cb] = [await a.challenge(), await b.challenge()];
    expect(a.messages[0]).toEqual(['AUTH', ca]);
    expect(ca).toMatch(/^[0-9a-f]{32}$/);
    expect(cb).not.toBe(ca);
  });

  it("accepts an AUTH event made with nostr-tools' makeAuthEvent, and the key may then publish", async () => {
    const c = await connect();
    const event = finalizeEvent(makeAuthEvent(RELAY_URL, await c.challenge()), alice.secretKey);
    expect(await c.sendAuth(event)).toEqual([true, '']);
    expect(await c.publish(alice.sign({ content: 'after auth' }))).toEqual([true, '']);
  });

  it.each([
    ['another scheme', 'ws://relay.example.com/nostr'],
    ['a trailing slash', 'wss://relay.example.com/nostr/'],
    ['upper-case host and the default port', 'wss://RELAY.example.com:443/nostr'],
  ])('treats %s as the same relay', async (_, url) => {
    const c = await connect();
    expect(await c.auth(alice, url)).toEqual([true, '']);
  });

  it.each([
    ['another host', 'wss://evil.example.com/nostr'],
    ['another path', 'wss://relay.example.com/other'],
    ['no path', 'wss://relay.example.com'],
    ['another port', 'wss://relay.example.com:8443/nostr'],
    ['not a URL', 'relay.example.com/nostr'],
  ])('refuses an AUTH event naming %s', async (_, url) => {
    const c = await connect();
    expect(await c.auth(alice, url)).toEqual([false, 'invalid: the relay tag does not name this relay']);
  });

  it('refuses an AUTH event with the challenge of another connection (a replay)', async () => {
    const [a, b] = [await connect(), await connect()];
    const event = alice.sign({ kind: 22242, tags: [['relay', RELAY_URL], ['challenge', await a.challenge()]] });
    expect(await b.sendAuth(event)).toEqual([false, 'invalid: the challenge tag does not match the challenge sent on this connection']);
    expect(await a.sendAuth(event)).toEqual([true, '']);
  });

  it('refuses an AUTH event without a challenge tag', async () => {
    const c = await connect();
    const event = alice.sign({ kind: 22242, tags: [['relay', RELAY_URL]] });
    expect(await c.sendAuth(event)).toEqual([false, expect.stringMatching(/^invalid: the challenge tag/)]);
  });

  it.each([
    ['eleven minutes old', -660],
    ['eleven minutes ahead', 660],
  ])('refuses an AUTH event whose created_at is %s', async (_, offset) => {
    const c = await connect();
    expect(await c.auth(alice, RELAY_URL, { created_at: now() + offset })).toEqual([false, expect.stringMatching(/^invalid: created_at of an AUTH event/)]);
  });

  it('refuses an AUTH event of another kind', async () => {
    const c = await connect();
    expect(await c.auth(alice, RELAY_URL, { kind: 1 })).toEqual([false, 'invalid: an AUTH event has kind 22242']);
  });

  it('refuses an AUTH event with a bad signature, and the key stays unauthenticated', async () => {
    const c = await connect();
    const event = alice.sign({ kind: 22242, tags: [['relay', RELAY_URL], ['challenge', await c.challenge()]] });
    const forged = { ...event, sig: bob.sign({ kind: 22242, tags: [['relay', RELAY_URL], ['challenge', await c.challenge()]] }).sig };
    expect(await c.sendAuth(forged)).toEqual([false, 'invalid: bad signature']);
    expect(await c.publish(alice.sign({}))).toEqual([false, expect.stringMatching(/^auth-required: /)]);
  });

  it('refuses an AUTH event whose id is not its hash', async () => {
    const c = await connect();
    const event = alice.sign({ kind: 22242, tags: [['relay', RELAY_URL], ['challenge', await c.challenge()]] });
    expect(await c.sendAuth({ ...event, content: 'changed' })).toEqual([false, expect.stringMatching(/^invalid: event id does not match/)]);
  });

  it('answers a malformed AUTH message with a NOTICE or an OK false, and keeps the connection', async () => {
    const c = await connect();
    const from = c.mark;
    c.send(['AUTH', 'not an event']);
    expect(await c.notice(from)).toMatch(/^invalid: /);
    expect(await c.sendAuth({ id: 'x', kind: 22242 })).toEqual([false, expect.stringMatching(/^invalid: /)]);
    expect(await c.auth(alice, RELAY_URL)).toEqual([true, '']);
  });

  it('counts every key authenticated on a connection, for the whole connection', async () => {
    const c = await connect();
    expect(await c.auth(alice, RELAY_URL)).toEqual([true, '']);
    expect(await c.auth(bob, RELAY_URL)).toEqual([true, '']);
    expect(await c.publish(alice.sign({ tags: [['-']] }))).toEqual([true, '']);
    expect(await c.publish(bob.sign({ tags: [['-']] }))).toEqual([true, '']);
  });

  it('lets at most 32 keys authenticate on one connection; the ones in keep counting', async () => {
    const c = await connect();
    const keys = Array.from({ length: 33 }, () => newSigner());
    for (const key of keys.slice(0, 32)) expect(await c.auth(key, RELAY_URL)).toEqual([true, '']);
    expect(await c.auth(keys[32], RELAY_URL)).toEqual([false, 'restricted: at most 32 keys may authenticate on one connection']);
    expect(await c.auth(keys[0], RELAY_URL)).toEqual([true, '']);
    expect(await c.publish(keys[31].sign({ tags: [['-']] }))).toEqual([true, '']);
  });

  it('refuses kind 22242 sent as an EVENT: never stored, never broadcast', async () => {
    const watcher = await connect();
    expect(await watcher.auth(bob, RELAY_URL)).toEqual([true, '']);
    await watcher.query('auth-live', { kinds: [22242] });
    const c = await connect();
    expect(await c.auth(alice, RELAY_URL)).toEqual([true, '']);
    const event = alice.sign({ kind: 22242, tags: [['relay', RELAY_URL], ['challenge', await c.challenge()]] });
    expect(await c.publish(event)).toEqual([false, expect.stringMatching(/^invalid: kind 22242/)]);
    expect(await c.fetch('auth-stored', { ids: [event.id] })).toEqual([]);
    await watcher.sync();
    expect(watcher.liveEvents('auth-live')).toEqual([]);
  });
});

describe('NIP-42 without RELAY_URL: the relay tag is compared with the Host of the upgrade', () => {
  let relay: TestRelay;
  beforeAll(async () => {
    relay = await startTestRelay();
  });
  afterAll(() => relay.close());

  it('accepts the URL the client connected to, and refuses another host', async () => {
    const c = await TestClient.connect(relay.url);
    expect(await c.auth(alice, 'wss://relay.example.com')).toEqual([false, 'invalid: the relay tag does not name this relay']);
    expect(await c.auth(alice, relay.url)).toEqual([true, '']);
    c.close();
  });

  it('takes the path of the upgrade into account', async () => {
    const c = await TestClient.connect(`${relay.url}/inbox`);
    expect(await c.auth(alice, relay.url)).toEqual([false, 'invalid: the relay tag does not name this relay']);
    expect(await c.auth(alice, `${relay.url}/inbox`)).toEqual([true, '']);
    c.close();
  });

  it('authenticates a nostr-tools Relay the way a real client does (relay.auth with makeAuthEvent inside)', async () => {
    useWebSocketImplementation(WebSocket);
    const r = await Relay.connect(relay.url);
    try {
      // The challenge arrives right after the open; nostr-tools refuses to auth before it has one.
      const sign = async (template: Parameters<typeof finalizeEvent>[0]) => finalizeEvent(template, alice.secretKey);
      let reply: string | undefined;
      for (let attempt = 0; reply === undefined; attempt++) {
        try {
          reply = await r.auth(sign);
        } catch (err) {
          if (attempt > 100 || !/challenge/.test(String(err))) throw err;
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      }
      expect(reply).toBe('');
      const note = alice.sign({ tags: [['-']], content: unique('protected') });
      await r.publish(note); // resolves on OK true only
    } finally {
      r.close();
    }
  });
});

describe('AUTH_REQUIRED', () => {
  let writes: TestRelay;
  let all: TestRelay;
  beforeAll(async () => {
    [writes, all] = await Promise.all([startTestRelay({ AUTH_REQUIRED: 'writes' }), startTestRelay({ AUTH_REQUIRED: 'all' })]);
  });
  afterAll(() => Promise.all([writes.close(), all.close()]));

  it('=writes: refuses EVENT from an unauthenticated connection with auth-required:, serves REQ, and accepts after AUTH', async () => {
    const c = await TestClient.connect(writes.url);
    const note = alice.sign({ content: unique('writes') });
    expect(await c.publish(note)).toEqual([false, expect.stringMatching(/^auth-required: /)]);
    expect(await c.fetch('r', { ids: [note.id] })).toEqual([]);
    expect(await c.count('n', { ids: [note.id] })).toBe(0);
    expect(await c.auth(bob)).toEqual([true, '']);
    expect(await c.publish(note)).toEqual([true, '']); // any authenticated key may publish anyone's signed event
    c.close();
  });

  it('=all: refuses REQ and COUNT with CLOSED auth-required: and EVENT with OK auth-required:, then serves after AUTH', async () => {
    const c = await TestClient.connect(all.url);
    const note = alice.sign({ content: unique('all') });
    expect(await c.refused('r1', { kinds: [1] })).toMatch(/^auth-required: /);
    await expect(c.count('c1', { kinds: [1] })).rejects.toThrow(/CLOSED: auth-required: /);
    expect(await c.publish(note)).toEqual([false, expect.stringMatching(/^auth-required: /)]);
    expect(await c.auth(alice)).toEqual([true, '']);
    expect(await c.publish(note)).toEqual([true, '']);
    expect(await c.fetch('r2', { ids: [note.id] })).toEqual([note]);
    expect(await c.count('c2', { ids: [note.id] })).toBe(1);
    c.close();
  });
});
