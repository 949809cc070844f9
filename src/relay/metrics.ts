// The relay's metrics: Prometheus counters, gauges and histograms (prom-client, one registry per
// relay, with Node's default metrics) for GET /metrics, and the few running totals and recent
// latencies the status page samples every second. The hot paths call one method each; label values
// are bounded (verbs, reply prefixes, a fixed list of kinds), so the series never grow with traffic.
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { signatureBackend } from '../nostr/schnorr.js';
import { prefixOf } from '../nostr/reason.js';
import type { PluginAction, WritePluginState } from '../policy/write-plugin.js';
import type { ArchiveStatus } from '../store/archive.js';
import type { PreparedEvent } from '../store/prepared-event.js';
import type { WebOfTrustState } from '../store/web-of-trust.js';

/** Kinds that get their own label on stored events; every other kind counts as "other". */
const LABELLED_KINDS = new Set([0, 1, 3, 4, 5, 6, 7, 16, 62, 1059, 1111, 9735, 10002, 30023]);

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * The most recent observations of a latency, for percentiles over the last minute: a ring of at
 * most `capacity` (time, value) pairs, so recording one is O(1) whatever the rate.
 */
export class LatencyWindow {
  private readonly times: Float64Array;
  private readonly values: Float64Array;
  private next = 0;
  private size = 0;

  constructor(
    private readonly windowMs = 60_000,
    capacity = 20_000,
  ) {
    this.times = new Float64Array(capacity);
    this.values = new Float64Array(capacity);
  }

  add(ms: number, now = Date.now()): void {
    this.times[this.next] = now;
    this.values[this.next] = ms;
    this.next = (this.next + 1) % this.times.length;
    this.size = Math.min(this.size + 1, this.times.length);
  }

  /** p50/p95/p99 in ms over the window (null when nothing was observed in it), and the count. */
  percentiles(now = Date.now()): { p50: number | null; p95: number | null; p99: number | null; n: number } {
    const recent: number[] = [];
    for (let i = 0; i < this.size; i++) if (this.times[i] >= now - this.windowMs) recent.push(this.values[i]);
    recent.sort((a, b) => a - b);
    const at = (q: number) => (recent.length ? recent[Math.min(recent.length - 1, Math.floor(q * recent.length))] : null);
    return { p50: at(0.5), p95: at(0.95), p99: at(0.99), n: recent.length };
  }
}

/** What the gauges read when Prometheus scrapes. */
export interface GaugeSources {
  connections(): number;
  subscriptions(): number;
  writerQueue(): number;
  verifyQueue(): number;
  /** NIP-77: records held by open negentropy sessions. */
  negentropyRecords(): number;
  /** Webhooks: the queue as last sampled (relay/webhooks.ts). */
  webhookQueue(): { queued: number; dead: number; oldestSeconds: number };
  pool(): { total: number; idle: number; waiting: number };
  /** The hot tier (store/hot), when on. */
  hotTier(): { events: number; bytes: number; windowStart: number; replaceableComplete: boolean } | undefined;
  /** The write-policy plugin (WRITE_POLICY_PLUGIN), when configured. */
  writePlugin?(): WritePluginState;
  /** NIP-56 reports' moderation queue (store/reports.ts): entries awaiting an admin, events withheld. */
  moderationQueue?(): { events: number; pubkeys: number; withheld: number };
  /** The database as this process sees it (docs/ha.md). */
  database?(): DatabaseState;
  /** WAL archiving as pg_stat_archiver reports it (undefined when archive_mode is off). */
  walArchive?(): Promise<ArchiveStatus | undefined>;
  /** Seconds since the newest base backup in BACKUP_DIR ended (undefined when there is none), when BACKUP_DIR is set. */
  lastBackupAge?(): Promise<number | undefined>;
  /** The web of trust (WOT_ROOTS), when configured. */
  webOfTrust?(): WebOfTrustState;
}

/** One call per scrape for several gauges: the promise is shared for a second. */
function sharedForASecond<T>(read: () => Promise<T>): () => Promise<T> {
  let last: { at: number; value: Promise<T> } | undefined;
  return () => {
    if (!last || Date.now() - last.at > 1000) last = { at: Date.now(), value: read() };
    return last.value;
  };
}

export interface DatabaseState {
  /** The live feed's last read succeeded (and the one under way is not stalled). */
  reachable: boolean;
  /** host:port in use when DATABASE_URL names several hosts (or a target_session_attrs). */
  server?: string;
  /** Times the server in use changed (failovers, switchovers). */
  failovers: number;
  /** Times the embedded PostgreSQL was found dead and started again. */
  embeddedRestarts: number;
  /** Write batches tried again after the database was unavailable. */
  writeRetries: number;
  /** REQs the hot tier answered while the database could not be read. */
  answeredUnreachable: number;
}

export class RelayMetrics {
  readonly registry = new Registry();
  /** Running totals since start, for the status page's per-second rates. */
  readonly totals = { eventsIn: 0, eventsOut: 0, reqs: 0 };
  /** Events stored since start, by kind (every kind: the status page shows the top ones). */
  readonly storedByKind = new Map<number, number>();
  readonly okLatency = new LatencyWindow();
  readonly reqLatency = new LatencyWindow();

  private readonly messages: Counter<'verb'>;
  private readonly received: Counter;
  private readonly storedEvents: Counter<'kind'>;
  private readonly ephemeralEvents: Counter;
  private readonly refused: Counter<'reason'>;
  private readonly duplicates: Counter;
  private readonly okSeconds: Histogram;
  private readonly reqSeconds: Histogram;
  private readonly countSeconds: Histogram;
  private readonly eventsSent: Counter<'source'>;
  private readonly batchEvents: Histogram;
  private readonly batchSeconds: Histogram;
  private readonly failedBatches: Counter;
  private readonly slowClients: Counter;
  private readonly auths: Counter<'result'>;
  private readonly rateLimited: Counter<'what'>;
  private readonly refusedConnections: Counter<'reason'>;
  private readonly reads: Counter<'database'>;
  private readonly feedEvents: Counter<'type'>;
  private readonly feedReads: Counter<'result'>;
  private readonly webhookDeliveries: Counter<'outcome'>;
  private readonly tierReqs: Counter<'answered'>;
  private readonly pluginDecisions: Counter<'action'>;
  private readonly pluginSeconds: Histogram;
  private readonly pluginRestarts: Counter<'reason'>;
  private readonly readRules: Counter<'rule' | 'outcome'>;

  constructor(sources: GaugeSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    this.messages = new Counter({ name: 'nostr_client_messages_total', help: 'Messages from clients, by verb', labelNames: ['verb'], registers });
    this.received = new Counter({ name: 'nostr_events_received_total', help: 'EVENT messages answered with OK', registers });
    this.storedEvents = new Counter({ name: 'nostr_events_stored_total', help: 'Events newly stored, by kind (common kinds; the rest as "other")', labelNames: ['kind'], registers });
    this.ephemeralEvents = new Counter({ name: 'nostr_events_ephemeral_total', help: 'Ephemeral events accepted and passed on', registers });
    this.refused = new Counter({ name: 'nostr_events_refused_total', help: 'EVENTs answered OK false, by reason prefix', labelNames: ['reason'], registers });
    this.duplicates = new Counter({ name: 'nostr_events_duplicate_total', help: 'EVENTs the relay already had', registers });
    this.okSeconds = new Histogram({ name: 'nostr_event_ok_seconds', help: 'EVENT received to OK sent', buckets: LATENCY_BUCKETS, registers });
    this.reqSeconds = new Histogram({ name: 'nostr_req_seconds', help: 'REQ received to EOSE sent', buckets: LATENCY_BUCKETS, registers });
    this.countSeconds = new Histogram({ name: 'nostr_count_seconds', help: 'COUNT received to answer sent', buckets: LATENCY_BUCKETS, registers });
    this.eventsSent = new Counter({ name: 'nostr_events_sent_total', help: 'EVENT messages sent to clients: stored answers and live deliveries', labelNames: ['source'], registers });
    this.batchEvents = new Histogram({ name: 'pgrelay_write_batch_events', help: 'Events per write transaction', buckets: [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500], registers });
    this.batchSeconds = new Histogram({ name: 'pgrelay_write_batch_seconds', help: 'Write transaction time, begin to commit', buckets: LATENCY_BUCKETS, registers });
    this.failedBatches = new Counter({ name: 'pgrelay_write_batches_failed_total', help: 'Write transactions that failed (split and retried, or refused)', registers });
    this.slowClients = new Counter({ name: 'nostr_slow_client_disconnects_total', help: 'Connections closed because the client read too slowly', registers });
    this.auths = new Counter({ name: 'nostr_auth_total', help: 'NIP-42 AUTH messages, by result', labelNames: ['result'], registers });
    this.rateLimited = new Counter({ name: 'nostr_rate_limited_total', help: 'Messages refused by the rate limits, by kind of budget', labelNames: ['what'], registers });
    this.refusedConnections = new Counter({ name: 'nostr_connections_refused_total', help: 'WebSocket upgrades refused, by reason', labelNames: ['reason'], registers });
    this.reads = new Counter({ name: 'pgrelay_read_queries_total', help: 'REQ and COUNT queries, by the database that ran them', labelNames: ['database'], registers });
    this.feedEvents = new Counter({ name: 'pgrelay_feed_events_total', help: 'Events learnt from other writers through the database (other processes, hosts, imports)', labelNames: ['type'], registers });
    this.feedReads = new Counter({
      name: 'pgrelay_feed_reads_total',
      help: 'Live feed reads: unchanged (one snapshot query: nothing had ended since the last read) or full',
      labelNames: ['result'],
      registers,
    });
    const gauge = (name: string, help: string, read: () => number) =>
      new Gauge({ name, help, registers, collect() { this.set(read()); } });
    gauge('nostr_connections', 'Open WebSocket connections', sources.connections);
    gauge('nostr_subscriptions', 'Open subscriptions (live REQs)', sources.subscriptions);
    gauge('pgrelay_writer_queue_events', 'Events waiting for a write transaction', sources.writerQueue);
    gauge('pgrelay_verify_queue_events', 'Events waiting for signature verification', sources.verifyQueue);
    gauge('pgrelay_negentropy_records', 'Records held by open NIP-77 negentropy sessions', sources.negentropyRecords);
    gauge('pgrelay_webhook_queue_deliveries', 'Webhook deliveries queued (sampled every few seconds)', () => sources.webhookQueue().queued);
    gauge('pgrelay_webhook_dead_deliveries', 'Webhook deliveries given up (older than WEBHOOK_MAX_AGE_SECONDS)', () => sources.webhookQueue().dead);
    gauge('pgrelay_webhook_queue_oldest_seconds', 'Age of the oldest queued webhook delivery', () => sources.webhookQueue().oldestSeconds);
    if (sources.database) {
      const db = sources.database;
      gauge('pgrelay_database_reachable', '1 while the database answers this process (its live feed reads succeed), 0 while it is down or failing over', () => (db().reachable ? 1 : 0));
      // Running totals kept by the parts that count them, read when scraped.
      const total = (name: string, help: string, read: () => number) =>
        new Counter({ name, help, registers, collect() { this.reset(); this.inc(read()); } });
      total('pgrelay_database_failovers_total', 'Times the database server in use changed (DATABASE_URL with several hosts): failovers and switchovers', () => db().failovers);
      total('pgrelay_embedded_restarts_total', 'Times the embedded PostgreSQL was found dead and started again', () => db().embeddedRestarts);
      total('pgrelay_write_retries_total', 'Write transactions tried again because the database was unavailable', () => db().writeRetries);
      total('pgrelay_hot_tier_reqs_unreachable_total', 'REQs the hot tier answered from memory while the database could not be read', () => db().answeredUnreachable);
      new Gauge({
        name: 'pgrelay_database_server_info',
        help: 'The database server in use (host:port), when DATABASE_URL names several hosts',
        labelNames: ['server'],
        registers,
        collect() {
          this.reset();
          const server = db().server;
          if (server) this.set({ server }, 1);
        },
      });
    }
    new Gauge({
      name: 'pgrelay_signature_verifier_info',
      help: 'The BIP-340 build that checks signatures: native (the system libsecp256k1) or wasm (its WebAssembly build)',
      labelNames: ['backend'],
      registers,
    }).set({ backend: signatureBackend().name }, 1);
    gauge('pgrelay_hot_tier_events', 'Events held in the hot tier', () => sources.hotTier()?.events ?? 0);
    gauge('pgrelay_hot_tier_bytes', 'Estimated bytes held by the hot tier (events and their indexes)', () => sources.hotTier()?.bytes ?? 0);
    gauge('pgrelay_hot_tier_window_seconds', 'Age of the oldest created_at the hot tier holds completely (-1: it holds everything; 0: not filled)', () => {
      const start = sources.hotTier()?.windowStart;
      if (start === undefined || start === Infinity) return 0;
      return start === -Infinity ? -1 : Math.max(0, Date.now() / 1000 - start);
    });
    gauge('pgrelay_hot_tier_replaceable_complete', "1 while every stored replaceable event's current version is held: authors' profiles, follow lists and the like are answered from memory whatever the window", () =>
      sources.hotTier()?.replaceableComplete ? 1 : 0,
    );
    this.tierReqs = new Counter({ name: 'pgrelay_hot_tier_reqs_total', help: 'REQs by where their stored events came from: memory (the hot tier), database, or mixed', labelNames: ['answered'], registers });
    this.webhookDeliveries = new Counter({ name: 'pgrelay_webhook_deliveries_total', help: 'Webhook deliveries attempted by this process, by outcome (delivered, failed: to be retried, dead)', labelNames: ['outcome'], registers });
    this.pluginDecisions = new Counter({
      name: 'pgrelay_write_plugin_decisions_total',
      help: 'Events decided by the write-policy plugin, by action (error: it failed, timed out, was not running or was too busy)',
      labelNames: ['action'],
      registers,
    });
    this.pluginSeconds = new Histogram({ name: 'pgrelay_write_plugin_seconds', help: 'Write-policy plugin round trip: event handed over to its answer', buckets: LATENCY_BUCKETS, registers });
    this.pluginRestarts = new Counter({
      name: 'pgrelay_write_plugin_restarts_total',
      help: 'Write-policy plugin restarts, by reason: exit, timeout, reload (its file changed), spawn (it could not start)',
      labelNames: ['reason'],
      registers,
    });
    this.readRules = new Counter({
      name: 'pgrelay_read_rules_total',
      help: 'REQs, COUNTs and NEG-OPENs a read rule refused (CLOSED or NEG-ERR) or narrowed (a filter changed: kinds left out, limit capped), by rule',
      labelNames: ['rule', 'outcome'],
      registers,
    });
    if (sources.writePlugin) {
      const plugin = sources.writePlugin;
      gauge('pgrelay_write_plugin_in_flight', 'Events awaiting the write-policy plugin (written to it or queued)', () => plugin().inFlight);
      gauge('pgrelay_write_plugin_running', 'Whether the write-policy plugin is running (1) or not (0)', () => (plugin().running ? 1 : 0));
    }
    if (sources.walArchive) {
      // A scrape while the database is unreachable keeps the last values rather than failing.
      const archive = sharedForASecond(() => sources.walArchive!().catch(() => null));
      const archiveGauge = (name: string, help: string, read: (status: ArchiveStatus | undefined) => number) =>
        new Gauge({
          name,
          help,
          registers,
          async collect() {
            const status = await archive();
            if (status !== null) this.set(read(status));
          },
        });
      archiveGauge(
        'pgrelay_wal_archive_lag_seconds',
        'Seconds since the last WAL segment was archived, when WAL was written since (else 0): what losing the database disk would lose. Above the archive timeout for long, archiving is failing',
        (s) => s?.archiveLagSeconds ?? 0,
      );
      archiveGauge('pgrelay_wal_archive_failures_total', 'Failed attempts to archive a WAL segment since the server started (pg_stat_archiver.failed_count)', (s) => s?.failedCount ?? 0);
      archiveGauge('pgrelay_wal_archived_total', 'WAL segments archived since the server started (pg_stat_archiver.archived_count)', (s) => s?.archivedCount ?? 0);
    }
    if (sources.lastBackupAge) {
      const age = sources.lastBackupAge;
      new Gauge({
        name: 'pgrelay_last_backup_age_seconds',
        help: 'Seconds since the newest base backup in BACKUP_DIR ended (+Inf: none yet)',
        registers,
        async collect() {
          const seconds = await age().catch(() => null);
          if (seconds !== null) this.set(seconds ?? Infinity);
        },
      });
    }
    if (sources.moderationQueue) {
      const queue = sources.moderationQueue;
      new Gauge({
        name: 'pgrelay_moderation_queue_entries',
        help: "Reported events (stored here) and pubkeys awaiting an admin's decision: NIP-56 reports from trusted reporters",
        labelNames: ['target'],
        registers,
        collect() {
          const { events, pubkeys } = queue();
          this.set({ target: 'event' }, events);
          this.set({ target: 'pubkey' }, pubkeys);
        },
      });
      gauge('pgrelay_moderation_withheld_events', 'Events withheld from answers and live delivery until an admin decides (REPORTS_HIDE_AT)', () => queue().withheld);
    }
    gauge('pgrelay_db_pool_connections', 'Connections in the database pool', () => sources.pool().total);
    gauge('pgrelay_db_pool_idle', 'Idle connections in the database pool', () => sources.pool().idle);
    gauge('pgrelay_db_pool_in_use', 'Database pool connections running a query or transaction', () => sources.pool().total - sources.pool().idle);
    gauge('pgrelay_db_pool_waiting', 'Queries waiting for a database connection', () => sources.pool().waiting);
    if (sources.webOfTrust) {
      const web = sources.webOfTrust;
      const total = (name: string, help: string, read: () => number) =>
        new Counter({ name, help, registers, collect() { this.reset(); this.inc(read()); } });
      gauge('pgrelay_wot_members', 'Pubkeys in the web of trust (WOT_ROOTS) in force in this process', () => web().members);
      gauge('pgrelay_wot_last_refresh_timestamp_seconds', 'When the web of trust in force was computed (unix seconds)', () => web().computedAt / 1000);
      gauge('pgrelay_wot_refresh_duration_seconds', 'How long computing the web of trust in force took', () => web().durationMs / 1000);
      total('pgrelay_wot_refreshes_total', 'Times the web of trust was computed', () => web().computations);
      total('pgrelay_wot_refresh_failures_total', 'Computations of the web of trust that failed (the previous web stayed in force)', () => web().failures);
      total('pgrelay_wot_refusals_total', "Events refused as not in this relay's web of trust", () => web().refusals);
    }
  }

  message(verb: string): void {
    this.messages.inc({ verb });
    if (verb === 'REQ' || verb === 'COUNT') this.totals.reqs++;
  }

  /** An EVENT answered: its OK, and how long it took. */
  eventAnswered(accepted: boolean, reason: string, ms: number): void {
    this.received.inc();
    this.okSeconds.observe(ms / 1000);
    this.okLatency.add(ms);
    if (!accepted) this.refused.inc({ reason: prefixOf(reason) ?? 'other' });
    else if (reason !== '') this.duplicates.inc();
  }

  /** A committed batch's new events (from the change stream). */
  stored(events: readonly PreparedEvent[]): void {
    for (const p of events) {
      const kind = p.event.kind;
      this.storedEvents.inc({ kind: LABELLED_KINDS.has(kind) ? String(kind) : 'other' });
      this.storedByKind.set(kind, (this.storedByKind.get(kind) ?? 0) + 1);
    }
    this.totals.eventsIn += events.length;
  }

  ephemeral(): void {
    this.ephemeralEvents.inc();
    this.totals.eventsIn++;
  }

  reqAnswered(ms: number, rows: number): void {
    this.reqSeconds.observe(ms / 1000);
    this.reqLatency.add(ms);
    if (rows) this.sent('stored', rows);
  }

  countAnswered(ms: number): void {
    this.countSeconds.observe(ms / 1000);
  }

  /** EVENT messages sent: `stored` answers to a REQ, or `live` deliveries of a fan-out. */
  sent(source: 'stored' | 'live', n: number): void {
    this.eventsSent.inc({ source }, n);
    this.totals.eventsOut += n;
  }

  batch({ events, seconds, committed }: { events: number; seconds: number; committed: boolean }): void {
    if (!committed) return this.failedBatches.inc();
    this.batchEvents.observe(events);
    this.batchSeconds.observe(seconds);
  }

  /** Where a REQ's or COUNT's stored part ran (READ_DATABASE_URL). */
  read(database: 'primary' | 'replica'): void {
    this.reads.inc({ database });
  }

  /** A change another writer committed, as the live feed announced it. */
  remote(type: 'stored' | 'ephemeral', n: number): void {
    this.feedEvents.inc({ type }, n);
  }

  /** A live feed read ended (store/feed.ts). */
  feedRead(result: 'unchanged' | 'full'): void {
    this.feedReads.inc({ result });
  }

  /** Where a REQ's stored events came from (the hot tier's planner). */
  tierReq(answered: 'memory' | 'database' | 'mixed'): void {
    this.tierReqs.inc({ answered });
  }

  /** The write-policy plugin decided an event (or a fault did: error); answers are timed. */
  pluginDecision(action: PluginAction | 'error', seconds: number): void {
    this.pluginDecisions.inc({ action });
    if (action !== 'error') this.pluginSeconds.observe(seconds);
  }

  pluginRestart(reason: string): void {
    this.pluginRestarts.inc({ reason });
  }

  /** A read rule refused or narrowed one REQ, COUNT or NEG-OPEN (policy/policy.ts checkRead). */
  readRule(rule: string, outcome: 'refused' | 'narrowed'): void {
    this.readRules.inc({ rule, outcome });
  }

  webhook(outcome: 'delivered' | 'failed' | 'dead', n: number): void {
    this.webhookDeliveries.inc({ outcome }, n);
  }

  slowClient(): void {
    this.slowClients.inc();
  }

  auth(accepted: boolean): void {
    this.auths.inc({ result: accepted ? 'accepted' : 'refused' });
  }

  limited(what: 'event' | 'query'): void {
    this.rateLimited.inc({ what });
  }

  connectionRefused(reason: 'rate' | 'cap' | 'blocked' | 'closing'): void {
    this.refusedConnections.inc({ reason });
  }
}
