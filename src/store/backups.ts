// The base backups in BACKUP_DIR/base: one folder each, named after its start time (UTC), holding
// the copy of the data folder (`pg/`), the server's `password`, and `manifest.json`, written last:
// a folder without one is a backup that never finished, and counts for nothing.
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { archiveStatus } from './archive.js';

export interface BackupManifest {
  /** The folder's name under base/. */
  name: string;
  startedAt: string;
  /** When pg_backup_stop returned: the earliest point this backup restores to. */
  stoppedAt: string;
  startLsn: string;
  stopLsn: string;
  timeline: number;
  /** The archived segments a restore of this backup needs, first to last (more are replayed after them up to the target). */
  walFiles: string[];
  /** Bytes and files copied from the data folder. */
  bytes: number;
  files: number;
  postgresVersion: string;
}

export const MANIFEST = 'manifest.json';
export const baseFolder = (backupDir: string) => path.join(path.resolve(backupDir), 'base');

/** A backup's folder name: its start time in UTC, without the characters some file systems refuse. */
export const backupName = (at: Date) => at.toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');

/** The finished backups, oldest first. */
export async function listBackups(backupDir: string): Promise<BackupManifest[]> {
  const base = baseFolder(backupDir);
  let names: string[];
  try {
    names = await readdir(base);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const manifests: BackupManifest[] = [];
  for (const name of names) {
    try {
      manifests.push({ ...(JSON.parse(await readFile(path.join(base, name, MANIFEST), 'utf8')) as BackupManifest), name });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' && (err as NodeJS.ErrnoException).code !== 'ENOTDIR') throw err;
    }
  }
  return manifests.sort((a, b) => Date.parse(a.startedAt) - Date.parse(b.startedAt) || (a.name < b.name ? -1 : 1));
}

/** Seconds since the newest finished backup stopped, or undefined when there is none. */
export async function newestBackupAgeSeconds(backupDir: string, now = Date.now()): Promise<number | undefined> {
  const newest = (await listBackups(backupDir)).at(-1);
  return newest && Math.max(0, (now - Date.parse(newest.stoppedAt)) / 1000);
}

/** What the relay's metrics read: the archiver (any server), the base backups when BACKUP_DIR is set. */
export function backupHealthSources(backupDir: string | undefined, db: pg.Pool) {
  return {
    walArchive: () => archiveStatus(db),
    lastBackupAge: backupDir === undefined ? undefined : () => newestBackupAgeSeconds(backupDir),
  };
}
