// `npm start`: configuration → database (embedded or DATABASE_URL) with migrations → relay; or, with
// WORKERS above 1, the same in each worker process under a primary that owns the database (cluster.ts).
// lifecycle.ts decides how the process ends: in order, whatever ends it.
import cluster from 'node:cluster';
import { reportListening, runPrimary, workerCount, WORKER_START_FAILED } from './cluster.js';
import { ConfigError, loadConfig } from './config.js';
import { Lifecycle } from './lifecycle.js';
import { createLogger } from './log.js';
import { checkPortFree } from './relay/listen-check.js';
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
  const lifecycle = new Lifecycle(log, config).install();
  // A worker that cannot start says so with its exit code; the primary then stops them all (cluster.ts).
  if (cluster.isWorker) lifecycle.startFailureCode = WORKER_START_FAILED;
  try {
    if (cluster.isPrimary && workerCount(config) > 1) return await runPrimary(config, log, lifecycle);
    // Before the database: a port in use (a second `npm start`, an old relay) costs no PostgreSQL start.
    if (cluster.isPrimary) await checkPortFree(config.PORT, config.HOST);
    const db = await openDatabase(config, log);
    // After a failed start, an embedded server this process found running (another relay's) stays.
    lifecycle.add('database', (reason) => db.close({ leaveAdopted: reason === 'startup-failed' }));
    const relay = await startRelay(config, db, log);
    lifecycle.add('relay', () => relay.close());
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

void main();
