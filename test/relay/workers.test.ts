// WORKERS=2: two relay processes on one port under a primary that owns the database (src/cluster.ts).
// A client on each worker sees the other's events; a worker killed mid-burst loses no acknowledged
// event and is started again; SIGTERM stops them all.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRelayProcess, type RelayProcess } from '../../bench/lib/relay-process.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { TestClient } from '../support/client.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now } from '../support/keys.js';
import { until } from '../support/wait.js';

let relay: RelayProcess;
const clients: TestClient[] = [];
beforeAll(async () => {
  relay = await startRelayProcess({ DATABASE_URL: await createTestDatabase(), WORKERS: '2' });
});
afterAll(async () => {
  clients.forEach((c) => c.close());
  await relay?.stop();
});

const workerOf = (c: TestClient) => Number(c.upgradeHeaders['x-relay-process']);

/** Connects until there is a client on `count` different workers (Linux deals connections in turn). */
async function oneOnEach(count: number, exclude: Set<number> = new Set(), timeoutMs = 20_000): Promise<Map<number, TestClient>> {
  const found = new Map<number, TestClient>();
  const deadline = Date.now() + timeoutMs;
  while (found.size < count) {
    if (Date.now() > deadline) throw new Error(`clients reached only workers ${[...found.keys()]}`);
    try {
      const c = await TestClient.connect(relay.url);
      clients.push(c);
      const pid = workerOf(c);
      if (!exclude.has(pid) && !found.has(pid)) found.set(pid, c);
      else c.close();
    } catch {
      await new Promise((r) => setTimeout(r, 100)); // no worker listening for a moment
    }
  }
  return found;
}

describe('WORKERS=2', () => {
  it('puts clients on two processes, and each sees the events published on the other', async () => {
    const [[pidA, onA], [pidB, onB]] = [...(await oneOnEach(2))];
    expect(pidA).not.toBe(pidB);
    expect(pidA).not.toBe(relay.pid); // workers, not the primary
    const run = `w-${Date.now()}`;
    await onA.query('live', { '#t': [run], limit: 0 });
    await onB.query('live', { '#t': [run], limit: 0 });
    const alice = newSigner();
    const fromA = alice.sign({ content: 'from A', tags: [['t', run]] });
    const fromB = alice.sign({ content: 'from B', tags: [['t', run]] });
    expect(await onA.publish(fromA)).toEqual([true, '']);
    expect(await onB.publish(fromB)).toEqual([true, '']);
    for (const c of [onA, onB]) {
      await until(() => c.liveEvents('live').length === 2, 'both events');
      expect(c.liveEvents('live').map((e) => e.id).sort()).toEqual([fromA.id, fromB.id].sort());
    }
  });

  it('loses no acknowledged event when a worker is killed mid-burst, and starts another', async () => {
    const workers = await oneOnEach(2);
    const [victim, survivor] = [...workers.keys()];
    const signer = newSigner();
    const events: NostrEvent[] = Array.from({ length: 1000 }, (_, i) =>
      signer.sign({ created_at: now() - i, content: `burst ${i}` }),
    );
    const acknowledged = new Set<string>();
    const publishers = [...workers.values()];
    publishers.forEach((c) =>
      c.ws.on('message', (data) => {
        const m = JSON.parse(data.toString());
        if (m[0] === 'OK' && m[2] === true) acknowledged.add(m[1]);
      }),
    );
    events.forEach((e, i) => publishers[i % 2].send(['EVENT', e]));
    await until(() => acknowledged.size >= 100, 'the first acknowledgements');
    process.kill(victim, 'SIGKILL');
    await workers.get(victim)!.closed();
    // The survivor answers everything it was sent.
    await until(() => workers.get(survivor)!.messages.filter((m) => m[0] === 'OK').length === 500, 'the survivor\'s OKs', 30_000);
    expect(acknowledged.size).toBeLessThan(events.length);

    const reader = (await oneOnEach(1, new Set([victim]))).values().next().value!;
    const stored = new Set((await reader.fetch('all', { authors: [signer.pubkey], limit: 1000 })).map((e) => e.id));
    expect([...acknowledged].filter((id) => !stored.has(id))).toEqual([]);

    // The primary starts a new worker in the dead one's place.
    const replaced = await oneOnEach(1, new Set([victim, survivor]));
    expect(replaced.size).toBe(1);
  }, 60_000);
});
