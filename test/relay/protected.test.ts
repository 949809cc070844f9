// NIP-70 protected events (protocol.md 10): an event with ["-"] is accepted only from its author,
// authenticated on the connection that sends it; a repost must not embed one.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { unique } from '../support/events.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

const alice = newSigner();
const bob = newSigner();
let relay: TestRelay;
beforeAll(async () => {
  relay = await startTestRelay();
});
afterAll(() => relay.close());

const protectedNote = () => alice.sign({ tags: [['-']], content: unique('protected') });

describe('NIP-70', () => {
  it('refuses a protected event from a connection where nobody is authenticated, with auth-required:', async () => {
    const c = await TestClient.connect(relay.url);
    const note = protectedNote();
    expect(await c.publish(note)).toEqual([false, expect.stringMatching(/^auth-required: /)]);
    expect(await c.fetch('s', { ids: [note.id] })).toEqual([]);
    c.close();
  });

  it('refuses it from a connection where another key is authenticated, with restricted:', async () => {
    const c = await TestClient.connect(relay.url);
    expect(await c.auth(bob)).toEqual([true, '']);
    expect(await c.publish(protectedNote())).toEqual([false, expect.stringMatching(/^restricted: /)]);
    c.close();
  });

  it('accepts it from its author, authenticated, stores it and serves it to anyone', async () => {
    const c = await TestClient.connect(relay.url);
    expect(await c.auth(alice)).toEqual([true, '']);
    const note = protectedNote();
    expect(await c.publish(note)).toEqual([true, '']);
    const reader = await TestClient.connect(relay.url);
    expect(await reader.fetch('s', { ids: [note.id] })).toEqual([note]);
    c.close();
    reader.close();
  });

  it('does not accept it again from another connection where the author is not authenticated', async () => {
    const author = await TestClient.connect(relay.url);
    expect(await author.auth(alice)).toEqual([true, '']);
    const note = protectedNote();
    expect(await author.publish(note)).toEqual([true, '']);
    const other = await TestClient.connect(relay.url);
    expect(await other.publish(note)).toEqual([false, expect.stringMatching(/^auth-required: /)]);
    author.close();
    other.close();
  });

  it.each([6, 16])('refuses a kind %i repost that embeds a protected event', async (kind) => {
    const c = await TestClient.connect(relay.url);
    const inner = protectedNote();
    const repost = bob.sign({ kind, tags: [['e', inner.id], ['p', alice.pubkey], ['k', '1']], content: JSON.stringify(inner) });
    expect(await c.publish(repost)).toEqual([false, 'blocked: a repost must not embed a protected event (NIP-70)']);
    c.close();
  });

  it('accepts a repost of an unprotected event, and a repost with no embedded event', async () => {
    const c = await TestClient.connect(relay.url);
    const inner = alice.sign({ content: unique('open') });
    expect(await c.publish(bob.sign({ kind: 6, tags: [['e', inner.id]], content: JSON.stringify(inner) }))).toEqual([true, '']);
    expect(await c.publish(bob.sign({ kind: 6, tags: [['e', inner.id]], content: '' }))).toEqual([true, '']);
    expect(await c.publish(bob.sign({ kind: 16, tags: [['e', inner.id]], content: '{not json' }))).toEqual([true, '']);
    c.close();
  });
});
