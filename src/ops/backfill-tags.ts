// backfill-tags: (re)derive event_tags from the stored events' tags, set-based, in batches of
// consecutive ids (the primary key). Each batch is one short INSERT … SELECT that PostgreSQL runs
// without a round trip per event or per tag; existing rows are kept (left out by an anti-join), so a
// run is idempotent and safe beside a live relay, which writes the tags of new events itself. After
// each batch the position is saved in ops_checkpoints: an interrupted run resumes there.
//
// The SQL applies exactly the rule of src/nostr/tags.ts `indexedTags` (a single-letter name, the
// first value, at most MAX_INDEXED_TAG_VALUE_BYTES UTF-8 bytes and no NUL, distinct per event).
// Rows whose raw JSON holds a "\u0000" escape cannot be cast to jsonb; those are parsed here in JS
// with indexedTags itself. A test checks that both paths give exactly what indexedTags gives.
import type pg from 'pg';
import type { Logger } from '../log.js';
import type { NostrEvent } from '../nostr/event.js';
import { indexedTags, MAX_INDEXED_TAG_VALUE_BYTES } from '../nostr/tags.js';
import { withTransaction } from '../store/write.js';
import { clearCheckpoint, readCheckpoint, saveCheckpoint } from './checkpoint.js';
import { estimatedEvents, noProgress, type Progress } from './progress.js';

export const BACKFILL_CHECKPOINT = 'backfill-tags';

export interface BackfillOptions {
  /** Events per batch (one INSERT … SELECT each). */
  batchSize?: number;
  /** Batches run at once, on separate connections. */
  concurrency?: number;
  /** Only events that have no event_tags row at all (quick after importing raw rows). */
  onlyMissing?: boolean;
  /** Ignore a saved checkpoint and start from the first id. */
  restart?: boolean;
  /** Aborting stops after the batches in flight; the checkpoint is kept for the next run. */
  signal?: AbortSignal;
  /** Stop after this many batches (a trial run; the checkpoint is kept). */
  maxBatches?: number;
  progress?: Progress;
  log?: Logger;
}

export interface BackfillCounts {
  /** Events whose tags were derived (in ranges already done, across resumed runs). */
  events: number;
  /** event_tags rows added. */
  tagRows: number;
}

export interface BackfillResult extends BackfillCounts {
  /** False when stopped early (signal or maxBatches): run again to resume. */
  complete: boolean;
  /** The id (hex) the run resumed after, if it resumed. */
  resumedAfter?: string;
  /** Events processed by this run alone (the rate is this over `seconds`). */
  eventsThisRun: number;
  batches: number;
  seconds: number;
}

// Bound as $3 in the batch SQL of a batch that holds a NUL escape (jsonb cannot hold U+0000, and
// refuses the whole batch with SQLSTATE 22P05). Such a batch is run again with the rows whose raw
// text holds this 6-character escape left to the JS path; an escaped backslash followed by "u0000"
// lands there too, which costs nothing but a parse. Only then: the extra filter makes PostgreSQL's
// row estimates, and so its plan, worse (~30% more CPU per batch).
const NUL_ESCAPE = '\\u0000';
const UNSUPPORTED_UNICODE_ESCAPE = '22P05';

/**
 * One batch, one statement. The ranges are (lo, hi]: lo exclusive (empty = from the start), hi
 * inclusive (null = to the end).
 *
 * - Rows already there are left out by an anti-join on the primary key's range for the batch (one
 *   ordered index scan), which is much cheaper than ON CONFLICT's per-row speculative insertion.
 * - The events that get new rows are locked FOR KEY SHARE, the lock the foreign-key check of each of
 *   their rows would take: a concurrent DELETE of one of them waits for this batch to commit, and
 *   its cascade then removes the rows just added; an event deleted meanwhile is skipped. So when the
 *   per-row check is skipped (session_replication_role = replica), no row can be left without its
 *   event. With `lockAll`, every event of the batch is locked as it is read (cheapest when most get
 *   rows: a fresh backfill); without, only those that get rows, looked up again (~3 µs more each),
 *   so that a batch with nothing to add (a second run) writes nothing at all: a lock writes to the
 *   event's page and to the WAL.
 * - A row inserted meanwhile by another transaction (another backfill) makes the batch fail with a
 *   unique violation, and it is retried.
 */
function rangeSql(onlyMissing: boolean, withNulEscapes: boolean, lockAll: boolean): string {
  const missing = onlyMissing ? 'AND NOT EXISTS (SELECT 1 FROM event_tags x WHERE x.event_id = e.id)' : '';
  const parseable = withNulEscapes ? 'strpos(b.raw, $3) = 0 AND' : '';
  return `WITH batch AS (
      SELECT e.id, e.kind, e.created_at, e.raw FROM events e
       WHERE e.id > $1 AND ($2::bytea IS NULL OR e.id <= $2) ${missing}
       ${lockAll ? 'FOR KEY SHARE' : ''}
    ), derived AS (
      SELECT DISTINCT b.id, t.tag->>0 AS name, t.tag->>1 AS value, b.kind, b.created_at
        FROM batch b CROSS JOIN LATERAL jsonb_array_elements((b.raw::jsonb)->'tags') AS t(tag)
       WHERE ${parseable} jsonb_array_length(t.tag) >= 2
         AND t.tag->>0 ~ '^[a-zA-Z]$' AND octet_length(t.tag->>1) <= ${MAX_INDEXED_TAG_VALUE_BYTES}
    ), new_rows AS (
      SELECT d.* FROM derived d
       WHERE NOT EXISTS (
         SELECT 1 FROM event_tags x
          WHERE x.event_id = d.id AND x.name = d.name AND x.value = d.value
            AND x.event_id > $1 AND ($2::bytea IS NULL OR x.event_id <= $2))
    ), locked AS (
      ${lockAll ? 'SELECT id FROM batch' : 'SELECT e.id FROM events e WHERE e.id = ANY (ARRAY(SELECT DISTINCT id FROM new_rows)) FOR KEY SHARE'}
    ), inserted AS (
      INSERT INTO event_tags (event_id, name, value, kind, created_at)
      SELECT n.id, n.name, n.value, n.kind, n.created_at FROM new_rows n ${lockAll ? '' : 'WHERE n.id IN (SELECT id FROM locked)'}
      RETURNING 1
    )
    SELECT (SELECT count(*) FROM batch)::int AS events,
           (SELECT count(*) FROM inserted)::int AS tag_rows,
           ${withNulEscapes ? '(SELECT count(*) FROM batch WHERE strpos(raw, $3) > 0)' : '0'}::int AS by_hand`;
}

/**
 * Whether this connection may skip the per-row foreign-key check of event_tags (a superuser, or the
 * SET privilege on session_replication_role). The check is 40% of a tag row's cost; the batch's
 * FOR KEY SHARE lock keeps what it guarantees (see rangeSql).
 */
async function maySkipForeignKeyCheck(pool: pg.Pool): Promise<boolean> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SET LOCAL session_replication_role = replica');
    return true;
  } catch {
    return false;
  } finally {
    await client.query('ROLLBACK').catch(() => undefined);
    client.release();
  }
}

/** The JS path: the rows SQL cannot parse (or a whole batch, if the SQL path failed on its data). */
async function deriveInJs(pool: pg.Pool, lo: Buffer, hi: Buffer | null, onlyMissing: boolean, onlyNulEscapes: boolean): Promise<number> {
  const { rows } = await pool.query<{ id: Buffer; kind: number; created_at: string; raw: string }>(
    `SELECT e.id, e.kind, e.created_at, e.raw FROM events e
      WHERE e.id > $1 AND ($2::bytea IS NULL OR e.id <= $2) ${onlyNulEscapes ? 'AND strpos(e.raw, $3) > 0' : ''}
      ${onlyMissing ? 'AND NOT EXISTS (SELECT 1 FROM event_tags x WHERE x.event_id = e.id)' : ''}`,
    onlyNulEscapes ? [lo, hi, NUL_ESCAPE] : [lo, hi],
  );
  const ids: Buffer[] = [], names: string[] = [], values: string[] = [], kinds: number[] = [], times: string[] = [];
  for (const r of rows) {
    for (const [name, value] of indexedTags((JSON.parse(r.raw) as NostrEvent).tags)) {
      ids.push(r.id);
      names.push(name);
      values.push(value);
      kinds.push(r.kind);
      times.push(r.created_at);
    }
  }
  if (ids.length === 0) return 0;
  const result = await pool.query(
    `INSERT INTO event_tags (event_id, name, value, kind, created_at)
     SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::int[], $5::bigint[])
     ON CONFLICT DO NOTHING`,
    [ids, names, values, kinds, times],
  );
  return result.rowCount ?? 0;
}

/**
 * SQLSTATEs worth a retry: a concurrent delete of an event in the range (FK check), a row inserted
 * meanwhile by another transaction (unique violation), deadlock, serialization.
 */
const RETRYABLE = new Set(['23503', '23505', '40P01', '40001']);
const isDataError = (err: unknown) => /^22/.test(String((err as { code?: string }).code ?? ''));

/** How a batch runs: see rangeSql. */
interface RangeMode {
  onlyMissing: boolean;
  skipForeignKeyCheck: boolean;
  /** Lock every event of the batch as it is read: when the batch before added rows (a fresh backfill). */
  lockAll: boolean;
}

async function backfillRange(pool: pg.Pool, lo: Buffer, hi: Buffer | null, mode: RangeMode, log?: Logger): Promise<BackfillCounts> {
  const { onlyMissing, skipForeignKeyCheck, lockAll } = mode;
  let withNulEscapes = false;
  for (let attempt = 1; ; attempt++) {
    try {
      const rows = await withTransaction(pool, async (client) => {
        if (skipForeignKeyCheck) await client.query('SET LOCAL session_replication_role = replica');
        const sql = rangeSql(onlyMissing, withNulEscapes, lockAll);
        return (await client.query<{ events: number; tag_rows: number; by_hand: number }>(sql, withNulEscapes ? [lo, hi, NUL_ESCAPE] : [lo, hi])).rows;
      });
      const { events, by_hand } = rows[0];
      let tagRows = rows[0].tag_rows;
      if (by_hand > 0) tagRows += await deriveInJs(pool, lo, hi, onlyMissing, true);
      return { events, tagRows };
    } catch (err) {
      const code = (err as { code?: string }).code ?? '';
      if (code === UNSUPPORTED_UNICODE_ESCAPE && !withNulEscapes) {
        withNulEscapes = true;
        continue;
      }
      if (isDataError(err)) {
        // Some raw text jsonb refuses for another reason: derive this whole range in JS instead.
        log?.warn({ err: (err as Error).message, after: lo.toString('hex') }, 'backfill: batch not parseable as jsonb, deriving in JS');
        const { rows } = await pool.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM events e WHERE e.id > $1 AND ($2::bytea IS NULL OR e.id <= $2)',
          [lo, hi],
        );
        return { events: rows[0].n, tagRows: await deriveInJs(pool, lo, hi, onlyMissing, false) };
      }
      if (!RETRYABLE.has(code) || attempt >= 5) throw err;
      log?.debug({ code, attempt }, 'backfill: retrying a batch after a conflict with concurrent writes');
    }
  }
}

/** The upper end of the batch that starts after `lo`: the batchSize-th id, or null for "to the end". */
async function nextBoundary(pool: pg.Pool, lo: Buffer, batchSize: number): Promise<Buffer | null> {
  const { rows } = await pool.query<{ id: Buffer }>('SELECT id FROM events WHERE id > $1 ORDER BY id OFFSET $2 LIMIT 1', [lo, batchSize - 1]);
  return rows[0]?.id ?? null;
}

export async function backfillTags(pool: pg.Pool, options: BackfillOptions = {}): Promise<BackfillResult> {
  const batchSize = options.batchSize ?? 5000;
  const concurrency = Math.max(1, options.concurrency ?? 2);
  const onlyMissing = options.onlyMissing ?? false;
  const progress = options.progress ?? noProgress;
  const started = Date.now();

  if (options.restart) await clearCheckpoint(pool, BACKFILL_CHECKPOINT);
  const checkpoint = await readCheckpoint<BackfillCounts>(pool, BACKFILL_CHECKPOINT);
  const counts: BackfillCounts = { events: checkpoint?.counts.events ?? 0, tagRows: checkpoint?.counts.tagRows ?? 0 };
  let position: Buffer = Buffer.from(checkpoint?.position ?? '', 'hex');
  if (checkpoint) options.log?.info({ after: checkpoint.position, ...counts }, 'backfill: resuming from checkpoint');

  progress.setTotal(await estimatedEvents(pool));
  const skipForeignKeyCheck = await maySkipForeignKeyCheck(pool);
  let lastAddedRows = true;
  progress.update(counts.events);

  // Ranges are cut one after the other and run `concurrency` at a time; the checkpoint only moves
  // past a range once every range before it is done, so a crash never skips one.
  interface Running { hi: Buffer | null; done: Promise<BackfillCounts> }
  const running: Running[] = [];
  let cutFrom: Buffer = position;
  let cutAll = false;
  let batches = 0;
  const stopped = () => options.signal?.aborted || (options.maxBatches !== undefined && batches >= options.maxBatches);

  const finishOldest = async () => {
    const oldest = running.shift()!;
    const c = await oldest.done;
    lastAddedRows = c.tagRows > 0;
    counts.events += c.events;
    counts.tagRows += c.tagRows;
    if (oldest.hi) {
      position = oldest.hi;
      await saveCheckpoint(pool, BACKFILL_CHECKPOINT, position.toString('hex'), counts);
    }
    progress.update(counts.events);
  };

  try {
    while (!cutAll || running.length) {
      while (!cutAll && running.length < concurrency && !stopped()) {
        const lo = cutFrom;
        const hi = await nextBoundary(pool, lo, batchSize);
        const done = backfillRange(pool, lo, hi, { onlyMissing, skipForeignKeyCheck, lockAll: lastAddedRows }, options.log);
        done.catch(() => undefined); // awaited in order below; this only prevents an unhandled rejection
        running.push({ hi, done });
        batches++;
        if (hi) cutFrom = hi;
        else cutAll = true;
      }
      if (running.length === 0) break; // stopped before cutting the rest
      await finishOldest();
    }
  } finally {
    // On an error, let the other ranges settle before the caller closes the pool.
    await Promise.allSettled(running.map((r) => r.done));
    progress.stop();
  }

  const complete = cutAll;
  if (complete) await clearCheckpoint(pool, BACKFILL_CHECKPOINT);
  return {
    ...counts,
    complete,
    resumedAfter: checkpoint?.position,
    eventsThisRun: counts.events - (checkpoint?.counts.events ?? 0),
    batches,
    seconds: (Date.now() - started) / 1000,
  };
}
