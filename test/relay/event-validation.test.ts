// NIP-01 EVENT: shape, id and signature checks (protocol.md 1.1-1.3), duplicates, and what OK true
// promises. Every refusal is `["OK", <id>, false, "invalid: ..."]`.
import { getEventHash } from 'nostr-tools/pure';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { TestClient } from '../support/client.js';
import { newSigner, type Signer } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let client: TestClient;
let alice: Signer;
beforeAll(async () => {
  relay = await startTestRelay();
  client = await TestClient.connect(relay.url);
  alice = newSigner();
});
afterAll(async () => {
  client.close();
  await relay.close();
});

const INVALID = expect.stringMatching(/^invalid: /);

/** An event whose fields were changed after signing (the id and sig no longer fit). */
const altered = (e: NostrEvent, changes: Record<string, unknown>) => ({ ...e, ...changes });

/** An event without one of its fields. */
function without(e: NostrEvent, field: keyof NostrEvent): Record<string, unknown> {
  const copy: Record<string, unknown> = { ...e };
  delete copy[field];
  return copy;
}

async function storedRows(id: string): Promise<number> {
  const { rows } = await relay.db.pool.query('SELECT count(*)::int AS n FROM events WHERE id = $1', [Buffer.from(id, 'hex')]);
  return rows[0].n;
}

describe('EVENT shape', () => {
  const cases: Array<[string, (e: NostrEvent) => Record<string, unknown>]> = [
    ['an id in uppercase hex', (e) => altered(e, { id: e.id.toUpperCase() })],
    ['an id shorter than 64 hex characters', (e) => altered(e, { id: e.id.slice(0, 63) })],
    ['an id that is not hex', (e) => altered(e, { id: 'z' + e.id.slice(1) })],
    ['a pubkey in uppercase hex', (e) => altered(e, { pubkey: e.pubkey.toUpperCase() })],
    ['a pubkey shorter than 64 hex characters', (e) => altered(e, { pubkey: e.pubkey.slice(0, 62) })],
    ['a sig in uppercase hex', (e) => altered(e, { sig: e.sig.toUpperCase() })],
    ['a sig shorter than 128 hex characters', (e) => altered(e, { sig: e.sig.slice(0, 126) })],
    ['a float created_at', (e) => altered(e, { created_at: e.created_at + 0.5 })],
    ['a float created_at, correctly signed', (e) => alice.signLoose({ ...e, created_at: e.created_at + 0.5 })],
    ['a negative created_at', (e) => alice.signLoose({ ...e, created_at: -1 })],
    ['a created_at above 2^53', (e) => alice.signLoose({ ...e, created_at: 2 ** 53 + 2 })],
    ['a created_at given as a string', (e) => alice.signLoose({ ...e, created_at: String(e.created_at) })],
    ['a kind above 65535', (e) => alice.signLoose({ ...e, kind: 65536 })],
    ['a float kind', (e) => alice.signLoose({ ...e, kind: 1.5 })],
    ['a negative kind', (e) => alice.signLoose({ ...e, kind: -1 })],
    ['a non-string tag element (number)', (e) => alice.signLoose({ ...e, tags: [['t', 1]] })],
    ['a null tag element', (e) => alice.signLoose({ ...e, tags: [['e', null]] })],
    ['an empty tag []', (e) => alice.signLoose({ ...e, tags: [[]] })],
    ['a tag that is not an array', (e) => altered(e, { tags: ['t'] })],
    ['tags that are not an array', (e) => altered(e, { tags: {} })],
    ['content that is not a string', (e) => altered(e, { content: 42 })],
    ['a missing content', (e) => without(e, 'content')],
    ['a missing sig', (e) => without(e, 'sig')],
    ['a missing pubkey', (e) => without(e, 'pubkey')],
    ['a missing created_at', (e) => without(e, 'created_at')],
    ['a missing kind', (e) => without(e, 'kind')],
    ['missing tags', (e) => without(e, 'tags')],
    // nostr-tools encodes a lone surrogate as U+FFFD before hashing, so these carry a valid id and
    // signature: only the explicit check refuses them (protocol.md 1.2).
    ['a lone UTF-16 surrogate in content', () => alice.signIndependent({ content: 'broken \ud800 text' })],
    ['a lone UTF-16 surrogate in a tag', () => alice.signIndependent({ tags: [['t', '\udc00']] })],
  ];

  it.each(cases)('refuses %s with OK false "invalid:"', async (_, make) => {
    const bad = make(alice.sign({ content: 'shape test' }));
    expect(await client.publish(bad)).toEqual([false, INVALID]);
  });

  it('accepts the same hand-built, hand-signed event when nothing is wrong with it (control)', async () => {
    const e = alice.sign({ content: 'control', tags: [['t', 'x']] });
    expect(await client.publish(alice.signLoose({ ...e, content: 'control 2' }))).toEqual([true, '']);
  });

  it('answers an EVENT without an id with a NOTICE (there is no id to put in an OK)', async () => {
    const from = client.mark;
    client.send(['EVENT', without(alice.sign({}), 'id')]);
    expect(await client.notice(from)).toMatch(/^invalid: /);
  });

  it('stores nothing for a refused event', async () => {
    const bad = alice.sign({ tags: [['t', '\ud800']] });
    await client.publish(bad);
    expect(await storedRows(bad.id)).toBe(0);
  });
});

describe('EVENT id and signature', () => {
  it('refuses an id that is not the hash of the event (content changed after signing)', async () => {
    const e = altered(alice.sign({ content: 'original' }), { content: 'forged' });
    expect(await client.publish(e)).toEqual([false, INVALID]);
    expect(await storedRows(e.id as string)).toBe(0);
  });

  it('refuses a well-formed id that is not the hash of the event', async () => {
    const e = altered(alice.sign({ content: 'x' }), { id: alice.sign({ content: 'y' }).id });
    expect(await client.publish(e)).toEqual([false, INVALID]);
  });

  it('refuses a signature with one character changed', async () => {
    const e = alice.sign({ content: 'signed' });
    const flipped = e.sig[127] === '0' ? '1' : '0';
    expect(await client.publish(altered(e, { sig: e.sig.slice(0, 127) + flipped }))).toEqual([false, INVALID]);
  });

  it('refuses an event claimed for another pubkey (id recomputed, signature by the wrong key)', async () => {
    const bob = newSigner();
    const signed = alice.sign({ content: 'claimed by bob' });
    const claimed = { ...signed, pubkey: bob.pubkey };
    claimed.id = getEventHash(claimed);
    expect(await client.publish(claimed)).toEqual([false, INVALID]);
  });

  it('refuses a pubkey that is not a point on the curve', async () => {
    const signed = alice.sign({ content: 'no such key' });
    const e = { ...signed, pubkey: 'f'.repeat(64) };
    e.id = getEventHash(e);
    expect(await client.publish(e)).toEqual([false, INVALID]);
  });

  it('refuses a genuine signature of the same key taken from another event', async () => {
    const other = alice.sign({ content: 'other' });
    const e = altered(alice.sign({ content: 'mine' }), { sig: other.sig });
    expect(await client.publish(e)).toEqual([false, INVALID]);
  });
});

describe('EVENT acceptance', () => {
  it('accepts a valid event with OK true and an empty message', async () => {
    expect(await client.publish(alice.sign({ content: 'fine' }))).toEqual([true, '']);
  });

  it('answers a duplicate with OK true and "duplicate:"', async () => {
    const e = alice.sign({ content: 'again' });
    expect(await client.publish(e)).toEqual([true, '']);
    expect(await client.publish(e)).toEqual([true, expect.stringMatching(/^duplicate: /)]);
    expect(await storedRows(e.id)).toBe(1);
  });

  it('ignores extra fields and serves back only the seven NIP-01 fields', async () => {
    const e = alice.sign({ content: 'with extras' });
    expect(await client.publish({ ...e, relays: ['wss://x'], seen: true, extra: { a: 1 } })).toEqual([true, '']);
    const [served] = await client.fetch('extras', { ids: [e.id] });
    expect(served).toStrictEqual(e);
    expect(Object.keys(served)).toEqual(['id', 'pubkey', 'created_at', 'kind', 'tags', 'content', 'sig']);
  });

  it('stores before OK true: a REQ sent right after OK, on another connection, finds the event', async () => {
    const reader = await TestClient.connect(relay.url);
    for (let i = 0; i < 10; i++) {
      const e = alice.sign({ content: `stored before ok ${i}` });
      expect(await client.publish(e)).toEqual([true, '']);
      expect(await reader.fetch(`after-ok-${i}`, { ids: [e.id] })).toEqual([e]);
    }
    reader.close();
  });

  it('stores and serves verbatim content and tags holding NUL and control characters', async () => {
    const e = alice.sign({ content: 'nul \u0000 bell \u0007 del \u007f', tags: [['x', 'a\u0000b'], ['t', 'ctl\u0001']] });
    expect(await client.publish(e)).toEqual([true, '']);
    expect(await client.fetch('nul', { ids: [e.id] })).toEqual([e]);
  });

  it('refuses kind 22242 (NIP-42 AUTH events are never stored)', async () => {
    expect(await client.publish(alice.sign({ kind: 22242 }))).toEqual([false, INVALID]);
  });

  it('refuses a NIP-70 protected event from a connection where nobody is authenticated with "auth-required:"', async () => {
    expect(await client.publish(alice.sign({ tags: [['-']] }))).toEqual([false, expect.stringMatching(/^auth-required: /)]);
  });
});
