// Continuous WAL archiving of the embedded PostgreSQL into BACKUP_DIR/wal, the commands PostgreSQL
// runs to archive and to restore a segment, WAL file names, and what pg_stat_archiver says of it.
import path from 'node:path';
import type pg from 'pg';

export interface ArchiveSettings {
  /** BACKUP_DIR: segments go to `wal/`, base backups to `base/`. */
  dir: string;
  /** archive_timeout: the longest written WAL waits before its segment is archived. */
  timeoutSeconds: number;
}

export const walFolder = (backupDir: string) => path.join(path.resolve(backupDir), 'wal');

/** A word for /bin/sh, single-quoted. */
export const shellQuote = (word: string) => `'${word.replace(/'/g, `'\\''`)}'`;

/** In archive_command and restore_command PostgreSQL replaces %p and %f; a literal % is %%. */
const percentEscaped = (text: string) => text.replace(/%/g, '%%');

/**
 * Copies a segment (%p, relative to the data folder) into the archive as %f: written to a
 * temporary name, fsynced, renamed, the folder fsynced, so a crash never leaves a short file under
 * the real name. A file already there is success when identical (a crash after the copy, before
 * PostgreSQL heard of it) and failure when not: an archive is never overwritten with other WAL.
 */
export function archiveCommand(backupDir: string): string {
  const wal = percentEscaped(shellQuote(walFolder(backupDir)));
  return `f=${wal}/%f; if [ -f "$f" ]; then cmp -s %p "$f"; else cp %p "$f.tmp" && sync "$f.tmp" && mv "$f.tmp" "$f" && sync ${wal}; fi`;
}

/** Fetches a segment from the archive during recovery; a missing one (the end of the archive) fails quietly. */
export function restoreCommand(backupDir: string): string {
  const wal = percentEscaped(shellQuote(walFolder(backupDir)));
  return `[ -f ${wal}/%f ] && cp ${wal}/%f %p`;
}

/** The server settings that turn archiving on (wal_level replica is the default; said for clarity). */
export function archiveServerSettings(settings: ArchiveSettings): Record<string, string> {
  return {
    wal_level: 'replica',
    archive_mode: 'on',
    archive_command: archiveCommand(settings.dir),
    archive_timeout: String(settings.timeoutSeconds),
  };
}

export function archiveSettings(config: { BACKUP_DIR?: string; BACKUP_ARCHIVE_TIMEOUT_SECONDS: number }): ArchiveSettings | undefined {
  return config.BACKUP_DIR ? { dir: path.resolve(config.BACKUP_DIR), timeoutSeconds: config.BACKUP_ARCHIVE_TIMEOUT_SECONDS } : undefined;
}

// WAL file names: 8 hex digits of timeline, then the segment number as two groups of 8 (the "log"
// and the segment within it), e.g. 000000010000000000000003.
const SEGMENT_NAME = /^[0-9A-F]{24}$/;

export const isSegmentName = (name: string) => SEGMENT_NAME.test(name);

/** Segment number of a WAL file name (timeline left out), for a segment size in bytes. */
export function segmentNumber(name: string, segmentBytes: number): bigint {
  const perLog = 0x1_0000_0000n / BigInt(segmentBytes);
  return BigInt(`0x${name.slice(8, 16)}`) * perLog + BigInt(`0x${name.slice(16, 24)}`);
}

export function segmentName(timeline: number, segment: bigint, segmentBytes: number): string {
  const perLog = 0x1_0000_0000n / BigInt(segmentBytes);
  const hex = (n: bigint | number) => n.toString(16).toUpperCase().padStart(8, '0');
  return hex(timeline) + hex(segment / perLog) + hex(segment % perLog);
}

/** The segments from `first` to `last` inclusive, on `first`'s timeline. */
export function segmentsBetween(first: string, last: string, segmentBytes: number): string[] {
  const timeline = parseInt(first.slice(0, 8), 16);
  const names: string[] = [];
  for (let n = segmentNumber(first, segmentBytes); n <= segmentNumber(last, segmentBytes); n++) names.push(segmentName(timeline, n, segmentBytes));
  return names;
}

/**
 * pg_archivecleanup's rule: an archived segment (or a backup history file, named after its segment)
 * whose segment number, timeline aside, precedes `oldestKept` is needed by no kept backup. Timeline
 * history files are always kept: they are tiny and recovery reads them to choose its timeline.
 */
export function precedesSegment(file: string, oldestKept: string): boolean {
  const segment = file.slice(0, 24);
  if (!isSegmentName(segment)) return false;
  const rest = file.slice(24);
  if (rest !== '' && rest !== '.partial' && !/^\.[0-9A-F]{8}\.backup$/.test(rest)) return false;
  return segment.slice(8) < oldestKept.slice(8);
}

export interface ArchiveStatus {
  archivedCount: number;
  failedCount: number;
  lastArchivedAt: Date | undefined;
  lastFailedAt: Date | undefined;
  /** Seconds since the last segment was archived when WAL was written since, else 0. */
  archiveLagSeconds: number;
}

/** What pg_stat_archiver says, or undefined when archive_mode is off. */
export async function archiveStatus(db: pg.Pool | pg.Client): Promise<ArchiveStatus | undefined> {
  const { rows } = await db.query<{
    mode: string;
    archived_count: string;
    failed_count: string;
    last_archived_wal: string | null;
    last_archived_time: Date | null;
    last_failed_time: Date | null;
    current_wal: string | null;
    since: Date;
    now: Date;
  }>(
    `SELECT current_setting('archive_mode') AS mode, archived_count, failed_count, last_archived_wal, last_archived_time, last_failed_time,
            CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_walfile_name(pg_current_wal_lsn()) END AS current_wal,
            greatest(pg_postmaster_start_time(), stats_reset) AS since, now() AS now
       FROM pg_stat_archiver`,
  );
  const row = rows[0];
  if (!row || row.mode === 'off') return undefined;
  // pg_walfile_name names the segment holding the byte before the position, so right after a
  // switch (nothing written since) it names the segment just archived.
  const archivedUpTo = row.last_archived_wal?.slice(0, 24);
  const writtenSince =
    row.current_wal !== null && (archivedUpTo === undefined || !isSegmentName(archivedUpTo) || row.current_wal.slice(8) > archivedUpTo.slice(8));
  const lastArchivedAt = row.last_archived_time ?? undefined;
  const from = lastArchivedAt ?? row.since;
  return {
    archivedCount: Number(row.archived_count),
    failedCount: Number(row.failed_count),
    lastArchivedAt,
    lastFailedAt: row.last_failed_time ?? undefined,
    archiveLagSeconds: writtenSince ? Math.max(0, (row.now.getTime() - from.getTime()) / 1000) : 0,
  };
}
