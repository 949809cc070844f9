// The live status page (STATUS_PAGE): the page and its files (assets/status-page/), uPlot from
// node_modules, one snapshot as JSON, and a Server-Sent Events stream: a snapshot, then a tick every
// second (relay/status.ts). Nothing here needs a build step.
import { createReadStream, existsSync, readdirSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';
import { packageRoot } from '../../paths.js';
import type { StatusSampler } from '../status.js';
import type { HttpHandler, Route } from './router.js';

const ASSETS = path.join(packageRoot(), 'assets/status-page');
const UPLOT = path.join(packageRoot(), 'node_modules/uplot/dist');
const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
};
/** Viewers of the stream at once: each costs a socket and a write per second. */
const MAX_VIEWERS = 100;

function sendFile(res: ServerResponse, file: string): void {
  if (!existsSync(file)) {
    res.writeHead(404, { 'Content-Type': 'text/plain; charset=utf-8' }).end('not found\n');
    return;
  }
  res.writeHead(200, {
    'Content-Type': TYPES[path.extname(file)] ?? 'application/octet-stream',
    'Cache-Control': 'no-cache',
    'X-Content-Type-Options': 'nosniff',
  });
  createReadStream(file).pipe(res);
}

/** The page itself, for the relay endpoint's GET from a browser. */
export const statusPageHandler: HttpHandler = (_req, res) => {
  // The page loads only its own files; the operator's icon (NIP-11 `icon`) may be anywhere on the web.
  res.setHeader('Content-Security-Policy', "default-src 'self'; img-src 'self' https: http: data:; connect-src 'self'; frame-ancestors 'none'");
  sendFile(res, path.join(ASSETS, 'index.html'));
};

export function statusRoutes(sampler: StatusSampler): Route[] {
  let viewers = 0;
  const asset = (name: string, file: string): Route => ({ path: `/status/${name}`, methods: ['GET', 'HEAD'], handle: (_req, res) => sendFile(res, file) });
  const routes: Route[] = [
    asset('vendor/uPlot.iife.min.js', path.join(UPLOT, 'uPlot.iife.min.js')),
    asset('vendor/uPlot.min.css', path.join(UPLOT, 'uPlot.min.css')),
    {
      path: '/status.json',
      methods: ['GET', 'HEAD'],
      handle: (_req, res) => void res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' }).end(JSON.stringify(sampler.snapshot())),
    },
    {
      path: '/status/stream',
      methods: ['GET'],
      handle(req: IncomingMessage, res: ServerResponse) {
        if (viewers >= MAX_VIEWERS) {
          res.writeHead(503, { 'Retry-After': '30', 'Content-Type': 'text/plain; charset=utf-8' }).end('too many viewers, try again later\n');
          return;
        }
        viewers++;
        res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store', Connection: 'keep-alive', 'X-Accel-Buffering': 'no' });
        const send = (event: string, data: object) => res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
        send('snapshot', sampler.snapshot());
        const stop = sampler.onTick((tick) => send('tick', tick));
        req.socket.setTimeout(0);
        res.on('close', () => {
          stop();
          viewers--;
        });
      },
    },
  ];
  // The page's own files, each a route of its own: a request never names a path on disk.
  const files = existsSync(ASSETS) ? readdirSync(ASSETS).filter((name) => /^[A-Za-z0-9_-]+\.(js|css|svg|png|ico)$/.test(name)) : [];
  for (const name of files) routes.push(asset(name, path.join(ASSETS, name)));
  return routes;
}
