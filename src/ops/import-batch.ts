// Where the importers' events go once admitted (admission/admit.ts): a sink that writes them in the
// order they arrived, in batches, whatever order their checks finish in, so the order-dependent rules
// (a deletion and its target, two versions of one address) give what publishing the events one by
// one would. The importers' batches are written by the bulk path (bulk-load.ts: the relay's locks and
// rules, rows by COPY); import-nostream's first phase encodes its rows for one load instead. Each
// answer is counted here.
import type pg from 'pg';
import { EPHEMERAL_NOT_STORED, type Answer, type EventSink, type SinkResult, type SinkSlot } from '../admission/admit.js';
import { addressOf } from '../store/plan-batch.js';
import type { NostrEvent, Verdict } from '../nostr/event.js';
import { prepareVerified, type PreparedEvent } from '../store/prepared-event.js';
import { BulkWriter, type BulkOptions } from './bulk-load.js';

export interface ImportCounts {
  /** Events stored. */
  accepted: number;
  /** Events already stored (or seen earlier in the input). */
  duplicate: number;
  /** Accepted versions of a replaceable/addressable event that took the place of an earlier version. */
  replaced: number;
  /** Not an event, or one the relay refuses on sight: bad JSON or shape, wrong id or signature, policy, a plugin's reject. */
  invalid: number;
  /** Valid events the relay rules refuse: an older version, deleted by its author, ephemeral, a plugin's shadowReject. */
  rejected: number;
  /** Not imported for no fault of theirs: the write-policy plugin could not judge them (it kept failing). */
  failed: number;
  /** invalid + rejected + failed, by reason. */
  reasons: Record<string, number>;
}

export const emptyCounts = (): ImportCounts => ({ accepted: 0, duplicate: 0, replaced: 0, invalid: 0, rejected: 0, failed: 0, reasons: {} });

/** Why an event the plugin shadow-rejected was not stored (counted with the rejected). */
export const SHADOW_REJECTED = 'shadowReject: kept out by the write policy plugin';

export function countReason(counts: ImportCounts, kind: 'invalid' | 'rejected' | 'failed', reason: string): void {
  counts[kind]++;
  // Reasons with a number in them ("more than 2000 tags") stay as they are: a handful of distinct ones.
  counts.reasons[reason] = (counts.reasons[reason] ?? 0) + 1;
}

/** Counts an admission's answer; returns the reason it was not stored (to report), or undefined. */
export function countAnswer(counts: ImportCounts, answer: Answer): string | undefined {
  switch (answer.outcome) {
    case 'stored':
    case 'passed':
      counts.accepted++;
      if (answer.replaced) counts.replaced++;
      return undefined;
    case 'duplicate':
      counts.duplicate++;
      return undefined;
    case 'shadowed':
      countReason(counts, 'rejected', SHADOW_REJECTED);
      return SHADOW_REJECTED;
    case 'rejected':
      countReason(counts, 'rejected', answer.reason);
      return answer.reason;
    case 'fault':
      countReason(counts, 'failed', answer.reason);
      return answer.reason;
    default:
      countReason(counts, 'invalid', answer.reason);
      return answer.reason;
  }
}

/** Writes a batch, in order, and answers each of its events. */
export type BatchWrite = (events: PreparedEvent[]) => Promise<SinkResult[]>;

/** One event's place: a slot (admit.ts) that hands what it is given to its sink, in its turn. */
class Place implements SinkSlot {
  state: 'open' | 'ready' | 'skipped' = 'open';
  event: NostrEvent | undefined;
  /** The verifier's serialisations of the event (its JSON and search words), when it checked it. */
  verdict: Verdict | undefined;
  resolve: ((result: SinkResult) => void) | undefined;
  reject: ((err: unknown) => void) | undefined;

  constructor(private readonly sink: OrderedSink) {}

  store(event: NostrEvent, verdict?: Verdict): Promise<SinkResult> {
    return new Promise<SinkResult>((resolve, reject) => {
      this.event = event;
      this.verdict = verdict;
      this.resolve = resolve;
      this.reject = reject;
      this.state = 'ready';
      this.sink.advance();
    });
  }

  // Never asked (passesOnEphemeral is false: admission refuses them first).
  passOn(): Promise<SinkResult> {
    this.skip();
    return Promise.resolve({ status: 'rejected', reason: EPHEMERAL_NOT_STORED });
  }

  skip(): void {
    this.state = 'skipped';
    this.sink.advance();
  }
}

/**
 * Places are handed out in arrival order; a batch is written once every place before its end is
 * settled (filled or skipped), when `flush()` asked for it or it reached `maxBatch`. Batches are
 * handed to `write` in order, at most `maxWrites` at once (the bulk writer overlaps two). A failed
 * write rejects its events' answers.
 */
export class OrderedSink implements EventSink {
  readonly passesOnEphemeral = false;
  private places: Place[] = [];
  /** Places before this index are settled and handed on. */
  private head = 0;
  /** The sequence number of places[0]. */
  private base = 0;
  private batch: Place[] = [];
  /** Where a flush was asked (a sequence number), in order, and who awaits its batch's turn. */
  private readonly flushes: Array<{ at: number; started: () => void }> = [];
  /** Whole batches waiting for a write to finish, and who awaits each one's turn. */
  private readonly waiting: Array<{ batch: Place[]; started: Array<() => void> }> = [];
  private writing = 0;

  constructor(
    private readonly write: BatchWrite,
    private readonly maxBatch: number,
    private readonly maxWrites = 2,
  ) {}

  slot(): SinkSlot {
    const place = new Place(this);
    this.places.push(place);
    return place;
  }

  /**
   * Everything handed out so far is written as soon as it is settled, however few. Resolves once
   * the last of it is being written: a reader that awaits this before reading on stays a bounded
   * distance ahead of the writes.
   */
  flush(): Promise<void> {
    return new Promise((started) => {
      this.flushes.push({ at: this.base + this.places.length, started });
      this.advance();
    });
  }

  /** Hands on every settled place from the head, and writes a batch when one is full or flushed. */
  advance(): void {
    const places = this.places;
    for (;;) {
      while (this.flushes.length > 0 && this.flushes[0].at <= this.base + this.head) {
        const { started } = this.flushes.shift()!;
        this.writeBatch(started);
      }
      if (this.head === places.length || places[this.head].state === 'open') break;
      const place = places[this.head++];
      if (place.state === 'ready') this.batch.push(place);
      if (this.batch.length >= this.maxBatch) this.writeBatch();
    }
    if (this.head > 4096 && this.head * 2 > places.length) {
      this.places = places.slice(this.head);
      this.base += this.head;
      this.head = 0;
    }
  }

  /** Queues the batch so far; `started` is told when it (or, if it is empty, every batch before it) is being written. */
  private writeBatch(started?: () => void): void {
    if (this.batch.length > 0) this.waiting.push({ batch: this.batch, started: [] });
    this.batch = [];
    if (started) {
      const last = this.waiting.at(-1);
      if (last) last.started.push(started);
      else started();
    }
    this.startWrites();
  }

  private startWrites(): void {
    while (this.writing < this.maxWrites && this.waiting.length > 0) {
      const { batch, started } = this.waiting.shift()!;
      this.writing++;
      for (const tell of started) tell();
      // Prepared only now, in the batch's turn, from what the verifier's threads made of each event
      // (its JSON and search words; not made again here, on the main thread).
      const written = Promise.resolve().then(() => this.write(batch.map((p) => prepareVerified(p.event!, p.verdict))));
      written.then(
        (results) => batch.forEach((p, i) => p.resolve!(results[i])),
        (err) => batch.forEach((p) => p.reject!(err)),
      ).finally(() => {
        this.writing--;
        this.startWrites();
      });
    }
  }
}

/** The importers' batch write: the bulk path, in order (BulkWriter overlaps two), with replacements marked. */
export function bulkWrite(pool: pg.Pool, bulk: BulkOptions): BatchWrite {
  const writer = new BulkWriter(pool, bulk);
  return async (events) => {
    const { results, hadVersion } = await writer.write(events);
    return results.map((r, i) => {
      if (r.status !== 'stored') return r;
      const address = addressOf(events[i]);
      if (address === undefined) return r;
      const replaced = hadVersion.has(address);
      hadVersion.add(address);
      return { status: 'stored', replaced };
    });
  };
}
