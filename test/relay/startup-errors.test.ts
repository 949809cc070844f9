// Fatal start-up errors: the relay, started as an operator starts it (`node dist/src/main.js`,
// its own process, only the environment given), prints one line saying what is wrong and what to do,
// exits non-zero without retrying, and leaves no process behind: an embedded PostgreSQL it started is
// stopped, one it found running stays. Once running, an uncaught exception shuts it down in order.
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { createLogger } from '../../src/log.js';
import { packageRoot } from '../../src/paths.js';
import { freePort, startEmbeddedPostgres } from '../../src/store/embedded.js';
import { runCli } from '../support/cli.js';
import { createTestDatabase } from '../support/database.js';
import { serverPass } from '../support/server-pass.js';
import { until } from '../support/wait.js';

const MAIN = path.join(packageRoot(), 'dist/src/main.js');
const folders: string[] = [];
afterAll(async () => {
  for (const f of folders) await rm(f, { recursive: true, force: true });
});

/** A fresh folder the embedded server (running as `postgres` under root) can reach. */
async function folder(): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'pgrelay-startup-'));
  await chmod(dir, 0o755);
  folders.push(dir);
  return dir;
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function spawnRelay(env: Record<string, string>, args: string[] = [MAIN]): ChildProcess {
  return spawn(process.execPath, args, { cwd: tmpdir(), env: { PATH: process.env.PATH, PORT: '0', HOST: '127.0.0.1', ...env } });
}

function finish(child: ChildProcess): Promise<Run> {
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => (stdout += d));
  child.stderr!.on('data', (d) => (stderr += d));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const startRelay = (env: Record<string, string>) => finish(spawnRelay(env));

/** PostgreSQL server processes whose data folder is under `dir`. */
function postgresUnder(dir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (path.basename(cmdline[0]) === 'postgres' && cmdline.some((arg) => arg.startsWith(dir))) pids.push(Number(entry));
    } catch {
      /* gone meanwhile */
    }
  }
  return pids;
}

/** Exactly one line on stderr, `pgrelay: ` and the message. */
function theLine(run: Run): string {
  const lines = run.stderr.split('\n').filter(Boolean);
  expect(lines, run.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^pgrelay: /);
  return lines[0];
}

describe('fatal start-up errors', () => {
  it('the port in use: says so and what to do, exits 1 at once, starts no PostgreSQL', async () => {
    const dir = await folder();
    const holder: Server = createServer();
    const port = await new Promise<number>((r) => holder.listen(0, '127.0.0.1', () => r((holder.address() as { port: number }).port)));
    try {
      const run = await startRelay({ DATA_DIR: path.join(dir, 'data'), PORT: String(port) });
      expect(run.code).toBe(1);
      expect(theLine(run)).toBe(`pgrelay: port ${port} is in use (127.0.0.1:${port}): stop the other process (another relay?) or set PORT to a free port`);
      expect(postgresUnder(dir)).toEqual([]);
    } finally {
      holder.close();
    }
  });

  it('a HOST that is not an address of this machine', async () => {
    const run = await startRelay({ DATA_DIR: path.join(await folder(), 'data'), HOST: '192.0.2.1', PORT: '8008' });
    expect(run.code).toBe(1);
    expect(theLine(run)).toBe('pgrelay: HOST 192.0.2.1 is not an address of this machine: set HOST to one of its addresses, or 0.0.0.0 for all');
  });

  it.skipIf(serverPass)('a TLS certificate that cannot be read: stops the embedded PostgreSQL it started', async () => {
    const dir = await folder();
    const run = await startRelay({ DATA_DIR: path.join(dir, 'data'), TLS_CERT_FILE: path.join(dir, 'missing.pem'), TLS_KEY_FILE: path.join(dir, 'key.pem') });
    expect(run.code).toBe(1);
    expect(theLine(run)).toBe(
      `pgrelay: TLS_CERT_FILE ${path.join(dir, 'missing.pem')} cannot be read (ENOENT): check the path and that this user may read it (set TLS_CERT_FILE), or unset TLS_CERT_FILE and TLS_KEY_FILE to serve ws://`,
    );
    expect(run.stdout).toMatch(/"msg":"embedded PostgreSQL started"/);
    expect(run.stdout).toMatch(/"msg":"embedded PostgreSQL stopped"/);
    expect(postgresUnder(dir)).toEqual([]);
  });

  it.skipIf(serverPass)('a certificate that is not one, beside an embedded PostgreSQL already running: that server stays', async () => {
    const dir = await folder();
    const cert = path.join(dir, 'cert.pem');
    await import('node:fs/promises').then((fs) => fs.writeFile(cert, 'not a certificate'));
    const running = await startEmbeddedPostgres(path.join(dir, 'data'), 0, createLogger('silent'));
    try {
      const run = await startRelay({ DATA_DIR: path.join(dir, 'data'), TLS_CERT_FILE: cert, TLS_KEY_FILE: cert });
      expect(run.code).toBe(1);
      expect(theLine(run)).toMatch(/^pgrelay: TLS_CERT_FILE .* and TLS_KEY_FILE .* are not a usable certificate and key \(.+\): both must be PEM files/);
      expect(postgresUnder(dir).length).toBeGreaterThan(0); // adopted, so left running
      const client = new pg.Client({ connectionString: running.adminUrl });
      await client.connect();
      await client.end();
    } finally {
      await running.stop();
    }
    // Its last processes may outlive the stop's return by a moment on a busy machine.
    await until(() => postgresUnder(dir).length === 0, "the server's processes gone");
  });

  it('a DATA_DIR the server cannot use: names the folder and what to do', async () => {
    const dir = await folder();
    const closed = path.join(dir, 'closed');
    await mkdir(closed);
    // As root PostgreSQL runs as `postgres`, which cannot enter a 0700 folder; as anyone else, a
    // folder without write permission stops the relay itself.
    const root = userInfo().uid === 0;
    await chmod(closed, root ? 0o700 : 0o500);
    const run = await startRelay({ DATA_DIR: path.join(closed, 'data') });
    await chmod(closed, 0o755);
    expect(run.code).toBe(1);
    if (root) expect(theLine(run)).toBe(`pgrelay: the embedded PostgreSQL runs as the user postgres (it refuses to run as root), which cannot enter ${closed}: let it in (e.g. chmod 755 ${closed}; mktemp -d makes 0700 folders) or set DATA_DIR to a folder this user can write, or DATABASE_URL to use another PostgreSQL`);
    else expect(theLine(run)).toBe(`pgrelay: DATA_DIR ${path.join(closed, 'data')} cannot be written (EACCES): set DATA_DIR to a folder this user can write, or DATABASE_URL to use another PostgreSQL`);
    expect(postgresUnder(dir)).toEqual([]);
  });

  it('a database server that refuses the connection', async () => {
    const port = await freePort();
    const run = await startRelay({ DATABASE_URL: `postgres://pgrelay:s3cret@127.0.0.1:${port}/nostr` });
    expect(run.code).toBe(1);
    expect(theLine(run)).toBe(`pgrelay: the database server at 127.0.0.1:${port} refuses connections: start PostgreSQL there or correct DATABASE_URL (unset, the relay runs its own embedded PostgreSQL)`);
  });

  it('a wrong password: says which user was refused, never the password', async () => {
    const url = new URL(await createTestDatabase());
    url.password = 'not-the-password';
    const run = await startRelay({ DATABASE_URL: url.toString() });
    expect(run.code).toBe(1);
    const line = theLine(run);
    expect(line).toMatch(new RegExp(`^pgrelay: the database at 127\\.0\\.0\\.1:${url.port} refused user "${url.username}" \\(password authentication failed for user "${url.username}"\\): correct the user and password in DATABASE_URL$`));
    expect(run.stderr + run.stdout).not.toContain('not-the-password');
  });

  it('a database that does not exist', async () => {
    const url = new URL(await createTestDatabase());
    url.pathname = '/no_such_database';
    const run = await startRelay({ DATABASE_URL: url.toString() });
    expect(run.code).toBe(1);
    expect(theLine(run)).toBe(`pgrelay: database "no_such_database" does not exist on 127.0.0.1:${url.port}: create it (e.g. createdb no_such_database) or correct the database name in DATABASE_URL`);
  });

  it('a migration that fails: names it and the error', async () => {
    const url = await createTestDatabase({ empty: true });
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.query('CREATE TABLE events (something int)'); // in the first migration's way
    await client.end();
    const run = await startRelay({ DATABASE_URL: url });
    expect(run.code).toBe(1);
    expect(theLine(run)).toMatch(/^pgrelay: migration 20261122000001_events failed: .*relation "events" already exists: the migrations before it stay applied; fix the cause and start again/);
  });

  it('the operator commands say the same', async () => {
    const url = new URL(await createTestDatabase());
    url.password = 'not-the-password';
    const run = await runCli(['stats'], { DATABASE_URL: url.toString() });
    expect(run.code).toBe(1);
    expect(run.stderr.trim()).toMatch(new RegExp(`^error: the database at 127\\.0\\.0\\.1:${url.port} refused user "${url.username}" .*: correct the user and password in DATABASE_URL$`));
  });

  it.skipIf(serverPass)('with WORKERS, a worker that cannot start stops them all and the database', async () => {
    const dir = await folder();
    const cert = path.join(dir, 'cert.pem');
    await import('node:fs/promises').then((fs) => fs.writeFile(cert, 'not a certificate'));
    const run = await startRelay({ DATA_DIR: path.join(dir, 'data'), WORKERS: '2', TLS_CERT_FILE: cert, TLS_KEY_FILE: cert });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^pgrelay: TLS_CERT_FILE .* are not a usable certificate and key/m);
    expect(run.stdout).not.toMatch(/worker died; starting another/);
    expect(postgresUnder(dir)).toEqual([]);
  });
});

describe('runtime errors', () => {
  it.skipIf(serverPass)('an uncaught exception once running: logged, connections closed, the embedded database stopped, exit 1', async () => {
    const dir = await folder();
    // The relay as `npm start` runs it, plus a signal handler that throws: an uncaught exception from
    // an event handler, as a bug would raise one.
    const script = `process.on('SIGUSR2', () => { throw new Error('a bug') }); await import(${JSON.stringify(MAIN)});`;
    const child = spawnRelay({ DATA_DIR: path.join(dir, 'data') }, ['--input-type=module', '-e', script]);
    const done = finish(child);
    const url = await new Promise<string>((resolve) => {
      child.stdout!.on('data', (d: Buffer) => {
        const m = /"url":"(ws:\/\/[^"]+)","msg":"relay listening"/.exec(String(d));
        if (m) resolve(m[1]);
      });
    });
    const ws = new WebSocket(url);
    await new Promise((r) => ws.once('open', r));
    const closed = new Promise<number>((r) => ws.once('close', (code) => r(code)));
    child.kill('SIGUSR2');
    const run = await done;
    expect(run.code).toBe(1);
    expect(await closed).toBe(1001); // closed by the relay shutting down, not dropped
    const fatal = run.stdout.split('\n').filter((l) => l.includes('"level":60')).map((l) => JSON.parse(l));
    expect(fatal).toHaveLength(1);
    expect(fatal[0].msg).toMatch(/^uncaught exception: shutting down/);
    expect(fatal[0].err.message).toBe('a bug');
    expect(run.stdout).toMatch(/"msg":"relay stopped"/);
    expect(run.stdout).toMatch(/"msg":"embedded PostgreSQL stopped"/);
    expect(postgresUnder(dir)).toEqual([]);
  });
});
