// GET /metrics: Prometheus text exposition of the relay's metrics (relay/metrics.ts). With
// METRICS_TOKEN set it needs `Authorization: Bearer <token>`, compared in constant time.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { RelayMetrics } from '../metrics.js';
import type { Route } from './router.js';

const digest = (s: string) => createHash('sha256').update(s).digest();

function authorized(req: IncomingMessage, token: string | undefined): boolean {
  if (token === undefined) return true;
  const header = req.headers.authorization ?? '';
  const given = /^Bearer (.+)$/.exec(header)?.[1];
  // Digests have one length, so timingSafeEqual never throws and leaks nothing about the length.
  return given !== undefined && timingSafeEqual(digest(given), digest(token));
}

export function metricsRoute(metrics: RelayMetrics, token: string | undefined): Route {
  return {
    path: '/metrics',
    methods: ['GET'],
    async handle(req, res) {
      if (!authorized(req, token)) {
        res.writeHead(401, { 'WWW-Authenticate': 'Bearer realm="metrics"', 'Content-Type': 'text/plain; charset=utf-8' }).end('a bearer token is required\n');
        return;
      }
      const body = await metrics.registry.metrics();
      res.writeHead(200, { 'Content-Type': metrics.registry.contentType, 'Cache-Control': 'no-store' }).end(body);
    },
  };
}
