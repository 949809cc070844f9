// GET /health: the process is alive and serving HTTP. GET /ready: the relay can do its job, i.e. its
// database answers and its migrations are current; 503 otherwise, so a load balancer stops sending
// clients to a relay whose database is gone and sends them again once it is back. From the moment a
// stop begins (the drain, SHUTDOWN_DRAIN_MS) it answers 503 {"status":"stopping"}, while the relay
// still serves its clients, so the balancer takes it out of rotation before its sockets close.
import type { ServerResponse } from 'node:http';
import type pg from 'pg';
import { pendingMigrations } from '../../store/migrate.js';
import type { Route } from './router.js';

/** How long /ready waits for the database before it says "not ready". */
const READY_TIMEOUT_MS = 2000;

function json(res: ServerResponse, status: number, body: object): void {
  res.writeHead(status, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' }).end(JSON.stringify(body));
}

export function healthRoutes(pool: pg.Pool, stopping: () => boolean): Route[] {
  return [
    { path: '/health', methods: ['GET', 'HEAD'], handle: (_req, res) => json(res, 200, { status: 'ok' }) },
    {
      path: '/ready',
      methods: ['GET', 'HEAD'],
      async handle(_req, res) {
        if (stopping()) return json(res, 503, { status: 'stopping' });
        let timer: NodeJS.Timeout | undefined;
        const timeout = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`the database did not answer within ${READY_TIMEOUT_MS} ms`)), READY_TIMEOUT_MS);
        });
        try {
          const pending = await Promise.race([pendingMigrations(pool), timeout]);
          if (pending.length) return json(res, 503, { status: 'unavailable', reason: 'migrations pending', pending });
          json(res, 200, { status: 'ready' });
        } catch (err) {
          json(res, 503, { status: 'unavailable', reason: `database unreachable: ${(err as Error).message}` });
        } finally {
          clearTimeout(timer);
        }
      },
    },
  ];
}
