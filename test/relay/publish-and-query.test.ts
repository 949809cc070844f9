import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let client: TestClient;
beforeAll(async () => {
  relay = await startTestRelay();
  client = await TestClient.connect(relay.url);
});
afterAll(async () => {
  client.close();
  await relay.close();
});

describe('publishing', () => {
  it('accepts a valid event with OK true and an empty message, and serves it back verbatim', async () => {
    const alice = newSigner();
    const event = alice.sign({ content: 'hello "world" \\ \n\u2028 ✓', tags: [['t', 'greeting']] });
    expect(await client.publish(event)).toEqual([true, '']);
    const found = await client.query('q1', { ids: [event.id] });
    expect(found).toEqual([event]);
  });

  it('answers a duplicate with OK true and a duplicate: prefix', async () => {
    const event = newSigner().sign({ content: 'twice' });
    await client.publish(event);
    expect(await client.publish(event)).toEqual([true, 'duplicate: already have this event']);
  });

  it('lets 20 clients publish 50 events each concurrently, all acknowledged and all stored', async () => {
    const signer = newSigner();
    const base = now() - 10_000;
    const clients = await Promise.all(Array.from({ length: 20 }, () => TestClient.connect(relay.url)));
    const batches = clients.map((_, c) => Array.from({ length: 50 }, (_, i) => signer.sign({ created_at: base + c * 50 + i, content: `${c}/${i}` })));
    const results = await Promise.all(clients.map((cl, c) => Promise.all(batches[c].map((e) => cl.publish(e)))));
    expect(results.flat().every(([ok]) => ok)).toBe(true);
    const stored = await client.query('all', { authors: [signer.pubkey], limit: 5000 });
    expect(stored).toHaveLength(1000);
    expect(new Set(stored.map((e) => e.id))).toEqual(new Set(batches.flat().map((e) => e.id)));
    clients.forEach((c) => c.close());
  });
});
