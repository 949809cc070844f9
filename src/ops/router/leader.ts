// One router per database among the relay's processes: with WORKERS above 1 (or several hosts on one
// database) every relay process given ROUTER_CONFIG asks for the same PostgreSQL session-level
// advisory lock, and only the one holding it runs the streams. The lock lives as long as that
// process's connection: if the process dies (or its connection drops), PostgreSQL releases it and
// another process takes it within `retryMs`, and its streams catch up from their positions.
import type pg from 'pg';
import { newClient } from '../../store/hosts.js';
import type { Logger } from '../../log.js';

const LOCK = "hashtextextended('pgrelay:router', 0)";

export interface Leadership {
  /** Stops the work (if running here) and gives the lock back. */
  stop(): Promise<void>;
}

/** Runs `start` while this process holds the router's lock; the function it returns stops the work. */
export function whileLeader(url: string, log: Logger, start: () => Promise<() => Promise<void>>, retryMs = 5000): Leadership {
  let client: pg.Client | undefined;
  let stopWork: (() => Promise<void>) | undefined;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let attempt: Promise<void> = Promise.resolve();

  const lose = async (why: string) => {
    const stop = stopWork;
    stopWork = undefined;
    const c = client;
    client = undefined;
    c?.removeAllListeners('end');
    c?.end().catch(() => undefined);
    if (stop) {
      log.warn({ why }, 'router: lost the router lock; stopping the streams here');
      await stop().catch((err) => log.error({ err: (err as Error).message }, 'router: stopping the streams failed'));
    }
  };

  const tryOnce = async () => {
    if (stopped || stopWork) return;
    try {
      if (!client) {
        const c = newClient(url, { application_name: `pgrelay-router-${process.pid}`, keepAlive: true });
        c.on('error', () => undefined); // 'end' follows
        await c.connect();
        c.on('end', () => void (attempt = attempt.then(() => lose('its database connection ended'))));
        client = c;
      }
      const { rows } = await client.query<{ ok: boolean }>(`SELECT pg_try_advisory_lock(${LOCK}) AS ok`);
      if (!rows[0].ok || stopped) return;
      log.info('router: this process holds the router lock; starting the streams');
      stopWork = await start();
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'router: could not take the router lock; trying again');
      await lose('an error');
    }
  };

  const tick = () => {
    attempt = attempt.then(tryOnce);
    void attempt.then(() => {
      if (!stopped) timer = setTimeout(tick, retryMs).unref();
    });
  };
  tick();

  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await attempt;
      const stop = stopWork;
      stopWork = undefined;
      await stop?.();
      const c = client;
      client = undefined;
      c?.removeAllListeners('end');
      await c?.end().catch(() => undefined);
    },
  };
}
