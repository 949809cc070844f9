// The moderation queue: NIP-56 reports (kind 1984) from trusted reporters (policy/reports.ts) put the
// event or pubkey they name before an admin, who keeps it (NIP-86 allowevent, or
// dismisspubkeyreports) or bans it (banevent, banpubkey). Tables: migration 20270110000001_reports.
//
// Why a table fed from the change stream rather than a query over the stored reports: whether a
// report counts depends on who trusts its author, and the web of trust lives in each process's
// memory, not in SQL; the report type is the third element of a tag, which event_tags does not
// keep, so a query would parse every report's JSON each time; and REPORTS_HIDE_AT needs the withheld
// ids in every process within a second, which a small table of judged reports answers with one
// cheap query when its version moves. So each report is judged when its commit reaches a relay
// process (every process sees every commit, local and remote, so the inserts are idempotent), and a
// catch-up at start judges those stored while no relay ran (imports, sync). The writer's transaction
// is untouched: reports are read after commit, from the stream.
import type pg from 'pg';
import type { Logger } from '../log.js';
import type { NostrEvent } from '../nostr/event.js';
import { KIND_REPORT } from '../nostr/kinds.js';
import { reportTargets } from '../nostr/report.js';
import { reportReason, type TrustedReporter } from '../policy/reports.js';
import type { Change, ChangeStream } from './changes.js';
import { unbanEvent } from './moderation.js';

export type ReportTargetType = 'event' | 'pubkey';

/**
 * Records each report's judgement, and what a trusted one names. Every relay process judges every
 * report, and a report counts once one of them trusts its author: a process whose lists are a moment
 * behind (an allowpubkey taken by another process under a second ago) may judge it first. Judged
 * again the same way, a report is left as it was. Returns the number of queue rows added.
 */
export async function recordReports(pool: pg.Pool | pg.PoolClient, reports: readonly NostrEvent[], trusted: TrustedReporter): Promise<number> {
  if (reports.length === 0) return 0;
  const judged = reports.map((r) => ({ report: r, trusted: trusted(r.pubkey) }));
  const targets = judged.flatMap(({ report, trusted }) => (trusted ? reportTargets(report.tags).map((t) => ({ report, ...t })) : []));
  const { rowCount } = await pool.query(
    `WITH judged AS (
       INSERT INTO reports (id, reporter, trusted)
       SELECT decode(id, 'hex'), decode(reporter, 'hex'), trusted FROM unnest($1::text[], $2::text[], $3::boolean[]) AS j(id, reporter, trusted)
       ON CONFLICT (id) DO UPDATE SET trusted = true WHERE excluded.trusted AND NOT reports.trusted
       RETURNING id)
     INSERT INTO report_targets (report_id, target_type, target, report_type, reporter)
     SELECT decode(t.report_id, 'hex'), t.target_type, decode(t.target, 'hex'), t.report_type, decode(t.reporter, 'hex')
       FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) AS t(report_id, target_type, target, report_type, reporter)
      WHERE decode(t.report_id, 'hex') IN (SELECT id FROM judged)
     ON CONFLICT DO NOTHING`,
    [
      judged.map((j) => j.report.id),
      judged.map((j) => j.report.pubkey),
      judged.map((j) => j.trusted),
      targets.map((t) => t.report.id),
      targets.map((t) => t.target),
      targets.map((t) => t.id),
      targets.map((t) => t.type),
      targets.map((t) => t.report.pubkey),
    ],
  );
  return rowCount ?? 0;
}

/**
 * The rows that count: not cleared by a decision, from a reporter whose earlier report of the same
 * target no decision covered (once an admin kept an event, those who reported it cannot bring it
 * back; a reporter new to it can), whose report is still stored (a report its author deleted, or
 * that expired, no longer counts), about a target not banned since.
 */
const OPEN_ROWS = `
  SELECT t.target_type, t.target, t.reporter, t.report_type, t.reported_at
    FROM report_targets t
   WHERE t.cleared_at IS NULL
     AND NOT EXISTS (SELECT 1 FROM report_targets c
                      WHERE c.target_type = t.target_type AND c.target = t.target AND c.reporter = t.reporter AND c.cleared_at IS NOT NULL)
     AND EXISTS (SELECT 1 FROM events r WHERE r.id = t.report_id)
     AND CASE t.target_type
           WHEN 'event' THEN NOT EXISTS (SELECT 1 FROM banned_events b WHERE b.id = t.target)
           ELSE NOT EXISTS (SELECT 1 FROM banned_pubkeys b WHERE b.pubkey = t.target)
         END`;

/** Entries listed: pubkeys, and events stored here (one not stored yet is listed once it arrives). */
const LISTED = `o.target_type = 'pubkey' OR EXISTS (SELECT 1 FROM events e WHERE e.id = o.target)`;

export interface QueueEntry {
  target: ReportTargetType;
  /** The event id or the pubkey (hex). */
  id: string;
  /** "3 reporters: spam (2), illegal (1)" (policy/reports.ts reportReason). */
  reason: string;
  reporters: number;
  /** When the first report counted here reached the relay. */
  firstReported: Date;
}

/** The queue, most reporters first, then the longest waiting. */
export async function listQueue(pool: pg.Pool): Promise<QueueEntry[]> {
  const { rows } = await pool.query<{ target_type: ReportTargetType; target: string; reporter: string; report_type: string; reported_at: Date }>(
    `WITH o AS (${OPEN_ROWS})
     SELECT o.target_type, encode(o.target, 'hex') AS target, encode(o.reporter, 'hex') AS reporter, o.report_type, o.reported_at
       FROM o WHERE ${LISTED}`,
  );
  const entries = new Map<string, { target: ReportTargetType; id: string; reporters: Set<string>; types: Map<string, Set<string>>; first: Date }>();
  for (const r of rows) {
    const key = `${r.target_type}:${r.target}`;
    let e = entries.get(key);
    if (!e) entries.set(key, (e = { target: r.target_type, id: r.target, reporters: new Set(), types: new Map(), first: r.reported_at }));
    e.reporters.add(r.reporter);
    let by = e.types.get(r.report_type);
    if (!by) e.types.set(r.report_type, (by = new Set()));
    by.add(r.reporter);
    if (r.reported_at < e.first) e.first = r.reported_at;
  }
  return [...entries.values()]
    .map((e) => ({
      target: e.target,
      id: e.id,
      reason: reportReason(e.reporters.size, new Map([...e.types].map(([type, who]) => [type, who.size]))),
      reporters: e.reporters.size,
      firstReported: e.first,
    }))
    .sort((a, b) => b.reporters - a.reporters || a.firstReported.getTime() - b.firstReported.getTime() || (a.id < b.id ? -1 : 1));
}

export interface QueueSize {
  events: number;
  pubkeys: number;
}

export async function queueSize(pool: pg.Pool): Promise<QueueSize> {
  const { rows } = await pool.query<{ target_type: ReportTargetType; n: number }>(
    `WITH o AS (${OPEN_ROWS}) SELECT o.target_type, count(DISTINCT o.target)::int AS n FROM o WHERE ${LISTED} GROUP BY o.target_type`,
  );
  return { events: rows.find((r) => r.target_type === 'event')?.n ?? 0, pubkeys: rows.find((r) => r.target_type === 'pubkey')?.n ?? 0 };
}

/** REPORTS_HIDE_AT: the events that at least `reporters` distinct trusted reporters have reported, stored or not. */
export async function withheldEvents(pool: pg.Pool, reporters: number): Promise<Set<string>> {
  const { rows } = await pool.query<{ id: string }>(
    `WITH o AS (${OPEN_ROWS})
     SELECT encode(o.target, 'hex') AS id FROM o WHERE o.target_type = 'event' GROUP BY o.target HAVING count(DISTINCT o.reporter) >= $1`,
    [reporters],
  );
  return new Set(rows.map((r) => r.id));
}

/**
 * An admin's decision to keep the target: the reports counted so far stop counting (NIP-86
 * allowevent, and dismisspubkeyreports for a pubkey). Returns whether an entry was cleared.
 */
export async function clearReports(pool: pg.Pool, target: ReportTargetType, id: string): Promise<boolean> {
  const { rowCount } = await pool.query(`UPDATE report_targets SET cleared_at = now() WHERE target_type = $1 AND target = decode($2, 'hex') AND cleared_at IS NULL`, [target, id]);
  return (rowCount ?? 0) > 0;
}

/**
 * NIP-86 allowevent, for the API and the CLI alike: the event may be published again (a ban on it is
 * lifted, as before there was a queue) and its reports so far stop counting. Returns whether it was
 * in the queue.
 */
export async function keepEvent(pool: pg.Pool, id: string): Promise<boolean> {
  await unbanEvent(pool, id);
  return clearReports(pool, 'event', id);
}

/** Reports read per batch by the catch-up. */
const CATCH_UP_BATCH = 500;

/**
 * Judges every stored report no relay process has judged (stored while none ran), newest first,
 * and forgets the judgements of reports no longer stored. Returns how many it judged.
 */
export async function judgeStoredReports(pool: pg.Pool, trusted: TrustedReporter): Promise<number> {
  const client = await pool.connect();
  let broken = false;
  try {
    // The whole history of reports may take longer than a REQ may (QUERY_TIMEOUT_MS).
    await client.query('SET statement_timeout = 0');
    await client.query('DELETE FROM reports r WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.id = r.id)');
    let judged = 0;
    // Keyset over the kind's index (kind, created_at DESC, id): each batch starts where the last ended.
    let at: { createdAt: string; id: Buffer } = { createdAt: '9223372036854775807', id: Buffer.alloc(0) };
    for (;;) {
      const { rows } = await client.query<{ created_at: string; id: Buffer; raw: string }>(
        `SELECT e.created_at, e.id, e.raw FROM events e
          WHERE e.kind = $1 AND e.created_at <= $2 AND NOT (e.created_at = $2 AND e.id <= $3)
            AND NOT EXISTS (SELECT 1 FROM reports r WHERE r.id = e.id)
          ORDER BY e.created_at DESC, e.id LIMIT $4`,
        [KIND_REPORT, at.createdAt, at.id, CATCH_UP_BATCH],
      );
      if (rows.length === 0) break;
      await recordReports(client, rows.map((r) => JSON.parse(r.raw) as NostrEvent), trusted);
      judged += rows.length;
      const last = rows[rows.length - 1];
      at = { createdAt: last.created_at, id: last.id };
      if (rows.length < CATCH_UP_BATCH) break;
    }
    await client.query('RESET statement_timeout');
    return judged;
  } catch (err) {
    broken = true;
    throw err;
  } finally {
    client.release(broken);
  }
}

/** How often a relay process checks whether the queue changed. */
export const REPORT_QUEUE_POLL_MS = 500;
/** And reads it again anyway: an event reported before it was stored joins the listing when it arrives. */
const REFRESH_MS = 30_000;
/** How long after a failed recording or catch-up the catch-up runs again. */
const CATCH_UP_RETRY_MS = 10_000;

export interface ReportQueueOptions {
  trusted: TrustedReporter;
  /** REPORTS_HIDE_AT; undefined withholds nothing. */
  hideAt?: number;
  pollMs?: number;
}

/**
 * One relay process's part in the queue: it judges the reports the change stream brings (and, at
 * start, those no process has judged), and keeps what the relay needs at hand: the queue's size for
 * the status page and the metrics, and the withheld ids (REPORTS_HIDE_AT), read again whenever
 * report_queue_state.version moves (polled), after this process's own changes, and every 30 s.
 */
export class ReportQueue {
  /** Events withheld from REQ and COUNT answers and from live delivery; undefined while none is (or REPORTS_HIDE_AT is off). */
  withheld: ReadonlySet<string> | undefined;
  size: QueueSize = { events: 0, pubkeys: 0 };
  private version: string | undefined;
  private readAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;
  private reading: Promise<void> | undefined;
  private readAgain: Promise<void> | undefined;
  /** When a recording or the catch-up failed (the database was away): the catch-up runs again then. */
  private catchUpAt: number | undefined;
  private catchingUp: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly pool: pg.Pool,
    private readonly log: Logger,
    private readonly o: ReportQueueOptions,
  ) {}

  /** Resolves once the withheld ids are read: a relay that starts serving withholds them at once. */
  async start(changes: ChangeStream): Promise<this> {
    // Before the catch-up's reads: a report committed meanwhile is judged by one or the other.
    this.unsubscribe = changes.subscribe((change) => this.observe(change));
    await this.refresh();
    this.catchUp();
    const tick = async () => {
      try {
        const { rows } = await this.pool.query<{ version: string }>('SELECT version FROM report_queue_state');
        if (rows[0]?.version !== this.version || Date.now() - this.readAt > REFRESH_MS) await this.refresh();
      } catch (err) {
        this.log.debug({ err: (err as Error).message }, 'reports: could not check the moderation queue for changes');
      }
      if (this.catchUpAt !== undefined && Date.now() >= this.catchUpAt) this.catchUp();
      if (this.timer) this.timer = setTimeout(tick, this.o.pollMs ?? REPORT_QUEUE_POLL_MS).unref();
    };
    this.timer = setTimeout(tick, this.o.pollMs ?? REPORT_QUEUE_POLL_MS).unref();
    return this;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.unsubscribe?.();
  }

  /** Reads the size and the withheld ids again; a call during a read gets one that starts after it. */
  refresh(): Promise<void> {
    if (!this.reading) {
      this.reading = this.read().finally(() => (this.reading = undefined));
      return this.reading;
    }
    this.readAgain ??= this.reading.then(() => {
      this.readAgain = undefined;
      return this.refresh();
    });
    return this.readAgain;
  }

  private async read(): Promise<void> {
    try {
      // The version first: a change committed after it is read makes the next poll read again.
      const version = (await this.pool.query<{ version: string }>('SELECT version FROM report_queue_state')).rows[0].version;
      const size = await queueSize(this.pool);
      const withheld = this.o.hideAt === undefined ? undefined : await withheldEvents(this.pool, this.o.hideAt);
      this.size = size;
      this.withheld = withheld?.size ? withheld : undefined;
      this.version = version;
      this.readAt = Date.now();
    } catch (err) {
      if (!this.stopped) this.log.warn({ err: (err as Error).message }, 'reports: could not read the moderation queue; keeping what was read before');
    }
  }

  private observe(change: Change): void {
    if (change.type !== 'stored') return;
    let reports: NostrEvent[] | undefined;
    for (const p of change.events) if (p.event.kind === KIND_REPORT) (reports ??= []).push(p.event);
    if (reports) void this.record(reports);
  }

  private async record(reports: NostrEvent[]): Promise<void> {
    try {
      if ((await recordReports(this.pool, reports, this.o.trusted)) > 0) await this.refresh();
    } catch (err) {
      // One statement: nothing of these reports was recorded, so the catch-up finds them.
      this.catchUpAt ??= Date.now() + CATCH_UP_RETRY_MS;
      if (!this.stopped) this.log.warn({ err: (err as Error).message, reports: reports.length }, 'reports: could not record reports; they will be read again from the store');
    }
  }

  private catchUp(): void {
    if (this.catchingUp) return;
    this.catchUpAt = undefined;
    this.catchingUp = judgeStoredReports(this.pool, this.o.trusted)
      .then(async (judged) => {
        if (judged > 0) {
          this.log.info({ judged }, 'reports: judged the reports stored while no relay read them');
          await this.refresh();
        }
      })
      .catch((err) => {
        if (this.stopped) return;
        this.catchUpAt = Date.now() + CATCH_UP_RETRY_MS;
        this.log.warn({ err: (err as Error).message }, 'reports: could not read the stored reports; trying again in 10 s');
      })
      .finally(() => (this.catchingUp = undefined));
  }
}
