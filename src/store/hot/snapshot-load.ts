// A snapshot read back into a new tier (snapshot.ts), started as early as the process can: it needs
// no database, so `npm start` begins it before the embedded PostgreSQL is up (main.ts), and the
// service checks the result against the database once it starts (warm-start.ts, restore.ts).
import type { Logger } from '../../log.js';
import { renameSync } from 'node:fs';
import { dirname } from 'node:path';
import { claimSnapshot, removeFile, snapshotFile, type BucketPrint } from './restore.js';
import { SnapshotReader, type SnapshotHeader } from './snapshot.js';
import { HotTier } from './tier.js';

export interface LoadedSnapshot {
  /** Every event held and listed; the window and replaceableComplete already the snapshot's. */
  tier: HotTier;
  /** The snapshot's buckets' figures (restore.ts). */
  prints: Map<number, BucketPrint>;
  /** Milliseconds reading the file, then building the lists. */
  readMs: number;
  buildMs: number;
}

export class SnapshotLoad {
  /** The file's header (its buckets are known before its events), or undefined when it could not be opened. */
  readonly header: SnapshotHeader | undefined;
  /** Settles once read back (take() has it) or refused for another budget; rejects when it cannot be read (or was cancelled). */
  readonly loaded: Promise<void>;
  private result: LoadedSnapshot | undefined;
  /** Date.now() when the file was claimed. */
  readonly startedAt = Date.now();
  private cancelled = false;
  private finished = false;
  private readonly slices = new Slices();

  private constructor(
    readonly file: string,
    budgetBytes: number,
    log: Logger,
  ) {
    let reader: SnapshotReader | undefined;
    let failure: unknown;
    try {
      reader = SnapshotReader.open(file);
    } catch (err) {
      failure = err;
    }
    this.header = reader?.header;
    this.loaded = reader ? this.load(reader, budgetBytes, log) : Promise.reject(failure);
    this.loaded.catch(() => undefined); // the service awaits it
  }

  /** Claims the newest snapshot in `dir` (restore.ts) and starts reading it; undefined when there is none. */
  static begin(dir: string, budgetBytes: number, log: Logger): SnapshotLoad | undefined {
    const file = claimSnapshot(dir);
    return file === undefined ? undefined : new SnapshotLoad(file, budgetBytes, log);
  }

  /**
   * What was read back, once `loaded` has settled; undefined when it was refused. Handed over once:
   * nothing here keeps the tier (or the file's columns) alive after that.
   */
  take(): LoadedSnapshot | undefined {
    const result = this.result;
    this.result = undefined;
    return result;
  }

  /**
   * The relay serves (it listens, and PostgreSQL answers REQs until the tier is back): from now on
   * the read takes most of the main thread while REQs wait for it (Slices).
   */
  serving(): void {
    this.slices.serving = true;
  }

  /** Stops reading at the next turn of the event loop (`loaded` rejects). */
  cancel(): void {
    this.cancelled = true;
  }

  /**
   * The relay stops (or did not start) before the file was read back: reading stops and the file
   * goes back under a snapshot's name, for the next start. A no-op once done().
   */
  release(): void {
    this.cancel();
    this.result = undefined;
    if (this.finished) return;
    this.finished = true;
    try {
      renameSync(this.file, snapshotFile(dirname(this.file)));
    } catch {
      // removed already
    }
  }

  /** The file is no longer needed: read, refused or given up. */
  done(): void {
    this.cancel();
    this.result = undefined;
    this.finished = true;
    removeFile(this.file);
  }

  private async load(reader: SnapshotReader, budgetBytes: number, log: Logger): Promise<void> {
    try {
      const { header } = reader;
      const windowStart = header.windowStart ?? -Infinity;
      // Filled to another budget: a larger one would leave memory unused, a smaller one evict at once.
      if (header.heldBytes > budgetBytes || (windowStart !== -Infinity && header.heldBytes < 0.9 * budgetBytes)) {
        log.info({ snapshotMegabytes: Math.round(header.heldBytes / 2 ** 20), budgetMegabytes: Math.round(budgetBytes / 2 ** 20) }, 'hot tier: the snapshot was written for another HOT_TIER_MB; filling from the database');
        return;
      }
      log.info({ events: header.events, file: this.file }, 'hot tier reading its snapshot');
      // A turn of the event loop when this stretch of reading is over (Slices), or now (`now`).
      const turn = async (now = false) => {
        if (!now && !this.slices.due()) return;
        await this.slices.yield();
        if (this.cancelled) throw new Error('stopped');
      };
      await turn(true);
      const tier = new HotTier({ budgetBytes, expectedEvents: header.events });
      const { image, prints } = await reader.read(turn, (e, bytes) => tier.restoreEvent(e, bytes));
      const readAt = Date.now();
      for (const _ of tier.restoreLists(image)) await turn();
      if (!this.cancelled) this.result = { tier, prints, readMs: readAt - this.startedAt, buildMs: Date.now() - readAt };
    } finally {
      reader.close();
    }
  }
}

/**
 * When the read lets the event loop turn. While the relay starts, every few milliseconds: the start
 * (PostgreSQL, migrations, the listening socket) goes first, and the relay listens as soon as it
 * would without a snapshot. Once it serves, REQs arrive that PostgreSQL answers, at a fifth of the
 * tier's speed, until the tier is back: each stretch of reading then lasts SHARE times what the
 * rest of the process took in the turn before (within bounds). So the REQs that arrive during a
 * restart stretch it less (docs/benchmarks.md, a restart), and an idle relay's read turns as often
 * as before.
 */
export class Slices {
  static readonly MIN_MS = 8;
  static readonly MAX_MS = 100;
  static readonly SHARE = 4;
  serving = false;
  private sliceStart: number;
  private slice = Slices.MIN_MS;

  constructor(private readonly now: () => number = () => performance.now()) {
    this.sliceStart = now();
  }

  /** Whether this stretch of reading is over. */
  due(): boolean {
    return this.now() - this.sliceStart >= this.slice;
  }

  /** One turn of the event loop, then the next stretch. */
  async yield(): Promise<void> {
    const yielded = this.now();
    await new Promise((next) => setImmediate(next));
    this.next(this.now() - yielded);
  }

  /** A stretch of reading starts now, after a turn in which the rest of the process took `othersMs`. */
  next(othersMs: number): void {
    this.sliceStart = this.now();
    this.slice = this.serving ? Math.min(Slices.MAX_MS, Math.max(Slices.MIN_MS, Slices.SHARE * othersMs)) : Slices.MIN_MS;
  }
}
