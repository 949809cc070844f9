// The relay process's network side: HTTP (one router: NIP-11 and what comes next) and WebSocket on one
// port, plain or TLS (tls.ts); who each client is (client-address.ts) and how much it may do
// (rate-limit.ts), decided at the upgrade; heartbeats, the expiry and retention sweeps, and an
// orderly shutdown: a drain (no new clients, those connected served) while a load balancer takes the
// relay out of rotation, then every in-flight write answered before the sockets close.
import cluster from 'node:cluster';
import type { IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type pg from 'pg';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { openWriteSide, type WriteSide } from '../admission/write-side.js';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import { noticeMessage } from '../nostr/messages.js';
import * as reason from '../nostr/reason.js';
import { relayIdentity } from '../policy/auth.js';
import type { ModerationLists } from '../policy/moderation.js';
import { createPool } from '../store/database.js';
import { backupHealthSources } from '../store/backups.js';
import { hotTierBytes } from '../store/hot/budget.js';
import { HotTierService } from '../store/hot/service.js';
import { ReportQueue } from '../store/reports.js';
import { trustedReporter } from '../policy/reports.js';
import type { SnapshotLoad } from '../store/hot/snapshot-load.js';
import { ReadRouter } from '../store/replicas.js';
import { signatureBackend } from '../nostr/schnorr.js';
import type { HostFinder } from '../store/hosts.js';
import { deleteExpiredEvents } from '../store/expiry.js';
import { startRetention } from '../store/retention.js';
import { WebOfTrustWatch } from '../store/web-of-trust.js';
import { addressList, clientAddress, trustedProxies, type AddressList } from './client-address.js';
import { Connection } from './connection.js';
import { nowSeconds, type RelayContext } from './context.js';
import { healthRoutes } from './http/health.js';
import { managementHandler } from './http/management.js';
import { MEMBERSHIPS_PATH, membershipsRoute } from './http/memberships.js';
import { metricsRoute } from './http/metrics.js';
import { NegentropyBudget } from './negentropy-budget.js';
import { WebhookWorker, type QueueSample } from './webhooks.js';
import { relayEndpoint, relayInformation } from './http/nip11.js';
import { Heartbeat } from './heartbeat.js';
import { HttpRouter, pathOf } from './http/router.js';
import { statusPageHandler, statusRoutes } from './http/status.js';
import { StatusSampler } from './status.js';
import { fanOut } from './fanout.js';
import { RelayMetrics } from './metrics.js';
import { RateLimiter, type RateLimitSettings } from './rate-limit.js';
import { SubscriptionIndex } from './subscriptions.js';
import { createListeningServer } from './tls.js';

export interface RelayServer {
  url: string;
  port: number;
  context: RelayContext;
  /** Reads TLS_CERT_FILE and TLS_KEY_FILE again (SIGHUP); false when the relay does not serve TLS. */
  reloadTls(): Promise<boolean>;
  /**
   * Begins the stop: `/ready` answers 503 and new connections are refused, while the clients
   * already connected are served on for `ms` (or until `hurry` aborts). close() follows.
   */
  drain(ms: number, hurry?: AbortSignal): Promise<void>;
  close(): Promise<void>;
}

const HEARTBEAT_MS = 30_000;

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

/**
 * This relay as a NIP-42 AUTH event must name it: RELAY_URL, or else the Host header and path of the
 * upgrade (which the client chooses: set RELAY_URL on a public relay, see the warning at start).
 */
function relayOf(req: IncomingMessage, relayUrl: string | undefined): string | undefined {
  if (relayUrl) return relayIdentity(relayUrl);
  const host = req.headers.host;
  if (!host || !/^[A-Za-z0-9.\-[\]:]+$/.test(host)) return undefined;
  return relayIdentity(`ws://${host}${pathOf(req)}`);
}

export function rateLimitsFrom(config: Config): RateLimitSettings {
  return {
    eventsPerSecond: config.RATE_LIMIT_EVENTS_PER_SECOND,
    eventsBurst: config.RATE_LIMIT_EVENTS_BURST,
    reqsPerSecond: config.RATE_LIMIT_REQS_PER_SECOND,
    reqsBurst: config.RATE_LIMIT_REQS_BURST,
    connectionsPerMinute: config.RATE_LIMIT_CONNECTIONS_PER_MINUTE,
    connectionsBurst: config.RATE_LIMIT_CONNECTIONS_BURST,
    maxConnectionsPerAddress: config.MAX_CONNECTIONS_PER_ADDRESS,
    maxPendingBytesPerAddress: config.MAX_PENDING_BYTES_PER_ADDRESS,
    disconnectAfter: config.RATE_LIMIT_DISCONNECT_AFTER,
    exempt: config.RATE_LIMIT_EXEMPT,
  };
}

/** Answers an upgrade with a plain HTTP error (before any WebSocket exists) and closes the socket. */
function refuseUpgrade(socket: Duplex, status: number, text: string, why: string): void {
  const body = `${why}\n`;
  socket.end(
    `HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}

/** The primary database: its pool, and its URL for the feed's own LISTEN connection. */
export interface PrimaryDatabase {
  pool: pg.Pool;
  url: string;
  /** Which server of several is in use (store/hosts.ts), for the metrics. */
  finder?: Pick<HostFinder, 'serving' | 'changes'>;
  embedded?: { restarts(): number };
}

export interface RelayOptions {
  /** The hot tier's snapshot, being read back (store/hot/snapshot-load.ts). */
  snapshot?: SnapshotLoad;
  /** Membership of a web of trust in place of WOT_ROOTS' (policy/reports.ts: its members' NIP-56 reports count). */
  inWeb?: (pubkey: string) => boolean;
}

export async function startRelay(config: Config, db: PrimaryDatabase, log: Logger, options: RelayOptions = {}): Promise<RelayServer> {
  const { pool } = db;
  // First, before anything starts that would need stopping: unusable TLS files end the start here.
  const router = new HttpRouter(log);
  const listening = await createListeningServer(config, router.handle);
  const connections = new Map<WebSocket, Connection>();
  const subscriptions = new SubscriptionIndex();
  const negentropy = new NegentropyBudget(config.NEGENTROPY_MAX_TOTAL_RECORDS);
  let webhookQueue: QueueSample = { queued: 0, dead: 0, oldestSeconds: 0 };
  // The write side (admission/write-side.ts) reports to the metrics, which read it back when scraped.
  let side: WriteSide | undefined;
  let reports: ReportQueue | undefined;
  const pluginState = config.WRITE_POLICY_PLUGIN ? () => side!.plugin!.state() : undefined;
  let webOfTrust: WebOfTrustWatch | undefined;
  const webOfTrustState = config.WOT_ROOTS.length > 0 ? () => webOfTrust!.state() : undefined;
  const metrics = new RelayMetrics({
    connections: () => connections.size,
    subscriptions: () => subscriptions.size,
    writerQueue: () => side?.writer.queued ?? 0,
    verifyQueue: () => side?.verifier.queued ?? 0,
    negentropyRecords: () => negentropy.records,
    webhookQueue: () => webhookQueue,
    pool: () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
    hotTier: () => tier?.current,
    writePlugin: pluginState,
    moderationQueue: () => ({ ...(reports?.size ?? { events: 0, pubkeys: 0 }), withheld: reports?.withheld?.size ?? 0 }),
    database: () => ({
      reachable: side?.feed.reachable ?? true,
      server: db.finder?.serving,
      failovers: db.finder?.changes ?? 0,
      embeddedRestarts: db.embedded?.restarts() ?? 0,
      writeRetries: side?.writer.stats.retries ?? 0,
      answeredUnreachable: tier?.stats.unreachable ?? 0,
    }),
    ...backupHealthSources(config.BACKUP_DIR, pool),
    webOfTrust: webOfTrustState,
  });
  const tierBytes = hotTierBytes(config.HOT_TIER_MB);
  // Every event arrives through side.admission; what any process, host or import commits reaches
  // side.changes (the feed); the operator's lists are watched so a change applies within a second.
  side = await openWriteSide(config, db, log, {
    feed: { removals: tierBytes > 0, onRead: (result) => metrics.feedRead(result), spacingMs: config.FEED_READ_SPACING_MS },
    onBatch: (batch) => metrics.batch(batch),
    plugin: { onDecision: (action, seconds) => metrics.pluginDecision(action, seconds), onRestart: (why) => metrics.pluginRestart(why) },
    closing: () => ctx.closing,
  });
  const { moderation, policy, changes, feed, writer, verifier, plugin: writePlugin } = side;
  const { limits } = policy;
  // NIP-56 reports from trusted reporters feed the moderation queue; REPORTS_HIDE_AT withholds the
  // most reported events (store/reports.ts). Started before the relay listens, so it withholds at once.
  reports = await new ReportQueue(pool, log, {
    trusted: trustedReporter({ admins: config.ADMIN_PUBKEYS, moderation, inWeb: options.inWeb ?? (policy.webOfTrust && ((pubkey) => policy.webOfTrust!.has(pubkey))) }),
    hideAt: config.REPORTS_HIDE_AT > 0 ? config.REPORTS_HIDE_AT : undefined,
  }).start(changes);
  moderation.onChange(() => void reports?.refresh());
  const withheld = config.REPORTS_HIDE_AT > 0 ? () => reports?.withheld : undefined;
  // WOT_ROOTS: the web the write rule reads, kept current from the change stream (store/web-of-trust.ts).
  if (policy.webOfTrust) webOfTrust = new WebOfTrustWatch(policy.webOfTrust, pool, changes, log, { refreshSeconds: config.WOT_REFRESH_SECONDS });
  // The newest events in memory, kept current from the change stream (store/hot/service.ts).
  const tier = tierBytes > 0 ? new HotTierService(pool, changes, feed, log, tierBytes, undefined, undefined, config.HOT_TIER_SNAPSHOT ? config.DATA_DIR : undefined).start(options.snapshot) : undefined;
  const reads = await new ReadRouter(
    pool,
    config.READ_DATABASE_URL.map((url) => ({ url, pool: createPool(url, config, log) })),
    () => changes.position,
    { maxLagMs: config.READ_REPLICA_MAX_LAG_MS, waitMs: config.READ_REPLICA_WAIT_MS },
    log,
    () => !feed.reachable,
  ).start();
  const ctx: RelayContext = {
    config,
    policy,
    limits,
    pool,
    log,
    subscriptions,
    verifier,
    writer,
    admission: side.admission,
    limiter: new RateLimiter(rateLimitsFrom(config)),
    changes,
    feed,
    reads,
    tier,
    reports,
    metrics,
    negentropy,
    writePlugin,
    stopping: false,
    closing: false,
  };
  // Everything downstream of a commit listens to the change stream.
  changes.subscribe((change) => metrics.sent('live', fanOut(subscriptions, change, withheld)));
  changes.subscribe((change) => {
    if (change.type === 'removed') return;
    if (change.source === 'remote') metrics.remote(change.type, change.type === 'stored' ? change.events.length : 1);
    else if (change.type === 'stored') metrics.stored(change.events);
    else metrics.ephemeral();
  });
  const proxies = trustedProxies(config.TRUSTED_PROXIES, config.TRUST_PROXY);
  if (config.TRUST_PROXY)
    log.warn('TRUST_PROXY is deprecated and will be removed: it now trusts X-Forwarded-For from loopback peers only; set TRUSTED_PROXIES instead (e.g. 127.0.0.1/32)');
  // Which BIP-340 build checks signatures (nostr/schnorr.ts); the verify threads load the same.
  if (signatureBackend().name === 'native') log.info('signatures: checked with the system libsecp256k1 (native addon)');
  else log.info({ why: signatureBackend().why }, 'signatures: checked with the WebAssembly build of libsecp256k1; the native addon is several times faster (docs/deploy.md)');
  if (!config.RELAY_URL)
    log.warn('RELAY_URL is not set: NIP-42 AUTH checks the relay tag against the Host header the client sends; set RELAY_URL (e.g. wss://relay.example.com) on a public relay');

  const info = () => relayInformation(config, policy);
  const status = config.STATUS_PAGE
    ? new StatusSampler({
        metrics,
        pool,
        log,
        info,
        relayUrl: config.RELAY_URL,
        connections: () => connections.size,
        subscriptions: () => subscriptions.size,
        writePlugin: pluginState,
        moderationQueue: () => reports!.size,
        webOfTrust: webOfTrustState,
      }).start()
    : undefined;
  router.add(
    relayEndpoint({
      info,
      statusPage: status && statusPageHandler,
      management: managementHandler({
        pool,
        log,
        admins: config.ADMIN_PUBKEYS,
        urlOf: (req) => {
          const identity = relayOf(req, config.RELAY_URL);
          return identity === undefined ? undefined : identity + new URL(req.url ?? '/', 'http://x').search;
        },
        changed: async () => {
          await moderation.reload();
          await reports!.refresh();
        },
      }),
    }),
  );
  router.add(
    membershipsRoute({
      pool,
      log,
      admins: config.ADMIN_PUBKEYS,
      secret: config.MEMBERSHIP_WEBHOOK_SECRET,
      // NIP-98's u tag names this API's public URL: RELAY_URL's with the path appended.
      urlOf: (req) => {
        const base = config.RELAY_URL ? relayIdentity(config.RELAY_URL) : undefined;
        const identity = config.RELAY_URL ? base && base + MEMBERSHIPS_PATH : relayOf(req, undefined);
        return identity === undefined ? undefined : identity + new URL(req.url ?? '/', 'http://x').search;
      },
      changed: () => moderation.reload(),
    }),
  );
  for (const route of healthRoutes(pool, () => ctx.stopping)) router.add(route);
  router.add(metricsRoute(metrics, config.METRICS_TOKEN));
  for (const route of status ? statusRoutes(status) : []) router.add(route);
  const http = listening.server;
  // The frame cap is above the announced limit so an oversized message still gets a NIP-01 reply;
  // beyond it ws closes the connection (1009) without buffering the rest.
  const wss = new WebSocketServer({ noServer: true, maxPayload: limits.maxMessageBytes * 2, perMessageDeflate: false });
  // Under WORKERS, which process took a connection (tests and benchmarks tell the workers apart).
  if (cluster.isWorker) wss.on('headers', (headers) => headers.push(`X-Relay-Process: ${process.pid}`));
  const heartbeat = new Heartbeat<WebSocket>(HEARTBEAT_MS).start();
  let warnedForwarded = false;
  // Blocked addresses (NIP-86 blockip): refused at the upgrade, and closed when they are blocked.
  let blocked: AddressList = addressList([]);
  const applyBlocks = (lists: ModerationLists) => {
    blocked = addressList([...lists.blockedIps.keys()]);
    for (const connection of connections.values())
      if (blocked.has(connection.remote)) connection.close(1008, reason.blocked('this address is blocked from this relay'));
  };
  applyBlocks(moderation.current);
  moderation.onChange(applyBlocks);

  // Who the client is and whether it may open another connection are settled before the upgrade, so
  // a refusal is a plain HTTP answer (429) that costs no WebSocket.
  http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', (err) => log.debug({ err: err.message }, 'upgrade socket error'));
    const forwarded = req.headers['x-forwarded-for'];
    const address = clientAddress(req.socket.remoteAddress, forwarded, proxies);
    if (forwarded !== undefined && !warnedForwarded && !proxies?.has(req.socket.remoteAddress ?? '')) {
      warnedForwarded = true;
      log.warn({ peer: address }, 'X-Forwarded-For from a peer not in TRUSTED_PROXIES is ignored: if a reverse proxy runs there, add it to TRUSTED_PROXIES');
    }
    if (blocked.has(address)) {
      metrics.connectionRefused('blocked');
      return refuseUpgrade(socket, 403, 'Forbidden', reason.blocked('this address is blocked from this relay'));
    }
    // From the drain on: a proxy that retries on 503 (nginx's proxy_next_upstream http_503,
    // HAProxy's retry-on 503) sends the client to another relay, and the rest reconnect.
    if (ctx.stopping) {
      metrics.connectionRefused('closing');
      return refuseUpgrade(socket, 503, 'Service Unavailable', reason.error('relay shutting down'));
    }
    const verdict = ctx.limiter.openConnection(address);
    if (verdict !== 'ok') {
      metrics.connectionRefused(verdict);
      const why =
        verdict === 'cap'
          ? reason.rateLimited(`at most ${config.MAX_CONNECTIONS_PER_ADDRESS} open connections per address`)
          : reason.rateLimited('too many new connections from this address, try again shortly');
      return refuseUpgrade(socket, 429, 'Too Many Requests', why);
    }
    // Counted open until the socket closes, whether or not the handshake completes.
    socket.once('close', () => ctx.limiter.closeConnection(address));
    wss.handleUpgrade(req, socket, head, (ws) => accept(ws, req, socket, address));
  });

  function accept(ws: WebSocket, req: IncomingMessage, socket: Duplex, address: string): void {
    const connection = new Connection(ws, ctx, { address, relay: relayOf(req, config.RELAY_URL) }, socket);
    connections.set(ws, connection);
    heartbeat.add(ws);
    ws.on('message', (data) => {
      connection.onMessage(toBuffer(data)).catch((err) => {
        // At the close, the verifier's threads stop under events still being checked: their sockets
        // are closed already and nothing was acknowledged, so it is no fault.
        if (ctx.closing) return log.debug({ err: (err as Error).message }, 'message dropped at shutdown');
        log.error({ err: (err as Error).message, stack: (err as Error).stack }, 'message handling failed');
        connection.send(noticeMessage(reason.error('internal error')));
      });
    });
    ws.on('close', () => {
      connection.dispose();
      connections.delete(ws);
      heartbeat.remove(ws);
    });
    ws.on('error', (err) => log.debug({ err: err.message, remote: connection.remote }, 'socket error'));
  }

  const sweepExpired = async () => {
    try {
      const removed = await deleteExpiredEvents(pool, nowSeconds());
      if (removed) log.info({ removed }, 'expired events removed');
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'expiry sweep failed');
    }
  };
  const sweep = setInterval(sweepExpired, config.EXPIRY_SWEEP_SECONDS * 1000);
  const stopRetention = startRetention(pool, config, log); // RETENTION_* (off unless RETENTION_OLDER_THAN)
  // Webhooks: every process delivers from the shared queue.
  const webhooks = config.WEBHOOK_DELIVERY
    ? new WebhookWorker(pool, log, {
        concurrency: config.WEBHOOK_CONCURRENCY,
        timeoutMs: config.WEBHOOK_TIMEOUT_MS,
        leaseMs: config.WEBHOOK_LEASE_MS,
        maxAgeMs: config.WEBHOOK_MAX_AGE_SECONDS * 1000,
        onOutcome: (outcome, n) => metrics.webhook(outcome, n),
        onSample: (sample) => (webhookQueue = sample),
      }, changes).start()
    : undefined;

  const drain = async (ms: number, hurry?: AbortSignal): Promise<void> => {
    if (ctx.stopping) return;
    ctx.stopping = true;
    if (ms <= 0 || hurry?.aborted) return;
    log.info({ drainMs: ms, connections: connections.size }, 'draining: /ready answers 503 and new connections are refused; connected clients are served until the drain ends');
    await new Promise<void>((resolve) => {
      const timer = setTimeout(finish, ms);
      function finish() {
        clearTimeout(timer);
        hurry?.removeEventListener('abort', finish);
        resolve();
      }
      hurry?.addEventListener('abort', finish);
    });
  };

  const close = async (): Promise<void> => {
    ctx.stopping = true;
    ctx.closing = true;
    // Events awaiting the plugin are answered error: now (and get that OK before their sockets close).
    const pluginClosed = writePlugin?.close();
    moderation.stop();
    reports?.stop();
    await webOfTrust?.stop();
    status?.stop();
    heartbeat.stop();
    clearInterval(sweep);
    stopRetention();
    const stopped = new Promise<void>((resolve) => http.close(() => resolve()));
    // Every event already being written gets its OK before its socket closes.
    const deadline = new Promise((r) => setTimeout(r, config.SHUTDOWN_TIMEOUT_MS).unref());
    await Promise.race([ctx.writer.drain(), deadline]);
    // A batch still waiting for the database gets its error now, not after the process is gone.
    ctx.writer.stopRetrying();
    await new Promise((r) => setImmediate(r));
    for (const connection of connections.values()) connection.close(1001, 'relay shutting down');
    wss.close();
    // Plain HTTP keep-alive sockets and status-page streams would hold http.close() open.
    http.closeAllConnections();
    await Promise.race([stopped, deadline]);
    for (const ws of connections.keys()) ws.terminate();
    await ctx.verifier.close();
    await pluginClosed;
    await webhooks?.stop();
    tier?.stop();
    await side?.searchMerger.stop();
    if (side && !side.writerPool.ending) await side.writerPool.end();
    await feed.stop();
    await reads.stop();
    const { batches, events, failedBatches } = ctx.writer.stats;
    log.info({ writer: { batches, events, failedBatches, meanBatch: batches ? events / batches : 0 } }, 'relay stopped');
  };

  try {
    // The web is computed before the first client: no write is judged against a web not yet known.
    await webOfTrust?.start();
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      http.listen(config.PORT, config.HOST, () => resolve());
    });
  } catch (err) {
    await close(); // what started so far, stopped before the caller reports the failure
    throw err;
  }
  const { port } = http.address() as AddressInfo;
  const host = config.HOST.includes(':') ? `[${config.HOST}]` : config.HOST;
  const url = `${listening.scheme}://${host}:${port}`;
  log.info({ url }, cluster.isWorker ? 'worker listening' : 'relay listening');
  writePlugin?.start(); // now rather than with the first event: a broken plugin shows in the log at once

  return {
    url,
    port,
    context: ctx,
    async reloadTls() {
      const reloaded = await listening.reload();
      if (reloaded) log.info({ cert: config.TLS_CERT_FILE }, 'TLS certificate reloaded');
      return reloaded;
    },
    drain,
    close,
  };
}
