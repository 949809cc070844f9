// Signature verification off the main thread: a worker pool sized to the cores, fed small batches
// (one message round trip per batch, not per event), so the event loop keeps serving sockets and
// queries while signatures are checked. With zero threads it verifies inline. Pure computation (no
// I/O), shared by the relay and the importers: the one module of nostr/ that starts threads.
import { availableParallelism } from 'node:os';
import path from 'node:path';
import { Piscina } from 'piscina';
import { checkIdAndSignature, type NostrEvent } from './event.js';
import { packageRoot } from '../paths.js';

const MAX_BATCH = 64;

// Workers load compiled JavaScript: the build of this file (tests run `npm run build` first), through
// a CommonJS entry (verify-worker-entry.cts says why).
const WORKER = path.join(packageRoot(), 'dist/src/nostr/verify-worker-entry.cjs');

interface Waiting {
  event: NostrEvent;
  resolve(reason: string | undefined): void;
  reject(err: unknown): void;
}

export class SignatureVerifier {
  private readonly pool: Piscina | undefined;
  private waiting: Waiting[] = [];
  private scheduled = false;
  private inFlight = 0;

  /** `threads`: worker threads; 'auto' = one per core; 0 = verify on the calling thread. */
  constructor(threads: number | 'auto') {
    const n = threads === 'auto' ? availableParallelism() : threads;
    this.pool = n > 0 ? new Piscina({ filename: WORKER, minThreads: n, maxThreads: n, idleTimeout: 60_000 }) : undefined;
  }

  /** Events handed to verify() whose verdict has not come back yet. */
  get queued(): number {
    return this.inFlight;
  }

  /** Resolves with an `invalid:` reason, or undefined when the id and signature are right. */
  verify(event: NostrEvent): Promise<string | undefined> {
    if (!this.pool) return Promise.resolve(checkIdAndSignature(event));
    this.inFlight++;
    return new Promise<string | undefined>((resolve, reject) => {
      this.waiting.push({ event, resolve, reject });
      if (this.waiting.length >= MAX_BATCH) this.dispatch();
      else if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.dispatch());
      }
    });
  }

  private dispatch(): void {
    this.scheduled = false;
    const batch = this.waiting.splice(0, MAX_BATCH);
    if (batch.length === 0) return;
    this.pool!.run(batch.map((w) => w.event)).then(
      (reasons: Array<string | undefined>) => batch.forEach((w, i) => w.resolve(reasons[i])),
      (err) => batch.forEach((w) => w.reject(err)),
    ).finally(() => (this.inFlight -= batch.length));
    if (this.waiting.length) this.dispatch();
  }

  async close(): Promise<void> {
    await this.pool?.destroy();
  }
}
