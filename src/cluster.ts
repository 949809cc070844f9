// WORKERS: the relay as several processes on one port (node:cluster; Linux hands new connections to
// the workers in turn). The primary process owns the database set-up: it starts the embedded
// PostgreSQL when there is no DATABASE_URL and runs the migrations, then each worker opens its own
// pool, verify threads and LISTEN connection on it (store/feed.ts delivers between them exactly as
// between hosts). A worker that dies is started again; SIGTERM or SIGINT stops every worker (each
// drains for SHUTDOWN_DRAIN_MS and answers its in-flight writes, as a single relay does) before the
// database is stopped.
import cluster, { type Worker } from 'node:cluster';
import { availableParallelism } from 'node:os';
import type { Config } from './config.js';
import type { Lifecycle } from './lifecycle.js';
import type { Logger } from './log.js';
import { checkPortFree } from './relay/listen-check.js';
import { openDatabase } from './store/database.js';

/** How many processes WORKERS asks for. */
export function workerCount(config: Pick<Config, 'WORKERS'>): number {
  return config.WORKERS === 'auto' ? availableParallelism() : config.WORKERS;
}

/** A worker that dies sooner than this after starting is restarted after a growing delay. */
const CRASH_LOOP_MS = 10_000;

/** A worker's exit code when it could not start (its port, its database …): the primary then stops. */
export const WORKER_START_FAILED = 78;

export async function runPrimary(config: Config, log: Logger, lifecycle: Lifecycle): Promise<void> {
  const count = workerCount(config);
  await checkPortFree(config.PORT, config.HOST);
  // Its pool stays unused (and so without connections): the workers connect to the same server, the
  // embedded one's URL or DATABASE_URL as given.
  const db = await openDatabase(config, log);
  lifecycle.add('database', (reason) => db.close({ leaveAdopted: reason === 'startup-failed' }));
  const env: Record<string, string> = { DATABASE_URL: db.url };
  // Verify threads: the cores shared among the workers rather than every worker taking them all.
  if (config.VERIFY_THREADS === 'auto') env.VERIFY_THREADS = String(Math.max(1, Math.floor(availableParallelism() / count)));

  let reported = false;
  const listening = new Set<number>();
  const startedAt = new Map<number, number>();
  let restartDelayMs = 500;

  const fork = (): Worker => {
    const worker = cluster.fork(env);
    startedAt.set(worker.id, Date.now());
    worker.on('message', (m: { type?: string; url?: string }) => {
      if (m?.type !== 'listening') return;
      listening.add(worker.id);
      if (!reported && listening.size === count) {
        reported = true;
        lifecycle.started();
        log.info({ url: m.url, workers: count }, 'relay listening');
      }
    });
    return worker;
  };

  cluster.on('exit', (worker, code, signal) => {
    listening.delete(worker.id);
    if (lifecycle.isStopping) return;
    // A worker that could not start has said why on stderr; the others would fail alike.
    if (code === WORKER_START_FAILED && !reported) return void lifecycle.stop('a worker could not start', 1, 'startup-failed');
    const lived = Date.now() - (startedAt.get(worker.id) ?? 0);
    startedAt.delete(worker.id);
    restartDelayMs = lived < CRASH_LOOP_MS ? Math.min(restartDelayMs * 2, 30_000) : 500;
    log.error({ pid: worker.process.pid, code, signal, restartInMs: restartDelayMs }, 'worker died; starting another');
    setTimeout(() => {
      if (lifecycle.isStopping) return;
      const next = fork();
      next.once('message', () => log.info({ pid: next.process.pid }, 'worker restarted'));
    }, restartDelayMs);
  });

  for (let i = 0; i < count; i++) fork();

  // Each worker drains (answers its in-flight writes) before the database is stopped.
  lifecycle.add('workers', async (_reason, hurry) => {
    const workers = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
    log.info({ workers: workers.length }, 'stopping workers');
    // A second signal to the primary ends the workers' drains too.
    hurry.addEventListener('abort', () => workers.forEach((w) => w.isDead() || w.process.kill('SIGTERM')), { once: true });
    await Promise.all(
      workers.map(
        (w) =>
          new Promise<void>((resolve) => {
            if (w.isDead()) return resolve();
            w.once('exit', () => resolve());
            w.process.kill('SIGTERM');
            // Past the workers' own deadline (their drain, then their writes), stop waiting.
            setTimeout(() => (w.process.kill('SIGKILL'), resolve()), config.SHUTDOWN_DRAIN_MS + config.SHUTDOWN_TIMEOUT_MS + 10_000).unref();
          }),
      ),
    );
    log.info('all workers stopped');
  });
  // Certificates rotate: each worker reads them again.
  process.on('SIGHUP', () => {
    for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGHUP');
  });
}

/** In a worker: tells the primary it is serving. */
export function reportListening(url: string): void {
  if (cluster.isWorker) process.send?.({ type: 'listening', url });
}
