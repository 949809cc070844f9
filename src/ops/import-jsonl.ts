// import: events as JSONL (strfry's import/export format: one event JSON per line), checked like an
// EVENT message (shape, policy, id and signature on the verifier's worker threads, then the
// write-policy plugin when one is configured, many events in flight to it at once) and written in
// batches by the bulk path (bulk-load.ts: the relay's own rules and locks, rows by COPY). A bad line
// is counted and reported with its number and never stops the import. Reading, verifying and writing
// overlap: while two batches are written, the next ones are read and verified.
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import type pg from 'pg';
import { computeEventId, ID_MISMATCH, parseEvent, type NostrEvent } from '../nostr/event.js';
import { isEphemeral } from '../nostr/kinds.js';
import * as reason from '../nostr/reason.js';
import type { SignatureVerifier } from '../nostr/verifier.js';
import { checkWrite, type Policy } from '../policy/policy.js';
import { importSession } from '../policy/session.js';
import { prepareEvent } from '../store/prepared-event.js';
import { bulkOptions } from './bulk-load.js';
import { askPlugin, type ImportPlugin, type PluginRefusal } from './import-plugin.js';
import { countReason, emptyCounts, ImportWriter, type ImportCounts, type ImportItem } from './import-batch.js';
import { noProgress, type Progress } from './progress.js';

export const EPHEMERAL_NOT_STORED = 'ephemeral: ephemeral events are not stored';

export interface ImportJsonlOptions {
  /** The relay's write rules, checked with importSession (no connection, nobody authenticated). */
  policy: Policy;
  /** Checks signatures (ids are always recomputed). Without it, signatures are trusted. */
  verifier?: SignatureVerifier;
  /** WRITE_POLICY_PLUGIN: asked about every event that passed the checks (ops/import-plugin.ts). */
  plugin?: ImportPlugin;
  /** Events per write transaction. */
  batchSize?: number;
  /** Told about every refused line: invalid ones and those the relay rules refuse. */
  onRefused?: (line: number, reason: string) => void;
  /** Input size in bytes, when known: drives the progress bar. */
  totalBytes?: number;
  progress?: Progress;
  signal?: AbortSignal;
}

export interface ImportJsonlResult extends ImportCounts {
  /** Non-blank lines read. */
  lines: number;
  seconds: number;
  /** False when stopped by the signal. */
  complete: boolean;
}

interface Candidate {
  line: number;
  event: NostrEvent;
  /** The verifier's verdict: an `invalid:` reason, or undefined. */
  verdict: Promise<string | undefined> | string | undefined;
  /** The write-policy plugin's, asked once the verifier's passed. */
  plugin: Promise<PluginRefusal | undefined> | undefined;
}

const nowSeconds = () => Math.floor(Date.now() / 1000);

/** Batches read and sent for verification ahead of the ones being written. */
const AHEAD = 3;
/** Batches being written at once (BulkWriter overlaps two). */
const WRITES_IN_FLIGHT = 2;

/** Parses and checks one line; returns the event, or the reason it is refused. */
function checkLine(text: string, policy: Policy): { event: NostrEvent } | { reason: string } {
  let input: unknown;
  try {
    input = JSON.parse(text);
  } catch {
    return { reason: reason.invalid('not valid JSON') };
  }
  const parsed = parseEvent(input);
  if (!parsed.ok) return { reason: parsed.reason };
  const refusal = checkWrite(policy, parsed.value, importSession, nowSeconds());
  if (refusal) return { reason: refusal };
  return { event: parsed.value };
}

export async function importJsonl(pool: pg.Pool, input: Readable, options: ImportJsonlOptions): Promise<ImportJsonlResult> {
  const batchSize = options.batchSize ?? 5000;
  const progress = options.progress ?? noProgress;
  const counts = emptyCounts();
  const started = Date.now();
  let lines = 0;
  let bytesRead = 0;
  let complete = true;
  const refuse = (line: number, kind: 'invalid' | 'rejected', reason: string) => {
    countReason(counts, kind, reason);
    options.onRefused?.(line, reason);
  };
  if (options.totalBytes) progress.setTotal(options.totalBytes);
  const writer = new ImportWriter(pool, { ...(await bulkOptions(pool)), relay: options.policy.relay });

  // Batches go through one chain (await the verdicts, then hand over to the writer, which writes two
  // at a time in the order handed over), so writes stay in input order; reading runs up to AHEAD
  // batches in front, so the verifier threads always have work queued.
  const chain: Array<Promise<void>> = [];
  let last: Promise<void> = Promise.resolve();
  const writing: Array<Promise<void>> = [];
  const writeInOrder = async (batch: Candidate[]) => {
    const items: ImportItem<number>[] = [];
    for (const c of batch) {
      const invalid = await c.verdict;
      const refusal = c.plugin && (await c.plugin);
      if (invalid) refuse(c.line, 'invalid', invalid);
      else if (isEphemeral(c.event.kind)) refuse(c.line, 'rejected', EPHEMERAL_NOT_STORED);
      else if (refusal) refuse(c.line, refusal.kind, refusal.reason);
      else items.push({ prepared: prepareEvent(c.event), ref: c.line });
    }
    while (writing.length >= WRITES_IN_FLIGHT) await writing.shift();
    const written = writer.write(items, counts, (line, reason) => options.onRefused?.(line, reason)).then(() => {
      progress.update(options.totalBytes ? Math.min(bytesRead, options.totalBytes) : counts.accepted + counts.duplicate + counts.invalid + counts.rejected);
    });
    written.catch(() => undefined); // awaited above or at the end
    writing.push(written);
  };
  const enqueue = async (batch: Candidate[]) => {
    last = last.then(() => writeInOrder(batch));
    last.catch(() => undefined); // surfaced by the await below or at the end
    chain.push(last);
    while (chain.length > AHEAD) await chain.shift();
  };

  const reader = createInterface({ input, crlfDelay: Infinity });
  let batch: Candidate[] = [];
  let lineNo = 0;
  try {
    for await (const text of reader) {
      lineNo++;
      bytesRead += Buffer.byteLength(text) + 1;
      if (options.signal?.aborted) {
        complete = false;
        break;
      }
      if (text.trim() === '') continue;
      lines++;
      const checked = checkLine(text, options.policy);
      if ('reason' in checked) {
        refuse(lineNo, 'invalid', checked.reason);
        continue;
      }
      const event = checked.event;
      const verdict = options.verifier
        ? options.verifier.verify(event)
        : computeEventId(event) === event.id
          ? undefined
          : ID_MISMATCH;
      if (verdict instanceof Promise) verdict.catch(() => undefined); // awaited in writeInOrder
      // Asked as soon as the signature passes, so the plugin works through the batches read ahead.
      const plugin = options.plugin && !isEphemeral(event.kind) ? askPlugin(options.plugin, event, verdict) : undefined;
      plugin?.catch(() => undefined); // awaited in writeInOrder
      batch.push({ line: lineNo, event, verdict, plugin });
      if (batch.length >= batchSize) {
        await enqueue(batch);
        batch = [];
      }
    }
    await enqueue(batch);
    await last;
    while (writing.length) await writing.shift();
  } finally {
    await Promise.allSettled(writing);
    reader.close();
    progress.stop();
  }
  return { lines, ...counts, seconds: (Date.now() - started) / 1000, complete };
}
