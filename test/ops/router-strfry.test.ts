// The router and `sync` against a real strfry (the relay whose router and negentropy they follow):
// down, up and both; catch-up after strfry is killed (events imported into its database while it is
// down, which no live subscription ever announces) and after the router process is killed; and
// `npm run cli -- sync` both ways. strfry is found through STRFRY_BIN, else `strfry` on PATH, else
// load/bin/strfry (where `npm run interop:install-strfry` unpacks a build); without it these tests are
// skipped (the rest of the suite never needs it). Each run gives strfry a database folder and a port of
// its own.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { readPosition } from '../../src/ops/router/positions.js';
import { Router } from '../../src/ops/router/router.js';
import { packageRoot } from '../../src/paths.js';
import { runCli } from '../support/cli.js';
import { TestClient } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { routerHostOf } from '../support/router-host.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { findExecutable, skipWithout } from '../support/executables.js';
import { until } from '../support/wait.js';


/** STRFRY_BIN, else `strfry` on PATH, else load/bin/strfry. */
function findStrfry(): string | undefined {
  return findExecutable('STRFRY_BIN', 'strfry', [path.join(packageRoot(), 'load', 'bin', 'strfry')]);
}

const STRFRY = findStrfry();
const SKIPPED = process.env.STRFRY_BIN
  ? `with a real strfry (skipped: STRFRY_BIN=${process.env.STRFRY_BIN} is not an executable file)`
  : 'with a real strfry (skipped: no strfry on PATH or at load/bin/strfry; run npm run interop:install-strfry, or set STRFRY_BIN to a strfry binary)';
const WAIT_MS = 30_000; // generous: only to catch a hang
const CLI = path.join(packageRoot(), 'dist/src/cli/main.js');
const FAST = { reconnectMs: [30, 80] as [number, number], checkpointMs: 100, reloadMs: 50, keepAliveMs: 5000 };

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  await new Promise((r) => server.close(r));
  return port;
}

/** strfry with its own database folder and port; start() again after kill() reopens the same database. */
class Strfry {
  child: ChildProcess | undefined;
  readonly url: string;
  readonly conf: string;

  constructor(
    readonly dir: string,
    readonly port: number,
  ) {
    this.url = `ws://127.0.0.1:${port}`;
    this.conf = path.join(dir, 'strfry.conf');
  }

  async start(): Promise<void> {
    await mkdir(path.join(this.dir, 'db'), { recursive: true });
    await writeFile(this.conf, `db = "${path.join(this.dir, 'db')}/"\nrelay {\n  bind = "127.0.0.1"\n  port = ${this.port}\n  nofiles = 0\n}\n`);
    this.child = spawn(STRFRY!, [`--config=${this.conf}`, 'relay'], { stdio: 'ignore' });
    await until(
      async () => {
        try {
          return (await fetch(`http://127.0.0.1:${this.port}/`, { headers: { Accept: 'application/nostr+json' } })).ok;
        } catch {
          return false;
        }
      },
      'strfry listening',
      WAIT_MS,
    );
  }

  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  }

  /** `strfry import`: events written into its database directly (it need not be running). */
  async import(events: NostrEvent[]): Promise<void> {
    const child = spawn(STRFRY!, [`--config=${this.conf}`, 'import'], { stdio: ['pipe', 'ignore', 'ignore'] });
    child.stdin!.end(events.map((e) => JSON.stringify(e)).join('\n') + '\n');
    const code = await new Promise((r) => child.once('exit', r));
    expect(code).toBe(0);
  }

  /** Which of `events` strfry serves. */
  async holds(events: NostrEvent[]): Promise<boolean> {
    const client = await TestClient.connect(this.url);
    try {
      const found = await client.fetch(`q${Math.random()}`, { ids: events.map((e) => e.id) });
      return found.length === events.length;
    } finally {
      client.close();
    }
  }
}


const has = async (relay: TestRelay, id: string) => (await relay.db.pool.query('SELECT 1 FROM events WHERE id = decode($1, $2)', [id, 'hex'])).rowCount === 1;
const allIn = async (relay: TestRelay, events: NostrEvent[]) => (await Promise.all(events.map((e) => has(relay, e.id)))).every(Boolean);

async function publish(url: string, events: NostrEvent[]): Promise<void> {
  const client = await TestClient.connect(url);
  for (const e of events) expect((await client.publish(e))[0]).toBe(true);
  client.close();
}

describe.skipIf(skipWithout(STRFRY !== undefined, SKIPPED))(STRFRY ? `with a real strfry (${STRFRY})` : SKIPPED, () => {
  let dir: string;
  let strfry: Strfry;
  let local: TestRelay;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'router-strfry-'));
    strfry = new Strfry(dir, await freePort());
    [local] = await Promise.all([startTestRelay(), strfry.start()]);
  });
  afterAll(async () => {
    await strfry?.kill();
    await local?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  async function routerFile(text: string): Promise<string> {
    const file = path.join(dir, `router-${Math.random().toString(36).slice(2)}.conf`);
    await writeFile(file, text);
    return file;
  }

  it('down, up and both with strfry; an event from strfry is not sent back to it', async () => {
    const a = newSigner();
    const b = newSigner();
    const c = newSigner();
    const file = await routerFile(`streams {
      d { dir = "down" filter = { "authors": ["${a.pubkey}"] } urls = [ "${strfry.url}" ] }
      u { dir = "up" filter = { "authors": ["${b.pubkey}"] } urls = [ "${strfry.url}" ] }
      both { dir = "both" filter = { "authors": ["${c.pubkey}"] } urls = [ "${strfry.url}" ] }
    }`);
    const router = new Router(routerHostOf(local), FAST);
    await router.runFile(file);
    try {
      await until(async () => (await local.relay.context.metrics.registry.getSingleMetricAsString('pgrelay_router_connected')).match(/ 1$/gm)?.length === 3, 'three connections', WAIT_MS);
      const down = a.sign({ content: 'from strfry' });
      const up = b.sign({ content: 'to strfry' });
      const bothThere = c.sign({ content: 'both, from strfry' });
      const bothHere = c.sign({ content: 'both, from here' });
      await publish(strfry.url, [down, bothThere]);
      await publish(local.url, [up, bothHere]);
      await until(() => allIn(local, [down, bothThere]), 'down from strfry', WAIT_MS);
      await until(() => strfry.holds([up, bothHere]), 'up to strfry', WAIT_MS);
      const sent = (await local.relay.context.metrics.registry.getMetricsAsJSON()).find((m) => m.name === 'pgrelay_router_events_up_total')!.values;
      const toStrfry = (stream: string) => sent.filter((v) => v.labels.stream === stream).reduce((n, v) => n + v.value, 0);
      expect(toStrfry('both')).toBe(1); // bothHere only: bothThere came from strfry
      // The positions move on strfry's proofs: its pongs (down) and its OKs (up).
      const t = now();
      await until(async () => (await readPosition(local.db.pool, 'd', strfry.url, 'down'))!.through > t, 'the down position moves past now', WAIT_MS);
      await until(async () => (await readPosition(local.db.pool, 'u', strfry.url, 'up'))!.through > t, 'the up position moves past now', WAIT_MS);
    } finally {
      await router.stop();
    }
  });

  it('catches up both ways after strfry is killed: what was committed here meanwhile, and what was imported into strfry', async () => {
    const author = newSigner();
    const file = await routerFile(`streams { mesh { dir = "both" filter = { "authors": ["${author.pubkey}"] } urls = [ "${strfry.url}" ] } }`);
    const router = new Router(routerHostOf(local), FAST);
    await router.runFile(file);
    try {
      const first = author.sign({ content: 'live' });
      await publish(strfry.url, [first]);
      await until(() => has(local, first.id), 'live down', WAIT_MS);
      await strfry.kill();
      const here = [author.sign({ content: 'here while strfry is down' })];
      const there = [author.sign({ content: 'imported into strfry while it is down' }), author.sign({ content: 'imported, 40 s old', created_at: now() - 40 })];
      await publish(local.url, here);
      await strfry.import(there);
      await strfry.start();
      await until(() => allIn(local, there), 'down: caught up from strfry by negentropy', WAIT_MS);
      await until(() => strfry.holds(here), 'up: caught up to strfry', WAIT_MS);
      const runs = (await local.relay.context.metrics.registry.getMetricsAsJSON()).find((m) => m.name === 'pgrelay_router_catchups_total')!.values;
      expect(runs.some((v) => v.labels.stream === 'mesh' && v.labels.direction === 'down' && v.labels.method === 'negentropy' && v.value >= 2)).toBe(true);
    } finally {
      await router.stop();
    }
  });

  it('catches up both ways after the router process is killed', async () => {
    const author = newSigner();
    const file = await routerFile(`streams { mesh { dir = "both" filter = { "authors": ["${author.pubkey}"] } urls = [ "${strfry.url}" ] } }`);
    const env = { PATH: process.env.PATH!, DATABASE_URL: local.config.DATABASE_URL!, LOG_LEVEL: 'info', VERIFY_THREADS: '1' };
    const start = () => {
      const child = spawn(process.execPath, [CLI, 'router', file, '--reconnect-delay', '50-150', '--checkpoint-interval', '100', '--summary-interval', '0'], { cwd: tmpdir(), env, stdio: ['ignore', 'ignore', 'pipe'] });
      const logs: string[] = [];
      createInterface({ input: child.stderr! }).on('line', (l) => logs.push(l));
      return { child, caughtUp: () => logs.filter((l) => l.includes('"router: caught up"')).length };
    };
    let router = start();
    try {
      await until(() => router.caughtUp() >= 2, 'the router caught up', WAIT_MS);
      const live = author.sign({ content: 'live' });
      await publish(local.url, [live]);
      await until(() => strfry.holds([live]), 'live up', WAIT_MS);
      const exited = new Promise((r) => router.child.once('exit', r));
      router.child.kill('SIGKILL');
      await exited;
      const there = [author.sign({ content: 'on strfry while the router is down' })];
      const here = [author.sign({ content: 'here while the router is down' }), author.sign({ content: 'here, two days old', created_at: now() - 2 * 86_400 })];
      await publish(strfry.url, there);
      await publish(local.url, here);
      router = start();
      await until(() => allIn(local, there), 'down: caught up after the restart', WAIT_MS);
      await until(() => strfry.holds(here), 'up: caught up after the restart', WAIT_MS);
    } finally {
      router.child.kill('SIGKILL');
    }
  });

  it('`npm run cli -- sync` with strfry, both ways: each side ends with the union, a second run finds nothing', async () => {
    const author = newSigner();
    const onlyHere = Array.from({ length: 30 }, (_, i) => author.sign({ content: `only here ${i}`, created_at: now() - 100 - i }));
    const onlyThere = Array.from({ length: 20 }, (_, i) => author.sign({ content: `only on strfry ${i}`, created_at: now() - 200 - i }));
    await publish(local.url, onlyHere);
    await strfry.import(onlyThere);
    const env = { DATABASE_URL: local.config.DATABASE_URL!, VERIFY_THREADS: '1' };
    const filter = JSON.stringify({ authors: [author.pubkey] });
    const first = await runCli(['sync', strfry.url, '--filter', filter], env);
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/^have: +30 /m);
    expect(first.stdout).toMatch(/^need: +20 /m);
    expect(await allIn(local, onlyThere)).toBe(true);
    expect(await strfry.holds(onlyHere)).toBe(true);
    const again = await runCli(['sync', strfry.url, '--filter', filter], env);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/^have: +0 /m);
    expect(again.stdout).toMatch(/^need: +0 /m);
  });
});
