// NIP-45 COUNT (protocol.md section 7): one count over the union of the filters, each event once;
// limit ignored; refusals are CLOSED; no subscription is kept.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { unique } from '../support/events.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let client: TestClient;
beforeAll(async () => {
  relay = await startTestRelay({ DEFAULT_LIMIT: '2', MAX_LIMIT: '3' });
  client = await TestClient.connect(relay.url);
});
afterAll(async () => {
  client.close();
  await relay.close();
});

const T = now() - 10_000;

describe('COUNT', () => {
  it('replies ["COUNT", id, {"count": n}]', async () => {
    const a = newSigner();
    for (let i = 0; i < 3; i++) await client.publish(a.sign({ created_at: T + i }));
    const from = client.mark;
    client.send(['COUNT', 'c1', { authors: [a.pubkey] }]);
    expect(await client.waitFor((m) => m[1] === 'c1', 10_000, from)).toEqual(['COUNT', 'c1', { count: 3 }]);
  });

  it('counts the union of its filters, each event once', async () => {
    const [a, b] = [newSigner(), newSigner()];
    const tag = unique();
    await client.publish(a.sign({ created_at: T, tags: [['t', tag]] })); // matches both filters
    await client.publish(a.sign({ created_at: T + 1 }));
    await client.publish(b.sign({ created_at: T, tags: [['t', tag]] }));
    await client.publish(b.sign({ created_at: T + 1 })); // matches neither
    expect(await client.count('union', { authors: [a.pubkey] }, { '#t': [tag] })).toBe(3);
    expect(await client.count('same', { authors: [a.pubkey] }, { authors: [a.pubkey] })).toBe(2);
  });

  it('ignores limit, default_limit and max_limit', async () => {
    const a = newSigner();
    for (let i = 0; i < 5; i++) await client.publish(a.sign({ created_at: T + i }));
    expect(await client.count('nolimit', { authors: [a.pubkey] })).toBe(5);
    expect(await client.count('limit1', { authors: [a.pubkey], limit: 1 })).toBe(5);
  });

  it('applies the filter conditions like REQ does (kinds, since/until inclusive)', async () => {
    const a = newSigner();
    for (let i = 0; i < 5; i++) await client.publish(a.sign({ created_at: T + i, kind: i % 2 ? 7 : 1 }));
    expect(await client.count('kinds', { authors: [a.pubkey], kinds: [7] })).toBe(2);
    expect(await client.count('window', { authors: [a.pubkey], since: T + 1, until: T + 3 })).toBe(3);
  });

  it('counts 0 for an empty list, since > until, or no match', async () => {
    const a = newSigner();
    await client.publish(a.sign({ created_at: T }));
    expect(await client.count('empty', { authors: [] })).toBe(0);
    expect(await client.count('inverted', { authors: [a.pubkey], since: T + 1, until: T })).toBe(0);
    expect(await client.count('none', { authors: [newSigner().pubkey] })).toBe(0);
  });

  it('counts only the current version of a replaceable event', async () => {
    const a = newSigner();
    await client.publish(a.sign({ kind: 0, created_at: T }));
    await client.publish(a.sign({ kind: 0, created_at: T + 1 }));
    expect(await client.count('profile', { authors: [a.pubkey], kinds: [0] })).toBe(1);
  });

  it('refuses a bad filter with CLOSED', async () => {
    await expect(client.count('bad', { foo: 1 })).rejects.toThrow(/CLOSED: unsupported: /);
    await expect(client.count('bad', { authors: ['ABC'] })).rejects.toThrow(/CLOSED: invalid: /);
    await expect(client.count('')).rejects.toThrow(/CLOSED: invalid: /);
  });

  it('opens no subscription: no EOSE and no live events afterwards', async () => {
    const a = newSigner();
    const from = client.mark;
    expect(await client.count('oneshot', { authors: [a.pubkey] })).toBe(0);
    await client.publish(a.sign({}));
    await client.sync();
    expect(client.messages.slice(from).filter((m) => m[1] === 'oneshot')).toEqual([['COUNT', 'oneshot', { count: 0 }]]);
  });
});
