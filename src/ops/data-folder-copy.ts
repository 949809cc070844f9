// Copying a PostgreSQL data folder file by file: out of a running server for a base backup (leaving
// out what PostgreSQL's manual says a backup omits), and out of a backup for a restore. Every file
// and folder is fsynced, so a copy that reports success survives a power cut.
import { chmod, chown, copyFile, mkdir, open, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import type { RunAs } from '../store/embedded.js';
import type { Progress } from './progress.js';

export interface DataFolderEntries {
  /** Folders, parents first, relative to the data folder ('' is the folder itself). */
  folders: string[];
  /** Files with their size when listed, global/pg_control last. */
  files: Array<{ name: string; bytes: number }>;
}

/** Folders a base backup keeps empty: rebuilt or reset at start, or (pg_wal) replayed from the archive. */
const EMPTIED = new Set(['pg_wal', 'pg_dynshmem', 'pg_notify', 'pg_replslot', 'pg_serial', 'pg_snapshots', 'pg_stat_tmp', 'pg_subtrans']);
/** Files of the running server a backup leaves out, wherever they are. */
const LEFT_OUT = new Set(['postmaster.pid', 'postmaster.opts', 'backup_label', 'tablespace_map', 'backup_manifest', 'postgresql.auto.conf.tmp', 'current_logfiles.tmp']);
const PG_CONTROL = path.join('global', 'pg_control');

const gone = (err: unknown) => (err as NodeJS.ErrnoException).code === 'ENOENT';

/**
 * Lists a data folder. For a live server's folder (`forBackup`), leaves out temporary files, the
 * relation cache, the contents of the folders in EMPTIED (the pg_wal subfolders are kept, as
 * PostgreSQL expects them), and the data of unlogged tables (recovery recreates them empty from
 * their init fork). Files that vanish while it walks are skipped: the WAL replayed from the
 * backup's start accounts for them.
 */
export async function listDataFolder(root: string, forBackup: boolean): Promise<DataFolderEntries> {
  const folders: string[] = [];
  const files: DataFolderEntries['files'] = [];
  const walk = async (relative: string): Promise<void> => {
    folders.push(relative);
    let entries;
    try {
      entries = await readdir(path.join(root, relative), { withFileTypes: true });
    } catch (err) {
      if (gone(err)) return;
      throw err;
    }
    const top = relative.split(path.sep)[0];
    const unlogged = new Set(entries.filter((e) => e.name.endsWith('_init')).map((e) => e.name.slice(0, -'_init'.length)));
    for (const entry of entries) {
      const name = path.join(relative, entry.name);
      if (forBackup && (entry.name.startsWith('pgsql_tmp') || entry.name.startsWith('pg_internal.init') || LEFT_OUT.has(entry.name))) continue;
      if (entry.isSymbolicLink() && top === 'pg_tblspc') throw new Error(`${path.join(root, name)} is a tablespace: the embedded server has none, and backups do not copy them`);
      if (entry.isDirectory()) {
        // pg_wal keeps its subfolders (archive_status, summaries); the other emptied folders hold
        // none that must exist (a slot's folder without its state would stop the server).
        if (forBackup && EMPTIED.has(top) && top !== 'pg_wal') continue;
        await walk(name);
        continue;
      }
      if (!entry.isFile()) continue;
      if (forBackup && EMPTIED.has(top)) continue;
      // An unlogged relation's forks other than _init: 16384, 16384.1, 16384_fsm, 16384_vm.
      if (forBackup && unlogged.has(entry.name.replace(/(_fsm|_vm)?(\.\d+)?$/, '')) && !entry.name.endsWith('_init')) continue;
      try {
        files.push({ name, bytes: (await stat(path.join(root, name))).size });
      } catch (err) {
        if (!gone(err)) throw err;
      }
    }
  };
  await walk('');
  // pg_control last: the copy then never holds a control file newer than the files it describes.
  const control = files.findIndex((f) => f.name === PG_CONTROL);
  if (control >= 0) files.push(...files.splice(control, 1));
  return { folders, files };
}

export async function fsyncPath(file: string): Promise<void> {
  const handle = await open(file, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

export interface CopyResult {
  files: number;
  bytes: number;
}

const MIB = 2 ** 20;

/**
 * Copies the listed entries from `from` to `to`: folders 0700, files with their mode, owned by
 * `owner` when given (the server's user, for a restore run as root). Progress is in MiB.
 */
export async function copyDataFolder(entries: DataFolderEntries, from: string, to: string, options: { progress: Progress; owner?: RunAs; signal?: AbortSignal }): Promise<CopyResult> {
  const { progress, owner } = options;
  for (const folder of entries.folders) {
    const target = path.join(to, folder);
    await mkdir(target, { recursive: true, mode: 0o700 });
    await chmod(target, 0o700);
    if (owner) await chown(target, owner.uid, owner.gid);
  }
  progress.setTotal(Math.ceil(entries.files.reduce((sum, f) => sum + f.bytes, 0) / MIB));
  progress.update(0);
  const copied: CopyResult = { files: 0, bytes: 0 };
  const copyOne = async (name: string) => {
    options.signal?.throwIfAborted();
    const target = path.join(to, name);
    try {
      await copyFile(path.join(from, name), target);
    } catch (err) {
      if (gone(err)) return; // dropped by the server meanwhile
      throw err;
    }
    if (owner) await chown(target, owner.uid, owner.gid);
    await fsyncPath(target);
    const { size } = await stat(target);
    copied.bytes += size;
    copied.files++;
    progress.update(Math.floor(copied.bytes / MIB));
  };
  // A few files at a time (most are small; the kernel copies each), pg_control alone at the end.
  const last = entries.files.at(-1)?.name === PG_CONTROL ? entries.files.length - 1 : entries.files.length;
  let next = 0;
  const worker = async () => {
    while (next < last) await copyOne(entries.files[next++].name);
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  if (last < entries.files.length) await copyOne(PG_CONTROL);
  for (const folder of [...entries.folders].reverse()) await fsyncPath(path.join(to, folder));
  progress.stop();
  return copied;
}
