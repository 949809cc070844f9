// The pgBackRest recipe of docs/operations.md, for a relay on the operator's own PostgreSQL
// (DATABASE_URL), run as written on a throwaway cluster of the system's PostgreSQL: archive_command
// pushing to a stanza, a full backup, rows written, a moment T, more rows, a point-in-time restore
// to T into a new folder, and that cluster started and checked. Skipped, saying why, without
// pgbackrest or a PostgreSQL server (bash scripts/install-pgbackrest.sh installs both).
import { existsSync, readdirSync } from 'node:fs';
import { appendFile, chmod, chown, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, postgresUser, run, type RunAs } from '../../src/store/embedded.js';
import { findExecutable, skipWithout } from '../support/executables.js';
import { until } from '../support/wait.js';
import { serverPass } from '../support/server-pass.js';

const PGBACKREST = findExecutable('PGBACKREST_BIN', 'pgbackrest', ['/usr/bin/pgbackrest']);
/** The newest PostgreSQL server of the system's packages (Debian: /usr/lib/postgresql/<major>/bin), or PG_BIN_DIR. */
function serverBinaries(): string | undefined {
  if (process.env.PG_BIN_DIR) return existsSync(path.join(process.env.PG_BIN_DIR, 'initdb')) ? process.env.PG_BIN_DIR : undefined;
  const root = '/usr/lib/postgresql';
  const majors = existsSync(root) ? readdirSync(root).filter((v) => existsSync(path.join(root, v, 'bin', 'initdb'))) : [];
  const newest = majors.sort((a, b) => Number(b) - Number(a))[0];
  return newest && path.join(root, newest, 'bin');
}
const PG_BIN = serverBinaries();
const noPgbackrest = process.env.PGBACKREST_BIN ? `PGBACKREST_BIN=${process.env.PGBACKREST_BIN} is not an executable file; ` : 'no pgbackrest on PATH; ';
const SKIPPED = `pgBackRest recipe (skipped: ${PGBACKREST ? '' : noPgbackrest}${PG_BIN ? '' : 'no PostgreSQL server under /usr/lib/postgresql (or PG_BIN_DIR); '}run bash scripts/install-pgbackrest.sh)`;

const STANZA = 'relay';

describe.skipIf(serverPass || skipWithout(PGBACKREST !== undefined && PG_BIN !== undefined, SKIPPED))('pgBackRest recipe', () => {
  let dir: string;
  let runAs: RunAs;
  let config: string;
  let port: number;
  const started: string[] = [];
  const pgCtl = (args: string[]) => run(path.join(PG_BIN!, 'pg_ctl'), args, runAs);
  const pgbackrest = (...args: string[]) => run(PGBACKREST!, [`--config=${config}`, `--stanza=${STANZA}`, ...args], runAs);

  async function startCluster(pgdata: string, port: number): Promise<pg.Client> {
    await pgCtl(['start', '-D', pgdata, '-l', `${pgdata}.log`, '-w', '-o', `-p ${port} -k ${path.join(dir, 'socket')}`]);
    started.push(pgdata);
    const client = new pg.Client({ host: path.join(dir, 'socket'), port, user: 'postgres', database: 'postgres' });
    client.on('error', () => {}); // a query in flight reports it
    await client.connect();
    return client;
  }

  beforeAll(async () => {
    runAs = await postgresUser();
    dir = await mkdtemp(path.join(tmpdir(), 'pgrelay-pgbackrest-'));
    await chmod(dir, 0o755);
    for (const sub of ['repo', 'log', 'lock', 'spool', 'socket']) await mkdir(path.join(dir, sub));
    if (runAs) for (const sub of ['', 'repo', 'log', 'lock', 'spool', 'socket']) await chown(path.join(dir, sub), runAs.uid, runAs.gid);
    config = path.join(dir, 'pgbackrest.conf');
    port = await freePort();
    // The recipe's /etc/pgbackrest/pgbackrest.conf, with this test's folders.
    await writeFile(
      config,
      [
        '[global]',
        `repo1-path=${dir}/repo`,
        'repo1-retention-full=2',
        'start-fast=y',
        `log-path=${dir}/log`,
        `lock-path=${dir}/lock`,
        `spool-path=${dir}/spool`,
        'log-level-console=warn',
        '',
        `[${STANZA}]`,
        `pg1-path=${dir}/pg`,
        `pg1-socket-path=${dir}/socket`,
        `pg1-port=${port}`,
        '',
      ].join('\n'),
    );
    await chmod(config, 0o644);
  }, 60_000);

  afterAll(async () => {
    for (const pgdata of started) await pgCtl(['stop', '-D', pgdata, '-m', 'immediate']).catch(() => {});
    await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it('restores a full backup and the archived WAL to a moment T: the rows committed before T, none after', async () => {
    const pgdata = path.join(dir, 'pg');
    await run(path.join(PG_BIN!, 'initdb'), ['-D', pgdata, '-U', 'postgres', '--auth=trust'], runAs);
    // The recipe's postgresql.conf lines (Patroni: the same under postgresql.parameters).
    await appendFile(
      path.join(pgdata, 'postgresql.conf'),
      `\nlisten_addresses = ''\nwal_level = replica\narchive_mode = on\narchive_command = 'pgbackrest --config=${config} --stanza=${STANZA} archive-push %p'\n`,
    );
    const db = await startCluster(pgdata, port);
    await pgbackrest('stanza-create');
    await pgbackrest('check');
    await db.query('CREATE TABLE notes (n int)');
    await db.query('INSERT INTO notes SELECT generate_series(1, 10)');
    await pgbackrest('--type=full', 'backup');
    // pgBackRest keeps a backup's stop time to the second, and restores to T only from a backup that
    // stopped before T: T must lie in a later second.
    await new Promise((r) => setTimeout(r, 2000));
    await db.query('INSERT INTO notes SELECT generate_series(11, 20)');
    // T after those commits and before the next, at millisecond precision.
    await new Promise((r) => setTimeout(r, 5));
    const target = new Date().toISOString().replace('T', ' ').replace('Z', '+00');
    await new Promise((r) => setTimeout(r, 5));
    await db.query('INSERT INTO notes SELECT generate_series(21, 30)');
    await pgbackrest('check'); // switches the WAL segment and waits until it is archived
    await db.end();
    await pgCtl(['stop', '-D', pgdata, '-m', 'fast', '-w']);

    const restored = path.join(dir, 'restored');
    await mkdir(restored, { mode: 0o700 });
    if (runAs) await chown(restored, runAs.uid, runAs.gid);
    await pgbackrest(`--pg1-path=${restored}`, '--type=time', `--target=${target}`, '--target-action=promote', 'restore');
    const copy = await startCluster(restored, await freePort());
    try {
      await until(async () => !(await copy.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r')).rows[0].r, 'the restored cluster promoted', 60_000);
      const { rows } = await copy.query<{ count: string; max: number }>('SELECT count(*) AS count, max(n) AS max FROM notes');
      expect(rows[0]).toEqual({ count: '20', max: 20 });
    } finally {
      await copy.end();
    }
    expect(await readFile(path.join(restored, 'postgresql.auto.conf'), 'utf8')).toMatch(/restore_command = '\S*pgbackrest .*archive-get %f "%p"'/);
  }, 240_000);
});
