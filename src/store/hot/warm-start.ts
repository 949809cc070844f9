// The hot tier's warm start: at stop the service writes what the tier holds to a snapshot
// (snapshot.ts), and at the next start it takes the tier read back from it (snapshot-load.ts) once
// PostgreSQL has said which parts are still true (restore.ts), instead of filling from the database.
import type pg from 'pg';
import type { Logger } from '../../log.js';
import type { PreparedEvent } from '../prepared-event.js';
import { mkdirSync } from 'node:fs';
import { prepareHeld, type DuringFill } from './fill.js';
import { bucketPrintsQuery, bucketRange, bucketRowsQuery, differingBuckets, removeUnclaimedSnapshots, snapshotFile, type BucketPrint } from './restore.js';
import { writeSnapshot } from './snapshot.js';
import type { SnapshotLoad } from './snapshot-load.js';
import type { HotTier } from './tier.js';

/**
 * A snapshot read back into a new tier while PostgreSQL computes its buckets' figures in one
 * statement snapshot (restore.ts); the buckets that differ read again in that snapshot, and what the
 * change stream brought meanwhile (`during`, kept from before that snapshot) applied as the fill
 * applies it. The tier, every event listed; undefined when the snapshot is not worth it (another
 * budget, or most of it out of date) or `current()` turned false before it was read back: the fill
 * runs instead. Throws when it cannot be read or checked.
 */
export async function restoreSnapshot(pool: pg.Pool, load: SnapshotLoad, during: DuringFill, current: () => boolean, log: Logger): Promise<HotTier | undefined> {
  let client: pg.PoolClient | undefined;
  let failed = false;
  let committed = false;
  try {
    client = await pool.connect();
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    await client.query('SET LOCAL statement_timeout = 0');
    // The buckets are in the file's header: PostgreSQL sums them while the events are read.
    const { header } = load;
    if (!header) {
      await load.loaded; // throws why it could not be opened
      return undefined;
    }
    const windowStart = header.windowStart ?? -Infinity;
    const { bounds, replaceableComplete } = header;
    const query = bucketPrintsQuery(bounds, windowStart, replaceableComplete);
    const theirs = client.query<BucketPrint & { bucket: number }>(query.text, query.values);
    theirs.catch(() => undefined); // awaited below
    await load.loaded;
    const loaded = load.take();
    if (!loaded || !current()) return undefined;
    const { tier, prints } = loaded;
    const builtAt = Date.now();
    const table = new Map((await theirs).rows.map((r) => [r.bucket, r]));
    const differing = differingBuckets(prints, table);
    const answeredAt = Date.now();
    // Read again, the part that differs would be more than half of what the fill reads: fill.
    let stale = 0;
    let total = 0;
    for (const print of table.values()) total += print.n;
    for (const b of differing) stale += table.get(b)?.n ?? 0;
    if (2 * stale > total) {
      log.info({ differingBuckets: differing.length, buckets: bounds.length + 1 }, 'hot tier: most of the snapshot is out of date; filling from the database');
      return undefined;
    }
    let readAgain = 0;
    for (const b of differing) {
      const range = bucketRange(bounds, b);
      const rows = client.query<{ raw: string }>(bucketRowsQuery(range, windowStart, replaceableComplete));
      const stored = new Map<string, PreparedEvent>();
      for (const { raw } of (await rows).rows) {
        const p = prepareHeld(raw);
        stored.set(p.event.id, p);
      }
      readAgain += stored.size;
      const gone: string[] = [];
      for (const e of tier.heldBetween(range[0], range[1])) if (!stored.delete(e.id)) gone.push(e.id);
      tier.remove(gone);
      for (const p of stored.values()) holdRestored(tier, p, windowStart);
      if (!current()) throw new Error('stopped');
    }
    await client.query('COMMIT');
    committed = true;
    // What the change stream brought since the statement snapshot: removals first (an id removed
    // and stored again since is among the waiting events, the service's forget() having taken it
    // out before).
    tier.remove(during.removed);
    for (const p of during.waiting.values()) holdRestored(tier, p, windowStart);
    tier.listUnlisted();
    log.info(
      {
        events: tier.size,
        megabytes: Math.round(tier.bytes / 2 ** 20),
        windowStart,
        seconds: (Date.now() - load.startedAt) / 1000,
        from: 'snapshot',
        // reading the file, building the lists (both from the moment the file was claimed), then
        // the database's figures, reading again what differs
        phases: [loaded.readMs, loaded.buildMs, answeredAt - builtAt, Date.now() - answeredAt].map((ms) => ms / 1000),
        bucketsReadAgain: differing.length,
        eventsReadAgain: readAgain,
      },
      'hot tier filled',
    );
    return tier;
  } catch (err) {
    failed = true;
    throw err;
  } finally {
    if (client) {
      if (!failed && !committed) await client.query('ROLLBACK').catch(() => (failed = true));
      client.release(failed);
    }
  }
}

/** An event the snapshot lacks: held in the window, or below it as the replaceable version it is (when every version is held). */
function holdRestored(tier: HotTier, p: PreparedEvent, windowStart: number): void {
  if (p.event.created_at >= windowStart) tier.add(p);
  else if (p.kindClass === 'replaceable' && tier.replaceableComplete) tier.preHold(p);
}

/**
 * What the tier holds, written to this process's file in `dir` for the next start, and the files
 * no process of this start claimed removed (restore.ts). Nothing when the tier has nothing to write
 * (HotTier.image); a failure is logged: the next start fills from the database.
 */
export function saveSnapshot(tier: HotTier, dir: string, log: Logger): void {
  const image = tier.image();
  if (!image) return;
  const started = Date.now();
  try {
    mkdirSync(dir, { recursive: true });
    const bytes = writeSnapshot(snapshotFile(dir), image);
    const unclaimed = removeUnclaimedSnapshots(dir, performance.timeOrigin);
    log.info(
      { events: image.events.length, megabytes: Math.round(bytes / 2 ** 20), seconds: (Date.now() - started) / 1000, ...(unclaimed ? { unclaimedRemoved: unclaimed } : {}) },
      'hot tier snapshot written',
    );
  } catch (err) {
    log.warn({ err: (err as Error).message, dir }, 'hot tier: the snapshot could not be written; the next start fills from the database');
  }
}
