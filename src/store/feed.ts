// Live delivery across processes and hosts: what other writers commit (a second relay process, another
// host, `import`, psql) is announced on this process's change stream (changes.ts), each event once.
//
// Every row inserted into events carries the id of its transaction (`txid`) and a sequence number
// (`seq`), and each transaction that stores events sends one NOTIFY naming its txid (migration
// 20261226000001_live_feed). A notification only says "look": this process then reads the rows
// itself, so a notification missed while the LISTEN connection was down costs nothing but latency.
//
// Exactly once, although transactions commit out of their txid order: the feed keeps a horizon, a
// txid below which every transaction has been delivered, and the set of transactions at or above it
// it has already delivered (including this process's own, which the writer claims before COMMIT and
// announces itself; a batch written in one round trip is settled after its COMMIT instead, and
// announced by whichever of the writer and a read gets there first: see expect and settle). Each
// read takes the rows of undelivered transactions from the horizon on, and then moves the horizon
// to the snapshot's xmin: PostgreSQL guarantees every transaction below it has finished, so a
// transaction still in flight, whatever its txid, is never stepped past. A write transaction left
// open for long holds the horizon back; reads then cost more, but stay exact.
//
// A read whose snapshot would be the same as the last read's begins with one trivial query instead:
// PostgreSQL's snapshot (xmin, xmax and the transactions in progress) names every transaction that
// has ended, so an unchanged snapshot means no transaction with a write has ended since, and the
// read would find nothing. The snapshot kept is that of the last read's first statement: what ended
// between its statements changes the next one's. Reads nobody waits for (the poll's, REQs' while
// the LISTEN connection is down) start at least `spacingMs` apart, and whatever asks in between
// shares the next one; a read for a commit heard of starts at once, or right after the one under way.
//
// Freshness, for the hot tier (hot/service.ts fresh()). The guarantee: a REQ that arrives after a
// commit was acknowledged to its client (an OK, the end of an import's batch, psql's COMMIT) is
// answered with that commit's events stored and its deletions applied, whichever process or host
// made it, as long as the commit's rows went through the events triggers (every INSERT and DELETE
// on events sends the NOTIFY; TRUNCATE or an UPDATE of stored rows sends none and is not covered).
// How, without a read per REQ:
// - This process's writer: its commits reach the change stream before their OKs are sent (writer.ts);
//   what they delete does not, so a batch that stored a deletion request (kind 5) or a request to
//   vanish (kind 62) counts as a commit heard of, read at once (a newer replaceable or addressable
//   version replaces the held one as the tier adds it).
// - Everyone else: each NOTIFY naming a transaction this writer did not claim (stores or removals),
//   each claim released, and each LISTEN connection made count as commits heard of; the feed is
//   `current` once a read that began after the last of them has ended and what it read has reached
//   the change stream's listeners.
// - The notification still has to travel, and a client that has B's OK may reach this process
//   before B's NOTIFY does: measured with test/relay/hot-tier-cross-process.test.ts's probes (a REQ
//   to A sent the moment B's OK arrives) on two shared cores, answering after one turn of the event
//   loop missed 545 of 8,000 events (0 to 196 per run of 1,000). So before answering, the tier waits
//   for heardUpToNow(): one empty query on the LISTEN connection, sent after the REQ arrived and
//   shared by every REQ of that turn.
//   PostgreSQL signals every listening backend while a transaction commits, before the committing
//   backend answers its client, and a listening backend sends the notifications it was signalled
//   about before answering any later query (it processes them before it reads the query, and again
//   before ReadyForQuery). So by that answer this process has heard of every commit acknowledged
//   before the REQ arrived; if one is unread, the REQ waits for its read. None missed in 11,000
//   probes measured that way, 5,000 of them with two more processes spinning on the two cores.
// - The LISTEN connection down or reconnecting: every REQ waits for a read that began after it
//   arrived. The database unreachable (a read failed, or a read or that query hangs): memory answers
//   with what this process has (docs/ha.md).
// - The poll (`pollMs`) and the snapshot check stay the safety net for what no notification said.
//
// Ephemeral events (never stored) travel in the payload of a NOTIFY on `pgrelay_ephemeral`, several
// to a payload; one too large for a payload (8,000 bytes) goes through the unlogged relay_ephemeral
// table and the payload carries its row id. Ephemeral events sent while a LISTEN connection is down
// do not reach that process: they are never stored, so there is nothing to read back.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { Logger } from '../log.js';
import type { NostrEvent } from '../nostr/event.js';
import { KIND_DELETION, KIND_VANISH } from '../nostr/kinds.js';
import type { ChangeStream } from './changes.js';
import { newClient } from './hosts.js';
import { lsnValue } from './lsn.js';
import { prepareEvent, prepareStored, type PreparedEvent } from './prepared-event.js';
import type { OwnTransactions } from './write.js';

const EVENTS_CHANNEL = 'pgrelay_events';
const EPHEMERAL_CHANNEL = 'pgrelay_ephemeral';
/** Below PostgreSQL's 8,000-byte payload limit, with room for the envelope. */
const MAX_PAYLOAD_BYTES = 7_900;
const EPHEMERAL_KEEP = '1 minute';
/** A read running longer than this means the server is not answering (a read is a few ms). */
const READ_STALLED_MS = 1500;

export interface FeedOptions {
  /** A read at least this often, notified or not: it moves the horizon and is the safety net. */
  pollMs?: number;
  /** Rows per read query; a larger backlog (an import) is read in pages. */
  pageRows?: number;
  /** Also read what every writer deleted (event_removals) and announce it as `removed` (the hot tier needs it). */
  removals?: boolean;
  /** Called as each read ends: `unchanged` when the snapshot check was the whole read (metrics). */
  onRead?: (result: 'unchanged' | 'full') => void;
  /**
   * Reads nobody waits for yet (the poll's, REQs' while the LISTEN connection is down) start at least
   * this far apart (FEED_READ_SPACING_MS): everything that asks in between shares the next one.
   * 0: back to back.
   */
  spacingMs?: number;
}

/** event_removals rows are kept this long for processes to read (a process behind by more refills its tier). */
export const REMOVALS_KEEP_MINUTES = 10;
const REMOVAL_PAGE_ROWS = 10_000;

// Removals, from every writer including this process (its writer does not announce what it deletes):
// the same horizon technique as new rows, with its own set of transactions already read.
const REMOVALS_SQL = `
  SELECT s.snapshot, r.txid::text AS txid, r.seq::text AS seq, encode(r.id, 'hex') AS id
    FROM (SELECT pg_current_snapshot()::text AS snapshot) s
    LEFT JOIN LATERAL (
      SELECT txid, seq, id FROM event_removals
       WHERE (txid, seq) > ($1::xid8, $2::bigint) AND NOT (txid = ANY($3::xid8[]))
       ORDER BY txid, seq LIMIT $4) r ON true
   ORDER BY r.txid, r.seq`;

/** The snapshot alone (`xmin:xmax:in-progress list`, the list sorted): equal text, equal visibility. */
const SNAPSHOT_SQL = 'SELECT pg_current_snapshot()::text AS snapshot';

/** A snapshot's xmin (its text's first field): every transaction below it had finished. */
function xminOf(snapshot: string): bigint {
  return BigInt(snapshot.slice(0, snapshot.indexOf(':')));
}

interface FeedRow {
  snapshot: string;
  lsn: string;
  txid: string | null;
  seq: string | null;
  raw: string | null;
}

// One statement, so the horizon and the rows come from the same snapshot. The LEFT JOIN returns the
// snapshot and WAL position even when there are no rows.
const READ_SQL = `
  SELECT s.snapshot, s.lsn, e.txid::text AS txid, e.seq::text AS seq, e.raw
    FROM (SELECT pg_current_snapshot()::text AS snapshot, pg_current_wal_insert_lsn()::text AS lsn) s
    LEFT JOIN LATERAL (
      SELECT txid, seq, raw FROM events
       WHERE txid IS NOT NULL AND (txid, seq) > ($1::xid8, $2::bigint) AND NOT (txid = ANY($3::xid8[]))
       ORDER BY txid, seq LIMIT $4) e ON true
   ORDER BY e.txid, e.seq`;

export class ChangeFeed implements OwnTransactions {
  /** This process, in ephemeral payloads: its own come back to it and are skipped. */
  readonly origin = randomBytes(8).toString('hex');
  private horizon = 0n;
  /** Transactions at or above the horizon already delivered (or this process's own). */
  private readonly done = new Set<bigint>();
  /** The last row delivered of a transaction read only in part (a page ended inside it). */
  private partial: { txid: bigint; seq: bigint } | undefined;
  /** Server backends running a writer transaction not settled yet (expect), with how many. */
  private readonly expecting = new Map<number, number>();
  /** Transactions the writer claimed and then released after the horizon had passed them. */
  private readonly released = new Set<bigint>();
  private listener: pg.Client | undefined;
  private reading: Promise<void> | undefined;
  private readAgain = false;
  /** The first statement's snapshot of the last read that completed; unset after a failure. */
  private lastSnapshot: string | undefined;
  /** A NOTIFY since the last read began: something committed, so the snapshot is not worth asking. */
  private notified = false;
  /**
   * Commits this process has heard of, as a count that only grows: each NOTIFY of a transaction its
   * writer did not claim, each claim released, each of its writer's batches that may have deleted
   * events, each LISTEN connection made (what was committed while none listened). A read that began
   * when the count stood at n has read all of those; `readThrough` is that n for the last read done.
   */
  private heard = 0;
  private readThrough = 0;
  /** `heard` when the read under way began. */
  private readingUpTo = 0;
  /** `heard` when a read that has ended began, until what it published has been delivered. */
  private announcing: number | undefined;
  /** Callers of caughtUp(), each waiting for a read that began once `heard` had reached `upTo`. */
  private catchingUp: Array<{ upTo: number; resolve: () => void }> = [];
  private caughtUpDone: { upTo: number; done: Promise<void> } | undefined;
  /** heardUpToNow's round trips on the LISTEN connection: one under way, and the next one's callers. */
  private hearing = false;
  private hearingSince = 0;
  private nextHearing: { done: Promise<boolean>; resolve: (listening: boolean) => void } | undefined;
  private waiting: Array<() => void> = [];
  /** Reads started so far: each read is numbered by this count as it starts (readMark). */
  private readsStarted = 0;
  /** The number of the last read whose events have reached the change stream's listeners. */
  private readsAnnounced = 0;
  /** nextRead's promise for the read that starts next (shared by its callers). */
  private nextReadDone: Promise<void> | undefined;
  private readonly timers: NodeJS.Timeout[] = [];
  private reconnectMs = 100;
  private stopped = false;
  private outbox: PreparedEvent[] = [];
  private ephemeralIn: Promise<void> = Promise.resolve();
  private readonly pollMs: number;
  private readonly spacingMs: number;
  /** When the last read started (performance.now()), and the timer of one put off until spacingMs after it. */
  private lastStart = -Infinity;
  private spaced: NodeJS.Timeout | undefined;
  private readonly pageRows: number;
  private readonly onRead: FeedOptions['onRead'];
  private readonly removals: { horizon: bigint; done: Set<bigint>; partial?: { txid: bigint; seq: bigint } } | undefined;
  /** When a read last finished (the hot tier refills after a long gap: removals may have been swept). */
  lastReadAt = Date.now();
  /** The last read failed: the database is unavailable (restarting, failing over) until one succeeds. */
  private failing = false;
  /** Ephemeral events other processes sent here (tests). */
  readonly stats = { ephemeralReceived: 0 };

  constructor(
    private readonly url: string,
    private readonly pool: pg.Pool,
    private readonly changes: ChangeStream,
    private readonly log: Logger,
    options: FeedOptions = {},
  ) {
    this.pollMs = options.pollMs ?? 1000;
    this.spacingMs = options.spacingMs ?? 0;
    this.pageRows = options.pageRows ?? 1000;
    this.onRead = options.onRead;
    this.removals = options.removals ? { horizon: 0n, done: new Set() } : undefined;
  }

  async start(): Promise<this> {
    const { rows } = await this.pool.query<FeedRow>(READ_SQL, ['0', -1, [], 0]);
    this.horizon = xminOf(rows[0].snapshot);
    if (this.removals) this.removals.horizon = this.horizon;
    this.changes.advance(lsnValue(rows[0].lsn));
    await this.connect();
    this.changes.subscribe((change) => {
      if (change.type === 'ephemeral' && change.source === 'local') this.sendEphemeral(change.event);
      // This process's writer announces what it stored, not what it deleted: a deletion request or
      // a request to vanish (a newer version replaces the one the tier holds as it is added) is
      // known unread until a read has passed it. Announced before its OK is read by its client.
      if (change.type === 'stored' && change.source === 'local' && this.removals && change.events.some((p) => p.event.kind === KIND_DELETION || p.event.kind === KIND_VANISH))
        this.heardOf();
    });
    this.timers.push(setInterval(() => this.requestRead(), this.pollMs));
    this.timers.push(setInterval(() => void this.sweepEphemeral(), 30_000));
    return this;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.timers.forEach(clearInterval);
    clearTimeout(this.spaced);
    await this.reading;
    await this.listener?.end().catch(() => undefined);
  }

  claim(txid: string): void {
    this.done.add(BigInt(txid));
  }

  /**
   * A transaction of this process's writer whose txid comes only with its COMMIT's answer (write.ts
   * writePlainBatch: one round trip) runs on server backend `pid`: a NOTIFY from that backend is its
   * commit, which the writer announces (settle), so it does not call for a read.
   */
  expect(pid: number): void {
    this.expecting.set(pid, (this.expecting.get(pid) ?? 0) + 1);
  }

  /**
   * The answer of expect()'s transaction: it committed as `txid`, stored nothing (null), or the
   * answer was lost (undefined: whatever it committed is read, as for a released claim). True when
   * the writer is to announce what it stored; false when a read got there first and announced it (a read that began after the
   * COMMIT and ended before its answer was handled: its rows below the horizon, in `done`, or being
   * paged through), or when there is no txid.
   */
  settle(pid: number, txid: string | null | undefined): boolean {
    const left = (this.expecting.get(pid) ?? 1) - 1;
    if (left > 0) this.expecting.set(pid, left);
    else this.expecting.delete(pid);
    if (txid === null) return false; // it stored nothing
    if (txid === undefined) {
      this.heardOf();
      return false;
    }
    const t = BigInt(txid);
    if (t < this.horizon || this.done.has(t) || this.partial?.txid === t) return false;
    this.done.add(t);
    return true;
  }

  release(txid: string): void {
    const t = BigInt(txid);
    this.done.delete(t);
    // Already below the horizon (it did commit, and a read has passed it): read it on its own.
    if (t < this.horizon) this.released.add(t);
    // Otherwise the next read from the horizon finds it, if it committed, and heardOf makes it a
    // full read: it may have ended before the last snapshot, which then looks unchanged (its NOTIFY
    // was skipped).
    this.heardOf();
  }

  /** Something was committed that no read has passed yet: a full read now (none waits for spacing). */
  private heardOf(): void {
    this.heard++;
    this.notified = true;
    this.requestRead(true);
  }

  /**
   * True while this process listens and every commit it has heard of has been read: what it has
   * read is then all that was committed, up to the notifications still on their way (heardUpToNow).
   */
  get current(): boolean {
    return this.listener !== undefined && this.readThrough >= this.heard;
  }

  /** The LISTEN connection is up: commits are heard of as they happen (else only reads find them). */
  get listening(): boolean {
    return this.listener !== undefined;
  }

  /**
   * Resolves once a read has finished that began after every commit heard of so far (`current`
   * then, unless more came since); its read starts at once if none is under way.
   */
  caughtUp(): Promise<void> {
    const upTo = this.heard;
    if (this.readThrough >= upTo) return Promise.resolve();
    if (this.caughtUpDone?.upTo !== upTo) {
      const done = new Promise<void>((resolve) => this.catchingUp.push({ upTo, resolve }));
      this.caughtUpDone = { upTo, done };
    }
    const covered = (this.reading !== undefined && this.readingUpTo >= upTo) || (this.announcing !== undefined && this.announcing >= upTo);
    if (!covered) this.requestRead(true);
    return this.caughtUpDone.done;
  }

  /**
   * Resolves true once this process has heard of every commit acknowledged to any client before
   * the call, false if it cannot tell (no LISTEN connection: then only a read can). PostgreSQL
   * signals the listening backends as a transaction commits, before it answers the committing
   * client, and a listening backend sends the notifications it was signalled about before its
   * answer to any later query: so the answer to a query sent after this call on the LISTEN
   * connection comes after those notifications. Callers until that query is sent share it.
   */
  heardUpToNow(): Promise<boolean> {
    if (!this.listener) return Promise.resolve(false);
    if (this.nextHearing) return this.nextHearing.done;
    let resolve!: (listening: boolean) => void;
    const done = new Promise<boolean>((r) => (resolve = r));
    this.nextHearing = { done, resolve };
    // Sent at the end of this turn: the REQs read from other sockets in this turn share it.
    if (!this.hearing) setImmediate(() => this.hear());
    return done;
  }

  /** One round trip on the LISTEN connection (an empty query) for heardUpToNow's callers so far. */
  private hear(): void {
    if (this.hearing) return;
    const waiting = this.nextHearing;
    this.nextHearing = undefined;
    if (!waiting) return;
    const client = this.listener;
    if (!client) return waiting.resolve(false);
    this.hearing = true;
    this.hearingSince = performance.now();
    client
      .query('')
      .then(() => true, () => false)
      .then((answered) => {
        this.hearing = false;
        waiting.resolve(answered && this.listener === client);
        this.hear();
      });
  }

  /**
   * False while the database cannot be read: the last read failed, or the one under way (or
   * heardUpToNow's round trip) has waited longer than a healthy server ever makes it (a frozen
   * server answers nothing and closes nothing).
   * The hot tier then answers from what this process has read (docs/ha.md).
   */
  get reachable(): boolean {
    const now = performance.now();
    return (
      !this.failing &&
      !(this.reading !== undefined && now - this.lastStart > READ_STALLED_MS) &&
      !(this.hearing && now - this.hearingSince > READ_STALLED_MS)
    );
  }

  /** A mark for readSince: the reads started until now. */
  readMark(): number {
    return this.readsStarted;
  }

  /**
   * Whether a read that started after readMark() gave `mark` has finished and what it read has
   * reached the change stream's listeners: afterNextRead as a question, for whoever can ask it
   * lazily (Subscription.sentRecently) rather than be called back, and so be held by the feed.
   */
  readSince(mark: number): boolean {
    return this.readsAnnounced > mark;
  }

  /** Calls `fn` once a read that starts after this call has finished (see Subscription.goLive). */
  afterNextRead(fn: () => void): void {
    this.waiting.push(fn);
  }

  /**
   * afterNextRead as a promise, one for every caller until that read starts (the hot tier's REQs:
   * hundreds a second share a few reads).
   */
  nextRead(): Promise<void> {
    return (this.nextReadDone ??= new Promise<void>((resolve) => this.afterNextRead(resolve)));
  }

  /**
   * A read now, or right after the one under way; no sooner than spacingMs after the last one
   * started, unless `now` (something is known to be committed: someone may be waiting for it).
   */
  requestRead(now = false): void {
    if (this.stopped) return;
    if (now && this.spaced) {
      clearTimeout(this.spaced);
      this.spaced = undefined;
    }
    if (this.spaced) return;
    if (this.reading) {
      this.readAgain = true;
      return;
    }
    const early = this.lastStart + this.spacingMs - performance.now();
    if (early > 0 && !now) {
      this.spaced = setTimeout(() => {
        this.spaced = undefined;
        this.requestRead();
      }, early);
      return;
    }
    this.lastStart = performance.now();
    const waiting = this.waiting;
    this.waiting = [];
    this.nextReadDone = undefined; // its read starts now: later callers wait for the one after
    const upTo = (this.readingUpTo = this.heard);
    const number = ++this.readsStarted;
    this.reading = this.read()
      .then(
        () => {
          if (this.failing) this.log.info('live feed: reading new events again');
          this.failing = false;
          waiting.forEach((fn) => fn());
          // What it published reaches the change stream's listeners (the tier) on the next turn
          // (changes.ts): only then does it count as read for `current` and caughtUp().
          this.announcing = upTo;
          setImmediate(() => {
            this.readsAnnounced = number;
            this.readThroughTo(upTo);
          });
        },
        (err) => {
          if (!this.failing) this.log.warn({ err: (err as Error).message }, 'live feed: reading new events failed, retrying');
          this.failing = true;
          this.waiting.unshift(...waiting); // not read past anything: they wait for the next read
        },
      )
      .finally(() => {
        this.reading = undefined;
        if (this.readAgain) {
          this.readAgain = false;
          // Without delay while a commit heard of is unread (a REQ may be waiting for it), unless
          // the database is failing: then at the usual pace.
          this.requestRead(!this.failing && Math.max(this.readThrough, this.announcing ?? 0) < this.heard);
        }
      });
  }

  private readThroughTo(upTo: number): void {
    if (this.announcing === upTo) this.announcing = undefined;
    if (upTo <= this.readThrough) return;
    this.readThrough = upTo;
    const caughtUp = this.catchingUp.filter((c) => c.upTo <= upTo);
    if (caughtUp.length) this.catchingUp = this.catchingUp.filter((c) => c.upTo > upTo);
    caughtUp.forEach((c) => c.resolve());
  }

  private async read(): Promise<void> {
    const previous = this.lastSnapshot;
    this.lastSnapshot = undefined; // set again only if this read completes
    if (previous !== undefined && !this.notified && this.released.size === 0) {
      const { rows } = await this.pool.query<{ snapshot: string }>(SNAPSHOT_SQL);
      if (rows[0].snapshot === previous) {
        this.lastSnapshot = previous;
        this.lastReadAt = Date.now();
        this.onRead?.('unchanged');
        return;
      }
    }
    this.notified = false;
    if (this.released.size) {
      const txids = [...this.released];
      const { rows } = await this.pool.query<{ raw: string }>('SELECT raw FROM events WHERE txid = ANY($1::xid8[]) ORDER BY txid, seq', [txids.map(String)]);
      txids.forEach((t) => this.released.delete(t));
      this.changes.publish({ type: 'stored', events: rows.map((r) => this.parse(r.raw)).filter((p) => p !== undefined), source: 'remote' });
    }
    // Removals are read first: a removal seen now had its row's insert committed before it, so the
    // insert is in the read below if it was not delivered earlier, and the tier applies it first.
    const removed = this.removals ? await this.readRemovals(this.removals) : undefined;
    let first = removed?.snapshot;
    // Always from the horizon: a transaction below the last row read may have committed since.
    let cursor = { txid: this.horizon, seq: -1n };
    let snapshot: { horizon: bigint; lsn: bigint } | undefined;
    for (;;) {
      const { rows } = await this.pool.query<FeedRow>(READ_SQL, [String(cursor.txid), String(cursor.seq), [...this.done].map(String), this.pageRows]);
      snapshot ??= { horizon: xminOf(rows[0].snapshot), lsn: lsnValue(rows[0].lsn) };
      first ??= rows[0].snapshot;
      const events: PreparedEvent[] = [];
      let count = 0;
      for (const row of rows) {
        if (row.txid === null) continue;
        count++;
        const txid = BigInt(row.txid);
        const seq = BigInt(row.seq!);
        cursor = { txid, seq };
        // Claimed by this process's writer after the query was sent: the writer announces it.
        if (this.done.has(txid)) continue;
        // Delivered by an earlier read that failed before it finished this transaction.
        if (this.partial && this.partial.txid === txid && seq <= this.partial.seq) continue;
        if (this.partial && this.partial.txid !== txid) this.done.add(this.partial.txid);
        this.partial = { txid, seq };
        const event = this.parse(row.raw!);
        if (event) events.push(event);
      }
      this.changes.publish({ type: 'stored', events, source: 'remote' });
      if (count < this.pageRows) break;
    }
    if (this.partial) this.done.add(this.partial.txid);
    this.partial = undefined;
    // Every transaction below the snapshot's xmin had finished, and all of it that committed was read.
    if (snapshot.horizon > this.horizon) this.horizon = snapshot.horizon;
    for (const txid of this.done) if (txid < this.horizon) this.done.delete(txid);
    if (removed) {
      this.changes.publish({ type: 'removed', ids: removed.ids, source: 'remote' });
      removed.commit();
    }
    this.changes.advance(snapshot.lsn);
    this.lastReadAt = Date.now();
    this.lastSnapshot = first;
    this.onRead?.('full');
  }

  /**
   * The ids removed by transactions not read yet, from the removal horizon on, in pages. The state
   * moves on only through `commit`, once they are announced: a read that fails later reads them again.
   */
  private async readRemovals(state: NonNullable<ChangeFeed['removals']>): Promise<{ ids: string[]; snapshot: string; commit(): void }> {
    const ids: string[] = [];
    const done = new Set(state.done);
    let partial = state.partial;
    let cursor = { txid: state.horizon, seq: -1n };
    let snapshot: string | undefined;
    for (;;) {
      const { rows } = await this.pool.query<{ snapshot: string; txid: string | null; seq: string | null; id: string | null }>(REMOVALS_SQL, [
        String(cursor.txid), String(cursor.seq), [...done].map(String), REMOVAL_PAGE_ROWS,
      ]);
      snapshot ??= rows[0].snapshot;
      let count = 0;
      for (const row of rows) {
        if (row.txid === null) continue;
        count++;
        const txid = BigInt(row.txid);
        const seq = BigInt(row.seq!);
        cursor = { txid, seq };
        if (partial && partial.txid === txid && seq <= partial.seq) continue;
        if (partial && partial.txid !== txid) done.add(partial.txid);
        partial = { txid, seq };
        ids.push(row.id!);
      }
      if (count < REMOVAL_PAGE_ROWS) break;
    }
    if (partial) done.add(partial.txid);
    const horizon = xminOf(snapshot!);
    const next = horizon > state.horizon ? horizon : state.horizon;
    return {
      ids,
      snapshot: snapshot!,
      commit() {
        state.horizon = next;
        state.partial = undefined;
        state.done = new Set([...done].filter((txid) => txid >= next));
      },
    };
  }

  /** A stored row as the writer would have announced it, sent exactly as stored. */
  private parse(raw: string): PreparedEvent | undefined {
    try {
      return prepareStored(raw);
    } catch (err) {
      // Only a row written around the relay (psql) can be unreadable; it must not stop the feed.
      this.log.warn({ err: (err as Error).message }, 'live feed: a stored event could not be read, not delivered');
      return undefined;
    }
  }

  /** The LISTEN connection: its own, never pooled; reconnects with backoff and then catches up. */
  private async connect(): Promise<void> {
    const client = newClient(this.url, { application_name: `pgrelay-listen-${process.pid}`, keepAlive: true });
    const lost = (err?: Error) => {
      if (this.listener !== client) return;
      this.listener = undefined;
      client.removeAllListeners('notification');
      client.end().catch(() => undefined);
      if (this.stopped) return;
      this.log.warn({ err: err?.message }, 'live feed: LISTEN connection lost, reconnecting');
      this.reconnectLater();
    };
    client.on('error', lost);
    client.on('end', () => lost());
    client.on('notification', (n) => this.onNotification(n.channel, n.payload ?? '', n.processId));
    try {
      await client.connect();
      await client.query(`LISTEN ${EVENTS_CHANNEL}; LISTEN ${EPHEMERAL_CHANNEL}`);
    } catch (err) {
      client.removeAllListeners();
      client.on('error', () => undefined);
      await client.end().catch(() => undefined);
      throw err;
    }
    this.listener = client;
    this.reconnectMs = 100;
    // Whatever was committed while no one listened.
    this.heardOf();
  }

  private reconnectLater(): void {
    const timer = setTimeout(() => {
      this.timers.splice(this.timers.indexOf(timer), 1);
      if (this.stopped) return;
      this.connect().catch((err) => {
        this.log.warn({ err: (err as Error).message, retryMs: this.reconnectMs }, 'live feed: LISTEN reconnect failed');
        this.reconnectLater();
      });
    }, this.reconnectMs);
    this.timers.push(timer);
    this.reconnectMs = Math.min(this.reconnectMs * 2, 5000);
  }

  private onNotification(channel: string, payload: string, pid: number): void {
    if (channel === EVENTS_CHANNEL) {
      // This process's own transaction: the writer announced it already, or will (settle).
      if (/^\d+$/.test(payload) && this.done.has(BigInt(payload))) return;
      if (this.expecting.has(pid)) return;
      return this.heardOf();
    }
    // One at a time, so a payload that needs a fetch does not let later ones overtake it.
    if (channel === EPHEMERAL_CHANNEL)
      this.ephemeralIn = this.ephemeralIn
        .then(() => this.receiveEphemeral(payload))
        .catch((err) => this.log.warn({ err: (err as Error).message }, 'live feed: an ephemeral notification was dropped'));
  }

  /** Queues this process's ephemeral events; one NOTIFY statement per turn of the event loop. */
  private sendEphemeral(event: PreparedEvent): void {
    if (this.outbox.push(event) > 1) return;
    setImmediate(() => {
      const events = this.outbox;
      this.outbox = [];
      this.flushEphemeral(events).catch((err) =>
        this.log.warn({ err: (err as Error).message, events: events.length }, 'live feed: ephemeral events not passed to other processes'),
      );
    });
  }

  private async flushEphemeral(events: PreparedEvent[]): Promise<void> {
    const large = events.filter((p) => Buffer.byteLength(p.raw) > MAX_PAYLOAD_BYTES - 100);
    const refs = new Map<PreparedEvent, string>();
    if (large.length) {
      const { rows } = await this.pool.query<{ id: string }>('INSERT INTO relay_ephemeral (raw) SELECT unnest($1::text[]) RETURNING id', [large.map((p) => p.raw)]);
      large.forEach((p, i) => refs.set(p, rows[i].id));
    }
    const payloads: string[] = [];
    const head = `{"o":"${this.origin}","e":[`;
    let items: string[] = [];
    let bytes = head.length + 2;
    for (const p of events) {
      const item = refs.get(p) ?? p.raw;
      const size = Buffer.byteLength(item) + 1;
      if (items.length && bytes + size > MAX_PAYLOAD_BYTES) {
        payloads.push(head + items.join(',') + ']}');
        items = [];
        bytes = head.length + 2;
      }
      items.push(item);
      bytes += size;
    }
    if (items.length) payloads.push(head + items.join(',') + ']}');
    await this.pool.query(`SELECT pg_notify('${EPHEMERAL_CHANNEL}', p) FROM unnest($1::text[]) WITH ORDINALITY AS t(p, n) ORDER BY n`, [payloads]);
  }

  private async receiveEphemeral(payload: string): Promise<void> {
    const message = JSON.parse(payload) as { o: string; e: Array<NostrEvent | number> };
    if (message.o === this.origin) return;
    const ids = message.e.filter((x): x is number => typeof x === 'number');
    const fetched = new Map<number, string>();
    if (ids.length) {
      const { rows } = await this.pool.query<{ id: string; raw: string }>('SELECT id, raw FROM relay_ephemeral WHERE id = ANY($1::bigint[])', [ids]);
      for (const row of rows) fetched.set(Number(row.id), row.raw);
    }
    for (const item of message.e) {
      const event = typeof item === 'number' ? (fetched.has(item) ? (JSON.parse(fetched.get(item)!) as NostrEvent) : undefined) : item;
      if (!event) continue; // swept already: it was over a minute old
      this.stats.ephemeralReceived++;
      this.changes.publish({ type: 'ephemeral', event: prepareEvent(event), source: 'remote' });
    }
  }

  private async sweepEphemeral(): Promise<void> {
    try {
      await this.pool.query(`DELETE FROM relay_ephemeral WHERE created_at < now() - interval '${EPHEMERAL_KEEP}'`);
      await this.pool.query(`DELETE FROM event_removals WHERE removed_at < now() - interval '${REMOVALS_KEEP_MINUTES} minutes'`);
    } catch (err) {
      this.log.debug({ err: (err as Error).message }, 'live feed: ephemeral sweep failed');
    }
  }
}
