// A TCP proxy in front of a test relay that a test can cut (every connection through it dropped at
// once, new ones refused) and restore: a remote that vanishes and comes back at the same address.
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

export interface TcpProxy {
  /** ws://127.0.0.1:<the proxy's port> */
  url: string;
  cut(): void;
  restore(): void;
  /** Forwards nothing and closes nothing (a frozen server): bytes and new connections wait for thaw(). */
  freeze(): void;
  thaw(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetUrl: string): Promise<TcpProxy> {
  const target = new URL(targetUrl);
  const sockets = new Set<Socket>();
  let refusing = false;
  let frozen = false;
  const held: Array<() => void> = [];
  const server = createServer((client) => {
    if (refusing) return void client.destroy();
    if (frozen) {
      client.pause();
      sockets.add(client);
      client.on('error', () => client.destroy());
      return void held.push(() => !client.destroyed && forward(client));
    }
    forward(client);
  });
  const forward = (client: Socket) => {
    const upstream = connect(Number(target.port), target.hostname);
    const pair = [client, upstream];
    const end = () => {
      for (const socket of pair) {
        socket.destroy();
        sockets.delete(socket);
      }
    };
    for (const socket of pair) {
      sockets.add(socket);
      socket.on('error', end).on('close', end);
    }
    client.pipe(upstream).pipe(client);
  };
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const cut = () => {
    refusing = true;
    held.length = 0;
    for (const socket of sockets) socket.destroy();
    sockets.clear();
  };
  return {
    url: `ws://127.0.0.1:${(server.address() as AddressInfo).port}`,
    cut,
    restore: () => void (refusing = false),
    freeze: () => {
      frozen = true;
      for (const socket of sockets) socket.pause();
    },
    thaw: () => {
      frozen = false;
      for (const socket of sockets) socket.resume();
      held.splice(0).forEach((go) => go());
    },
    close: () => {
      cut();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
