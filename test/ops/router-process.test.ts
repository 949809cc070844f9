// No gaps when a side dies: `npm run cli -- router` as its own process on our database (beside a
// relay on the same database) and a remote relay process, each killed with SIGKILL in turn. Whatever
// was committed on either side while the other was away arrives once both run again: on the remote
// while it was down (written straight into its database, so its live subscribers never hear of them),
// here while the remote was down, on either side while the router was down, and an event here two
// days old. Also ROUTER_CONFIG in the relay process, under WORKERS=2 run by one process, and a bad
// configuration refused at start with one line (exit 2), by the command and by the relay.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRelayProcess, type RelayProcess } from '../../bench/lib/relay-process.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { packageRoot } from '../../src/paths.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatchStored } from '../../src/store/write.js';
import { runCli } from '../support/cli.js';
import { TestClient } from '../support/client.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { until } from '../support/wait.js';

const CLI = path.join(packageRoot(), 'dist/src/cli/main.js');
const MAIN = path.join(packageRoot(), 'dist/src/main.js');
const WAIT_MS = 30_000; // generous: only to catch a hang

/** The router command as an operator runs it, its JSON log lines (stderr) collected. */
class RouterProcess {
  readonly logs: Array<Record<string, unknown>> = [];
  readonly child: ChildProcess;

  constructor(file: string, databaseUrl: string) {
    this.child = spawn(process.execPath, [CLI, 'router', file, '--reconnect-delay', '50-150', '--checkpoint-interval', '100', '--summary-interval', '0'], {
      cwd: tmpdir(),
      env: { PATH: process.env.PATH, DATABASE_URL: databaseUrl, LOG_LEVEL: 'info', VERIFY_THREADS: '1' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    createInterface({ input: this.child.stderr! }).on('line', (line) => {
      try {
        this.logs.push(JSON.parse(line));
      } catch {
        /* the human line */
      }
    });
  }

  count(msg: string): number {
    return this.logs.filter((l) => l.msg === msg).length;
  }

  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.kill('SIGKILL');
    await exited;
  }
}

async function kill(relay: RelayProcess): Promise<void> {
  const exited = new Promise((r) => relay.child.once('exit', r));
  relay.child.kill('SIGKILL');
  await exited;
}

/** Runs a command to its exit: code and stderr. */
function runToExit(args: string[], env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: tmpdir(), env: { PATH: process.env.PATH, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

const hasEvent = async (pool: pg.Pool, id: string) => (await pool.query('SELECT 1 FROM events WHERE id = decode($1, $2)', [id, 'hex'])).rowCount === 1;
const allIn = async (pool: pg.Pool, events: NostrEvent[]) => (await Promise.all(events.map((e) => hasEvent(pool, e.id)))).every(Boolean);

async function publish(url: string, events: NostrEvent[]): Promise<void> {
  const client = await TestClient.connect(url);
  for (const e of events) expect(await client.publish(e)).toEqual([true, '']);
  client.close();
}

let dir: string;
let local: TestRelay; // our relay; the router command runs on its database
let remoteDb: string;
let remotePool: pg.Pool;
let remote: RelayProcess;
let remotePort: string;
let router: RouterProcess | undefined;
const author = newSigner();
let configPath: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'router-process-'));
  remoteDb = await createTestDatabase();
  remotePool = new pg.Pool({ connectionString: remoteDb, max: 2 });
  [local, remote] = await Promise.all([startTestRelay(), startRelayProcess({ DATABASE_URL: remoteDb })]);
  remotePort = new URL(remote.url).port;
  configPath = path.join(dir, 'router.conf');
  // strfry's syntax, as an operator would write it.
  await writeFile(
    configPath,
    `connectionTimeout = 10\nverbose = false\nstreams {\n  mesh {\n    dir = "both"\n    filter = { "authors": ["${author.pubkey}"] }\n    urls = [ "${remote.url}" ]\n  }\n}\n`,
  );
});
afterAll(async () => {
  await router?.kill();
  await remote?.stop();
  await remotePool?.end();
  await local?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('router command: no gaps when either side dies', () => {
  it('streams both ways, then catches up both ways after the remote relay is killed and restarted', async () => {
    router = new RouterProcess(configPath, local.config.DATABASE_URL!);
    await until(() => router!.count('router: caught up') >= 2, 'the router connected and caught up', WAIT_MS);
    const live = [author.sign({ content: 'live down' }), author.sign({ content: 'live up' })];
    await publish(remote.url, [live[0]]);
    await publish(local.url, [live[1]]);
    await until(async () => (await hasEvent(local.db.pool, live[0].id)) && (await hasEvent(remotePool, live[1].id)), 'live both ways', WAIT_MS);

    await kill(remote);
    const hereMeanwhile = [author.sign({ content: 'here while the remote is down 1' }), author.sign({ content: 'here while the remote is down 2' })];
    await publish(local.url, hereMeanwhile);
    // Stored on the remote while it was down: its live subscribers never hear of these.
    const thereMeanwhile = [author.sign({ content: 'there while it was down' }), author.sign({ content: 'there, 30 s old', created_at: now() - 30 })];
    const { results } = await writeBatchStored(remotePool, thereMeanwhile.map(prepareEvent));
    expect(results.map((r) => r.status)).toEqual(['stored', 'stored']);
    const caughtUp = router.count('router: caught up');
    remote = await startRelayProcess({ DATABASE_URL: remoteDb, PORT: remotePort });

    await until(() => allIn(local.db.pool, thereMeanwhile), 'down: what the remote stored while it was down', WAIT_MS);
    await until(() => allIn(remotePool, hereMeanwhile), 'up: what was committed here while the remote was down', WAIT_MS);
    expect(router.count('router: caught up')).toBeGreaterThan(caughtUp);
  });

  it('catches up both ways after the router process is killed and started again, an event here two days old included', async () => {
    await router!.kill();
    const thereMeanwhile = [author.sign({ content: 'there while the router is down' })];
    const hereMeanwhile = [author.sign({ content: 'here while the router is down' }), author.sign({ content: 'here, two days old', created_at: now() - 2 * 86_400 })];
    await publish(remote.url, thereMeanwhile);
    await publish(local.url, hereMeanwhile);
    router = new RouterProcess(configPath, local.config.DATABASE_URL!);
    await until(() => allIn(local.db.pool, thereMeanwhile), 'down: caught up after the restart', WAIT_MS);
    await until(() => allIn(remotePool, hereMeanwhile), 'up: caught up after the restart (the old event by our arrival order)', WAIT_MS);
    // And live again afterwards.
    const after = author.sign({ content: 'after the restart' });
    await publish(remote.url, [after]);
    await until(() => hasEvent(local.db.pool, after.id), 'live again', WAIT_MS);
    const positions = await runCli(['router', configPath, '--positions'], { DATABASE_URL: local.config.DATABASE_URL! });
    expect(positions.code).toBe(0);
    expect(positions.stdout.split('\n').filter((l) => l.startsWith(`mesh  ${remote.url}  `)).map((l) => l.split(/ +/)[2])).toEqual(['down', 'up']);
  });

  it('refuses a bad configuration at start with one line naming the line and column (exit code 2)', async () => {
    const bad = path.join(dir, 'bad.conf');
    await writeFile(bad, 'streams {\n  s {\n    dir = "sideways"\n    urls = [ "ws://127.0.0.1:1" ]\n  }\n}\n');
    const run = await runCli(['router', bad], { DATABASE_URL: local.config.DATABASE_URL! });
    expect(run.code).toBe(2);
    expect(run.stderr.trim()).toBe(`router config ${bad}:3:11: streams.s.dir must be "up", "down" or "both" (got "sideways")`);
    const relay = await runToExit([MAIN], { DATABASE_URL: local.config.DATABASE_URL!, PORT: '0', LOG_LEVEL: 'silent', ROUTER_CONFIG: bad });
    expect(relay.code).toBe(2);
    expect(relay.stderr.trim()).toBe(`ROUTER_CONFIG: router config ${bad}:3:11: streams.s.dir must be "up", "down" or "both" (got "sideways")`);
  });
});

describe('ROUTER_CONFIG in the relay', () => {
  it('under WORKERS=2 one worker runs the streams, on the relay\'s own write path', async () => {
    const other = newSigner();
    const file = path.join(dir, 'relay-router.json');
    await writeFile(file, JSON.stringify({ streams: { down: { dir: 'down', filter: { authors: [other.pubkey] }, urls: [remote.url] } } }));
    const databaseUrl = await createTestDatabase();
    const relay = await startRelayProcess({ DATABASE_URL: databaseUrl, WORKERS: '2', ROUTER_CONFIG: file, VERIFY_THREADS: '1' });
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
    try {
      await until(() => relay.logs.some((l) => l.msg === 'router: caught up'), 'a worker runs the stream', WAIT_MS);
      const note = other.sign({ content: 'to the relay with ROUTER_CONFIG' });
      // A subscriber on the relay hears of it (whichever worker it is on): the router's write is a commit like any.
      const watcher = await TestClient.connect(relay.url);
      await watcher.query('live', { authors: [other.pubkey] });
      await publish(remote.url, [note]);
      await until(() => watcher.liveEvents('live').length === 1, 'fanned out on the relay', WAIT_MS);
      watcher.close();
      expect(await hasEvent(pool, note.id)).toBe(true);
      expect(relay.logs.filter((l) => l.msg === 'router: this process holds the router lock; starting the streams')).toHaveLength(1);
      expect(relay.logs.filter((l) => l.msg === 'router: connected')).toHaveLength(1);
    } finally {
      await pool.end();
      await relay.stop();
    }
  });
});
