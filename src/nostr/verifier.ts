// Signature verification off the main thread: a worker pool sized to the cores, fed small batches
// (one message round trip per batch, not per event), so the event loop keeps serving sockets and
// queries while signatures are checked. The threads also serialise each valid event for storage and
// find its search words (verify-worker.ts): CPU the main thread would otherwise spend per event. With zero threads it verifies inline. Pure computation (no
// I/O), shared by the relay and the importers: the one module of nostr/ that starts threads.
import { availableParallelism } from 'node:os';
import path from 'node:path';
import { Piscina } from 'piscina';
import type { NostrEvent, Verdict } from './event.js';
import { checkEvent } from './verify-worker.js';
import { packageRoot } from '../paths.js';

const MAX_BATCH = 64;

// Workers load compiled JavaScript: the build of this file (tests run `npm run build` first), through
// a CommonJS entry (verify-worker-entry.cts says why).
const WORKER = path.join(packageRoot(), 'dist/src/nostr/verify-worker-entry.cjs');

interface Waiting {
  /** The event, or the text it came in (verify-worker.ts). */
  item: NostrEvent | string;
  resolve(verdict: Verdict): void;
  reject(err: unknown): void;
}

export class SignatureVerifier {
  private readonly pool: Piscina | undefined;
  private waiting: Waiting[] = [];
  private scheduled = false;
  private inFlight = 0;
  private readonly threads: number;
  /** Batches on the threads or queued in the pool. */
  private batches = 0;
  /** An event was checked on the calling thread in this turn of the event loop (verify). */
  private inlineThisTurn = false;
  private readonly newTurn = () => (this.inlineThisTurn = false);

  /** `threads`: worker threads; 'auto' = one per core; 0 = verify on the calling thread. */
  constructor(threads: number | 'auto') {
    const n = threads === 'auto' ? availableParallelism() : threads;
    this.threads = n;
    this.pool = n > 0 ? new Piscina({ filename: WORKER, minThreads: n, maxThreads: n, idleTimeout: 60_000 }) : undefined;
  }

  /** Events handed to verify() whose verdict has not come back yet. */
  get queued(): number {
    return this.inFlight;
  }

  /**
   * Resolves with the verdict: an `invalid:` reason, or the event's stored JSON and search words.
   * `text`: the JSON the event was parsed from (a client's whole EVENT message will do), which the
   * thread parses again rather than be sent the object.
   */
  verify(event: NostrEvent, text?: string): Promise<Verdict> {
    if (!this.pool) return Promise.resolve(checkEvent(event));
    // A lone event, with nothing queued or on the threads, is checked here at once (~0.1 ms): the
    // trip to a thread and back costs it two turns of the event loop, milliseconds on a loop busy
    // answering REQs. At most one a turn, so a burst still goes to the threads.
    if (this.inFlight === 0 && this.waiting.length === 0 && !this.inlineThisTurn) {
      this.inlineThisTurn = true;
      setImmediate(this.newTurn);
      return Promise.resolve(checkEvent(event));
    }
    this.inFlight++;
    return new Promise<Verdict>((resolve, reject) => {
      this.waiting.push({ item: text ?? event, resolve, reject });
      if (this.waiting.length >= MAX_BATCH) this.dispatch();
      else if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.dispatch());
      }
    });
  }

  /**
   * Sends the waiting events to the threads, in batches, with at most two batches a thread under
   * way: the rest wait here and leave as fuller batches when one comes back. Each batch costs the
   * main thread one message (bench:ingest: with a batch sent every turn, handing them over took
   * ~17 µs of the main thread per event).
   */
  private dispatch(): void {
    this.scheduled = false;
    while (this.waiting.length && this.batches < this.threads * 2) {
      const batch = this.waiting.splice(0, MAX_BATCH);
      this.batches++;
      this.pool!.run(batch.map((w) => w.item))
        .then(
          (verdicts: Verdict[]) => batch.forEach((w, i) => w.resolve(verdicts[i])),
          (err) => batch.forEach((w) => w.reject(err)),
        )
        .finally(() => {
          this.inFlight -= batch.length;
          this.batches--;
          this.dispatch();
        });
    }
  }

  async close(): Promise<void> {
    await this.pool?.destroy();
  }
}
