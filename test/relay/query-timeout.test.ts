import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatchStored } from '../../src/store/write.js';
import { TestClient } from '../support/client.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

// Both relays here have no hot tier: these are the PostgreSQL path's limits. With a tier, a REQ it
// can answer needs no table while nothing is written (the feed read before it is a snapshot query,
// store/feed.ts), so a locked events table would not stop it.
let relay: TestRelay;
beforeAll(async () => {
  relay = await startTestRelay({ QUERY_TIMEOUT_MS: '300', HOT_TIER_MB: '0' });
});
afterAll(async () => {
  await relay.close();
});

describe('statement timeout', () => {
  it('closes a REQ whose query runs past QUERY_TIMEOUT_MS with error:, and the connection keeps working', async () => {
    const alice = newSigner();
    const note = alice.sign({ content: 'still here' });
    // Stored beside the relay, not through it: its 300 ms statement timeout bounds writes too, and a
    // busy machine can make the first write into a new database outlast it.
    const store = new pg.Pool({ connectionString: relay.db.url });
    await writeBatchStored(store, [prepareEvent(note)]).finally(() => store.end());
    const client = await TestClient.connect(relay.url);

    // Another session holds the table, so the REQ's query waits until its statement timeout.
    const blocker = new pg.Client({ connectionString: relay.db.url });
    await blocker.connect();
    await blocker.query('BEGIN');
    await blocker.query('LOCK TABLE events IN ACCESS EXCLUSIVE MODE');
    try {
      expect(await client.refused('slow', { authors: [alice.pubkey] })).toBe('error: query timed out');
    } finally {
      await blocker.query('ROLLBACK');
      await blocker.end();
    }
    expect((await client.query('again', { authors: [alice.pubkey] })).map((e) => e.id)).toEqual([note.id]);
    client.close();
  });
});

describe('pool exhaustion', () => {
  it('refuses a REQ with rate-limited: when no database connection frees up in time', async () => {
    const busy = await startTestRelay({ DB_POOL_SIZE: '1', QUERY_TIMEOUT_MS: '20000', HOT_TIER_MB: '0' });
    const blocker = new pg.Client({ connectionString: busy.db.url });
    await blocker.connect();
    await blocker.query('BEGIN');
    await blocker.query('LOCK TABLE events IN ACCESS EXCLUSIVE MODE');
    const client = await TestClient.connect(busy.url);
    try {
      client.send(['REQ', 'holds-the-connection', { kinds: [1] }]); // waits on the lock with the only connection
      expect(await client.refused('waits-for-a-connection', { kinds: [1] })).toMatch(/^rate-limited: /);
    } finally {
      await blocker.query('ROLLBACK');
      await blocker.end();
      client.close();
      await busy.close();
    }
  }, 30_000);
});
