// import: events as JSONL (strfry's import/export format: one event JSON per line), each taken
// through the one admission path (admission/admit.ts) as an EVENT message is: shape, the relay's
// write rules, id and signature on the verifier's threads, the write-policy plugin when one is
// configured (many events in flight to it at once), then written in input order, in batches, by the
// bulk path (bulk-load.ts: the relay's own rules and locks, rows by COPY). A bad line is counted and
// reported with its number and never stops the import; an event the plugin could not judge (it kept
// failing) is counted as failed. Reading, checking and writing overlap: while batches are written,
// the next ones are read and checked. `sync` stores what it downloads through here too.
import type { Readable } from 'node:stream';
import type pg from 'pg';
import { Admission, type Answer } from '../admission/admit.js';
import { importSource, type EventSource } from '../admission/source.js';
import * as reason from '../nostr/reason.js';
import type { SignatureVerifier } from '../nostr/verifier.js';
import type { Policy } from '../policy/policy.js';
import type { WritePlugin } from '../policy/write-plugin.js';
import { bulkWrite, countAnswer, countReason, emptyCounts, OrderedSink, type ImportCounts } from './import-batch.js';
import { noProgress, type Progress } from './progress.js';

export { EPHEMERAL_NOT_STORED } from '../admission/admit.js';

export interface ImportJsonlOptions {
  /**
   * importSource(...) for `import`, syncSource(url) for `sync`: what the rules and the plugin are
   * told. Default: an import, its signatures checked when there is a verifier and trusted otherwise.
   */
  source?: EventSource;
  /** The relay's write rules, checked with the source's session (no connection, nobody authenticated). */
  policy: Policy;
  /** Checks signatures; a source whose signatures are trusted needs none (ids are always recomputed). */
  verifier?: SignatureVerifier;
  /** WRITE_POLICY_PLUGIN, when set. */
  plugin?: WritePlugin;
  /** Events per write transaction. */
  batchSize?: number;
  /** Told about every line not stored: invalid ones, those the relay rules refuse, those that failed. */
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

/** A batch of lines admitted: each line's number and its answer. */
type Admitted = Array<{ line: number; answer: Promise<Answer> }>;

/**
 * The lines of a byte stream (each ending in \n; the last may have no end), decoded as UTF-8, a
 * chunk's worth at a time, with the bytes the chunk held. A \r before the \n stays: JSON takes it as
 * whitespace. readline gave lines one at a time through an async iterator and a regular expression:
 * several promises and strings a line, ~6 % of the import's main thread, and more for the garbage
 * collector.
 */
async function* linesOf(input: Readable): AsyncGenerator<{ lines: string[]; bytes: number }> {
  let carry: Buffer | undefined;
  for await (const chunk of input) {
    const buf: Buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    const lines: string[] = [];
    let start = 0;
    for (let end = buf.indexOf(10); end !== -1; end = buf.indexOf(10, start)) {
      if (carry) {
        lines.push(Buffer.concat([carry, buf.subarray(0, end)]).toString('utf8'));
        carry = undefined;
      } else lines.push(buf.toString('utf8', start, end));
      start = end + 1;
    }
    if (start < buf.length) carry = carry ? Buffer.concat([carry, buf]) : buf.subarray(start);
    yield { lines, bytes: buf.length };
  }
  if (carry) yield { lines: [carry.toString('utf8')], bytes: 0 };
}

/** Batches read and being checked ahead of the last one handed to the writer (which writes two at a time). */
const AHEAD = 3;

export async function importJsonl(pool: pg.Pool, input: Readable, options: ImportJsonlOptions): Promise<ImportJsonlResult> {
  const batchSize = options.batchSize ?? 5000;
  const progress = options.progress ?? noProgress;
  const counts = emptyCounts();
  const started = Date.now();
  let lines = 0;
  let bytesRead = 0;
  let complete = true;
  if (options.totalBytes) progress.setTotal(options.totalBytes);
  const sink = new OrderedSink(bulkWrite(pool, { relay: options.policy.relay }), batchSize);
  const admission = new Admission({ policy: options.policy, verifier: options.verifier, plugin: options.plugin, sink });
  const source = options.source ?? importSource(options.verifier ? 'verify' : 'trust');

  // Each batch of lines is one write (the sink is flushed after it), its answers counted in order
  // once it is written. Reading runs up to AHEAD batches in front of the last one handed to the
  // writer, so the verifier's threads and the plugin always have work queued, while what waits for
  // the writer stays bounded.
  let counted: Promise<void> = Promise.resolve();
  let failure: { err: unknown } | undefined;
  const handedOver: Array<Promise<void>> = [];
  const countInOrder = async (batch: Admitted) => {
    const answers = await Promise.all(batch.map((b) => b.answer));
    answers.forEach((answer, i) => {
      const refused = countAnswer(counts, answer);
      if (refused !== undefined) options.onRefused?.(batch[i].line, refused);
    });
    progress.update(options.totalBytes ? Math.min(bytesRead, options.totalBytes) : counts.accepted + counts.duplicate + counts.invalid + counts.rejected + counts.failed);
  };
  const enqueue = async (batch: Admitted) => {
    handedOver.push(sink.flush());
    counted = counted.then(() => countInOrder(batch));
    counted.catch((err) => (failure ??= { err }));
    while (handedOver.length > AHEAD) await handedOver.shift();
    if (failure) throw failure.err;
  };

  let batch: Admitted = [];
  let lineNo = 0;
  try {
    reading: for await (const chunk of linesOf(input)) {
      bytesRead += chunk.bytes;
      for (const text of chunk.lines) {
        lineNo++;
        if (options.signal?.aborted) {
          complete = false;
          break reading;
        }
        if (text.trim() === '') continue;
        lines++;
        let event: unknown;
        try {
          event = JSON.parse(text);
        } catch {
          const why = reason.invalid('not valid JSON');
          countReason(counts, 'invalid', why);
          options.onRefused?.(lineNo, why);
          continue;
        }
        const answer = admission.admit(event, source);
        answer.catch(() => undefined); // awaited in countInOrder
        batch.push({ line: lineNo, answer });
        if (batch.length >= batchSize) {
          await enqueue(batch);
          batch = [];
        }
      }
    }
    await enqueue(batch);
    await counted;
  } finally {
    void sink.flush();
    await Promise.allSettled([...batch.map((b) => b.answer), counted]);
    progress.stop();
  }
  return { lines, ...counts, seconds: (Date.now() - started) / 1000, complete };
}
