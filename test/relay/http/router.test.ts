// The relay's one HTTP router: routes by exact path, 405 with Allow for other methods, the relay's
// endpoint (NIP-11) for any other path, and a failing handler answered 500 without taking the server down.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/log.js';
import { HttpRouter } from '../../../src/relay/http/router.js';

let server: Server;
let base: string;

beforeAll(async () => {
  const router = new HttpRouter(createLogger('silent'))
    .add({ methods: ['GET'], handle: (_req, res) => void res.end('endpoint') })
    .add({ path: '/thing', methods: ['GET', 'POST'], handle: (req, res) => void res.end(`thing ${req.method}`) })
    .add({ path: '/broken', methods: ['GET'], handle: async () => Promise.reject(new Error('boom')) });
  server = createServer(router.handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe('HTTP router', () => {
  it('sends a request to the route of its path, whatever its query string', async () => {
    expect(await (await fetch(`${base}/thing?x=1`)).text()).toBe('thing GET');
    expect(await (await fetch(`${base}/thing`, { method: 'POST' })).text()).toBe('thing POST');
  });

  it('answers another method 405 with the methods the route allows', async () => {
    const res = await fetch(`${base}/thing`, { method: 'DELETE' });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('GET, POST');
  });

  it('sends every other path to the relay endpoint', async () => {
    expect(await (await fetch(`${base}/`)).text()).toBe('endpoint');
    expect(await (await fetch(`${base}/some/prefix`)).text()).toBe('endpoint');
  });

  it('answers 500 when a handler fails, and keeps serving', async () => {
    expect((await fetch(`${base}/broken`)).status).toBe(500);
    expect((await fetch(`${base}/thing`)).status).toBe(200);
  });
});
