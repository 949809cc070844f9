// What the status page shows (relay/http/status.ts): every second, the change in the running totals
// (events in and out, REQ and COUNT) becomes one sample of a ten-minute history; latencies are the
// percentiles of the last minute; the database's size and event count are read every 15 s.
import type pg from 'pg';
import type { Logger } from '../log.js';
import type { WritePluginState } from '../policy/write-plugin.js';
import type { WebOfTrustState } from '../store/web-of-trust.js';
import type { RelayMetrics } from './metrics.js';

const HISTORY = 600; // seconds kept
const DATABASE_EVERY_MS = 15_000;
const TOP_KINDS = 12;

export interface StatusSample {
  t: number;
  eventsIn: number;
  eventsOut: number;
  reqs: number;
}

export interface StatusSources {
  metrics: RelayMetrics;
  pool: pg.Pool;
  log: Logger;
  connections(): number;
  subscriptions(): number;
  info(): object;
  /** RELAY_URL: the page shows it as the address to connect to. */
  relayUrl?: string;
  /** The write-policy plugin, when one is configured (the page shows its state only then). */
  writePlugin?(): WritePluginState;
  /** Entries of the moderation queue (store/reports.ts): reported events and pubkeys awaiting an admin. */
  moderationQueue?(): { events: number; pubkeys: number };
  /** The web of trust, when WOT_ROOTS is set (the page shows its size and last computation only then). */
  webOfTrust?(): WebOfTrustState;
}

export class StatusSampler {
  readonly startedAt = Date.now();
  private readonly history: StatusSample[] = [];
  private last = { eventsIn: 0, eventsOut: 0, reqs: 0 };
  private database: { sizeBytes: number; events: number } | null = null;
  private readonly listeners = new Set<(tick: object) => void>();
  private timer: NodeJS.Timeout | undefined;
  private dbTimer: NodeJS.Timeout | undefined;

  constructor(private readonly s: StatusSources) {}

  start(): this {
    this.timer = setInterval(() => this.sample(), 1000).unref();
    const readDatabase = async () => {
      try {
        // The estimate PostgreSQL keeps (ANALYZE, autovacuum): a count(*) would scan millions of rows.
        // A table never analyzed yet (-1) is young and small: counted, up to 100,000 rows.
        const { rows } = await this.s.pool.query<{ size: string; events: string }>(
          `SELECT pg_database_size(current_database()) AS size,
                  CASE WHEN e.reltuples >= 0 THEN e.reltuples::bigint
                       ELSE (SELECT count(*) FROM (SELECT 1 FROM events LIMIT 100000) n) END AS events
             FROM pg_class e WHERE e.oid = 'events'::regclass`,
        );
        this.database = { sizeBytes: Number(rows[0].size), events: Number(rows[0].events) };
      } catch (err) {
        this.s.log.debug({ err: (err as Error).message }, 'status: could not read the database size');
      }
    };
    void readDatabase();
    this.dbTimer = setInterval(readDatabase, DATABASE_EVERY_MS).unref();
    return this;
  }

  stop(): void {
    clearInterval(this.timer);
    clearInterval(this.dbTimer);
    this.listeners.clear();
  }

  /** Told every second's tick; returns the function that stops it. */
  onTick(listener: (tick: object) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private sample(): void {
    const { totals } = this.s.metrics;
    const sample: StatusSample = {
      t: Date.now(),
      eventsIn: totals.eventsIn - this.last.eventsIn,
      eventsOut: totals.eventsOut - this.last.eventsOut,
      reqs: totals.reqs - this.last.reqs,
    };
    this.last = { ...totals };
    this.history.push(sample);
    if (this.history.length > HISTORY) this.history.shift();
    if (this.listeners.size === 0) return;
    const tick = { ...this.current(), sample };
    for (const listener of this.listeners) listener(tick);
  }

  private kinds(): Array<{ kind: number; count: number }> {
    const all = [...this.s.metrics.storedByKind].map(([kind, count]) => ({ kind, count })).sort((a, b) => b.count - a.count || a.kind - b.kind);
    if (all.length <= TOP_KINDS) return all;
    const others = all.slice(TOP_KINDS - 1).reduce((n, k) => n + k.count, 0);
    return [...all.slice(0, TOP_KINDS - 1), { kind: -1, count: others }];
  }

  /** The gauges and totals of now (both the snapshot and every tick carry them). */
  private current() {
    const { metrics } = this.s;
    return {
      now: Date.now(),
      connections: this.s.connections(),
      subscriptions: this.s.subscriptions(),
      latency: { ok: metrics.okLatency.percentiles(), req: metrics.reqLatency.percentiles() },
      kinds: this.kinds(),
      totals: { ...metrics.totals },
      database: this.database,
      ...(this.s.writePlugin && { writePlugin: this.s.writePlugin() }),
      ...(this.s.moderationQueue && { moderationQueue: this.s.moderationQueue() }),
      ...(this.s.webOfTrust && { webOfTrust: this.s.webOfTrust() }),
    };
  }

  /** Everything the page needs to draw itself, history included. */
  snapshot(): object {
    return {
      relay: this.s.info(),
      relayUrl: this.s.relayUrl ?? null,
      startedAt: this.startedAt,
      ...this.current(),
      history: {
        t: this.history.map((s) => s.t),
        eventsIn: this.history.map((s) => s.eventsIn),
        eventsOut: this.history.map((s) => s.eventsOut),
        reqs: this.history.map((s) => s.reqs),
      },
    };
  }
}
