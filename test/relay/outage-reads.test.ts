// What a REQ sees while the database cannot be read (docs/ha.md): every event this process
// acknowledged or had read before the loss, from memory; an event another process committed that this
// one had not read yet is missing until the database is back, and then reaches the live subscribers and
// the REQs that follow. Two relays on one server: B reaches it through a proxy the test freezes, so B
// has not read A's last event when the server is killed.
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { ensureDatabase, withDatabaseName } from '../../src/store/database.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/store/embedded.js';
import { TestClient } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import { until } from '../support/wait.js';
import { serverPass } from '../support/server-pass.js';

const log = createLogger('silent');
let dir: string;
let server: EmbeddedPostgres;
let proxy: TcpProxy;
let a: TestRelay;
let b: TestRelay;

beforeAll(async () => {
  if (serverPass) return; // starts servers of its own: nothing to test on another server
  dir = await mkdtemp(path.join(tmpdir(), 'pgrelay-outage-'));
  await chmod(dir, 0o755);
  // Not supervised: the test decides when it comes back.
  server = await startEmbeddedPostgres(dir, 0, log, false);
  await ensureDatabase(server.adminUrl, 'nostr');
  const direct = withDatabaseName(server.adminUrl, 'nostr');
  proxy = await startTcpProxy(direct);
  const proxied = new URL(direct);
  proxied.port = new URL(proxy.url).port;
  a = await startTestRelay({}, direct);
  b = await startTestRelay({ WRITE_TIMEOUT_MS: '0' }, proxied.toString());
}, 120_000);

afterAll(async () => {
  await a?.close();
  await b?.close();
  await proxy?.close();
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const events = (c: TestClient) => c.messages.filter((m) => m[0] === 'EVENT' && m[1] === 'live').map((m) => (m[2] as NostrEvent).id);

describe.skipIf(serverPass)('REQs while the database is down, with two relay processes', () => {
  it('answer what this process wrote or read before; what another committed unread arrives once the database is back', async () => {
    const signer = newSigner();
    const make = (content: string) => signer.sign({ kind: 1, created_at: now(), tags: [], content });
    const toA = await TestClient.connect(a.url);
    const toB = await TestClient.connect(b.url);
    const watcher = await TestClient.connect(b.url);
    watcher.send(['REQ', 'live', { authors: [signer.pubkey] }]);
    await watcher.waitFor((m) => m[0] === 'EOSE');

    const readByB = make('committed by A, read by B');
    expect(await toA.publish(readByB)).toEqual([true, '']);
    await until(() => events(watcher).includes(readByB.id), 'B read A\'s first event');
    const writtenByB = make('committed by B');
    expect(await toB.publish(writtenByB)).toEqual([true, '']);

    proxy.freeze(); // B reads nothing from now on
    const unread = make('committed by A, not read by B');
    expect(await toA.publish(unread)).toEqual([true, '']);
    const pid = Number((await readFile(path.join(dir, 'pg', 'postmaster.pid'), 'utf8')).split('\n')[0]);
    process.kill(pid, 'SIGKILL');
    await until(async () => !(await fetch(`${a.url.replace('ws', 'http')}/ready`).then((r) => r.ok)), 'the server down');
    proxy.thaw();

    // From memory: B's own event and what it had read; A's last event is not known to B yet.
    const during = await toB.query('during', { authors: [signer.pubkey] });
    expect(during.map((e) => e.id).sort()).toEqual([readByB.id, writtenByB.id].sort());
    // Writes are refused (WRITE_TIMEOUT_MS=0 on B), never acknowledged without a commit.
    const refused = make('sent to B while down');
    const [accepted, reason] = await toB.publish(refused);
    expect(accepted).toBe(false);
    expect(reason).toMatch(/^error: /);

    server = await startEmbeddedPostgres(dir, server.port, log, false);
    await until(() => events(watcher).includes(unread.id), 'A\'s unread event delivered by B once the database is back', 60_000);
    expect(events(watcher).sort()).toEqual([readByB.id, writtenByB.id, unread.id].sort());
    const afterwards = await toB.query('after', { authors: [signer.pubkey] });
    expect(afterwards.map((e) => e.id).sort()).toEqual([readByB.id, writtenByB.id, unread.id].sort());
    for (const c of [toA, toB, watcher]) c.ws.close();
  }, 180_000);
});
