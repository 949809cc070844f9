// Restoring a base backup into a new DATA_DIR for point-in-time recovery: the backup's copy of the
// data folder and its password, recovery.signal, and the recovery settings (restore_command reading
// BACKUP_DIR/wal, the target time, promote at the end). The relay started on that folder has
// PostgreSQL replay the archived WAL up to the target and open for writes there. Every check runs
// before anything is written: a refused restore touches nothing.
import { appendFile, chmod, chown, copyFile, mkdir, readdir, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../log.js';
import { isSegmentName, restoreCommand, walFolder } from '../store/archive.js';
import { baseFolder, listBackups, type BackupManifest } from '../store/backups.js';
import { postgresUser } from '../store/embedded.js';
import { copyDataFolder, fsyncPath, listDataFolder, type CopyResult } from './data-folder-copy.js';
import type { Progress } from './progress.js';

/** A restore refused before anything was written: the message says why and what to do. */
export class RestoreRefused extends Error {}

export interface RestoreRequest {
  /** BACKUP_DIR to restore from. */
  from: string;
  /** The new DATA_DIR: missing or empty. */
  dataDir: string;
  /** ISO-8601 with its zone; unset, everything archived is replayed. */
  toTime?: string;
  /** A backup's name under base/; unset, the newest that ended before the target. */
  backup?: string;
}

export interface RestorePlan {
  from: string;
  dataDir: string;
  backup: BackupManifest;
  target: Date | undefined;
}

const ISO_8601 = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})$/;

/** An ISO-8601 time with its zone (a time without one would mean different instants on different hosts). */
export function parseTargetTime(text: string): Date {
  const at = ISO_8601.test(text) ? new Date(text.replace(' ', 'T')) : undefined;
  if (!at || Number.isNaN(at.getTime()))
    throw new RestoreRefused(`--to-time "${text}" is not an ISO-8601 time with its zone, e.g. 2025-06-01T12:30:00Z or 2025-06-01T14:30:00+02:00`);
  return at;
}

const iso = (ms: number) => new Date(ms).toISOString();

/** When the newest archived segment was written into the archive (its copy's modification time). */
async function lastArchivedAt(wal: string): Promise<number | undefined> {
  let newest: number | undefined;
  for (const file of await readdir(wal)) {
    if (!isSegmentName(file)) continue;
    const { mtimeMs } = await stat(path.join(wal, file));
    newest = Math.max(newest ?? 0, mtimeMs);
  }
  return newest;
}

async function isMissingOrEmpty(dir: string): Promise<boolean> {
  try {
    return (await readdir(dir)).length === 0;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return true;
    if (code === 'ENOTDIR') return false;
    throw err;
  }
}

/** Checks the request and chooses the backup; reads only. */
export async function planRestore(request: RestoreRequest, now = Date.now()): Promise<RestorePlan> {
  const from = path.resolve(request.from);
  const dataDir = path.resolve(request.dataDir);
  const target = request.toTime === undefined ? undefined : parseTargetTime(request.toTime);
  if (!(await isMissingOrEmpty(dataDir))) throw new RestoreRefused(`--data-dir ${dataDir} exists and is not empty: restore into a new folder, then move it into place`);
  const backups = await listBackups(from);
  if (!backups.length) throw new RestoreRefused(`no finished backup in ${baseFolder(from)} (is --from the BACKUP_DIR?)`);
  if (target && target.getTime() > now) throw new RestoreRefused(`--to-time ${target.toISOString()} is in the future`);

  let backup: BackupManifest | undefined;
  if (request.backup !== undefined) {
    backup = backups.find((b) => b.name === request.backup);
    if (!backup) throw new RestoreRefused(`no finished backup named ${request.backup} in ${baseFolder(from)} (there are: ${backups.map((b) => b.name).join(', ')})`);
    if (target && Date.parse(backup.stoppedAt) > target.getTime())
      throw new RestoreRefused(`backup ${backup.name} ended at ${backup.stoppedAt}, after --to-time: choose an older backup, or leave --backup out`);
  } else if (target) {
    // A backup is consistent only from its end on: the newest that ended by the target.
    backup = backups.filter((b) => Date.parse(b.stoppedAt) <= target.getTime()).at(-1);
    if (!backup)
      throw new RestoreRefused(`--to-time ${target.toISOString()} is before the end of the oldest backup (${backups[0].name}, ended ${backups[0].stoppedAt}), the earliest point a restore can reach`);
  } else backup = backups.at(-1)!;

  if (target) {
    // Recovery stops at the first commit after the target; with none archived it would fail at the
    // end of the archive instead ("recovery ended before configured recovery target was reached").
    const archived = await lastArchivedAt(walFolder(from));
    if (archived === undefined || archived <= target.getTime())
      throw new RestoreRefused(
        `nothing archived was written after --to-time ${target.toISOString()} (the newest segment was archived ${archived === undefined ? 'never' : `at ${iso(archived)}`}): wait for the next segment (BACKUP_ARCHIVE_TIMEOUT_SECONDS), or leave --to-time out to replay everything archived`,
      );
  }
  return { from, dataDir, backup, target };
}

/** A postgresql.conf string. */
const confString = (value: string) => `'${value.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;

function recoverySettings(plan: RestorePlan): string {
  const lines = [
    '',
    `# pgrelay restore of ${plan.backup.name}: replay the archive${plan.target ? ` up to ${plan.target.toISOString()}` : ''}, then open for writes.`,
    `restore_command = ${confString(restoreCommand(plan.from))}`,
    // PostgreSQL's own form: its check of this setting refuses ISO-8601's T and Z.
    ...(plan.target ? [`recovery_target_time = ${confString(plan.target.toISOString().replace('T', ' ').replace('Z', '+00'))}`] : []),
    "recovery_target_action = 'promote'",
    // No read-only connections during the replay: the relay starts on a writable database or waits.
    'hot_standby = off',
    '',
  ];
  return lines.join('\n');
}

export interface RestoreResult extends CopyResult {
  seconds: number;
}

/** Copies the planned backup into the new DATA_DIR, owned by the server's user; on failure removes what it wrote. */
export async function restoreBackup(plan: RestorePlan, options: { progress: Progress; log: Logger; signal?: AbortSignal }): Promise<RestoreResult> {
  const started = Date.now();
  const { dataDir } = plan;
  const source = path.join(baseFolder(plan.from), plan.backup.name);
  const pgdata = path.join(dataDir, 'pg');
  const owner = await postgresUser();
  // The plan found it missing or empty: a failure leaves it that way.
  const existed = await stat(dataDir).then(() => true, () => false);
  try {
    await mkdir(dataDir, { recursive: true });
    if (owner) await chown(dataDir, owner.uid, owner.gid);
    const entries = await listDataFolder(path.join(source, 'pg'), false);
    const copied = await copyDataFolder(entries, path.join(source, 'pg'), pgdata, { progress: options.progress, owner, signal: options.signal });

    await copyFile(path.join(source, 'password'), path.join(dataDir, 'password'));
    await chmod(path.join(dataDir, 'password'), 0o600);
    const signal = path.join(pgdata, 'recovery.signal');
    await writeFile(signal, '', { mode: 0o600 });
    await appendFile(path.join(pgdata, 'postgresql.auto.conf'), recoverySettings(plan));
    for (const file of [path.join(dataDir, 'password'), signal]) if (owner) await chown(file, owner.uid, owner.gid);
    for (const file of [path.join(dataDir, 'password'), signal, path.join(pgdata, 'postgresql.auto.conf'), pgdata, dataDir]) await fsyncPath(file);
    options.log.info({ backup: plan.backup.name, dataDir, target: plan.target?.toISOString() }, 'backup restored');
    return { ...copied, seconds: (Date.now() - started) / 1000 };
  } catch (err) {
    if (existed) for (const entry of await readdir(dataDir).catch(() => [])) await rm(path.join(dataDir, entry), { recursive: true, force: true });
    else await rm(dataDir, { recursive: true, force: true });
    throw err;
  }
}
