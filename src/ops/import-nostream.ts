// import-nostream: load a nostream database into ours. nostream keeps one row per event in its
// `events` table (binary id, pubkey and signature, tags as jsonb, soft deletion in deleted_at,
// NIP-40 expiry in expires_at). Rows are read in event_id order, in keyset batches (the next batch is
// fetched while the current ones are written), each event rebuilt from its columns and checked like
// an EVENT message, and written by the bulk path (bulk-load.ts: the relay's own rules and locks, rows
// by COPY), so replaceable/addressable and NIP-09 rules apply exactly as for live events. The
// position is checkpointed after every batch.
//
// - Soft-deleted rows (deleted_at set) are not imported, and if our store already holds one (an
//   earlier run, or a client republishing it) it is removed: deleted stays deleted. The kind 5 that
//   deleted it, when nostream has it, is imported like any event and blocks it from then on.
// - Expired rows (expires_at, or an expiration tag, not after now) are skipped.
// - The id is recomputed from the columns (jsonb keeps array order and decodes escapes, so tags come
//   back exactly); a row whose columns do not hash to its event_id is counted invalid. Signatures were
//   verified by nostream when the events arrived, so they are checked only with `verifier`.
import type pg from 'pg';
import type { Logger } from '../log.js';
import { computeEventId, parseEvent } from '../nostr/event.js';
import { isEphemeral } from '../nostr/kinds.js';
import { expirationOf } from '../nostr/tags.js';
import type { Limits } from '../relay/limits.js';
import { checkEventPolicy } from '../relay/policy.js';
import type { SignatureVerifier } from '../relay/verifier.js';
import { prepareEvent } from '../store/write.js';
import { clearCheckpoint, readCheckpoint, saveCheckpoint } from './checkpoint.js';
import { bulkOptions } from './bulk-load.js';
import { countReason, emptyCounts, ImportWriter, type ImportCounts, type ImportItem } from './import-batch.js';
import { EPHEMERAL_NOT_STORED } from './import-jsonl.js';
import { estimatedEvents, noProgress, type Progress } from './progress.js';

export interface NostreamCounts extends ImportCounts {
  /** Rows read from nostream. */
  read: number;
  /** Rows with deleted_at set: not imported. */
  softDeleted: number;
  /** Of those, events our store held and that were removed. */
  removed: number;
  /** Rows already expired: not imported. */
  expired: number;
}

export interface ImportNostreamOptions {
  limits: Limits;
  /** Checks signatures too (nostream verified them on arrival; ids are always recomputed). */
  verifier?: SignatureVerifier;
  /** Rows per source read and per write transaction. */
  batchSize?: number;
  /** Ignore a saved checkpoint and start from the first row. */
  restart?: boolean;
  /** Aborting stops after the current batch; the checkpoint is kept. */
  signal?: AbortSignal;
  /** Stop after this many batches (a trial run; the checkpoint is kept). */
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
}

interface SourceRow {
  /** Hex, as are event_pubkey and event_signature (encoded by PostgreSQL: cheaper than here). */
  event_id: string;
  event_pubkey: string;
  event_kind: number;
  event_created_at: string | number;
  event_content: string | null;
  tags: string | null;
  event_signature: string;
  deleted: boolean;
  expires_at: string | number | null;
}

interface CheckedBatch {
  /** The batch's last event_id: the checkpoint once it is written. */
  last: Buffer;
  items: ImportItem<string>[];
  softDeleted: Buffer[];
  tally: NostreamCounts;
}

/** Batches being written at once (BulkWriter overlaps two). */
const WRITES_IN_FLIGHT = 2;

function addCounts(into: NostreamCounts, add: NostreamCounts): void {
  for (const key of ['read', 'softDeleted', 'removed', 'expired', 'accepted', 'duplicate', 'replaced', 'invalid', 'rejected'] as const) into[key] += add[key];
  for (const [reason, n] of Object.entries(add.reasons)) into.reasons[reason] = (into.reasons[reason] ?? 0) + n;
}

const REQUIRED = ['event_id', 'event_pubkey', 'event_kind', 'event_created_at', 'event_content', 'event_tags', 'event_signature'];

/** The batch query for this nostream schema version (deleted_at and expires_at came in later ones). */
async function sourceQuery(source: pg.Pool): Promise<string> {
  const { rows } = await source.query<{ column_name: string }>(
    `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'events'`,
  );
  const columns = new Set(rows.map((r) => r.column_name));
  const missing = REQUIRED.filter((c) => !columns.has(c));
  if (missing.length) throw new Error(`the source has no nostream events table (missing columns: ${missing.join(', ')})`);
  return `SELECT encode(event_id, 'hex') AS event_id, encode(event_pubkey, 'hex') AS event_pubkey, event_kind, event_created_at,
                 event_content, event_tags::text AS tags, encode(event_signature, 'hex') AS event_signature,
                 ${columns.has('deleted_at') ? 'deleted_at IS NOT NULL' : 'false'} AS deleted,
                 ${columns.has('expires_at') ? 'expires_at' : 'NULL::bigint'} AS expires_at
            FROM events WHERE events.event_id > $1 ORDER BY events.event_id LIMIT $2`;
}

/** The checkpoint key: the source's address without credentials, so each source resumes on its own. */
export function nostreamCheckpointName(sourceUrl: string): string {
  const u = new URL(sourceUrl);
  return `import-nostream:${u.hostname}:${u.port || 5432}${u.pathname}`;
}

export async function importNostream(
  source: pg.Pool,
  target: pg.Pool,
  checkpointName: string,
  options: ImportNostreamOptions,
): Promise<ImportNostreamResult> {
  const batchSize = options.batchSize ?? 5000;
  const progress = options.progress ?? noProgress;
  const started = Date.now();
  const sql = await sourceQuery(source);
  const writer = new ImportWriter(target, await bulkOptions(target));

  if (options.restart) await clearCheckpoint(target, checkpointName);
  const checkpoint = await readCheckpoint<NostreamCounts>(target, checkpointName);
  const counts: NostreamCounts = { read: 0, softDeleted: 0, removed: 0, expired: 0, ...emptyCounts(), ...checkpoint?.counts };
  let position: Buffer = Buffer.from(checkpoint?.position ?? '', 'hex');
  if (checkpoint) options.log?.info({ after: checkpoint.position, read: counts.read }, 'import-nostream: resuming from checkpoint');
  progress.setTotal(await estimatedEvents(source));
  progress.update(counts.read);

  const read = (after: Buffer) => source.query<SourceRow>(sql, [after, batchSize]).then((r) => r.rows);

  // Checks the rows of one batch (counting into a batch-local tally, merged when the batch is written,
  // so a checkpoint never counts a batch it does not cover).
  const check = async (rows: SourceRow[]): Promise<CheckedBatch> => {
    const now = Math.floor(Date.now() / 1000);
    const tally: NostreamCounts = { read: 0, softDeleted: 0, removed: 0, expired: 0, ...emptyCounts() };
    const refuse = (id: string, kind: 'invalid' | 'rejected', reason: string) => {
      countReason(tally, kind, reason);
      options.onRefused?.(id, reason);
    };
    const softDeleted: Buffer[] = [];
    const candidates: Array<{ item: ImportItem<string>; verdict?: Promise<string | undefined> }> = [];
    for (const row of rows) {
      tally.read++;
      const id = row.event_id;
      if (row.deleted) {
        tally.softDeleted++;
        softDeleted.push(Buffer.from(id, 'hex'));
        continue;
      }
      let tags: unknown;
      try {
        tags = JSON.parse(row.tags ?? 'null');
      } catch {
        refuse(id, 'invalid', 'invalid: tags are not JSON');
        continue;
      }
      const parsed = parseEvent({
        id,
        pubkey: row.event_pubkey,
        created_at: Number(row.event_created_at),
        kind: row.event_kind,
        tags,
        content: row.event_content,
        sig: row.event_signature,
      });
      if (!parsed.ok) {
        refuse(id, 'invalid', parsed.reason);
        continue;
      }
      const event = parsed.value;
      const expiration = row.expires_at === null ? expirationOf(event.tags) : Number(row.expires_at);
      if (expiration !== undefined && expiration <= now) {
        tally.expired++;
        continue;
      }
      if (computeEventId(event) !== id) {
        refuse(id, 'invalid', 'invalid: event id does not match the sha256 of its serialization');
        continue;
      }
      const policy = checkEventPolicy(event, options.limits, now);
      if (policy) {
        refuse(id, 'invalid', policy);
        continue;
      }
      if (isEphemeral(event.kind)) {
        refuse(id, 'rejected', EPHEMERAL_NOT_STORED);
        continue;
      }
      candidates.push({ item: { prepared: prepareEvent(event), ref: id }, verdict: options.verifier?.verify(event) });
    }
    const items: ImportItem<string>[] = [];
    for (const c of candidates) {
      const invalid = await c.verdict;
      if (invalid) refuse(c.item.ref, 'invalid', invalid);
      else items.push(c.item);
    }
    return { last: Buffer.from(rows[rows.length - 1].event_id, 'hex'), items, softDeleted, tally };
  };

  // Writes one batch; its counts go into its own tally, merged into the totals when the batch is
  // done, in order, so a checkpoint never counts a batch it does not cover.
  const write = async (batch: CheckedBatch) => {
    // The writer is handed the batch before anything is awaited: its place in the write order is
    // taken now, so batches are written in event_id order whatever the removal below costs.
    const written = writer.write(batch.items, batch.tally, (id, reason) => options.onRefused?.(id, reason));
    const removal = batch.softDeleted.length
      ? target.query('DELETE FROM events WHERE id = ANY($1::bytea[])', [batch.softDeleted]).then((r) => {
          batch.tally.removed += r.rowCount ?? 0;
        })
      : undefined;
    await Promise.all([written, removal]);
  };

  // Three stages overlap: the next batch is read while this one is checked, and checked while the
  // ones before are written, two at a time, in event_id order (ImportWriter).
  let complete = false;
  let batches = 0;
  let next = read(position);
  const writing: Array<{ done: Promise<void>; batch: CheckedBatch }> = [];
  const finishOldest = async () => {
    const { done, batch } = writing[0];
    await done;
    writing.shift();
    addCounts(counts, batch.tally);
    position = batch.last;
    await saveCheckpoint(target, checkpointName, position.toString('hex'), counts);
    progress.update(counts.read);
  };
  const stopRequested = () => options.signal?.aborted || (options.maxBatches !== undefined && batches >= options.maxBatches);
  try {
    while (!stopRequested()) {
      const rows = await next;
      if (rows.length === 0) {
        complete = true;
        break;
      }
      next = read(Buffer.from(rows[rows.length - 1].event_id, 'hex'));
      next.catch(() => undefined); // awaited by the next turn, or in finally
      const checked = await check(rows);
      while (writing.length >= WRITES_IN_FLIGHT) await finishOldest();
      const done = write(checked);
      done.catch(() => undefined); // awaited by finishOldest
      writing.push({ done, batch: checked });
      batches++;
    }
    while (writing.length) await finishOldest();
  } finally {
    await Promise.allSettled(writing.map((w) => w.done));
    await next.catch(() => undefined);
    progress.stop();
  }
  if (complete) await clearCheckpoint(target, checkpointName);
  return {
    ...counts,
    complete,
    resumedAfter: checkpoint?.position,
    readThisRun: counts.read - (checkpoint?.counts.read ?? 0),
    seconds: (Date.now() - started) / 1000,
  };
}
