// While PostgreSQL is unreachable the relay keeps its sockets, answers REQs from memory, answers
// EVENTs with error: once WRITE_TIMEOUT_MS has passed (0 here: at once), and resumes on its own when
// the database is back. This file runs its own embedded server, to stop it.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import { openDatabase, type Database } from '../../src/store/database.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/store/embedded.js';
import { startRelay, type RelayServer } from '../../src/relay/server.js';
import { TestClient } from '../support/client.js';
import { newSigner } from '../support/keys.js';
import { serverPass } from '../support/server-pass.js';

const log = createLogger('silent');
let dir: string;
let server: EmbeddedPostgres;
let db: Database;
let relay: RelayServer;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'pgrelay-outage-'));
  server = await startEmbeddedPostgres(dir, 0, log);
  const config = parseConfig({ PORT: '0', LOG_LEVEL: 'silent', DATABASE_URL: server.adminUrl, WRITE_TIMEOUT_MS: '0' });
  db = await openDatabase(config, log);
  relay = await startRelay(config, db, log);
});
afterAll(async () => {
  await relay.close();
  await db.close();
  await server.stop().catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
});

const http = () => relay.url.replace(/^ws/, 'http');
const ready = async () => (await fetch(`${http()}/ready`)).status;

describe.skipIf(serverPass)('database outage', () => {
  it('answers EVENTs error: and REQs from memory while the database is down (and /ready 503), keeps the socket, and recovers when it is back', async () => {
    const client = await TestClient.connect(relay.url);
    const alice = newSigner();
    expect(await client.publish(alice.sign({ content: 'before' }))).toEqual([true, '']);

    expect(await ready()).toBe(200);
    await server.stop();
    // A load balancer drains this relay while its database is gone.
    const down = await fetch(`${http()}/ready`);
    expect(down.status).toBe(503);
    expect(await down.json()).toMatchObject({ status: 'unavailable', reason: expect.stringMatching(/^database unreachable/) });
    expect((await fetch(`${http()}/health`)).status).toBe(200); // the process itself is alive
    const during = alice.sign({ content: 'during' });
    const [ok, reason] = await client.publish(during);
    expect(ok).toBe(false);
    expect(reason).toMatch(/^error: /);
    expect((await client.query('down', { authors: [alice.pubkey] })).map((e) => e.content)).toEqual(['before']);
    expect(client.closeInfo).toBeUndefined();

    server = await startEmbeddedPostgres(dir, server.port, log);
    await expect.poll(() => ready(), { timeout: 10_000 }).toBe(200);
    expect(await client.publish(during)).toEqual([true, '']);
    const stored = await client.query('after', { authors: [alice.pubkey] });
    expect(stored.map((e) => e.content).sort()).toEqual(['before', 'during']);
    client.close();
  });
});

describe.skipIf(serverPass)('a connection lost while checked out', () => {
  it('is reported and does not crash the process (an uncaught error would fail this run)', async () => {
    const client = await db.pool.connect(); // as a REQ's cursor or a write transaction holds one
    const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const other = await db.pool.connect();
    await other.query('SELECT pg_terminate_backend($1)', [pid]);
    other.release();
    await new Promise((r) => setTimeout(r, 300)); // the server's FATAL reaches the client as an 'error' event
    await expect(client.query('SELECT 1')).rejects.toThrow();
    client.release(true);
    expect((await db.pool.query('SELECT 1 AS one')).rows[0].one).toBe(1);
  });
});
