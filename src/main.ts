// `npm start`: configuration → database (embedded or DATABASE_URL) with migrations → relay; or, with
// WORKERS above 1, the same in each worker process under a primary that owns the database (cluster.ts).
import cluster from 'node:cluster';
import { reportListening, runPrimary, workerCount } from './cluster.js';
import { ConfigError, loadConfig } from './config.js';
import { createLogger } from './log.js';
import { openDatabase } from './store/database.js';
import { startRelay } from './relay/server.js';

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
  const log = cluster.isWorker ? createLogger(config.LOG_LEVEL).child({ worker: cluster.worker!.id }) : createLogger(config.LOG_LEVEL);
  // A safety net: no client input is meant to reach these, and the relay keeps serving if it does.
  process.on('unhandledRejection', (err) => log.error({ err: String(err) }, 'unhandled rejection'));
  process.on('uncaughtException', (err) => log.error({ err: err.message, stack: err.stack }, 'uncaught exception'));

  if (cluster.isPrimary && workerCount(config) > 1) return runPrimary(config, log);
  const db = await openDatabase(config, log);
  const relay = await startRelay(config, db, log);
  reportListening(relay.url);

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down');
    await relay.close();
    await db.close();
    process.exit(0);
  };
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  // Certificates rotate: SIGHUP reads TLS_CERT_FILE and TLS_KEY_FILE again, open connections stay.
  process.on('SIGHUP', () => {
    relay.reloadTls().then(
      (reloaded) => reloaded || log.info('SIGHUP: no TLS certificate to reload (TLS_CERT_FILE is not set)'),
      (err) => log.error({ err: (err as Error).message }, 'SIGHUP: TLS certificate not reloaded, the previous one stays in use'),
    );
  });
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
