// The relay process's network side: HTTP (one router: NIP-11 and what comes next) and WebSocket on one
// port, heartbeats, the expiry and retention sweeps, and an orderly shutdown that answers every
// in-flight write before closing sockets.
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import type pg from 'pg';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import { noticeMessage } from '../nostr/messages.js';
import * as reason from '../nostr/reason.js';
import { SignatureVerifier } from '../nostr/verifier.js';
import { policyFrom } from '../policy/policy.js';
import { deleteExpiredEvents } from '../store/expiry.js';
import { startRetention } from '../store/retention.js';
import { EventWriter } from '../store/writer.js';
import { Connection } from './connection.js';
import { nowSeconds, type RelayContext } from './context.js';
import { relayEndpoint, relayInformation } from './http/nip11.js';
import { HttpRouter } from './http/router.js';
import { SubscriptionIndex } from './subscriptions.js';

export interface RelayServer {
  url: string;
  port: number;
  context: RelayContext;
  close(): Promise<void>;
}

const HEARTBEAT_MS = 30_000;

function toBuffer(data: RawData): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

function remoteAddress(req: IncomingMessage, trustProxy: boolean): string {
  const forwarded = trustProxy ? String(req.headers['x-forwarded-for'] ?? '').split(',')[0].trim() : '';
  return forwarded || req.socket.remoteAddress || 'unknown';
}

export async function startRelay(config: Config, pool: pg.Pool, log: Logger): Promise<RelayServer> {
  const policy = policyFrom(config);
  const { limits } = policy;
  const ctx: RelayContext = {
    config,
    policy,
    limits,
    pool,
    log,
    subscriptions: new SubscriptionIndex(),
    verifier: new SignatureVerifier(config.VERIFY_THREADS),
    writer: new EventWriter(pool, log, config.WRITE_BATCH_SIZE, config.WRITE_QUEUE_MAX, config.WRITE_CONCURRENCY),
    closing: false,
  };
  const router = new HttpRouter(log).add(relayEndpoint(relayInformation(config, limits)));
  const http = createServer(router.handle);
  // The frame cap is above the announced limit so an oversized message still gets a NIP-01 reply;
  // beyond it ws closes the connection (1009) without buffering the rest.
  const wss = new WebSocketServer({ server: http, maxPayload: limits.maxMessageBytes * 2, perMessageDeflate: false });
  const connections = new Map<WebSocket, Connection>();
  const alive = new WeakSet<WebSocket>();

  wss.on('connection', (ws, req) => {
    const connection = new Connection(ws, ctx, remoteAddress(req, config.TRUST_PROXY), req.socket);
    connections.set(ws, connection);
    alive.add(ws);
    ws.on('pong', () => alive.add(ws));
    ws.on('message', (data) => {
      connection.onMessage(toBuffer(data)).catch((err) => {
        log.error({ err: (err as Error).message, stack: (err as Error).stack }, 'message handling failed');
        connection.send(noticeMessage(reason.error('internal error')));
      });
    });
    ws.on('close', () => {
      connection.dispose();
      connections.delete(ws);
    });
    ws.on('error', (err) => log.debug({ err: err.message, remote: connection.remote }, 'socket error'));
  });

  const heartbeat = setInterval(() => {
    for (const ws of connections.keys()) {
      if (!alive.has(ws)) ws.terminate();
      else {
        alive.delete(ws);
        ws.ping();
      }
    }
  }, HEARTBEAT_MS);

  const sweepExpired = async () => {
    try {
      const removed = await deleteExpiredEvents(pool, nowSeconds());
      if (removed) log.info({ removed }, 'expired events removed');
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'expiry sweep failed');
    }
  };
  const sweep = setInterval(sweepExpired, config.EXPIRY_SWEEP_SECONDS * 1000);
  const stopRetention = startRetention(pool, config, log); // RETENTION_* (off unless RETENTION_OLDER_THAN)

  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(config.PORT, config.HOST, () => resolve());
  });
  const { port } = http.address() as AddressInfo;
  const host = config.HOST.includes(':') ? `[${config.HOST}]` : config.HOST;
  const url = `ws://${host}:${port}`;
  log.info({ url }, 'relay listening');

  return {
    url,
    port,
    context: ctx,
    async close() {
      ctx.closing = true;
      clearInterval(heartbeat);
      clearInterval(sweep);
      stopRetention();
      const stopped = new Promise<void>((resolve) => http.close(() => resolve()));
      // Every event already being written gets its OK before its socket closes.
      const deadline = new Promise((r) => setTimeout(r, config.SHUTDOWN_TIMEOUT_MS).unref());
      await Promise.race([ctx.writer.drain(), deadline]);
      await new Promise((r) => setImmediate(r));
      for (const connection of connections.values()) connection.close(1001, 'relay shutting down');
      wss.close();
      await Promise.race([stopped, deadline]);
      for (const ws of connections.keys()) ws.terminate();
      await ctx.verifier.close();
      const { batches, events, failedBatches } = ctx.writer.stats;
      log.info({ writer: { batches, events, failedBatches, meanBatch: batches ? events / batches : 0 } }, 'relay stopped');
    },
  };
}
