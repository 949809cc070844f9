// The hot tier kept current: the newest events held in memory (tier.ts), answering the REQ
// filters whose answer lies inside its window; PostgreSQL stays the source of truth.
//
// - Filled at start from PostgreSQL in two passes read at once, each one statement read in batches
//   (fill.ts), a batch per turn of the event loop: every event newest first, until the budget
//   (HOT_TIER_MB) or the end of the table, the tier answering what its window already covers; and
//   every replaceable event (profiles, follow lists …: a few percent of a store), after which
//   filters of authors and replaceable kinds are answered from memory whatever the window. What
//   other writers commit or delete meanwhile is not in those statements' snapshots: it comes
//   through the change stream, as always.
// - Or, with a snapshot folder (HOT_TIER_SNAPSHOT), read back from the snapshot the last stop wrote
//   and checked against PostgreSQL (warm-start.ts), which also writes it at stop; the fill runs when
//   there is none, or it cannot be read or is not worth it.
// - Kept current from the change stream: what this process's writer stored, what the feed read from
//   other writers (processes, hosts, imports), and what anyone deleted (the feed's `removed`, read
//   from event_removals: kind 5, replaced versions, vanish, prune, purges, the expiry sweep).
// - Exact at the moment of each REQ: whatever any writer had committed by the time it arrived is in
//   the tier before it is answered (removals included). That takes no read while the feed has read
//   every commit it heard of: one round trip on the feed's LISTEN connection shows none is on its
//   way; one that is, or no LISTEN connection, is waited for (fresh(), and the top of feed.ts).
// - A removal that reaches an event added moments before may be out of order with a re-insert of
//   the same id (pruned, then published again): such ids are checked against the database.
import type pg from 'pg';
import type { Logger } from '../../log.js';
import type { Filter } from '../../nostr/filter.js';
import type { Change, ChangeStream } from '../changes.js';
import type { ChangeFeed } from '../feed.js';
import { REMOVALS_KEEP_MINUTES } from '../feed.js';
import type { PreparedEvent } from '../prepared-event.js';
import type { StoredRow } from '../read.js';
import { FILL_BATCH_ROWS, prepareHeld, readBatches, readNewestFirst, REPLACEABLE_SQL, type DuringFill } from './fill.js';
import { SnapshotLoad } from './snapshot-load.js';
import { HotTier } from './tier.js';
import { restoreSnapshot, saveSnapshot } from './warm-start.js';

/** Events evicted per turn of the event loop: about 2.5 ms (4-5 µs each, measured at 1M held). */
const EVICT_PER_TURN = 500;
/** A removal of an event added this recently is checked against the database (see above). */
const RECENT_MS = 60_000;
/** Without a completed feed read for this long, removals may have been swept unread: start again. */
const STALE_FEED_MS = (REMOVALS_KEEP_MINUTES / 2) * 60_000;
/** How long a REQ waits for the tier to catch up before PostgreSQL answers it instead. */
const FRESH_TIMEOUT_MS = 2000;
/**
 * A freshness timer that fires later than this after its time says the relay itself was held up (a
 * long collection of a large heap, a burst of work), not the database: see fresh().
 */
const STALLED_MS = 250;

/** What the tier could answer of a REQ, and what is left for PostgreSQL. */
export interface TierPlan {
  /** The union of the answered filters' rows, in result order, each event once. */
  rows: StoredRow[];
  /** Filters memory could not answer exactly. */
  rest: Filter[];
}

export interface HotTierStats {
  events: number;
  bytes: number;
  windowStart: number;
  filling: boolean;
  /** Every stored replaceable event's current version is held (the fill's first pass is over). */
  replaceableComplete: boolean;
  /** Where the tier was last filled from: the database (the fill), or a snapshot read back and checked. */
  filledFrom: 'database' | 'snapshot' | undefined;
}

export class HotTierService {
  private tier: HotTier;
  private filling = false;
  private filledFrom: HotTierStats['filledFrom'];
  /** A snapshot being read back. */
  private loading: SnapshotLoad | undefined;
  private fillGeneration = 0;
  /** Set while the fill reads (see DuringFill). */
  private during: DuringFill | undefined;
  /**
   * The created_at of the last row the fill has read: that second may be only partly read, and an
   * event stored at or above it meanwhile is not in the rows still to come: it is held at once.
   */
  private boundary: number | undefined;
  /** When each event held was added through the change stream (for the recent-removal check). */
  private readonly recentlyAdded = new Map<string, number>();
  private checking: Promise<void> = Promise.resolve();
  /** The wait REQs share: the feed's promise they wait on, and theirs (fresh). */
  private freshness: { key: Promise<unknown>; fresh: Promise<boolean> } | undefined;
  private evicting = false;
  private unsubscribe: (() => void) | undefined;
  private stopped = false;
  private readonly timer: NodeJS.Timeout;
  /** `unreachable`: REQs answered from memory while the database could not be read. */
  readonly stats = { memory: 0, database: 0, mixed: 0, counts: 0, unreachable: 0 };

  constructor(
    private readonly pool: pg.Pool,
    private readonly changes: ChangeStream,
    private readonly feed: ChangeFeed,
    private readonly log: Logger,
    private readonly budgetBytes: number,
    /** How long a REQ waits for the tier to catch up (tests shorten it). */
    private readonly freshTimeoutMs = FRESH_TIMEOUT_MS,
    /** Rows per batch of the fill (tests make it small). */
    private readonly fillBatchRows = FILL_BATCH_ROWS,
    /** Where the tier is written at stop and read back at start (HOT_TIER_SNAPSHOT); undefined: never. */
    private readonly snapshotDir?: string,
  ) {
    this.tier = new HotTier({ budgetBytes });
    this.timer = setInterval(() => this.housekeeping(), 5000);
    this.timer.unref();
  }

  /** `snapshot`: a snapshot already being read back (main.ts starts it before the database). */
  start(snapshot?: SnapshotLoad): this {
    this.unsubscribe = this.changes.subscribe((change) => this.apply(change));
    void this.begin(snapshot);
    return this;
  }

  /** From the snapshot the last stop wrote, checked against the database (warm-start.ts); else (or if that fails) by the fill. */
  private async begin(snapshot?: SnapshotLoad): Promise<void> {
    const load = snapshot ?? (this.snapshotDir === undefined ? undefined : SnapshotLoad.begin(this.snapshotDir, this.budgetBytes, this.log));
    if (load !== undefined) {
      this.loading = load;
      const generation = ++this.fillGeneration;
      this.filling = true;
      // Before the statement snapshot: what is committed after it is announced after this.
      const during: DuringFill = (this.during = { removed: new Set(), waiting: new Map() });
      try {
        const tier = await restoreSnapshot(this.pool, load, during, () => !this.stopped && generation === this.fillGeneration, this.log);
        if (tier) {
          this.tier = tier;
          this.filling = false;
          this.filledFrom = 'snapshot';
          this.evictLater();
          return;
        }
      } catch (err) {
        if (!this.stopped) this.log.warn({ err: (err as Error).message, file: load.file }, 'hot tier: the snapshot could not be read back; filling from the database');
      } finally {
        // Stopped before it was read back: the file stays for the next start.
        if (this.stopped) load.release();
        else load.done();
        this.loading = undefined;
        if (generation === this.fillGeneration) {
          this.filling = false;
          this.during = undefined;
        }
      }
      if (this.stopped || generation !== this.fillGeneration) return;
    }
    await this.fill();
  }

  /**
   * Stops keeping the tier current; with a snapshot folder, writes what the tier holds there first
   * (not while it fills: the next start fills instead).
   */
  stop(): void {
    if (!this.stopped && this.snapshotDir !== undefined && !this.filling) saveSnapshot(this.tier, this.snapshotDir, this.log);
    this.stopped = true;
    this.loading?.cancel();
    this.unsubscribe?.();
    clearInterval(this.timer);
  }

  get current(): HotTierStats {
    return { events: this.tier.size, bytes: this.tier.bytes, windowStart: this.tier.windowStart, filling: this.filling, replaceableComplete: this.tier.replaceableComplete, filledFrom: this.filledFrom };
  }

  private apply(change: Change): void {
    if (change.type === 'stored') {
      const now = Date.now();
      for (const p of change.events) {
        if (this.during && p.event.created_at < this.tier.windowStart) this.holdDuringFill(p);
        else this.tier.add(p);
        this.recentlyAdded.set(p.event.id, now);
      }
      if (!this.filling) this.evictLater(); // the fill evicts once it ends: the tier cannot fill below what it evicted
    } else if (change.type === 'removed') {
      const recent = change.ids.filter((id) => this.recentlyAdded.has(id));
      this.forget(recent.length ? change.ids.filter((id) => !this.recentlyAdded.has(id)) : change.ids);
      if (recent.length) this.checking = this.checking.then(() => this.check(recent));
    }
  }

  /**
   * An event stored while the fill reads, older than the window: at or above the last row read, the
   * rows still to come cannot hold it (committed after the fill's snapshot, or read already), so it
   * is held now, below the window as a fill row would be; older, it waits for the window.
   */
  private holdDuringFill(p: PreparedEvent): void {
    if (this.boundary !== undefined && p.event.created_at >= this.boundary) this.tier.addOlder([p], false);
    else {
      // A replaceable version is its author's current one at once (the first pass holds them all),
      // and waits like any other event to be filed in the lists when the window reaches it.
      if (p.kindClass === 'replaceable') this.tier.preHold(p);
      this.during!.waiting.set(p.event.id, p);
    }
  }

  /** Events deleted in the database: out of the tier, and out of what the fill has yet to hold. */
  private forget(ids: string[]): void {
    this.tier.remove(ids);
    if (this.during)
      for (const id of ids) {
        this.during.removed.add(id);
        this.during.waiting.delete(id);
      }
  }

  /**
   * Ids removed soon after they were added: the removal may predate a re-insert that was announced
   * first. The database says which is true; until it has, REQs wait (see `fresh`).
   */
  private async check(ids: string[]): Promise<void> {
    try {
      const { rows } = await this.pool.query<{ id: string }>(`SELECT encode(id, 'hex') AS id FROM events WHERE id = ANY($1::bytea[])`, [ids.map((id) => Buffer.from(id, 'hex'))]);
      const present = new Set(rows.map((r) => r.id));
      this.forget(ids.filter((id) => !present.has(id)));
    } catch (err) {
      // Unknown: the safe answer is to forget them (PostgreSQL answers for them from now on).
      this.log.warn({ err: (err as Error).message }, 'hot tier: checking removed events failed; starting over');
      this.restart();
    }
  }

  /**
   * True once the tier holds everything committed before this call (see the top of feed.ts for
   * what that covers exactly); false if that takes over freshTimeoutMs (the database is slow or
   * down: PostgreSQL answers, or fails, as without a tier). While the feed listens and has read
   * every commit it heard of, that is one round trip on its LISTEN connection, shared by every REQ
   * that arrives before it is sent; a commit heard of and not yet read is waited for (its read
   * starts at once). Without a LISTEN connection, a feed read that began after this call is
   * waited for, shared by every REQ until that read starts.
   */
  fresh(): Promise<boolean> {
    // The database cannot be read (restarting, failing over): memory answers with every event this
    // process wrote or read before (docs/ha.md), rather than the REQ failing on PostgreSQL.
    if (!this.feed.reachable) {
      this.stats.unreachable++;
      return Promise.resolve(true);
    }
    if (!this.feed.listening) {
      const read = this.feed.nextRead();
      this.feed.requestRead();
      return this.sharedWait(read, () => read.then(nextTurn));
    }
    const heard = this.feed.heardUpToNow();
    return this.sharedWait(heard, () => heard.then(() => this.readWhatWasHeard()));
  }

  /**
   * After heardUpToNow: nothing more when the feed has read (and the tier applied) every commit it
   * heard of; else that read.
   */
  private async readWhatWasHeard(): Promise<void> {
    if (this.feed.current) return;
    if (this.feed.listening) return this.feed.caughtUp();
    const read = this.feed.nextRead(); // the connection was lost meanwhile: a read after this
    this.feed.requestRead();
    await read;
    await nextTurn();
  }

  /** One wait, and one timer, for every REQ that waits on the same promise of the feed. */
  private sharedWait(key: Promise<unknown>, wait: () => Promise<unknown>): Promise<boolean> {
    if (this.freshness?.key !== key) this.freshness = { key, fresh: this.withTimeout(wait()) };
    return this.freshness.fresh;
  }

  private withTimeout(wait: Promise<unknown>): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      let due = performance.now() + this.freshTimeoutMs;
      const expire = () => {
        // Fired late: the event loop was held up, and the read may have finished meanwhile, its
        // answer not yet read from the socket. Giving up then sent every REQ waiting at that moment
        // to PostgreSQL at once (~200 at the ladder's 200-VU step, twice, each taking seconds there,
        // p99 4-5 s). The database gets its time again.
        const now = performance.now();
        if (now - due > STALLED_MS) {
          due = now + this.freshTimeoutMs;
          timer = setTimeout(expire, this.freshTimeoutMs);
        } else {
          // Slow: PostgreSQL answers. Unreachable: memory answers, as for the REQs that follow.
          if (!this.feed.reachable) this.stats.unreachable++;
          resolve(!this.feed.reachable);
        }
      };
      let timer = setTimeout(expire, this.freshTimeoutMs);
      // Then the checks of removed ids it may have started.
      void wait
        .then(() => this.checking)
        .then(() => {
          clearTimeout(timer);
          resolve(true);
        });
    });
  }

  /** The part of a REQ memory answers exactly, after waiting until the tier is fresh. */
  async plan(filters: Filter[], now: number): Promise<TierPlan> {
    if (this.tier.windowStart === Infinity || !(await this.fresh())) {
      this.stats.database++;
      return { rows: [], rest: filters };
    }
    const rest: Filter[] = [];
    const answers: StoredRow[][] = [];
    for (const f of filters) {
      const rows = this.tier.answer(f, now);
      if (rows === undefined) rest.push(f);
      else answers.push(rows);
    }
    if (answers.length === 0) this.stats.database++;
    else if (rest.length) this.stats.mixed++;
    else this.stats.memory++;
    // One filter's answer is already in result order, each event once: only a union is merged.
    const rows = answers.length === 1 ? answers[0] : inResultOrder(answers.flat());
    return { rows, rest };
  }

  /** NIP-45 COUNT from memory, or undefined (PostgreSQL counts it). */
  async count(filters: Filter[], now: number): Promise<number | undefined> {
    if (this.tier.windowStart === Infinity || !(await this.fresh())) return undefined;
    const n = this.tier.count(filters, now);
    if (n !== undefined) this.stats.counts++;
    return n;
  }

  /**
   * Newest first, until the budget or the end of the table: the rows of one snapshot (fill.ts), a
   * batch at a time, with what the change stream brings meanwhile (DuringFill).
   */
  private async fill(): Promise<void> {
    const generation = ++this.fillGeneration;
    const current = () => !this.stopped && generation === this.fillGeneration;
    this.filling = true;
    this.log.info({ budgetMegabytes: Math.round(this.budgetBytes / 2 ** 20) }, 'hot tier filling');
    const started = Date.now();
    // Before the statement starts: what is committed after its snapshot is announced after this.
    const during: DuringFill = (this.during = { removed: new Set(), waiting: new Map() });
    try {
      // The two passes read at once, each on its own connection: the newest events are answered
      // from memory as soon as the newest-first pass holds them, the replaceable versions as soon
      // as the first pass has read them all (PostgreSQL finds those a few at a time across the table).
      const first = this.fillReplaceable(current, during);
      first.catch(() => undefined); // awaited below, after the newest-first pass
      const end = await readNewestFirst(this.pool, (raws) => {
        if (!current()) return false;
        const page: PreparedEvent[] = [];
        let last: PreparedEvent | undefined;
        for (const raw of raws) {
          last = prepareHeld(raw);
          if (!during.removed.has(last.event.id)) page.push(last);
        }
        this.tier.addOlder(page, false);
        if (last) this.boundary = last.event.created_at;
        for (const p of during.waiting.values())
          if (p.event.created_at >= this.boundary!) {
            during.waiting.delete(p.event.id);
            this.holdDuringFill(p);
          }
        return this.tier.bytes < this.budgetBytes;
      }, undefined, this.fillBatchRows);
      await first;
      if (!current()) return;
      if (end) {
        this.tier.addOlder([], true);
        for (const p of during.waiting.values()) this.tier.add(p);
      }
      this.tier.listUnlisted();
      this.filledFrom = 'database';
      this.log.info({ events: this.tier.size, megabytes: Math.round(this.tier.bytes / 2 ** 20), windowStart: this.tier.windowStart, seconds: (Date.now() - started) / 1000 }, 'hot tier filled');
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'hot tier: fill failed; PostgreSQL answers until it is retried');
      if (generation === this.fillGeneration) setTimeout(() => this.restart(), 5000).unref();
    } finally {
      if (generation === this.fillGeneration) {
        this.during = this.boundary = undefined;
        this.filling = false;
      }
    }
    this.evictLater();
  }

  /**
   * The fill's first pass: every stored replaceable event held as its author's version (preHold),
   * then tier.replaceableComplete. Given up (the versions not yet in the lists dropped) once the
   * tier reaches its budget: it will evict the oldest events, replaceable versions among them.
   */
  private async fillReplaceable(current: () => boolean, during: DuringFill): Promise<void> {
    let within = true;
    await readBatches(
      this.pool,
      REPLACEABLE_SQL,
      (raws) => {
        if (!current()) return false;
        for (const raw of raws) {
          const p = prepareHeld(raw);
          if (!during.removed.has(p.event.id)) this.tier.preHold(p);
        }
        within = this.tier.bytes < this.budgetBytes;
        return within;
      },
      undefined,
      this.fillBatchRows,
    );
    if (!current()) return;
    if (within) this.tier.replaceableComplete = true;
    else this.tier.dropUnlisted();
    this.log.info({ events: this.tier.size, complete: within }, 'hot tier: replaceable events held');
  }

  /** Forgets everything and fills again. */
  private restart(): void {
    if (this.stopped) return;
    this.tier = new HotTier({ budgetBytes: this.budgetBytes });
    this.recentlyAdded.clear();
    void this.fill();
  }

  private evictLater(): void {
    if (this.evicting || this.tier.bytes <= this.budgetBytes) return;
    this.evicting = true;
    const step = () => {
      if (this.stopped) return;
      if (this.tier.evict(EVICT_PER_TURN)) setImmediate(step);
      else this.evicting = false;
    };
    setImmediate(step);
  }

  private housekeeping(): void {
    const cutoff = Date.now() - RECENT_MS;
    for (const [id, at] of this.recentlyAdded) {
      if (at >= cutoff) break; // in insertion order: the rest is newer
      this.recentlyAdded.delete(id);
    }
    // While the database cannot be read, the tier keeps answering with what it holds (docs/ha.md);
    // the first read after minutes without one starts it again.
    const lastRead = this.feed.lastReadAt;
    const gap = this.feed.reachable ? Date.now() - this.seenReadAt : 0;
    if (this.feed.reachable) this.seenReadAt = lastRead;
    if (gap > STALE_FEED_MS) {
      this.log.warn('hot tier: no feed read for minutes (removals may have been missed); filling again');
      this.seenReadAt = this.feed.lastReadAt = Date.now();
      this.restart();
    }
  }

  /** The feed's last read as housekeeping last saw it while the database could be read. */
  private seenReadAt = Date.now();
}

/**
 * One turn of the event loop: the change stream delivers on the next turn (changes.ts), so what a
 * read or this process's writer published before now is in the tier after it.
 */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

const CREATED_AT = /"created_at":(\d+)/;
/** Canonical event JSON (nostr/event.ts) has created_at as a plain integer. */
export function createdAtOf(raw: string): number {
  return Number(CREATED_AT.exec(raw)?.[1] ?? 0);
}

export function resultOrder(a: { id: string; createdAt: number }, b: { id: string; createdAt: number }): number {
  return b.createdAt - a.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/** Rows from several answers as one: each event once, newest first, ties to the lowest id. */
export function inResultOrder(rows: StoredRow[]): StoredRow[] {
  const union = new Map<string, StoredRow & { createdAt: number }>();
  for (const row of rows) if (!union.has(row.id)) union.set(row.id, { ...row, createdAt: createdAtOf(row.raw) });
  return [...union.values()].sort(resultOrder);
}
