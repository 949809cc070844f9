// A TCP load balancer in front of several test relays, as HAProxy or nginx with active health checks
// would be: it asks each backend for GET /ready every `intervalMs` and sends each new connection to
// the next backend (in turn) whose last answer was 200. Bytes pass through untouched, so a relay's
// close frame, or its 503 to an upgrade, reaches the client as the relay sent it.
import { request } from 'node:http';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

export interface ReadyProxy {
  /** ws://127.0.0.1:<the proxy's port> */
  url: string;
  /** Whether the backend on `port` answered its last check with 200. */
  isReady(port: number): boolean;
  /** Connections sent to each backend's port so far. */
  readonly sent: Map<number, number>;
  close(): Promise<void>;
}

/** GET /ready on 127.0.0.1:`port`: true for 200; false for anything else, no answer in time, or no listener. */
function checkReady(port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/ready', timeout: timeoutMs, agent: false }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
    req.end();
  });
}

export async function startReadyProxy(ports: number[], { intervalMs = 50 } = {}): Promise<ReadyProxy> {
  const ready = new Map(ports.map((port) => [port, false]));
  const sent = new Map(ports.map((port) => [port, 0]));
  const sockets = new Set<Socket>();
  let closed = false;
  let next = 0;

  const checks = ports.map(async (port) => {
    while (!closed) {
      ready.set(port, await checkReady(port, intervalMs * 4));
      await new Promise((r) => setTimeout(r, intervalMs));
    }
  });
  // The first round, so a proxy that has started knows its backends.
  await Promise.all(ports.map(async (port) => ready.set(port, await checkReady(port, intervalMs * 4))));

  const server = createServer((client) => {
    const candidates = ports.filter((port) => ready.get(port));
    // No backend ready: the client is refused, as a balancer with no server up answers 503 or resets.
    if (!candidates.length) return void client.destroy();
    const port = candidates[next++ % candidates.length];
    sent.set(port, sent.get(port)! + 1);
    const upstream = connect(port, '127.0.0.1');
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      // A reset or a refused upstream ends both; an orderly end is passed on by pipe().
      socket.on('error', () => (client.destroy(), upstream.destroy()));
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));

  return {
    url: `ws://127.0.0.1:${(server.address() as AddressInfo).port}`,
    isReady: (port) => ready.get(port) ?? false,
    sent,
    async close() {
      closed = true;
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.all(checks);
    },
  };
}
