// No acknowledged event is ever lost: kill the relay process with SIGKILL in the middle of a publish
// burst, start it again, and every event that got OK true must be served.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { changeEndpoints } from '../../src/store/outbox.js';
import { startRelayProcess, type RelayProcess } from '../../bench/lib/relay-process.js';
import { TestClient } from '../support/client.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now } from '../support/keys.js';
import { until } from '../support/wait.js';

let relay: RelayProcess | undefined;
afterAll(async () => {
  await relay?.stop();
});

describe('crash safety', () => {
  it('serves after a restart every event acknowledged before SIGKILL', async () => {
    const env = { DATABASE_URL: await createTestDatabase(), LOG_LEVEL: 'silent' };
    relay = await startRelayProcess(env);
    const author = newSigner();
    const events = Array.from({ length: 800 }, (_, i) => author.sign({ created_at: now() - i, content: `burst ${i}` }));
    const clients = await Promise.all(Array.from({ length: 5 }, () => TestClient.connect(relay!.url)));
    const acknowledged: string[] = [];
    clients.forEach((c) =>
      c.ws.on('message', (data) => {
        const m = JSON.parse(data.toString());
        if (m[0] === 'OK' && m[2] === true) acknowledged.push(m[1]);
      }),
    );
    events.forEach((e, i) => clients[i % clients.length].send(['EVENT', e]));
    // Kill mid-burst: once some events are acknowledged, well before all of them are.
    while (acknowledged.length < 100) await new Promise((r) => setTimeout(r, 2));
    relay.child.kill('SIGKILL');
    await new Promise((r) => relay!.child.once('exit', r));
    const acked = [...new Set(acknowledged)];
    expect(acked.length).toBeLessThan(events.length);

    relay = await startRelayProcess(env);
    const reader = await TestClient.connect(relay.url);
    const stored = new Set((await reader.query('all', { authors: [author.pubkey], limit: 5000 })).map((e) => e.id));
    expect(acked.filter((id) => !stored.has(id))).toEqual([]);
    reader.close();
    clients.forEach((c) => c.close());
  }, 90_000);

  it('delivers to webhooks, after a restart, every acknowledged event that was not yet delivered at SIGKILL', async () => {
    const url = await createTestDatabase();
    // Claims of the killed process come back when their lease lapses (WEBHOOK_LEASE_MS).
    const env = { DATABASE_URL: url, LOG_LEVEL: 'silent', WEBHOOK_TIMEOUT_MS: '300', WEBHOOK_LEASE_MS: '3000' };
    const received = new Set<string>();
    const receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c) => chunks.push(c));
      // Slow enough that deliveries are still queued when the relay dies.
      req.on('end', () => setTimeout(() => {
        received.add((JSON.parse(Buffer.concat(chunks).toString()).data as NostrEvent).id);
        res.end();
      }, 2));
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    await relay?.stop(); // the previous test's
    try {
      relay = await startRelayProcess(env); // migrates the database
      const author = newSigner();
      await changeEndpoints(pool, (c) => c.query('INSERT INTO webhook_endpoints (url, filters) VALUES ($1, $2)', [`http://127.0.0.1:${(receiver.address() as AddressInfo).port}/`, JSON.stringify([{ authors: [author.pubkey] }])]));
      const events = Array.from({ length: 600 }, (_, i) => author.sign({ created_at: now() - i, content: `hooked ${i}` }));
      const client = await TestClient.connect(relay.url);
      const acknowledged: string[] = [];
      client.ws.on('message', (data) => {
        const m = JSON.parse(data.toString());
        if (m[0] === 'OK' && m[2] === true) acknowledged.push(m[1]);
      });
      events.forEach((e) => client.send(['EVENT', e]));
      while (acknowledged.length < 150) await new Promise((r) => setTimeout(r, 2));
      relay.child.kill('SIGKILL');
      await new Promise((r) => relay!.child.once('exit', r));
      client.close();
      const acked = [...new Set(acknowledged)];
      expect(acked.filter((id) => !received.has(id)).length).toBeGreaterThan(0); // some were still queued

      relay = await startRelayProcess(env);
      await until(() => acked.every((id) => received.has(id)), 'every acknowledged event delivered', 30_000);
    } finally {
      await pool.end();
      receiver.closeAllConnections();
      receiver.close();
    }
  }, 90_000);
});
