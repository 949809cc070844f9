// No acknowledged event is ever lost: kill the relay process with SIGKILL in the middle of a publish
// burst, start it again, and every event that got OK true must be served.
import { afterAll, describe, expect, it } from 'vitest';
import { startRelayProcess, type RelayProcess } from '../../bench/lib/relay-process.js';
import { TestClient } from '../support/client.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now } from '../support/keys.js';

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
});
