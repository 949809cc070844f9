import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { unique } from '../support/events.js';
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

describe('bytes awaiting OK per address', () => {
  it('answers events that would take an address past MAX_PENDING_BYTES_PER_ADDRESS with rate-limited:, over all its connections', async () => {
    const alice = newSigner();
    const events = Array.from({ length: 8 }, () => alice.sign({ content: unique('pending').padEnd(3000, '.') }));
    const size = Buffer.byteLength(JSON.stringify(['EVENT', events[0]]));
    expect(events.every((e) => Buffer.byteLength(JSON.stringify(['EVENT', e])) === size)).toBe(true);
    const cap = 5 * size + Math.floor(size / 2); // room for five of these messages and a half
    const capped = await startTestRelay({ MAX_PENDING_BYTES_PER_ADDRESS: String(cap), QUERY_TIMEOUT_MS: '60000' });
    // Another session holds the events table, so every accepted event waits for the writer, unanswered.
    const blocker = new pg.Client({ connectionString: capped.db.url });
    await blocker.connect();
    await blocker.query('BEGIN');
    await blocker.query('LOCK TABLE events IN ACCESS EXCLUSIVE MODE');
    const [a, b] = [await TestClient.connect(capped.url), await TestClient.connect(capped.url)];
    try {
      for (const e of events.slice(0, 4)) a.send(['EVENT', e]);
      // A reply to a later message: the four before it are read and awaiting OK.
      const mark = a.mark;
      a.send('not json');
      await a.notice(mark);
      for (const e of events.slice(4)) b.send(['EVENT', e]);
      const refused = await Promise.all(events.slice(5).map((e) => b.waitFor((m) => m[0] === 'OK' && m[1] === e.id)));
      expect(refused.map((m) => [m[2], m[3]])).toEqual(
        Array(3).fill([false, `rate-limited: more than ${cap} bytes of events awaiting OK from this address`]),
      );
    } finally {
      await blocker.query('ROLLBACK');
      await blocker.end();
    }
    const accepted = await Promise.all([
      ...events.slice(0, 4).map((e) => a.waitFor((m) => m[0] === 'OK' && m[1] === e.id)),
      b.waitFor((m) => m[0] === 'OK' && m[1] === events[4].id),
    ]);
    expect(accepted.map((m) => m[2])).toEqual([true, true, true, true, true]);
    expect(await a.count('stored', { authors: [alice.pubkey] })).toBe(5);
    a.close();
    b.close();
    await capped.close();
  });
});
