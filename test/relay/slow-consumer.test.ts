// A client that stops reading must not make the relay buffer without bound: once more than
// MAX_BUFFERED_BYTES wait in its socket's send buffer, the relay disconnects it. Everyone else is
// unaffected.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Socket } from 'node:net';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatch } from '../../src/store/write.js';
import { TestClient } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

// Well above one event, so a client that reads is never near it, and far below what we send.
const MAX_BUFFERED_BYTES = 1024 * 1024;

let relay: TestRelay;
beforeAll(async () => {
  relay = await startTestRelay({ MAX_BUFFERED_BYTES: String(MAX_BUFFERED_BYTES) });
});
afterAll(async () => {
  await relay.close();
});

/** The client's TCP socket: pausing it stops reading, so the relay's send buffer fills up. */
const socketOf = (c: TestClient) => (c.ws as unknown as { _socket: Socket })._socket;

describe('slow consumer', () => {
  it('is disconnected when it stops reading while live events pour in; a reading client gets them all', async () => {
    const author = newSigner();
    const [slow, reader, publisher] = await Promise.all([1, 2, 3].map(() => TestClient.connect(relay.url)));
    await slow.query('firehose', { authors: [author.pubkey] });
    await reader.query('firehose', { authors: [author.pubkey] });
    expect(relay.relay.context.subscriptions.size).toBe(2);
    socketOf(slow).pause();

    // Ephemeral events of ~60 kB: fanned out without touching the database. Publish until the relay
    // drops the slow subscriber (its subscription leaves the index), with a generous upper bound.
    const content = 'x'.repeat(60_000);
    const published: string[] = [];
    while (relay.relay.context.subscriptions.size === 2) {
      if (published.length >= 2000) throw new Error('the slow consumer was never disconnected');
      const batch = Array.from({ length: 5 }, (_, i) => author.sign({ kind: 20001, content: content + i + published.length }));
      const acks = await Promise.all(batch.map((e) => publisher.publish(e)));
      expect(acks.every(([ok]) => ok)).toBe(true);
      published.push(...batch.map((e) => e.id));
    }
    const sentBytes = published.length * content.length;

    socketOf(slow).resume();
    const { code } = await slow.closed();
    expect([1006, 1008]).toContain(code); // 1008 if the close frame got through before the cut
    expect(slow.eventsFor('firehose').length).toBeLessThan(published.length);

    await reader.sync();
    // Every event exactly once; five published at a time may be verified and fanned out in any order.
    expect(reader.eventsFor('firehose').map((e) => e.id).sort()).toEqual([...published].sort());
    expect(sentBytes).toBeGreaterThan(MAX_BUFFERED_BYTES);
    reader.close();
    publisher.close();
  });

  it('is not confused with a client that reads a large stored answer: that one gets all of it', async () => {
    // 150 events of 60 kB (9 MB) against a 1 MB send-buffer cap: the relay must wait for the
    // socket to drain as it goes, not cut off a client that is reading.
    const author = newSigner();
    const content = 'y'.repeat(60_000);
    const stored = Array.from({ length: 150 }, (_, i) => author.sign({ created_at: now() - 1000 + i, content: content + i }));
    await writeBatch(relay.db.pool, stored.map((e) => prepareEvent(e)));

    const client = await TestClient.connect(relay.url);
    const found = await client.fetch('history', { authors: [author.pubkey], limit: 5000 });
    expect(found.map((e) => e.id)).toEqual(stored.map((e) => e.id).reverse());
    client.close();
  });
});
