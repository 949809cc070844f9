import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
beforeAll(async () => {
  relay = await startTestRelay({ MAX_PENDING_EVENTS: '4' });
});
afterAll(async () => {
  await relay.close();
});

describe('ingest backpressure', () => {
  it('answers events beyond the per-connection cap of unacknowledged events with rate-limited:, and stores the rest', async () => {
    const client = await TestClient.connect(relay.url);
    const alice = newSigner();
    const events = Array.from({ length: 60 }, (_, i) => alice.sign({ content: `burst ${i}` }));
    // One write call: every message arrives before the first can be acknowledged.
    for (const e of events) client.send(['EVENT', e]);
    const oks = await Promise.all(events.map((e) => client.waitFor((m) => m[0] === 'OK' && m[1] === e.id)));
    const limited = oks.filter((m) => m[2] === false);
    expect(limited.length).toBeGreaterThan(0);
    expect(limited.every((m) => String(m[3]).startsWith('rate-limited: '))).toBe(true);
    const accepted = oks.filter((m) => m[2] === true).map((m) => m[1]);
    const stored = await client.query('mine', { authors: [alice.pubkey], limit: 100 });
    expect(stored.map((e) => e.id).sort()).toEqual([...accepted].sort());
    // Each event got exactly one OK.
    expect(client.messages.filter((m) => m[0] === 'OK').length).toBe(60);
    client.close();
  });
});
