// backfill-search: fills events.search (NIP-50, src/nostr/search.ts) for the stored events that have
// none: those stored before the search migration, or put into `events` by raw SQL. The relay writes
// `search` itself for every event it stores, so this is a one-off after an upgrade.
//
// Like backfill-tags, it walks `events` in batches of consecutive heap blocks, each read with a TID
// range scan (`ctid >= '(B,0)' AND ctid < '(B+N,0)'`): the whole run reads the table once, in storage
// order. The end is the table's size in blocks when the run starts. Of each batch it reads the rows
// of searchable kinds whose `search` is NULL, computes their documents here with searchDocument (the
// very function the relay uses on insert: PostgreSQL's own parser would tokenize differently), and
// writes them in one UPDATE, a short transaction of its own. After each batch the next block is saved
// in ops_checkpoints: an interrupted run resumes there.
//
// Safe beside a running relay: the relay stores new events with `search` already set, and the UPDATE
// only touches rows whose `search` is still NULL, so a row written meanwhile (by another run) is left
// as it is. A row deleted between the read and the UPDATE is simply not found. A row updated here gets
// a new version (elsewhere in the heap, since `search` is indexed); its `search` is set, so a later
// batch that meets it passes it over. Each updated row leaves a dead version behind: a VACUUM (ANALYZE)
// of events afterwards reclaims them (autovacuum will, in time).
//
// Rows whose document is undefined (no words: an empty note, a profile without names) stay NULL,
// which is right: there is nothing to index. They are read again by a later run, cheaply.
//
// Rows put into `events` by other means (raw SQL, a COPY of the table alone) while a run goes may be
// missed, past the end or in a block already done: run it again once they are in.
import type pg from 'pg';
import type { Logger } from '../log.js';
import type { NostrEvent } from '../nostr/event.js';
import { searchDocument, SEARCHABLE_KINDS, tsvectorLiteral } from '../nostr/search.js';
import { hasSqlState, sqlState, SQLSTATE } from '../store/pg-errors.js';
import { withTransaction } from '../store/write.js';
import { clearCheckpoint, saveCheckpoint } from './checkpoint.js';
import { positionText, readBlockCheckpoint, readHeap, tidBounds, type BlockRange, type Heap } from './heap-blocks.js';
import { noProgress, type Progress } from './progress.js';

export const BACKFILL_SEARCH_CHECKPOINT = 'backfill-search';

export interface BackfillSearchOptions {
  /** About this many events per batch: turned into heap blocks by the table's events per block. */
  batchSize?: number;
  /** Heap blocks per batch; overrides batchSize. */
  batchBlocks?: number;
  /** Ignore a saved checkpoint and start from the first block. */
  restart?: boolean;
  /** Aborting stops after the batch in flight; the checkpoint is kept for the next run. */
  signal?: AbortSignal;
  /** Stop after this many batches (a trial run; the checkpoint is kept). */
  maxBatches?: number;
  /** Counts the events read; the total is extrapolated from the blocks done. */
  progress?: Progress;
  log?: Logger;
}

export interface BackfillSearchCounts {
  /** Events of searchable kinds found without a document (in blocks already done, across resumed runs). */
  events: number;
  /** Events whose `search` was set. */
  updated: number;
  /** Events with no words to index: left NULL. */
  withoutWords: number;
  /** Events whose stored JSON could not be read as an event: left NULL (each one is logged). */
  unreadable: number;
}

export interface BackfillSearchResult extends BackfillSearchCounts {
  /** False when stopped early (signal or maxBatches): run again to resume. */
  complete: boolean;
  /** The heap block this run started at, when it resumed from a checkpoint. */
  resumedAtBlock?: number;
  /** The heap blocks of `events` the job covers: [0, blocks). */
  blocks: number;
  /** Events read by this run alone. */
  eventsThisRun: number;
  /** Events updated by this run alone (the rate is this over `seconds`). */
  updatedThisRun: number;
  batches: number;
  seconds: number;
}

const ZERO: BackfillSearchCounts = { events: 0, updated: 0, withoutWords: 0, unreadable: 0 };


const SEARCHABLE = [...SEARCHABLE_KINDS];

/** The rows of a batch that need a document. */
const READ_SQL = `SELECT id, raw FROM events
  WHERE ctid >= $1::tid AND ctid < $2::tid AND kind = ANY ($3::int[]) AND search IS NULL`;

/**
 * One UPDATE per batch. Joined on the primary key; `search IS NULL` leaves a row that got its
 * document meanwhile as it is. The rows are those just read from the batch's blocks, so the TID range
 * is repeated: it bounds the scan of `events` whichever join PostgreSQL picks (with 5,000 ids it
 * otherwise may hash them and read the whole table). A row moved meanwhile has been updated by
 * someone else, which only another run does: its `search` is set already.
 */
const UPDATE_SQL = `UPDATE events SET search = d.doc::tsvector
    FROM unnest($3::bytea[], $4::text[]) AS d(id, doc)
   WHERE events.ctid >= $1::tid AND events.ctid < $2::tid AND events.id = d.id AND events.search IS NULL`;

interface BatchRow {
  id: Buffer;
  raw: string;
}

/** The documents of a batch's rows, as tsvector text, and what could not be indexed. */
function documents(rows: BatchRow[], log?: Logger): { ids: Buffer[]; docs: string[]; withoutWords: number; unreadable: number } {
  const ids: Buffer[] = [];
  const docs: string[] = [];
  let withoutWords = 0;
  let unreadable = 0;
  for (const row of rows) {
    let doc;
    try {
      doc = searchDocument(JSON.parse(row.raw) as NostrEvent);
    } catch (err) {
      unreadable++;
      log?.warn({ id: row.id.toString('hex'), err: (err as Error).message }, 'backfill-search: stored JSON is not a readable event; left without a document');
      continue;
    }
    if (doc === undefined) {
      withoutWords++;
      continue;
    }
    ids.push(row.id);
    docs.push(tsvectorLiteral(doc));
  }
  return { ids, docs, withoutWords, unreadable };
}

/** A concurrent delete (NIP-09, replacement) may lock rows in another order: retry the batch's UPDATE. */
const RETRYABLE = [SQLSTATE.deadlockDetected, SQLSTATE.serializationFailure];

async function updateBatch(pool: pg.Pool, range: BlockRange, ids: Buffer[], docs: string[], log?: Logger): Promise<number> {
  if (ids.length === 0) return 0;
  for (let attempt = 1; ; attempt++) {
    try {
      return await withTransaction(pool, async (client) => (await client.query(UPDATE_SQL, [...tidBounds(range), ids, docs])).rowCount ?? 0);
    } catch (err) {
      if (!hasSqlState(err, ...RETRYABLE) || attempt >= 5) throw err;
      log?.debug({ code: sqlState(err), attempt }, 'backfill-search: retrying a batch after a conflict with concurrent writes');
    }
  }
}

/** Where to start: the saved block, unless the checkpoint cannot be used (then from block 0). */
async function readStart(pool: pg.Pool, heap: Heap, log?: Logger): Promise<{ block: number; counts: BackfillSearchCounts } | undefined> {
  const start = await readBlockCheckpoint<BackfillSearchCounts>(pool, BACKFILL_SEARCH_CHECKPOINT, heap, log);
  if (!start) return undefined;
  const c = start.counts;
  return { block: start.block, counts: { events: c.events ?? 0, updated: c.updated ?? 0, withoutWords: c.withoutWords ?? 0, unreadable: c.unreadable ?? 0 } };
}

export async function backfillSearch(pool: pg.Pool, options: BackfillSearchOptions = {}): Promise<BackfillSearchResult> {
  const progress = options.progress ?? noProgress;
  const log = options.log;
  const started = Date.now();

  if (options.restart) await clearCheckpoint(pool, BACKFILL_SEARCH_CHECKPOINT);
  const heap = await readHeap(pool);
  const batchBlocks = Math.max(1, options.batchBlocks ?? Math.round((options.batchSize ?? 5000) / Math.max(heap.eventsPerBlock, 1e-3)));
  const start = await readStart(pool, heap, log);
  const counts: BackfillSearchCounts = { ...(start?.counts ?? ZERO) };
  const startCounts = { ...counts };
  let position = start?.block ?? 0; // every block before it is done
  if (start) log?.info({ block: position, of: heap.blocks, ...counts }, 'backfill-search: resuming from checkpoint');

  // Events are counted as they are read; the total, known only in blocks, is extrapolated from the
  // events needing a document per block met so far (before the first batch: every event, an upper bound).
  const updateProgress = () => {
    const perBlock = position > 0 ? counts.events / position : heap.eventsPerBlock;
    progress.setTotal(Math.round(counts.events + perBlock * Math.max(0, heap.blocks - position)));
    progress.update(counts.events);
  };
  updateProgress();

  let batches = 0; // written (UPDATE started)
  let cut = 0; // read (SELECT started)
  const stopped = () => options.signal?.aborted || (options.maxBatches !== undefined && cut >= options.maxBatches);
  const read = (range: BlockRange) => pool.query<BatchRow>(READ_SQL, [...tidBounds(range), SEARCHABLE]).then((r) => r.rows);
  const rangeAt = (from: number): BlockRange => ({ from, to: Math.min(from + batchBlocks, heap.blocks) });

  // Three batches are in hand at once: the next one's rows are read, and the one before's UPDATE
  // runs, while this one's documents are computed here (CPU-bound: about half of a batch's time).
  // At most one UPDATE is in flight, and the checkpoint moves past a batch once it has committed, so
  // batches are done, and saved, in order. Reads and documents are plain computation: when stopped,
  // those not written yet are dropped.
  let reading: { range: BlockRange; rows: Promise<BatchRow[]> } | undefined;
  let writing: { range: BlockRange; events: number; withoutWords: number; unreadable: number; updated: Promise<number> } | undefined;
  const startReading = (from: number) => {
    if (from >= heap.blocks || stopped()) return undefined;
    const range = rangeAt(from);
    cut++;
    const rows = read(range);
    rows.catch(() => undefined); // awaited below; this only prevents an unhandled rejection
    return { range, rows };
  };
  const finishWriting = async () => {
    const w = writing!;
    const updated = await w.updated;
    writing = undefined;
    counts.events += w.events;
    counts.updated += updated;
    counts.withoutWords += w.withoutWords;
    counts.unreadable += w.unreadable;
    position = w.range.to;
    await saveCheckpoint(pool, BACKFILL_SEARCH_CHECKPOINT, positionText(position, heap), counts);
    updateProgress();
  };
  try {
    reading = startReading(position);
    while (reading) {
      const { range, rows: pending } = reading;
      reading = startReading(range.to);
      const rows = await pending;
      const { ids, docs, withoutWords, unreadable } = documents(rows, log);
      if (writing) await finishWriting();
      // Stopped: the batch in flight has committed and is saved; this one is not written.
      if (options.signal?.aborted) break;
      const updated = updateBatch(pool, range, ids, docs, log);
      updated.catch(() => undefined); // awaited by finishWriting
      batches++;
      writing = { range, events: rows.length, withoutWords, unreadable, updated };
    }
    if (writing) await finishWriting();
  } finally {
    // On an error, let the statements in flight settle before the caller closes the pool.
    await Promise.allSettled([reading?.rows, writing?.updated]);
    progress.stop();
  }

  const complete = position >= heap.blocks;
  if (complete) await clearCheckpoint(pool, BACKFILL_SEARCH_CHECKPOINT);
  return {
    ...counts,
    complete,
    resumedAtBlock: start?.block,
    blocks: heap.blocks,
    eventsThisRun: counts.events - startCounts.events,
    updatedThisRun: counts.updated - startCounts.updated,
    batches,
    seconds: (Date.now() - started) / 1000,
  };
}
