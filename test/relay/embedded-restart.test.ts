// The embedded PostgreSQL is supervised: when its postmaster dies (SIGKILL: an OOM kill, a crash) the
// relay starts it again, crash recovery replays the WAL, and the relay carries on with the same
// sockets. Nothing acknowledged before the kill is lost; EVENTs sent meanwhile are acknowledged once
// their commit happens (never before); a live subscriber receives every event committed after it;
// REQs the hot tier can answer are answered throughout.
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRelayProcess, type RelayProcess } from '../../bench/lib/relay-process.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { TestClient } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { until } from '../support/wait.js';
import { serverPass } from '../support/server-pass.js';

let dir: string;
let relay: RelayProcess | undefined;

const ENV = { HOT_TIER_SNAPSHOT: 'false', DATABASE_URL: '', WRITE_TIMEOUT_MS: '60000' };

beforeAll(async () => {
  if (serverPass) return; // starts servers of its own: nothing to test on another server
  dir = await mkdtemp(path.join(tmpdir(), 'pgrelay-supervised-'));
  await chmod(dir, 0o755); // the server runs as postgres when the tests run as root
  relay = await startRelayProcess({ ...ENV, DATA_DIR: dir });
}, 180_000);

afterAll(async () => {
  await relay?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const postmasterPid = async () => Number((await readFile(path.join(dir, 'pg', 'postmaster.pid'), 'utf8')).split('\n')[0]);


describe.skipIf(serverPass)('embedded PostgreSQL killed under a running relay', () => {
  it('is started again; acknowledged events survive, events sent meanwhile are acknowledged after their commit, the subscriber gets them all', async () => {
    const signer = newSigner();
    const make = (i: number) => signer.sign({ kind: 1, created_at: now(), tags: [], content: `supervised ${i}` });
    const publisher = await TestClient.connect(relay!.url);
    const subscriber = await TestClient.connect(relay!.url);
    subscriber.send(['REQ', 'live', { authors: [signer.pubkey] }]);
    await subscriber.waitFor((m) => m[0] === 'EOSE');

    const before = Array.from({ length: 10 }, (_, i) => make(i));
    for (const e of before) expect(await publisher.publish(e, 90_000)).toEqual([true, '']);

    const killed = await postmasterPid();
    process.kill(killed, 'SIGKILL');
    const during = Array.from({ length: 10 }, (_, i) => make(100 + i));
    const answers = Promise.all(during.map((e) => publisher.publish(e, 90_000)));
    // Answered (from memory while the database is down, or by it once it is back), never refused.
    expect((await publisher.query('while-down', { ids: before.map((e) => e.id) })).length).toBe(before.length);
    for (const [accepted, message] of await answers) expect([accepted, message.startsWith('duplicate:') ? '' : message]).toEqual([true, '']);
    // (Some may have committed before the restart: a killed postmaster's backends live on for a
    // moment, and a commit they make is on disk, so crash recovery keeps it.)
    await until(() => relay!.logs.some((l) => l.msg === 'embedded PostgreSQL started again'), 'the restart logged');
    expect(await postmasterPid()).not.toBe(killed);

    const after = Array.from({ length: 10 }, (_, i) => make(200 + i));
    for (const e of after) expect(await publisher.publish(e, 90_000)).toEqual([true, '']);
    const all = [...before, ...during, ...after].map((e) => e.id).sort();
    await until(() => subscriber.messages.filter((m) => m[0] === 'EVENT').length >= all.length, 'every event delivered live', 60_000);
    expect(subscriber.messages.filter((m) => m[0] === 'EVENT').map((m) => (m[2] as NostrEvent).id).sort()).toEqual(all);
    expect(relay!.logs.filter((l) => l.msg === 'embedded PostgreSQL started again')).toHaveLength(1);
    const metrics = async () => (await fetch(relay!.url.replace(/^ws/, 'http') + '/metrics')).text();
    expect(await metrics()).toMatch(/^pgrelay_embedded_restarts_total 1$/m);
    // Reachable again once a read of the live feed has succeeded (it polls every second).
    await until(async () => /^pgrelay_database_reachable 1$/m.test(await metrics()), 'the database reachable again');
    publisher.ws.close();
    subscriber.ws.close();

    // A fresh start on the same folder reads every acknowledged event back from disk.
    await relay!.stop();
    relay = await startRelayProcess({ ...ENV, DATA_DIR: dir });
    const reader = await TestClient.connect(relay.url);
    expect((await reader.query('stored', { authors: [signer.pubkey] })).map((e) => e.id).sort()).toEqual(all);
    reader.ws.close();
  }, 240_000);
});
