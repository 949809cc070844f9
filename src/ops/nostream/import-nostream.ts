// import-nostream: load a nostream database into ours. nostream keeps one row per event in its
// `events` table (nostream-source.ts reads it). Rows are read in event_id order, in keyset batches (the
// next batch is fetched while the current ones are written), each event rebuilt from its columns and
// checked like an EVENT message (checkRows), and written by the bulk path (bulk-load.ts: the relay's
// own rules and locks, rows by COPY), so replaceable/addressable and NIP-09 rules apply exactly as for
// live events. The position is checkpointed after every batch.
//
// - Soft-deleted rows (deleted_at set) are not imported, and if our store already holds one (an
//   earlier run, or a client republishing it) it is removed: deleted stays deleted. The kind 5 that
//   deleted it, when nostream has it, is imported like any event and blocks it from then on.
// - Expired rows (expires_at, or an expiration tag, not after now) are skipped.
// - Every other row goes through the one admission path (admission/admit.ts) as sourceType Import:
//   the relay's rules, the id recomputed from the columns (jsonb keeps array order and decodes
//   escapes, so tags come back exactly; a row whose columns do not hash to its event_id is counted
//   invalid), the signature only with `verifier` (nostream verified them when the events arrived),
//   WRITE_POLICY_PLUGIN. An event the plugin could not judge (it kept failing) is counted as failed,
//   and the checkpoint stays before its batch, so the next run reads it again.
//
// With `emptyTarget` (moving to a new relay before it opens), the same rows, checked the same way,
// go in two phases (nostream-phases.ts decides which row goes where):
//   1. Every event that no other event of the source bears on, except a kind 5 deleting it (regular
//      events, and replaceable/addressable ones that are the only row of their address), is loaded
//      in one transaction into the empty store (empty-target-load.ts: secondary indexes built once at
//      the end), while the next batches are read and checked. All or nothing.
//   2. The rest (kind 5s, 62s, gift wraps, and the versions of addresses with several rows) goes
//      through the ordered bulk path above, in event_id order, resumable. A kind 5 there deletes the
//      phase 1 events it names, which is where the event-by-event order leaves them too: deleted
//      whether they came before the kind 5 (stored, then deleted) or after it (refused).
// The final rows are those of the normal mode (a test compares them column for column). The counts
// differ in one place: an event of phase 1 named by a kind 5 is counted accepted (loaded, then
// deleted), where the normal mode counts it rejected when the kind 5 comes first.
import type pg from 'pg';
import type { Logger } from '../../log.js';
import type { SignatureVerifier } from '../../nostr/verifier.js';
import type { Policy } from '../../policy/policy.js';
import { clearCheckpoint, readCheckpoint, saveCheckpoint } from '../checkpoint.js';
import type { AdmissionChecks } from '../../admission/admit.js';
import type { WritePlugin } from '../../policy/write-plugin.js';
import { EmptyTargetLoad } from './empty-target-load.js';
import { bulkWrite, OrderedSink } from '../import-batch.js';
import { addCounts, admitRows, emptyNostreamCounts, type NostreamCounts } from './nostream-check.js';
import { bulkBatch, OrderedRows, type BulkBatch } from './nostream-phases.js';
import { keysetBatches, nostreamTable, streamedBatches, type NostreamTable, type SourceBatch, type SourceRow } from './nostream-source.js';
import { estimatedEvents, noProgress, type Progress } from '../progress.js';

export type { NostreamCounts } from './nostream-check.js';

export interface ImportNostreamOptions {
  policy: Policy;
  /** Checks signatures too (nostream verified them on arrival; ids are always recomputed). */
  verifier?: SignatureVerifier;
  /** WRITE_POLICY_PLUGIN: asked about every event that passed the checks, as sourceType Import. */
  plugin?: WritePlugin;
  /** Rows per source read and per write transaction. */
  batchSize?: number;
  /**
   * The store is empty and the relay is not running: load the events no other event bears on in one
   * transaction with the indexes built at the end, then the rest in order (see the top of this file).
   */
  emptyTarget?: boolean;
  /** Ignore a saved checkpoint and start from the first row. */
  restart?: boolean;
  /** Aborting stops after the current batch; the checkpoint is kept (an empty-target load rolls back). */
  signal?: AbortSignal;
  /** Stop after this many batches written in order (a trial run; the checkpoint is kept). */
  maxBatches?: number;
  /** Told about every refused row (hex event id, reason). */
  onRefused?: (id: string, reason: string) => void;
  progress?: Progress;
  log?: Logger;
}

export interface ImportNostreamResult extends NostreamCounts {
  complete: boolean;
  /** The event_id (hex) the run resumed after, if it resumed. */
  resumedAfter?: string;
  /** Rows read by this run alone (the rate is this over `seconds`). */
  readThisRun: number;
  seconds: number;
  /** Empty-target mode: phase 1, when this run did it (not when it resumed phase 2). */
  emptyTargetLoad?: EmptyTargetLoadReport;
}

export interface EmptyTargetLoadReport {
  /** Rows read (all but phase 2's) and events loaded. */
  read: number;
  loaded: number;
  /** False if it was stopped and rolled back: the store is still empty. */
  complete: boolean;
  seconds: number;
  /** Of those, building the indexes and committing. */
  indexSeconds: number;
}

/** What judges each row before it is written: the relay's rules, the verifier with --verify, the plugin. */
const checksOf = (options: ImportNostreamOptions): AdmissionChecks => ({ policy: options.policy, verifier: options.verifier, plugin: options.plugin });

/** Batches admitted and not yet written: one being checked while two are written (the writer overlaps two). */
const BATCHES_IN_FLIGHT = 3;

/** The checkpoint key: the source's address without credentials, so each source resumes on its own. */
export function nostreamCheckpointName(sourceUrl: string): string {
  const u = new URL(sourceUrl);
  return `import-nostream:${u.hostname}:${u.port || 5432}${u.pathname}`;
}

/** The empty-target mode keeps its own checkpoint (its phase 2), apart from the normal mode's. */
export const emptyTargetCheckpointName = (checkpointName: string) => `${checkpointName}:empty-target`;

export async function importNostream(
  source: pg.Pool,
  target: pg.Pool,
  checkpointName: string,
  options: ImportNostreamOptions,
): Promise<ImportNostreamResult> {
  const started = Date.now();
  const progress = options.progress ?? noProgress;
  const table = await nostreamTable(source);
  const name = options.emptyTarget ? emptyTargetCheckpointName(checkpointName) : checkpointName;
  if (options.restart) await clearCheckpoint(target, name);
  const checkpoint = await readCheckpoint<NostreamCounts>(target, name);
  const counts: NostreamCounts = { ...emptyNostreamCounts(), ...checkpoint?.counts };
  const result = (complete: boolean, emptyTargetLoad?: EmptyTargetLoadReport): ImportNostreamResult => ({
    ...counts,
    complete,
    resumedAfter: checkpoint?.position || undefined,
    readThisRun: counts.read - (checkpoint?.counts.read ?? 0),
    seconds: (Date.now() - started) / 1000,
    emptyTargetLoad,
  });
  if (checkpoint) options.log?.info({ after: checkpoint.position, read: counts.read }, 'import-nostream: resuming from checkpoint');
  progress.setTotal(await estimatedEvents(source));
  progress.update(counts.read);
  try {
    let report: EmptyTargetLoadReport | undefined;
    let ordered: OrderedRows | undefined;
    if (options.emptyTarget) {
      ordered = await OrderedRows.find(source);
      if (!checkpoint) {
        // Phase 1; phase 2 then starts from its checkpoint, saved by the same commit.
        report = await loadInBulk(source, target, table, ordered, name, counts, options, progress);
        if (!report.complete) return result(false, report);
      }
    }
    const position = Buffer.from(checkpoint?.position ?? '', 'hex');
    const complete = await writeInOrder(source, target, table, ordered, name, position, counts, options, progress);
    // Events that failed are read again by the next run, from the checkpoint before them.
    if (complete && counts.failed === (checkpoint?.counts.failed ?? 0)) await clearCheckpoint(target, name);
    return result(complete, report);
  } finally {
    progress.stop();
  }
}

/**
 * The bulk path, in event_id order, from `position`: three stages overlap: the next batch is read
 * while this one is checked, and checked while the ones before are written, two at a time, in
 * event_id order (ImportWriter). The checkpoint is saved once a batch and every batch before it are
 * written. With `ordered` (phase 2 of the empty-target mode), only the rows it has. Returns whether
 * it reached the end.
 */
async function writeInOrder(
  source: pg.Pool,
  target: pg.Pool,
  table: NostreamTable,
  ordered: OrderedRows | undefined,
  checkpointName: string,
  position: Buffer,
  counts: NostreamCounts,
  options: ImportNostreamOptions,
  progress: Progress,
): Promise<boolean> {
  const batchSize = options.batchSize ?? 5000;
  const sink = new OrderedSink(bulkWrite(target, { relay: options.policy.relay }), batchSize);
  // Phase 2's rows are few among many: one query finds and sorts them (see streamedBatches).
  const read = ordered ? streamedBatches(source, table, position, batchSize, OrderedRows.sql) : keysetBatches(source, table, position, batchSize);

  // Each source batch is admitted (its places taken in event_id order, then written as one batch);
  // its counts go into its own tally, merged into the totals when the batch is done, in order, so a
  // checkpoint never counts a batch it does not cover.
  const write = async (rows: SourceBatch, tally: NostreamCounts) => {
    const { softDeleted, settled } = await admitRows(rows, select, tally, checksOf(options), sink, options.onRefused);
    const removal = softDeleted.length
      ? target.query('DELETE FROM events WHERE id = ANY($1::bytea[])', [softDeleted]).then((r) => {
          tally.removed += r.rowCount ?? 0;
        })
      : undefined;
    await Promise.all([settled, removal]);
  };

  let batches = 0;
  const stopRequested = () => options.signal?.aborted || (options.maxBatches !== undefined && batches >= options.maxBatches);
  const select = ordered && ((row: SourceRow) => ordered.has(row));
  const writing: Array<{ done: Promise<void>; tally: NostreamCounts; last: Buffer }> = [];
  // Once a batch has an event that failed, the checkpoint stays before it: the next run reads it again.
  let held = false;
  const finishOldest = async () => {
    const { done, tally, last } = writing[0];
    await done;
    writing.shift();
    addCounts(counts, tally);
    if (tally.failed > 0) held = true;
    if (!held) await saveCheckpoint(target, checkpointName, last.toString('hex'), counts);
    progress.update(counts.read);
  };
  let complete = false;
  try {
    if (!stopRequested()) {
      complete = true;
      for await (const rows of read) {
        while (writing.length >= BATCHES_IN_FLIGHT) await finishOldest();
        const tally = emptyNostreamCounts();
        const done = write(rows, tally);
        done.catch(() => undefined); // awaited by finishOldest
        writing.push({ done, tally, last: rows.lastId() });
        batches++;
        if (stopRequested()) {
          complete = false;
          break;
        }
      }
    }
    while (writing.length) await finishOldest();
  } finally {
    await Promise.allSettled(writing.map((w) => w.done));
  }
  return complete;
}

/**
 * Phase 1 of the empty-target mode: every row but those `ordered` has, checked and encoded by
 * bulkBatch, loaded in one transaction (EmptyTargetLoad). Three stages overlap: the source reads the
 * batch after next (keysetBatches), this thread prepares the next one, and PostgreSQL copies this
 * one. The commit also saves phase 2's checkpoint (its start, and the counts so far), so a crash
 * after it resumes with phase 2 and never loads twice. Stopped (the signal) or failed, it rolls back.
 */
async function loadInBulk(
  source: pg.Pool,
  target: pg.Pool,
  table: NostreamTable,
  ordered: OrderedRows,
  checkpointName: string,
  counts: NostreamCounts,
  options: ImportNostreamOptions,
  progress: Progress,
): Promise<EmptyTargetLoadReport> {
  const started = Date.now();
  const phase = emptyNostreamCounts();
  const report = (complete: boolean, indexSeconds = 0): EmptyTargetLoadReport => ({
    read: phase.read,
    loaded: phase.accepted,
    complete,
    seconds: (Date.now() - started) / 1000,
    indexSeconds,
  });
  const load = await EmptyTargetLoad.begin(target);
  const prepare = (rows: SourceBatch, lastLoaded: string) => bulkBatch(rows, ordered, checksOf(options), lastLoaded);

  const batches = keysetBatches(source, table, Buffer.alloc(0), options.batchSize ?? 5000);
  let preparing: Promise<BulkBatch> | undefined;
  let writing: Promise<void> = Promise.resolve();
  try {
    const first = await batches.next();
    preparing = first.done ? undefined : prepare(first.value, '');
    while (preparing) {
      const batch = await preparing;
      const next = await batches.next();
      preparing = next.done ? undefined : prepare(next.value, batch.lastLoaded);
      preparing?.catch(() => undefined); // awaited by the next turn, or below
      await writing;
      for (const [id, reason] of batch.refused) options.onRefused?.(id, reason);
      addCounts(phase, batch.tally);
      progress.update(counts.read + phase.read);
      // All or nothing: an event the plugin could not judge would be lost once phase 2 starts after it.
      if (batch.tally.failed > 0) {
        await writing;
        await load.abort();
        options.log?.warn({ failed: batch.tally.failed }, 'import-nostream: the write policy plugin could not judge some events; the empty-target load was rolled back and the store is empty');
        return report(false);
      }
      writing = load.write(batch.rows);
      writing.catch(() => undefined); // awaited by the next turn
      if (options.signal?.aborted) {
        await writing;
        await load.abort();
        options.log?.warn('import-nostream: the empty-target load was stopped and rolled back; the store is empty');
        return report(false);
      }
    }
    await writing;
    const indexing = Date.now();
    options.log?.info({ loaded: phase.accepted }, 'import-nostream: events loaded; building the indexes');
    addCounts(counts, phase);
    await load.finish((client) => saveCheckpoint(client, checkpointName, '', counts));
    return report(true, (Date.now() - indexing) / 1000);
  } catch (err) {
    await writing.catch(() => undefined);
    await load.abort();
    throw err;
  } finally {
    await preparing?.catch(() => undefined);
    await batches.return(undefined);
  }
}
