// Live delivery across relay processes (src/store/feed.ts): two relay processes started by the test,
// as operators run them, on one database. Every subscriber gets each matching event once, from
// whichever process it was published to, also while a LISTEN connection is killed, also for events
// written by `import` or by another writer, never one refused, replaced or deleted in its batch, and
// never one the read rules keep from it.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRelayProcess, type RelayProcess } from '../../bench/lib/relay-process.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatchStored } from '../../src/store/write.js';
import { runCli } from '../support/cli.js';
import { TestClient } from '../support/client.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now } from '../support/keys.js';
import { until } from '../support/wait.js';

let databaseUrl: string;
let a: RelayProcess;
let b: RelayProcess;
let admin: pg.Pool;
const clients: TestClient[] = [];

beforeAll(async () => {
  databaseUrl = await createTestDatabase();
  const env = { DATABASE_URL: databaseUrl, LOG_LEVEL: 'silent' };
  a = await startRelayProcess(env);
  b = await startRelayProcess(env);
  admin = new pg.Pool({ connectionString: databaseUrl, max: 2 });
});
afterAll(async () => {
  clients.forEach((c) => c.close());
  await Promise.all([a?.stop(), b?.stop()]);
  await admin?.end();
});

async function connect(relay: RelayProcess): Promise<TestClient> {
  const c = await TestClient.connect(relay.url);
  clients.push(c);
  return c;
}

/** Longer than the feed's poll (1 s): a second delivery, were there one, has had its chance. */
const quietPeriod = () => new Promise((r) => setTimeout(r, 1500));

/** A live subscription; returns the ids it receives, in arrival order. */
async function subscribe(client: TestClient, subId: string, filter: object): Promise<() => string[]> {
  await client.query(subId, { ...filter, limit: 0 });
  return () => client.liveEvents(subId).map((e) => e.id);
}

/** Sends every event without waiting; resolves with the ids acknowledged with OK true. */
async function publishAll(client: TestClient, events: NostrEvent[]): Promise<string[]> {
  const from = client.mark;
  events.forEach((e) => client.send(['EVENT', e]));
  const wanted = new Set(events.map((e) => e.id));
  await until(() => client.messages.slice(from).filter((m) => m[0] === 'OK' && wanted.has(m[1] as string)).length === events.length, 'every OK', 60_000);
  return client.messages.slice(from).filter((m) => m[0] === 'OK' && m[2] === true).map((m) => m[1] as string);
}

const tagged = (run: string) => ({ '#t': [run] });

describe('live delivery across relay processes', () => {
  it('delivers an event published on A to a subscriber on B, and ephemeral events small and large, each once', async () => {
    const run = `x-${Date.now()}`;
    const [onA, onB, publisher] = [await connect(a), await connect(b), await connect(a)];
    const seenA = await subscribe(onA, 'live', tagged(run));
    const seenB = await subscribe(onB, 'live', tagged(run));
    const alice = newSigner();
    const stored = alice.sign({ content: 'hello from A', tags: [['t', run]] });
    const small = alice.sign({ kind: 20001, content: 'ephemeral', tags: [['t', run]] });
    const large = alice.sign({ kind: 20002, content: 'L'.repeat(20_000), tags: [['t', run]] }); // beyond a NOTIFY payload
    for (const e of [stored, small, large]) expect(await publisher.publish(e)).toEqual([true, '']);
    await until(() => seenB().length === 3, 'three events on B');
    await quietPeriod();
    expect(seenB().sort()).toEqual([stored.id, small.id, large.id].sort());
    expect(seenA().sort()).toEqual([stored.id, small.id, large.id].sort());
    expect(onB.liveEvents('live').find((e) => e.id === large.id)).toEqual(large);
  });

  it('delivers 5,000 events published concurrently to both processes to a subscriber on each exactly once, in each publisher\'s order', async () => {
    const run = `burst-${Date.now()}`;
    const [onA, onB] = [await connect(a), await connect(b)];
    const seenA = await subscribe(onA, 'burst', tagged(run));
    const seenB = await subscribe(onB, 'burst', tagged(run));
    const publishers = await Promise.all(Array.from({ length: 10 }, (_, i) => connect(i % 2 ? b : a)));
    const batches = publishers.map((_, p) => {
      const signer = newSigner();
      return Array.from({ length: 500 }, (_, i) => signer.sign({ content: `p${p} #${i}`, tags: [['t', run]] }));
    });
    const acked = (await Promise.all(publishers.map((c, i) => publishAll(c, batches[i])))).flat();
    expect(acked).toHaveLength(5000);
    await until(() => seenA().length >= 5000 && seenB().length >= 5000, '5,000 events at each subscriber', 60_000);
    await quietPeriod();
    for (const seen of [seenA(), seenB()]) {
      expect(seen).toHaveLength(5000);
      expect(new Set(seen).size).toBe(5000);
      expect(new Set(seen)).toEqual(new Set(acked));
      // Commit order per writer: each connection's OKs leave in the order its events committed.
      const position = new Map(seen.map((id, i) => [id, i]));
      for (const publisher of publishers) {
        const order = publisher.messages.filter((m) => m[0] === 'OK').map((m) => position.get(m[1] as string)!);
        expect(order).toEqual([...order].sort((x, y) => x - y));
      }
    }
  }, 120_000);

  it('still delivers every event once when a process\'s LISTEN connection is killed during a burst', async () => {
    const run = `kill-${Date.now()}`;
    const [onA, onB] = [await connect(a), await connect(b)];
    const publishers = await Promise.all([a, a, a, a].map(connect)); // 500 each: the most a connection may have awaiting OK
    const seenA = await subscribe(onA, 'k', tagged(run));
    const seenB = await subscribe(onB, 'k', tagged(run));
    const signer = newSigner();
    const events = Array.from({ length: 2000 }, (_, i) => signer.sign({ content: `k ${i}`, tags: [['t', run]] }));
    const publishing = Promise.all(publishers.map((c, i) => publishAll(c, events.slice(i * 500, (i + 1) * 500)))).then((r) => r.flat());
    await until(() => seenB().length >= 300, 'the burst under way on B');
    const { rows } = await admin.query('SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity WHERE application_name = $1', [`pgrelay-listen-${b.pid}`]);
    expect(rows).toEqual([{ killed: true }]);
    const acked = await publishing;
    expect(acked).toHaveLength(2000);
    await until(() => seenB().length >= 2000, 'every event on B after the reconnect');
    await quietPeriod();
    for (const seen of [seenA(), seenB()]) {
      expect(seen).toHaveLength(2000);
      expect(new Set(seen)).toEqual(new Set(acked));
    }
    // The process did reconnect: a later event arrives within the poll, through LISTEN or not.
    const after = signer.sign({ content: 'after', tags: [['t', run]] });
    expect(await publishers[0].publish(after)).toEqual([true, '']);
    await until(() => seenB().includes(after.id), 'an event after the reconnect');
  }, 60_000);

  it('delivers live what `import` writes while the relays run, and what another writer commits, as that batch stored it', async () => {
    const run = `imp-${Date.now()}`;
    const [onA, onB] = [await connect(a), await connect(b)];
    const seenA = await subscribe(onA, 'i', tagged(run));
    const seenB = await subscribe(onB, 'i', tagged(run));
    const signer = newSigner();
    const imported = Array.from({ length: 300 }, (_, i) => signer.sign({ content: `imported ${i}`, created_at: now() - i, tags: [['t', run]] }));
    const cli = await runCli(['import', '-'], { DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' }, imported.map((e) => JSON.stringify(e)).join('\n') + '\n');
    expect(cli.code, cli.stderr).toBe(0);
    await until(() => seenA().length >= 300 && seenB().length >= 300, 'the imported events on both processes');

    // Another writer's one batch: a note it deletes, a replaceable version it replaces, and the rest.
    const carol = newSigner();
    const doomed = carol.sign({ content: 'doomed', tags: [['t', run]] });
    const deletion = carol.sign({ kind: 5, tags: [['e', doomed.id], ['t', run]] });
    const v1 = carol.sign({ kind: 0, created_at: now() - 10, content: 'v1', tags: [['t', run]] });
    const v2 = carol.sign({ kind: 0, created_at: now(), content: 'v2', tags: [['t', run]] });
    const { stored } = await writeBatchStored(admin, [doomed, v1, v2, deletion].map(prepareEvent));
    expect(stored.map((p) => p.event.id)).toEqual([v2.id, deletion.id]);
    await until(() => seenA().length >= 302 && seenB().length >= 302, 'the other writer\'s batch');
    await quietPeriod();
    for (const seen of [seenA(), seenB()]) {
      expect(seen).toHaveLength(302);
      expect(new Set(seen)).toEqual(new Set([...imported.map((e) => e.id), v2.id, deletion.id]));
    }
  }, 60_000);

  it('applies the read rules on every process: a DM published on A reaches its authenticated recipient on B only', async () => {
    const [alice, bob, mallory] = [newSigner(), newSigner(), newSigner()];
    const [stranger, anonymous, recipient, sender] = [await connect(b), await connect(b), await connect(b), await connect(a)];
    expect(await recipient.auth(bob)).toEqual([true, '']);
    expect(await stranger.auth(mallory)).toEqual([true, '']);
    const strangerSees = await subscribe(stranger, 'dm', { kinds: [4] });
    const anonymousSees = await subscribe(anonymous, 'dm', { kinds: [1, 4] });
    const bobSees = await subscribe(recipient, 'dm', { kinds: [4], '#p': [bob.pubkey] });
    const dm = alice.sign({ kind: 4, content: 'secret', tags: [['p', bob.pubkey]] });
    expect(await sender.publish(dm)).toEqual([true, '']);
    await until(() => bobSees().length === 1, 'the DM at its recipient on B');
    await quietPeriod();
    expect(bobSees()).toEqual([dm.id]);
    expect(strangerSees()).toEqual([]);
    expect(anonymousSees()).toEqual([]);
  });
});
