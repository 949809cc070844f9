// Backups and point-in-time restore of the embedded PostgreSQL, as an operator runs them: relays
// started as `node dist/src/main.js` with DATA_DIR and BACKUP_DIR, `backup` and `restore` run as
// CLI processes, and the restored DATA_DIR checked by starting a relay on it and asking it for
// every event. The history: batch A, a base backup, batch B, a moment T, batch C, a clean stop.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { appendFile, chmod, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { packageRoot } from '../../src/paths.js';
import { segmentNumber } from '../../src/store/archive.js';
import type { BackupManifest } from '../../src/store/backups.js';
import { binaries, postgresUser, run, startEmbeddedPostgres } from '../../src/store/embedded.js';
import { runCli } from '../support/cli.js';
import { TestClient } from '../support/client.js';
import { newSigner } from '../support/keys.js';
import { until } from '../support/wait.js';
import { serverPass } from '../support/server-pass.js';

const MAIN = path.join(packageRoot(), 'dist/src/main.js');
const SEGMENT_BYTES = 16 * 2 ** 20;
const LONG = 240_000;

let root: string;
const children: ChildProcess[] = [];
const dataDirs: string[] = [];

beforeAll(async () => {
  if (serverPass) return; // starts servers of its own: nothing to test on another server
  root = await mkdtemp(path.join(tmpdir(), 'pgrelay-backup-'));
  await chmod(root, 0o755); // the servers run as postgres when the tests run as root
});

afterAll(async () => {
  // A failed assertion may leave a relay or a server running: stopped here, by process or folder.
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  const bin = await binaries();
  const runAs = await postgresUser();
  for (const dir of dataDirs)
    if (existsSync(path.join(dir, 'pg', 'postmaster.pid'))) await run(bin.pg_ctl, ['stop', '-D', path.join(dir, 'pg'), '-m', 'immediate', '-w'], runAs).catch(() => {});
  if (root) await rm(root, { recursive: true, force: true });
}, 120_000);

interface Relay {
  dataDir: string;
  child: ChildProcess;
  logs: Array<Record<string, unknown>>;
  exited: Promise<number | null>;
}

/** Quiet, lean relays: no rate limits, no hot tier, one verify thread. */
const RELAY_ENV = {
  RATE_LIMIT_EVENTS_PER_SECOND: '0',
  RATE_LIMIT_REQS_PER_SECOND: '0',
  RATE_LIMIT_CONNECTIONS_PER_MINUTE: '0',
  MAX_CONNECTIONS_PER_ADDRESS: '0',
  HOT_TIER_MB: '0',
  HOT_TIER_SNAPSHOT: 'false',
  VERIFY_THREADS: '1',
};

function spawnRelay(env: Record<string, string>): Relay {
  if (env.DATA_DIR) dataDirs.push(env.DATA_DIR);
  const child = spawn(process.execPath, [MAIN], { cwd: tmpdir(), env: { PATH: process.env.PATH, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...RELAY_ENV, ...env } });
  children.push(child);
  const relay: Relay = { dataDir: env.DATA_DIR, child, logs: [], exited: new Promise((resolve) => child.on('close', resolve)) };
  createInterface({ input: child.stdout! }).on('line', (line) => {
    try {
      relay.logs.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // not a log line
    }
  });
  child.stderr!.on('data', (d) => relay.logs.push({ msg: 'stderr', text: String(d) }));
  return relay;
}

/** The relay's ws:// URL once it listens; its logs if it exits instead. */
async function listening(relay: Relay): Promise<string> {
  let exited = false;
  void relay.exited.then(() => (exited = true));
  await until(() => exited || relay.logs.some((l) => l.msg === 'relay listening'), 'relay listening', 180_000);
  const line = relay.logs.find((l) => l.msg === 'relay listening');
  if (!line) {
    const postgresLog = await readFile(path.join(relay.dataDir, 'postgres.log'), 'utf8').catch(() => '');
    throw new Error(`the relay exited: ${JSON.stringify(relay.logs)}\npostgres.log ends:\n${postgresLog.split('\n').slice(-25).join('\n')}`);
  }
  return line.url as string;
}

async function stopRelay(relay: Relay): Promise<void> {
  relay.child.kill('SIGTERM');
  expect(await relay.exited).toBe(0);
}

async function publishBatch(client: TestClient, label: string, n: number): Promise<NostrEvent[]> {
  const signer = newSigner();
  const events = Array.from({ length: n }, (_, i) => signer.sign({ content: `${label} ${i}` }));
  for (const event of events) expect(await client.publish(event)).toEqual([true, '']);
  return events;
}

const idsOf = (events: NostrEvent[]) => events.map((e) => e.id).sort();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Starts a relay on a DATA_DIR, asks it for every note, stops it. */
async function storedIn(dataDir: string): Promise<string[]> {
  const relay = spawnRelay({ DATA_DIR: dataDir });
  const client = await TestClient.connect(await listening(relay));
  try {
    return idsOf(await client.fetch('all', { kinds: [1], limit: 5000 }));
  } finally {
    client.close();
    await stopRelay(relay);
  }
}

async function restore(args: string[]): Promise<void> {
  const result = await runCli(['restore', ...args], { LOG_LEVEL: 'warn' });
  expect(result.stderr).toBe('');
  expect(result.code).toBe(0);
}

const backups = async (backupDir: string): Promise<string[]> => (await readdir(path.join(backupDir, 'base'))).sort();
const manifestOf = async (backupDir: string, name: string) => JSON.parse(await readFile(path.join(backupDir, 'base', name, 'manifest.json'), 'utf8')) as BackupManifest;

describe.skipIf(serverPass)('a restore of the history A, backup, B, T, C, clean stop', () => {
  let dataDir: string;
  let backupDir: string;
  const history = { a: [] as NostrEvent[], b: [] as NostrEvent[], c: [] as NostrEvent[], t: '' };
  const cliEnv = () => ({ DATA_DIR: dataDir, BACKUP_DIR: backupDir, LOG_LEVEL: 'warn' });

  beforeAll(async () => {
    dataDir = path.join(root, 'history', 'data');
    backupDir = path.join(root, 'history', 'backup');
    const relay = spawnRelay({ DATA_DIR: dataDir, BACKUP_DIR: backupDir });
    const client = await TestClient.connect(await listening(relay));
    history.a = await publishBatch(client, 'A', 10);
    const backup = await runCli(['backup'], cliEnv());
    expect(backup.stderr).toBe('');
    expect(backup.code).toBe(0);
    history.b = await publishBatch(client, 'B', 10);
    // T after B's commits (their OKs came after them) and before C's, at millisecond precision.
    await sleep(5);
    history.t = new Date().toISOString();
    await sleep(5);
    history.c = await publishBatch(client, 'C', 10);
    client.close();
    await stopRelay(relay);
  }, LONG);

  it('restored to T, the relay serves exactly A and B', async () => {
    const target = path.join(root, 'history', 'at-t');
    await restore(['--from', backupDir, '--data-dir', target, '--to-time', history.t]);
    expect(await storedIn(target)).toEqual(idsOf([...history.a, ...history.b]));
  }, LONG);

  it('restored to the end of the archive, the relay serves A, B and C: a clean stop archived everything', async () => {
    const target = path.join(root, 'history', 'latest');
    await restore(['--from', backupDir, '--data-dir', target]);
    expect(await storedIn(target)).toEqual(idsOf([...history.a, ...history.b, ...history.c]));
  }, LONG);

  it('a replay that cannot reach its target ends the relay\'s start, pointing at postgres.log', async () => {
    // restore refuses such a target; written by hand here, after everything archived.
    const target = path.join(root, 'history', 'unreachable');
    await restore(['--from', backupDir, '--data-dir', target]);
    const later = new Date().toISOString().replace('T', ' ').replace('Z', '+00');
    await appendFile(path.join(target, 'pg', 'postgresql.auto.conf'), `recovery_target_time = '${later}'\n`);
    const relay = spawnRelay({ DATA_DIR: target });
    expect(await relay.exited).toBe(1);
    const stderr = relay.logs.filter((l) => l.msg === 'stderr').map((l) => l.text).join('');
    expect(stderr).toMatch(/^pgrelay: the embedded PostgreSQL stopped while replaying the archive of a restore: see .*unreachable\/postgres\.log/);
    expect(await readFile(path.join(target, 'postgres.log'), 'utf8')).toMatch(/recovery ended before configured recovery target was reached/);
  }, LONG);

  it('restored files belong to the server, the data folder 0700', async () => {
    const target = path.join(root, 'history', 'owned');
    await restore(['--from', backupDir, '--data-dir', target]);
    const owner = await postgresUser();
    expect(statSync(path.join(target, 'pg')).mode & 0o777).toBe(0o700);
    for (const file of [path.join(target, 'password'), path.join(target, 'pg', 'PG_VERSION'), path.join(target, 'pg', 'recovery.signal')]) {
      expect(statSync(file).uid).toBe(owner?.uid ?? process.getuid!());
    }
  }, LONG);

  it('backup --keep 1, with the relay stopped, leaves the newest backup and the WAL from its start on', async () => {
    const [older] = await backups(backupDir);
    const result = await runCli(['backup', '--keep', '1'], cliEnv());
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const left = await backups(backupDir);
    expect(left).toHaveLength(1);
    expect(left[0]).not.toBe(older);
    const { walFiles } = await manifestOf(backupDir, left[0]);
    const wal = await readdir(path.join(backupDir, 'wal'));
    const segments = wal.filter((f) => /^[0-9A-F]{24}$/.test(f));
    expect(segments).toEqual(expect.arrayContaining(walFiles));
    expect(segments.filter((f) => segmentNumber(f, SEGMENT_BYTES) < segmentNumber(walFiles[0], SEGMENT_BYTES))).toEqual([]);
    expect(result.stdout).toMatch(/removed 1 backup\(s\)/);
  }, LONG);

  it('after --keep 1, the archive still restores A, B and C', async () => {
    const target = path.join(root, 'history', 'after-keep');
    await restore(['--from', backupDir, '--data-dir', target]);
    expect(await storedIn(target)).toEqual(idsOf([...history.a, ...history.b, ...history.c]));
  }, LONG);

  describe('refusals, which touch nothing', () => {
    const refused = async (args: string[], message: RegExp, target: string) => {
      const result = await runCli(['restore', '--from', backupDir, '--data-dir', target, ...args], { LOG_LEVEL: 'warn' });
      expect(result.code).toBe(2);
      expect(result.stderr).toMatch(message);
    };

    it('a --to-time that is not an ISO-8601 time with its zone', async () => {
      const target = path.join(root, 'refused-format');
      await refused(['--to-time', 'yesterday noon'], /--to-time "yesterday noon" is not an ISO-8601 time with its zone/, target);
      await refused(['--to-time', '2025-06-01T12:00:00'], /is not an ISO-8601 time with its zone/, target);
      expect(existsSync(target)).toBe(false);
    });

    it('a --to-time before the oldest backup ended', async () => {
      const target = path.join(root, 'refused-early');
      await refused(['--to-time', '2020-01-01T00:00:00Z'], /--to-time 2020-01-01T00:00:00.000Z is before the end of the oldest backup/, target);
      expect(existsSync(target)).toBe(false);
    });

    it('a --to-time in the future', async () => {
      const target = path.join(root, 'refused-future');
      await refused(['--to-time', new Date(Date.now() + 3_600_000).toISOString()], /is in the future/, target);
      expect(existsSync(target)).toBe(false);
    });

    it('a --to-time after the newest archived segment: recovery could not reach it', async () => {
      const target = path.join(root, 'refused-unarchived');
      await refused(['--to-time', new Date().toISOString()], /nothing archived was written after --to-time/, target);
      expect(existsSync(target)).toBe(false);
    });

    it('a --data-dir that exists and is not empty', async () => {
      const target = path.join(root, 'refused-occupied');
      await mkdir(target);
      await writeFile(path.join(target, 'keep-me'), 'data');
      await refused([], /--data-dir .*refused-occupied exists and is not empty/, target);
      expect(await readdir(target)).toEqual(['keep-me']);
      expect(await readFile(path.join(target, 'keep-me'), 'utf8')).toBe('data');
    });
  });
});

describe.skipIf(serverPass)('backup refusals', () => {
  it('without BACKUP_DIR, saying so, and nothing is started or written', async () => {
    const dataDir = path.join(root, 'no-backup-dir', 'data');
    const result = await runCli(['backup'], { DATA_DIR: dataDir, LOG_LEVEL: 'warn' });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^error: BACKUP_DIR is not set/);
    expect(existsSync(dataDir)).toBe(false);
  });

  it('of a server that does not archive (started without BACKUP_DIR), saying so', async () => {
    const dataDir = path.join(root, 'not-archiving', 'data');
    const backupDir = path.join(root, 'not-archiving', 'backup');
    dataDirs.push(dataDir);
    const server = await startEmbeddedPostgres(dataDir, 0, createLogger('silent'), true, undefined);
    try {
      const result = await runCli(['backup'], { DATA_DIR: dataDir, BACKUP_DIR: backupDir, LOG_LEVEL: 'warn' });
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(/^error: the embedded PostgreSQL does not archive its WAL \(it was started without BACKUP_DIR\)/);
      expect(existsSync(path.join(backupDir, 'base')) ? await readdir(path.join(backupDir, 'base')) : []).toEqual([]);
    } finally {
      await server.stop();
    }
  }, LONG);
});

/** Connects to the embedded server of a running relay (its port from postmaster.pid). */
async function connectToServer(dataDir: string): Promise<pg.Client> {
  const port = Number(readFileSync(path.join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[3]);
  const password = (await readFile(path.join(dataDir, 'password'), 'utf8')).trim();
  const client = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', password, database: 'nostr' });
  client.on('error', () => {}); // the server is killed under it
  await client.connect();
  return client;
}

const lsnValue = (lsn: string) => {
  const [hi, lo] = lsn.split('/');
  return (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`);
};

/** PostgreSQL processes whose command line names a folder under `dir`. */
function postgresUnder(dir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (cmdline.includes(dir) && /postgres/.test(cmdline.split('\0')[0])) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

describe.skipIf(serverPass)('after the relay and its PostgreSQL are killed (SIGKILL)', () => {
  it('a restore to the end of the archive has every event committed in the segments archived before', async () => {
    const dataDir = path.join(root, 'crash', 'data');
    const backupDir = path.join(root, 'crash', 'backup');
    const relay = spawnRelay({ DATA_DIR: dataDir, BACKUP_DIR: backupDir, BACKUP_ARCHIVE_TIMEOUT_SECONDS: '1' });
    const client = await TestClient.connect(await listening(relay));
    const backup = await runCli(['backup'], { DATA_DIR: dataDir, BACKUP_DIR: backupDir, LOG_LEVEL: 'warn' });
    expect(backup.code).toBe(0);

    // Batches, each with the WAL position after its OKs (past its commit), until one lies in an
    // archived segment and a later one does not yet.
    const server = await connectToServer(dataDir);
    const batches: Array<{ events: NostrEvent[]; lsn: bigint }> = [];
    const archivedUpTo = async () => {
      const { rows } = await server.query<{ wal: string | null }>('SELECT last_archived_wal AS wal FROM pg_stat_archiver');
      const wal = rows[0].wal?.slice(0, 24);
      return wal && /^[0-9A-F]{24}$/.test(wal) ? (segmentNumber(wal, SEGMENT_BYTES) + 1n) * BigInt(SEGMENT_BYTES) : 0n;
    };
    for (let i = 0; ; i++) {
      if (i === 200) throw new Error('no archived batch followed by an unarchived one in 200 batches');
      const events = await publishBatch(client, `crash ${i}`, 5);
      const { rows } = await server.query<{ lsn: string }>('SELECT pg_current_wal_lsn() AS lsn');
      batches.push({ events, lsn: lsnValue(rows[0].lsn) });
      const end = await archivedUpTo();
      if (batches.some((b) => b.lsn <= end) && batches.at(-1)!.lsn > end) break;
      await sleep(100);
    }
    const end = await archivedUpTo();
    const postmaster = Number(readFileSync(path.join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
    relay.child.kill('SIGKILL');
    process.kill(postmaster, 'SIGKILL');
    await relay.exited;
    client.close();
    await server.end().catch(() => {});
    await until(() => postgresUnder(path.join(root, 'crash')).length === 0, 'the killed server gone');

    const target = path.join(root, 'crash', 'restored');
    await restore(['--from', backupDir, '--data-dir', target]);
    const stored = new Set(await storedIn(target));
    const archived = batches.filter((b) => b.lsn <= end).flatMap((b) => b.events);
    const published = batches.flatMap((b) => b.events);
    expect(archived.length).toBeGreaterThan(0);
    expect(archived.filter((e) => !stored.has(e.id))).toEqual([]);
    expect([...stored].filter((id) => !published.some((e) => e.id === id))).toEqual([]);
  }, LONG);
});

/** One sample from Prometheus text, by metric name (no labels). */
async function metric(relayUrl: string, name: string): Promise<number> {
  const text = await (await fetch(relayUrl.replace(/^ws/, 'http') + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  if (!line) throw new Error(`no ${name} in /metrics`);
  const value = line.slice(name.length + 1);
  return value === '+Inf' ? Infinity : Number(value);
}

describe.skipIf(serverPass)('/metrics with BACKUP_DIR', () => {
  it('reports the WAL archive and the age of the newest base backup', async () => {
    const dataDir = path.join(root, 'metrics', 'data');
    const backupDir = path.join(root, 'metrics', 'backup');
    const relay = spawnRelay({ DATA_DIR: dataDir, BACKUP_DIR: backupDir });
    try {
      const url = await listening(relay);
      expect(await metric(url, 'pgrelay_last_backup_age_seconds')).toBe(Infinity);
      const backup = await runCli(['backup'], { DATA_DIR: dataDir, BACKUP_DIR: backupDir, LOG_LEVEL: 'warn' });
      expect(backup.code).toBe(0);
      // The backup waited for its WAL to be archived (the archive gauges share one reading a second).
      await until(async () => (await metric(url, 'pgrelay_wal_archived_total')) >= 1, 'an archived segment in /metrics');
      const age = await metric(url, 'pgrelay_last_backup_age_seconds');
      expect(Number.isFinite(age)).toBe(true);
      expect(age).toBeGreaterThanOrEqual(0);
      expect(await metric(url, 'pgrelay_wal_archive_failures_total')).toBe(0);
      expect(await metric(url, 'pgrelay_wal_archive_lag_seconds')).toBeGreaterThanOrEqual(0);
    } finally {
      await stopRelay(relay);
    }
  }, LONG);
});
