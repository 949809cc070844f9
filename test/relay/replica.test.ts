// READ_DATABASE_URL with a real streaming replica (test/support/replica.ts makes it from a fresh
// primary with PostgreSQL's backup functions): REQ and COUNT run on the replica when it has replayed
// up to the relay's live position; under an artificial replay delay a client still reads its own
// writes (the primary answers), a live subscription still misses nothing another writer committed,
// and a replica that is down is skipped without waiting.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureDatabase, withDatabaseName } from '../../src/store/database.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatchStored } from '../../src/store/write.js';
import { TestClient } from '../support/client.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { startPrimaryWithReplica, type ReplicaPair } from '../support/replica.js';
import { serverPass } from '../support/server-pass.js';

let pair: ReplicaPair;
let relay: TestRelay;
let replicaPool: pg.Pool;
const clients: TestClient[] = [];

beforeAll(async () => {
  pair = await startPrimaryWithReplica();
  await ensureDatabase(pair.primaryAdminUrl, 'relay');
  const [primaryUrl, replicaUrl] = [withDatabaseName(pair.primaryAdminUrl, 'relay'), withDatabaseName(pair.replicaAdminUrl, 'relay')];
  await pair.caughtUp();
  // Without the hot tier: it would answer these REQs from memory, and this file tests where the
  // database part of a REQ runs (with the tier, what it cannot answer goes the same way).
  relay = await startTestRelay({ READ_DATABASE_URL: replicaUrl, READ_REPLICA_WAIT_MS: '50', HOT_TIER_MB: '0' }, primaryUrl);
  replicaPool = new pg.Pool({ connectionString: replicaUrl, max: 1 });
  replicaPool.on('error', () => undefined); // its idle connection ends when the test stops the replica
}, 120_000);
afterAll(async () => {
  clients.forEach((c) => c.close());
  await relay?.close();
  await replicaPool?.end();
  await pair?.stop();
});

async function connect(): Promise<TestClient> {
  const c = await TestClient.connect(relay.url);
  clients.push(c);
  return c;
}

/** pgrelay_read_queries_total by database. */
async function readCounts(): Promise<{ primary: number; replica: number }> {
  const metric = await relay.relay.context.metrics.registry.getSingleMetric('pgrelay_read_queries_total')!.get();
  const of = (database: string) => metric.values.find((v) => v.labels.database === database)?.value ?? 0;
  return { primary: of('primary'), replica: of('replica') };
}

const onReplica = async (id: string) => (await replicaPool.query('SELECT 1 FROM events WHERE id = $1', [Buffer.from(id, 'hex')])).rowCount === 1;

describe.skipIf(serverPass)('read replicas', () => {
  it('runs REQ and COUNT on the replica once it has caught up', async () => {
    const [writer, reader] = [await connect(), await connect()];
    const alice = newSigner();
    const note = alice.sign({ content: 'on the replica' });
    expect(await writer.publish(note)).toEqual([true, '']);
    await pair.caughtUp();
    await new Promise((r) => setTimeout(r, 200)); // the relay's next replica check
    const before = await readCounts();
    expect((await reader.fetch('r', { authors: [alice.pubkey] })).map((e) => e.id)).toEqual([note.id]);
    expect(await reader.count('c', { authors: [alice.pubkey] })).toBe(1);
    const after = await readCounts();
    expect(after.replica - before.replica).toBe(2);
    expect(after.primary).toBe(before.primary);
  });

  describe('with a replay delay of 1.5 s', () => {
    beforeAll(() => pair.setApplyDelay(1500));
    afterAll(() => pair.setApplyDelay(0));

    it('lets a client read its own write at once: the primary answers while the replica lags', async () => {
      const client = await connect();
      const bob = newSigner();
      const note = bob.sign({ content: 'read your writes' });
      expect(await client.publish(note)).toEqual([true, '']);
      const before = await readCounts();
      expect((await client.fetch('mine', { ids: [note.id] })).map((e) => e.id)).toEqual([note.id]);
      expect(await client.count('n', { authors: [bob.pubkey] })).toBe(1);
      expect(await onReplica(note.id)).toBe(false); // the delay is real
      const after = await readCounts();
      expect(after.primary - before.primary).toBe(2);
      // Once replayed, the replica serves it.
      await pair.caughtUp();
      await new Promise((r) => setTimeout(r, 200));
      expect((await client.fetch('later', { ids: [note.id] })).map((e) => e.id)).toEqual([note.id]);
      expect((await readCounts()).replica - after.replica).toBe(1);
    }, 30_000);

    it('misses nothing another writer committed before a subscription opened: stored or live, once', async () => {
      const carol = newSigner();
      const primary = new pg.Pool({ connectionString: relay.db.url, max: 1 });
      try {
        const client = await connect();
        const notes = Array.from({ length: 5 }, (_, i) => carol.sign({ content: `other writer ${i}`, created_at: 1_700_000_000 + i }));
        for (const note of notes) {
          await writeBatchStored(primary, [prepareEvent(note)]);
          // The relay's feed has announced the commit (to no subscriber) before the subscription
          // opens, so it will not come live: the query must find it, on a replica that has it or on
          // the primary.
          await new Promise((r) => setTimeout(r, 100));
          await client.query(`s${note.id.slice(0, 8)}`, { authors: [carol.pubkey], limit: 100 });
        }
        await new Promise((r) => setTimeout(r, 2000)); // the feed's reads and the replica's delay
        // Each subscription: the notes up to its own, stored or live, and the later ones live; each once.
        for (const note of notes) {
          const got = client.eventsFor(`s${note.id.slice(0, 8)}`).map((e) => e.id);
          expect(got.sort()).toEqual(notes.map((n) => n.id).sort());
        }
      } finally {
        await primary.end();
      }
    }, 30_000);
  });

  it('skips a replica that is down, without waiting for it', async () => {
    const client = await connect();
    const dave = newSigner();
    const note = dave.sign({ content: 'replica down' });
    expect(await client.publish(note)).toEqual([true, '']);
    await pair.stopReplica();
    const reads = relay.relay.context.reads;
    await expect.poll(() => reads.reachableReplicas(), { timeout: 10_000 }).toEqual([]); // the relay's next check fails
    // Routed at once: before a timer (the wait for a lagging replica's replay) could have fired.
    const routed = await Promise.race([reads.route().then((r) => r.target), new Promise((r) => setImmediate(() => r('waited')))]);
    expect(routed).toBe('primary');
    const before = await readCounts();
    expect((await client.fetch('down', { authors: [dave.pubkey] })).map((e) => e.id)).toEqual([note.id]);
    expect(await readCounts()).toEqual({ primary: before.primary + 1, replica: before.replica });
  });
});
