// `npm start`: configuration → database (embedded or DATABASE_URL) with migrations → relay; or, with
// WORKERS above 1, the same in each worker process under a primary that owns the database (cluster.ts).
// lifecycle.ts decides how the process ends: in order, whatever ends it.
import cluster from 'node:cluster';
import { reportListening, runPrimary, workerCount, WORKER_START_FAILED } from './cluster.js';
import { ConfigError, loadConfig } from './config.js';
import { Lifecycle } from './lifecycle.js';
import { createLogger, type Logger } from './log.js';
import { whileLeader, type Leadership } from './ops/router/leader.js';
import { loadRouterConfig, RouterConfigError } from './ops/router/config.js';
import { Router } from './ops/router/router.js';
import { checkPortFree } from './relay/listen-check.js';
import { openDatabase } from './store/database.js';
import { hotTierBytes } from './store/hot/budget.js';
import { SnapshotLoad } from './store/hot/snapshot-load.js';
import { startRelay, type RelayServer } from './relay/server.js';

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
  // ROUTER_CONFIG is configuration too: a file that does not parse stops the start here (exit 2).
  if (config.ROUTER_CONFIG) {
    try {
      loadRouterConfig(config.ROUTER_CONFIG);
    } catch (err) {
      if (!(err instanceof RouterConfigError)) throw err;
      console.error(`ROUTER_CONFIG: ${err.message}`);
      process.exit(2);
    }
  }
  const log = cluster.isWorker ? createLogger(config.LOG_LEVEL).child({ worker: cluster.worker!.id }) : createLogger(config.LOG_LEVEL);
  const lifecycle = new Lifecycle(log, config).install();
  // A worker that cannot start says so with its exit code; the primary then stops them all (cluster.ts).
  if (cluster.isWorker) lifecycle.startFailureCode = WORKER_START_FAILED;
  try {
    if (cluster.isPrimary && workerCount(config) > 1) return await runPrimary(config, log, lifecycle);
    // Before the database: a port in use (a second `npm start`, an old relay) costs no PostgreSQL start.
    if (cluster.isPrimary) await checkPortFree(config.PORT, config.HOST);
    // The hot tier's snapshot needs no database: read back while PostgreSQL starts, and checked
    // against it once the relay runs (store/hot/warm-start.ts).
    const tierBytes = hotTierBytes(config.HOT_TIER_MB);
    const snapshot = config.HOT_TIER_SNAPSHOT && tierBytes > 0 ? SnapshotLoad.begin(config.DATA_DIR, tierBytes, log) : undefined;
    // Not yet read back when the relay stops (or fails to start): the file stays for the next start.
    if (snapshot) lifecycle.add('hot tier snapshot', async () => snapshot.release());
    const db = await openDatabase(config, log);
    // After a failed start, an embedded server this process found running (another relay's) stays.
    lifecycle.add('database', (reason) => db.close({ leaveAdopted: reason === 'startup-failed' }));
    const relay = await startRelay(config, db, log, { snapshot });
    snapshot?.serving();
    lifecycle.add('relay', () => relay.close());
    // The router's streams once the relay serves; stopped before it (the writer still takes their events).
    if (config.ROUTER_CONFIG) {
      const router = runRouter(relay, db.url, config.ROUTER_CONFIG, log);
      lifecycle.add('router', () => router.stop());
    }
    // Added last, so a stop begins with it: asked to stop, the relay first drains (SHUTDOWN_DRAIN_MS).
    lifecycle.add('drain', (reason, hurry) => (reason === 'signal' ? relay.drain(config.SHUTDOWN_DRAIN_MS, hurry) : Promise.resolve()));
    lifecycle.started();
    reportListening(relay.url);
    // Certificates rotate: SIGHUP reads TLS_CERT_FILE and TLS_KEY_FILE again, open connections stay.
    process.on('SIGHUP', () => {
      relay.reloadTls().then(
        (reloaded) => reloaded || log.info('SIGHUP: no TLS certificate to reload (TLS_CERT_FILE is not set)'),
        (err) => log.error({ err: (err as Error).message }, 'SIGHUP: TLS certificate not reloaded, the previous one stays in use'),
      );
    });
  } catch (err) {
    await lifecycle.fail(err);
  }
}

/**
 * ROUTER_CONFIG's streams, run on this relay's own writer, change stream and rules, in one process
 * per database: the one holding the router's advisory lock (ops/router/leader.ts). Under WORKERS
 * that is whichever worker takes it first; if it dies another takes over and catches up.
 */
function runRouter(relay: RelayServer, databaseUrl: string, file: string, log: Logger): Leadership {
  const ctx = relay.context;
  const routerLog = log.child({ component: 'router' });
  return whileLeader(databaseUrl, routerLog, async () => {
    const router = new Router({
      pool: ctx.pool,
      log: routerLog,
      admission: ctx.admission,
      pluginTimeoutMs: ctx.config.WRITE_POLICY_TIMEOUT_MS,
      maxMessageBytes: ctx.config.MAX_MESSAGE_BYTES,
      changes: ctx.changes,
      feed: ctx.feed,
      registry: ctx.metrics.registry,
    });
    try {
      await router.runFile(file);
    } catch (err) {
      await router.stop();
      throw err;
    }
    return () => router.stop();
  });
}

void main();
