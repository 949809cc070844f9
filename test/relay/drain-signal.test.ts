// The drain as an operator meets it (`node dist/src/main.js`, its own process): SIGTERM begins it at
// once (/ready says 503 while the connected client is still answered), a second SIGTERM ends it, and
// the process then closes its clients with 1001 and exits 0.
import { afterAll, describe, expect, it } from 'vitest';
import { startRelayProcess, type RelayProcess } from '../../bench/lib/relay-process.js';
import { TestClient } from '../support/client.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner } from '../support/keys.js';
import { until } from '../support/wait.js';

let relay: RelayProcess | undefined;
afterAll(() => {
  // A failed assertion leaves the relay draining: stopped here, whatever happened.
  if (relay && relay.child.exitCode === null && relay.child.signalCode === null) relay.child.kill('SIGKILL');
});

describe('SIGTERM with SHUTDOWN_DRAIN_MS', () => {
  it('drains (/ready 503, the connected client served), a second SIGTERM ends the drain, then 1001 and exit 0', async () => {
    relay = await startRelayProcess({ DATABASE_URL: await createTestDatabase(), SHUTDOWN_DRAIN_MS: '600000', HOT_TIER_SNAPSHOT: 'false' });
    const exited = new Promise<number | null>((resolve) => relay!.child.once('exit', resolve));
    const http = relay.url.replace(/^ws/, 'http');
    const client = await TestClient.connect(relay.url);
    const alice = newSigner();
    await client.query('live', { authors: [alice.pubkey] });

    relay.child.kill('SIGTERM');
    await until(async () => (await fetch(`${http}/ready`)).status === 503, '/ready to answer 503');
    expect(await (await fetch(`${http}/ready`)).json()).toEqual({ status: 'stopping' });
    const event = alice.sign({ content: 'published while the relay drains' });
    expect(await client.publish(event)).toEqual([true, '']);
    await client.waitFor((m) => m[0] === 'EVENT' && m[1] === 'live');
    expect(client.liveEvents('live')).toEqual([event]);
    expect(relay.logs.filter((l) => typeof l.msg === 'string' && l.msg.startsWith('draining')).length).toBe(1);

    relay.child.kill('SIGTERM');
    expect((await client.closed()).code).toBe(1001);
    expect(await exited).toBe(0);
    expect(relay.logs.map((l) => l.msg).filter((m) => m === 'second signal: ending the drain' || m === 'relay stopped')).toEqual([
      'second signal: ending the drain',
      'relay stopped',
    ]);
  }, 120_000);
});
