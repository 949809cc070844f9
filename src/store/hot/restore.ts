// Reading a snapshot back (snapshot.ts), and knowing it is still true: the events it holds are cut
// into buckets of created_at, and PostgreSQL gives, in the same statement snapshot as anything read
// again, each bucket's count and three sums of 24 bits of its ids. A bucket whose figures differ from
// the snapshot's (events stored, deleted or replaced while the relay was down, by anyone) is read
// again whole and made equal to the table; the others are the table's, unless someone managed to
// delete events and store others whose ids add up to the same 72 bits and count, which takes ~2^72
// tries (ids are SHA-256 hashes).
import { readdirSync, renameSync, statSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { hexBits } from '../../nostr/event.js';
import { REPLACEABLE_KINDS_SQL } from './fill.js';

const SNAPSHOT_NAME = /^hot-tier\.(\d+)\.snapshot$/;
const LEFTOVER_NAME = /^hot-tier\.(\d+)\.(?:loading|snapshot\.\d+\.tmp)$/;

/** This process's snapshot file in `dir` (each process of WORKERS writes its own). */
export function snapshotFile(dir: string): string {
  return join(dir, `hot-tier.${process.pid}.snapshot`);
}

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes the newest snapshot in `dir` for this process (renamed to `hot-tier.<pid>.loading`, so that
 * each process of WORKERS reads a different one), or undefined when there is none. Files left by a
 * process that died while writing or reading one are removed.
 */
export function claimSnapshot(dir: string): string | undefined {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return undefined; // no folder yet: nothing was ever written
  }
  for (const name of names) {
    const left = LEFTOVER_NAME.exec(name);
    if (left && Number(left[1]) !== process.pid && !running(Number(left[1]))) unlinkSync(join(dir, name));
  }
  const found: Array<{ path: string; mtime: number }> = [];
  for (const name of names) {
    if (!SNAPSHOT_NAME.test(name)) continue;
    try {
      found.push({ path: join(dir, name), mtime: statSync(join(dir, name)).mtimeMs });
    } catch {
      // claimed by another process meanwhile
    }
  }
  found.sort((a, b) => b.mtime - a.mtime);
  const claimed = join(dir, `hot-tier.${process.pid}.loading`);
  for (const { path } of found) {
    try {
      renameSync(path, claimed);
      return claimed;
    } catch {
      // another process of WORKERS took it first
    }
  }
  return undefined;
}

/**
 * Removes the snapshots in `dir` other processes wrote before `since` (this process's start), once
 * this process has written its own: every process of this start claimed one at its start (renamed,
 * no longer a `.snapshot`), so these are what a larger WORKERS left, each older than the one just
 * written. Returns how many were removed.
 */
export function removeUnclaimedSnapshots(dir: string, since: number): number {
  let removed = 0;
  for (const name of readdirSync(dir)) {
    const match = SNAPSHOT_NAME.exec(name);
    if (!match || Number(match[1]) === process.pid) continue;
    try {
      if (statSync(join(dir, name)).mtimeMs >= since) continue; // written by a process of this start
      unlinkSync(join(dir, name));
      removed++;
    } catch {
      // removed or claimed meanwhile
    }
  }
  return removed;
}

/** A bucket's count and the three sums of its ids' first 72 bits, 24 at a time. */
export interface BucketPrint {
  n: number;
  f1: number;
  f2: number;
  f3: number;
}


/** What a snapshot holds, as a condition on events (`$n`: the window's start, unless it is -Infinity). */
function scopeSql(windowStart: number, replaceableComplete: boolean, n: number): string {
  if (windowStart === -Infinity) return 'true';
  return replaceableComplete ? `(created_at >= $${n} OR ${REPLACEABLE_KINDS_SQL})` : `created_at >= $${n}`;
}

/** Each bucket's figures in the table (bucket i: bounds[i-1] <= created_at < bounds[i], width_bucket's numbering). */
export function bucketPrintsQuery(bounds: number[], windowStart: number, replaceableComplete: boolean): { text: string; values: unknown[] } {
  const byte = (i: number) => `get_byte(id, ${i})::bigint`;
  const sum = (at: number) => `sum(${byte(at)} * 65536 + ${byte(at + 1)} * 256 + ${byte(at + 2)})::float8`;
  const bucket = bounds.length === 0 ? '0' : 'width_bucket(created_at, $1::bigint[])';
  const values: unknown[] = bounds.length === 0 ? [] : [bounds];
  const scope = scopeSql(windowStart, replaceableComplete, values.length + 1);
  if (windowStart !== -Infinity) values.push(windowStart);
  return { text: `SELECT ${bucket} AS bucket, count(*)::float8 AS n, ${sum(0)} AS f1, ${sum(3)} AS f2, ${sum(6)} AS f3 FROM events WHERE ${scope} GROUP BY 1`, values };
}

/** The rows of one bucket in scope, created_at in [lo, hi), oldest first. */
export function bucketRowsQuery([lo, hi]: [number, number], windowStart: number, replaceableComplete: boolean): { text: string; values: unknown[] } {
  const values: unknown[] = [];
  const where: string[] = [];
  if (lo !== -Infinity) where.push(`created_at >= $${values.push(lo)}`);
  if (hi !== Infinity) where.push(`created_at < $${values.push(hi)}`);
  where.push(scopeSql(windowStart, replaceableComplete, values.length + 1));
  if (windowStart !== -Infinity) values.push(windowStart);
  // In the tier's list order (oldest first, on a tie the higher id first): events newer than all
  // held (the usual case: stored while the relay was down) are then appended to their lists.
  return { text: `SELECT raw FROM events WHERE ${where.join(' AND ')} ORDER BY created_at, id DESC`, values };
}

/** The bucket of created_at `t` among ascending `bounds` (width_bucket's numbering). */
export function bucketOf(bounds: number[], t: number): number {
  let lo = 0;
  let hi = bounds.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (bounds[mid]! <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The created_at range [lo, hi) of bucket b. */
export function bucketRange(bounds: number[], b: number): [number, number] {
  return [b === 0 ? -Infinity : bounds[b - 1]!, b === bounds.length ? Infinity : bounds[b]!];
}

/** Each bucket's figures, summed one event at a time in created_at order (as the tier lists them). */
export class BucketPrints {
  readonly byBucket = new Map<number, BucketPrint>();
  private print: BucketPrint | undefined;
  private hi = -Infinity;

  constructor(private readonly bounds: number[]) {}

  /** An event: its created_at, and its id as the 64 hex digits at text[at..]. */
  add(createdAt: number, text: string, at: number): void {
    let print = this.print;
    if (print === undefined || createdAt >= this.hi) {
      const b = bucketOf(this.bounds, createdAt);
      this.hi = bucketRange(this.bounds, b)[1];
      print = this.byBucket.get(b);
      if (!print) this.byBucket.set(b, (print = { n: 0, f1: 0, f2: 0, f3: 0 }));
      this.print = print;
    }
    print.n++;
    print.f1 += hexBits(text, at, 6);
    print.f2 += hexBits(text, at + 6, 6);
    print.f3 += hexBits(text, at + 12, 6);
  }
}

/** Buckets whose figures differ between the snapshot and the table. */
export function differingBuckets(ours: Map<number, BucketPrint>, theirs: Map<number, BucketPrint>): number[] {
  const out: number[] = [];
  for (const b of new Set([...ours.keys(), ...theirs.keys()])) {
    const a = ours.get(b);
    const t = theirs.get(b);
    if (!a || !t || a.n !== t.n || a.f1 !== t.f1 || a.f2 !== t.f2 || a.f3 !== t.f3) out.push(b);
  }
  return out.sort((x, y) => x - y);
}

/** Removes a file if it is there. */
export function removeFile(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // gone already
  }
}
