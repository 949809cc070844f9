// The pieces of WAL archiving that need no server: the archive command PostgreSQL runs for each
// segment (run here through /bin/sh as PostgreSQL runs it), WAL file names, and the rule that
// decides which archived files no kept backup needs.
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { archiveCommand, precedesSegment, restoreCommand, segmentName, segmentNumber, segmentsBetween } from '../../src/store/archive.js';

let dir: string;
beforeAll(async () => {
  // A quote, a space and a percent sign in the path: the commands must quote and escape them.
  dir = await mkdtemp(path.join(tmpdir(), "pgrelay archive '%x-"));
  await mkdir(path.join(dir, 'pg', 'pg_wal'), { recursive: true });
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs a command as PostgreSQL does: %p and %f replaced, %% a literal %, in the data folder, through /bin/sh. */
function runAsPostgres(command: string, segment: string, cwd: string): Promise<number> {
  const expanded = command.replace(/%([pf%])/g, (_, c: string) => (c === 'p' ? `pg_wal/${segment}` : c === 'f' ? segment : '%'));
  return new Promise((resolve) => execFile('/bin/sh', ['-c', expanded], { cwd }, (err) => resolve(err ? ((err.code as number) ?? 1) : 0)));
}

const SEGMENT = '000000010000000000000003';
const MB16 = 16 * 2 ** 20;

describe('archive_command', () => {
  const backupDir = () => path.join(dir, 'backup');
  const archived = () => path.join(backupDir(), 'wal', SEGMENT);

  it('copies a segment into BACKUP_DIR/wal under its name, leaving no temporary file', async () => {
    await mkdir(path.join(backupDir(), 'wal'), { recursive: true });
    await writeFile(path.join(dir, 'pg', 'pg_wal', SEGMENT), 'segment one');
    expect(await runAsPostgres(archiveCommand(backupDir()), SEGMENT, path.join(dir, 'pg'))).toBe(0);
    expect(await readFile(archived(), 'utf8')).toBe('segment one');
    expect(await readdir(path.join(backupDir(), 'wal'))).toEqual([SEGMENT]);
  });

  it('succeeds again for the same segment already archived (a crash after the copy)', async () => {
    expect(await runAsPostgres(archiveCommand(backupDir()), SEGMENT, path.join(dir, 'pg'))).toBe(0);
    expect(await readFile(archived(), 'utf8')).toBe('segment one');
  });

  it('fails, and keeps the archived file, for other content under the same name', async () => {
    await writeFile(path.join(dir, 'pg', 'pg_wal', SEGMENT), 'other WAL');
    expect(await runAsPostgres(archiveCommand(backupDir()), SEGMENT, path.join(dir, 'pg'))).not.toBe(0);
    expect(await readFile(archived(), 'utf8')).toBe('segment one');
  });

  it('restore_command fetches an archived segment, and fails for one not archived', async () => {
    await rm(path.join(dir, 'pg', 'pg_wal', SEGMENT));
    expect(await runAsPostgres(restoreCommand(backupDir()), SEGMENT, path.join(dir, 'pg'))).toBe(0);
    expect(await readFile(path.join(dir, 'pg', 'pg_wal', SEGMENT), 'utf8')).toBe('segment one');
    expect(await runAsPostgres(restoreCommand(backupDir()), '000000010000000000000004', path.join(dir, 'pg'))).not.toBe(0);
  });
});

describe('WAL file names', () => {
  it('count segments across the 4 GB "log" boundary', () => {
    // With 16 MB segments a log holds 256 of them: ...000000FF is followed by ...0000000100000000.
    expect(segmentsBetween('0000000200000000000000FE', '000000020000000100000001', MB16)).toEqual([
      '0000000200000000000000FE',
      '0000000200000000000000FF',
      '000000020000000100000000',
      '000000020000000100000001',
    ]);
    expect(segmentName(1, segmentNumber('00000001000000AB000000CD', MB16), MB16)).toBe('00000001000000AB000000CD');
  });

  it("an archived file precedes a kept segment by segment number, timeline aside (pg_archivecleanup's rule)", () => {
    const kept = '000000020000000000000010';
    expect(precedesSegment('00000001000000000000000F', kept)).toBe(true);
    expect(precedesSegment('00000002000000000000000F.00000028.backup', kept)).toBe(true);
    expect(precedesSegment('000000010000000000000010', kept)).toBe(false);
    expect(precedesSegment('000000020000000000000011', kept)).toBe(false);
    expect(precedesSegment('00000002.history', kept)).toBe(false);
    expect(precedesSegment('000000010000000000000001.tmp', kept)).toBe(false);
  });
});
