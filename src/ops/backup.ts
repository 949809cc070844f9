// A base backup of the embedded PostgreSQL while it serves, with the server's own SQL functions
// (the embedded build has no pg_basebackup): PostgreSQL's "low level" non-exclusive API, as its
// manual describes it. pg_backup_start on one session held open for the whole copy, the data folder
// copied file by file, pg_backup_stop on the same session, waiting until the WAL the copy needs is
// archived, and its label written into the copy. The copy plus the archived WAL from its start
// onwards is a consistent database at any point after its stop.
import { copyFile, mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { existsSync, realpathSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import type { Logger } from '../log.js';
import { archiveCommand, precedesSegment, segmentsBetween, walFolder } from '../store/archive.js';
import { backupName, baseFolder, listBackups, MANIFEST, type BackupManifest } from '../store/backups.js';
import { copyDataFolder, fsyncPath, listDataFolder } from './data-folder-copy.js';
import type { Progress } from './progress.js';

export interface BackupOptions {
  /** A superuser connection to the server (the embedded server's `postgres` role). */
  url: string;
  /** DATA_DIR: the server's folder is its `pg/`, its password in `password`. */
  dataDir: string;
  backupDir: string;
  progress: Progress;
  log: Logger;
  signal?: AbortSignal;
}

export interface BackupResult {
  manifest: BackupManifest;
  folder: string;
  seconds: number;
}

/** Writes a small file and makes it durable. */
async function writeDurably(file: string, text: string, mode = 0o600): Promise<void> {
  await writeFile(file, text, { mode });
  await fsyncPath(file);
}

/** `START WAL LOCATION: 0/9000028 (file 000000010000000000000009)` and `START TIMELINE: 1`. */
function parseLabel(label: string): { startWal: string; timeline: number } {
  const startWal = /^START WAL LOCATION: \S+ \(file ([0-9A-F]{24})\)$/m.exec(label)?.[1];
  const timeline = /^START TIMELINE: (\d+)$/m.exec(label)?.[1];
  if (!startWal || !timeline) throw new Error(`unexpected backup label from pg_backup_stop:\n${label}`);
  return { startWal, timeline: Number(timeline) };
}

/**
 * Refuses a server that does not archive into `backupDir`: a backup without its WAL restores
 * nothing. Returns what the manifest records of the server.
 */
async function checkServer(client: pg.Client, pgdata: string, backupDir: string): Promise<{ segmentBytes: number; version: string }> {
  const { rows } = await client.query<{ mode: string; command: string; directory: string; segment: string; version: string }>(
    `SELECT current_setting('archive_mode') AS mode, current_setting('archive_command') AS command, current_setting('data_directory') AS directory,
            (SELECT setting FROM pg_settings WHERE name = 'wal_segment_size') AS segment, current_setting('server_version') AS version`,
  );
  const server = rows[0];
  if (realpathSync(server.directory) !== realpathSync(pgdata)) throw new Error(`the server on this port serves ${server.directory}, not ${pgdata}`);
  if (server.mode === 'off')
    throw new Error('the embedded PostgreSQL does not archive its WAL (it was started without BACKUP_DIR): restart the relay with BACKUP_DIR set, then back up');
  if (server.command !== archiveCommand(backupDir))
    throw new Error(`the embedded PostgreSQL archives its WAL elsewhere (archive_command: ${server.command}): back up with the BACKUP_DIR it was started with, or restart the relay with this one`);
  return { segmentBytes: Number(server.segment), version: server.version };
}

/** A folder name under base/ not taken yet: the start time, with a suffix if two start in the same second. */
function freeName(base: string, at: Date): string {
  const name = backupName(at);
  for (let n = 1; ; n++) {
    const candidate = n === 1 ? name : `${name}-${n}`;
    if (!existsSync(path.join(base, candidate)) && !existsSync(path.join(base, candidate + '.partial'))) return candidate;
  }
}

export async function takeBackup(options: BackupOptions): Promise<BackupResult> {
  const { backupDir, log } = options;
  const dataDir = path.resolve(options.dataDir);
  const pgdata = path.join(dataDir, 'pg');
  const client = new pg.Client({ connectionString: options.url, application_name: 'pgrelay backup' });
  // pg_backup_stop says, every minute, that it still waits for the archive: pass that on.
  client.on('notice', (notice) => log[notice.severity === 'WARNING' ? 'warn' : 'info']({ notice: notice.message }, 'PostgreSQL'));
  await client.connect();
  const base = baseFolder(backupDir);
  let partial: string | undefined;
  let started = false;
  try {
    const server = await checkServer(client, pgdata, backupDir);
    const startedAt = new Date();
    const name = freeName(base, startedAt);
    partial = path.join(base, `${name}.partial`);
    await mkdir(partial, { recursive: true });
    const { rows: start } = await client.query<{ lsn: string }>('SELECT pg_backup_start($1, fast => true) AS lsn', [`pgrelay ${name}`]);
    started = true;
    log.info({ name, lsn: start[0].lsn }, 'backup started');

    const entries = await listDataFolder(pgdata, true);
    const copied = await copyDataFolder(entries, pgdata, path.join(partial, 'pg'), { progress: options.progress, signal: options.signal });

    const { rows: stop } = await client.query<{ lsn: string; labelfile: string; spcmapfile: string; wal: string }>(
      'SELECT lsn, labelfile, spcmapfile, pg_walfile_name(lsn) AS wal FROM pg_backup_stop(wait_for_archive => true)',
    );
    started = false;
    const stoppedAt = new Date();
    const { labelfile, spcmapfile } = stop[0];
    await writeDurably(path.join(partial, 'pg', 'backup_label'), labelfile);
    if (spcmapfile) await writeDurably(path.join(partial, 'pg', 'tablespace_map'), spcmapfile);

    const { startWal, timeline } = parseLabel(labelfile);
    const walFiles = segmentsBetween(startWal, stop[0].wal, server.segmentBytes);
    const archived = new Set(await readdir(walFolder(backupDir)));
    const missing = walFiles.filter((f) => !archived.has(f));
    if (missing.length) throw new Error(`pg_backup_stop returned, but ${missing.join(', ')} is not in ${walFolder(backupDir)}`);

    // The relay reads the server's password from DATA_DIR: a restore needs it beside the copy.
    await copyFile(path.join(dataDir, 'password'), path.join(partial, 'password'));
    await fsyncPath(path.join(partial, 'password'));
    const manifest: BackupManifest = {
      name,
      startedAt: startedAt.toISOString(),
      stoppedAt: stoppedAt.toISOString(),
      startLsn: start[0].lsn,
      stopLsn: stop[0].lsn,
      timeline,
      walFiles,
      bytes: copied.bytes,
      files: copied.files,
      postgresVersion: server.version,
    };
    // Written last: a folder with a manifest is a finished backup.
    await writeDurably(path.join(partial, MANIFEST), JSON.stringify(manifest, null, 2) + '\n', 0o644);
    await fsyncPath(partial);
    const folder = path.join(base, name);
    await rename(partial, folder);
    partial = undefined;
    await fsyncPath(base);
    return { manifest, folder, seconds: (stoppedAt.getTime() - startedAt.getTime()) / 1000 };
  } finally {
    // Ending the session aborts a backup still in progress; the half-made copy goes too.
    if (started) await client.query('SELECT pg_backup_stop(wait_for_archive => false)').catch(() => {});
    await client.end().catch(() => {});
    if (partial) await rm(partial, { recursive: true, force: true });
  }
}

export interface PruneResult {
  removedBackups: string[];
  removedWalFiles: number;
}

/**
 * Keeps the newest `keep` finished backups and removes the others, then the archived WAL that only
 * they needed: every segment before the oldest kept backup's first (pg_archivecleanup's rule).
 * Folders of backups that never finished (`.partial`) are left to the operator: one may be in progress.
 */
export async function pruneBackups(backupDir: string, keep: number): Promise<PruneResult> {
  if (!Number.isInteger(keep) || keep < 1) throw new Error('--keep must be 1 or more: the archive is useless without a base backup');
  const backups = await listBackups(backupDir);
  const removed = backups.slice(0, Math.max(0, backups.length - keep));
  for (const backup of removed) await rm(path.join(baseFolder(backupDir), backup.name), { recursive: true, force: true });
  const oldestKept = backups[removed.length]?.walFiles[0];
  let removedWalFiles = 0;
  if (oldestKept) {
    const wal = walFolder(backupDir);
    for (const file of await readdir(wal)) {
      if (!precedesSegment(file, oldestKept)) continue;
      await rm(path.join(wal, file), { force: true });
      removedWalFiles++;
    }
  }
  return { removedBackups: removed.map((b) => b.name), removedWalFiles };
}
