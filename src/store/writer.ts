// Group commit: events arriving close together are written in one transaction (write-batch.ts), so
// one fsync acknowledges many events (../shared/perf-notes.md: ~270 events/s with a commit per event,
// ~8,800/s in batches). Each caller's promise settles only after its batch has committed.
import type pg from 'pg';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import { inSqlStateClass, isUnavailable } from './pg-errors.js';
import type { PreparedEvent, WriteResult } from './prepared-event.js';
import type { ChangeStream } from './changes.js';
import { vanishNamesRelay } from '../policy/vanish.js';
import { writeBatchStored, type Outbox, type OwnTransactions } from './write.js';

export class WriterBusyError extends Error {}

interface Pending {
  event: PreparedEvent;
  /** performance.now() past which it is answered with the error rather than retried. */
  deadline: number;
  resolve(result: WriteResult): void;
  reject(err: unknown): void;
}

export interface WriterStats {
  batches: number;
  events: number;
  failedBatches: number;
  /** Batches tried again after the database was unavailable. */
  retries: number;
}

/** SQLSTATE classes 22 (data exception) and 23 (integrity): caused by some event, not the database. */
const isDataError = (err: unknown) => inSqlStateClass(err, '22', '23');

export interface WriterOptions {
  /** Events per transaction (1 turns batching off). */
  maxBatch?: number;
  /** Events waiting for a transaction; beyond it, submit() refuses. */
  maxQueue?: number;
  /**
   * Transactions in flight at once. More overlap one batch's commit with the next one's inserts but
   * split arrivals into smaller batches (bench:ingest measures both). Concurrent batches stay
   * correct: each locks the keys it touches (write.ts), so conflicting events still serialise.
   */
  concurrency?: number;
  /** Told what each committed batch stored (store/changes.ts). */
  changes?: ChangeStream;
  /** Told each transaction's id before it commits (feed.ts: not to announce it twice). */
  own?: OwnTransactions;
  /** This relay's name, for NIP-62 requests (policy.relay). */
  relay?: string;
  /** Webhooks: deliveries enqueued with each batch (store/outbox.ts). */
  outbox?: Outbox;
  /** Told each transaction's size and time, committed or not (metrics). */
  onBatch?: (batch: { events: number; seconds: number; committed: boolean }) => void;
  /**
   * While the database is unavailable (restarting, failing over), a batch is tried again until its
   * events have waited this long since submit; then they are answered with the error. 0: no retry.
   */
  retryMs?: number;
}

/** The batching limits as configured (WRITE_BATCH_SIZE, WRITE_QUEUE_MAX, WRITE_CONCURRENCY). */
export function writerLimits(
  config: Pick<Config, 'WRITE_BATCH_SIZE' | 'WRITE_QUEUE_MAX' | 'WRITE_CONCURRENCY' | 'WRITE_TIMEOUT_MS'>,
): Pick<WriterOptions, 'maxBatch' | 'maxQueue' | 'concurrency' | 'retryMs'> {
  return { maxBatch: config.WRITE_BATCH_SIZE, maxQueue: config.WRITE_QUEUE_MAX, concurrency: config.WRITE_CONCURRENCY, retryMs: config.WRITE_TIMEOUT_MS };
}

/** The first retry of a batch the database could not take, doubling up to RETRY_MAX_MS. */
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 1000;

export class EventWriter {
  private queue: Pending[] = [];
  private readonly flushing = new Set<Promise<void>>();
  /** Requests to vanish written beside the batches (writeAside). */
  private readonly aside = new Set<Promise<void>>();
  readonly stats: WriterStats = { batches: 0, events: 0, failedBatches: 0, retries: 0 };
  private readonly maxBatch: number;
  private readonly maxQueue: number;
  private readonly concurrency: number;
  /** stopRetrying() was called: failed batches are answered, not tried again. */
  private stopped = false;

  constructor(
    private readonly pool: pg.Pool,
    private readonly log: Logger,
    private readonly options: WriterOptions = {},
  ) {
    this.maxBatch = options.maxBatch ?? 500;
    this.maxQueue = options.maxQueue ?? 20_000;
    this.concurrency = options.concurrency ?? 1;
  }

  get queued(): number {
    return this.queue.length;
  }

  /** Resolves with the event's outcome once its transaction has committed. */
  submit(event: PreparedEvent): Promise<WriteResult> {
    if (this.queue.length >= this.maxQueue) return Promise.reject(new WriterBusyError('write queue is full'));
    return new Promise((resolve, reject) => {
      this.queue.push({ event, resolve, reject, deadline: performance.now() + (this.options.retryMs ?? 0) });
      if (this.flushing.size < this.concurrency) {
        // Written as soon as this turn's microtasks are done: an event alone (a quiet relay) goes at
        // once, rather than a turn of the event loop later, milliseconds on a loop busy with REQs;
        // the events that arrive while its transaction runs form the next batch.
        const loop: Promise<void> = new Promise<void>((done) => queueMicrotask(() => void this.flushLoop().finally(done))).finally(() =>
          this.flushing.delete(loop),
        );
        this.flushing.add(loop);
      }
    });
  }

  /** Waits until every submitted event has been written (or has failed). */
  async drain(): Promise<void> {
    while (this.flushing.size || this.aside.size) await Promise.all([...this.flushing, ...this.aside]);
  }

  /** Takes batches while there are events: whatever arrived during the last commit forms the next. */
  private async flushLoop(): Promise<void> {
    while (this.queue.length) {
      const batch = this.queue.splice(0, this.maxBatch);
      const at = batch.findIndex((p) => vanishNamesRelay(p.event.event, this.options.relay));
      if (at < 0) {
        await this.write(batch);
        continue;
      }
      if (at > 0) await this.write(batch.slice(0, at));
      this.queue.unshift(...batch.slice(at + 1));
      await this.writeAside(batch[at]);
    }
  }

  /**
   * A NIP-62 request to vanish may delete a million rows (seconds): it gets its own transaction beside
   * the batches that follow. Once it holds its locks (write.ts takeLocks: its pubkey's key), those
   * batches go on; one with an event it covers waits for that key, and then sees the tombstone.
   */
  private async writeAside(request: Pending): Promise<void> {
    let locked!: () => void;
    const holdsLocks = new Promise<void>((resolve) => (locked = resolve));
    const written: Promise<void> = this.write([request], locked).finally(() => this.aside.delete(written));
    this.aside.add(written);
    await Promise.race([holdsLocks, written]);
  }

  /**
   * One transaction for the batch. A data error splits it (one bad event must not fail its
   * neighbours); the database being unavailable retries it until its events' deadlines, so a restart
   * or a failover costs them a wait, not an error. A retry is idempotent: an event the failed attempt
   * committed after all (its answer lost with the connection) is found stored and answered as such,
   * and the feed delivers it (own.release in write.ts).
   */
  private async write(batch: Pending[], onLocked?: () => void): Promise<void> {
    for (let waitMs = RETRY_FIRST_MS; ; waitMs = Math.min(waitMs * 2, RETRY_MAX_MS)) {
      const started = performance.now();
      try {
        const options = { own: this.options.own, relay: this.options.relay, outbox: this.options.outbox, onLocked };
        const { results, stored, lsn } = await writeBatchStored(this.pool, batch.map((p) => p.event), options);
        // Before any OK: a client that sends a REQ after its OK must find a replica that has its event.
        this.options.changes?.advance(lsn);
        this.stats.batches++;
        this.stats.events += batch.length;
        this.options.onBatch?.({ events: batch.length, seconds: (performance.now() - started) / 1000, committed: true });
        batch.forEach((p, i) => p.resolve(results[i]));
        this.options.changes?.publish({ type: 'stored', events: stored, source: 'local' });
        return;
      } catch (err) {
        this.options.onBatch?.({ events: batch.length, seconds: (performance.now() - started) / 1000, committed: false });
        this.stats.failedBatches++;
        if (batch.length > 1 && isDataError(err)) {
          const half = Math.ceil(batch.length / 2);
          await this.write(batch.slice(0, half));
          await this.write(batch.slice(half));
          return;
        }
        const now = performance.now();
        const retry = isUnavailable(err) && !this.stopped ? batch.filter((p) => p.deadline > now + waitMs) : [];
        this.log.warn({ err: (err as Error).message, events: batch.length, retrying: retry.length }, 'write batch failed');
        for (const p of batch) if (!retry.includes(p)) p.reject(err);
        if (retry.length === 0) return;
        this.stats.retries++;
        batch = retry;
        await new Promise((r) => setTimeout(r, waitMs));
      }
    }
  }

  /** Batches waiting to be retried are answered with their error instead (the relay is stopping). */
  stopRetrying(): void {
    this.stopped = true;
  }
}
