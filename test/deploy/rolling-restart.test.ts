// docs/deploy.md, Upgrading without downtime, run under load: two relay processes on one database
// behind a balancer that health-checks GET /ready (test/support/ready-proxy.ts); publishers send
// signed events through it continuously, re-sending on reconnect what was not acknowledged, and
// subscribers read them, re-subscribing on reconnect with `since`. Relay A is stopped (SIGTERM: the
// drain, then the close) and started again on its port, then relay B. Counted at the end: every event
// acknowledged OK true is stored and every stored one was acknowledged, every connection a client
// opened was served, no reconnect was sent to a relay that was stopping (the drain outlasts the
// balancer's checks), and every subscriber has every stored event, live or from a re-subscription.
import WebSocket from 'ws';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { startRelayProcess, type RelayProcess } from '../../bench/lib/relay-process.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { createTestDatabase } from '../support/database.js';
import { unique } from '../support/events.js';
import { newSigner, type Signer } from '../support/keys.js';
import { startReadyProxy, type ReadyProxy } from '../support/ready-proxy.js';
import { until } from '../support/wait.js';

const PUBLISHERS = 2;
const SUBSCRIBERS = 2;
/** Events a publisher has sent and not yet seen answered, at most. */
const WINDOW = 4;
/** A publisher's pause between events: about 100 events/s in all, which the machine keeps up with while relays restart. */
const PACE_MS = 20;
const RECONNECT_MS = 50;
/** A re-subscription asks for events from this long before its previous connection closed. */
const SINCE_MARGIN_S = 10;
/** Each REQ asks for up to this many stored events (the relay's MAX_LIMIT): more would cut the stored part. */
const REQ_LIMIT = 5000;
/**
 * The balancer's check interval, and each relay's drain: five intervals, so the balancer has taken a
 * relay out of rotation before its clients are closed and reconnect.
 */
const CHECK_MS = 400;
const DRAIN_MS = 2000;
/** Events acknowledged between one step and the next, so each step happens under load. */
const STEP_EVENTS = 100;

const run = unique('rolling');

interface Connection {
  /** For a publisher: an OK came on it; for a subscriber: its REQ got EOSE. */
  served: boolean;
}

/** Opens a WebSocket through the balancer again and again until stopped; each socket is one Connection. */
abstract class ReconnectingClient {
  readonly connections: Connection[] = [];
  /** Connection attempts that never opened (a relay's 503 during its drain, or a reset). */
  failedAttempts = 0;
  protected ws: WebSocket | undefined;
  private stopped = false;

  constructor(private readonly url: string) {}

  start(): void {
    if (this.stopped) return;
    const ws = new WebSocket(this.url);
    let connection: Connection | undefined;
    ws.on('open', () => {
      connection = { served: false };
      this.connections.push(connection);
      this.ws = ws;
      this.opened(connection);
    });
    ws.on('message', (data) => this.message(JSON.parse(data.toString()), connection!));
    ws.on('error', () => {}); // followed by close
    ws.on('close', () => {
      if (!connection) this.failedAttempts++;
      if (this.ws === ws) this.ws = undefined;
      this.closed();
      setTimeout(() => this.start(), RECONNECT_MS);
    });
  }

  stop(): void {
    this.stopped = true;
    this.ws?.terminate();
  }

  protected send(message: unknown): void {
    this.ws?.send(JSON.stringify(message));
  }

  protected abstract opened(connection: Connection): void;
  protected abstract message(m: unknown[], connection: Connection): void;
  protected abstract closed(): void;
}

class Publisher extends ReconnectingClient {
  readonly signer: Signer = newSigner();
  readonly acked = new Set<string>();
  /** Signed and not yet answered OK true: re-sent on every new connection. */
  readonly unacked = new Map<string, NostrEvent>();
  /** The reasons of OK false answers (an event refused is sent again on the next connection). */
  readonly refusals: string[] = [];
  producing = true;
  private signed = 0;
  private timer: NodeJS.Timeout | undefined;

  protected opened(): void {
    for (const event of this.unacked.values()) this.send(['EVENT', event]);
    this.produce();
  }

  protected message(m: unknown[], connection: Connection): void {
    if (m[0] !== 'OK') return;
    connection.served = true;
    const id = m[1] as string;
    if (m[2] === true) {
      this.acked.add(id);
      this.unacked.delete(id);
    } else this.refusals.push(m[3] as string);
    this.produce();
  }

  protected closed(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** Signs and sends the next event after a pause, unless the window is full. */
  private produce(): void {
    if (this.timer || !this.producing || !this.ws || this.unacked.size >= WINDOW) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (!this.producing || !this.ws || this.unacked.size >= WINDOW) return;
      const event = this.signer.sign({ content: `event ${this.signed++}`, tags: [['t', run]] });
      this.unacked.set(event.id, event);
      this.send(['EVENT', event]);
      this.produce();
    }, PACE_MS);
  }
}

class Subscriber extends ReconnectingClient {
  /** Every event received, and how: in a REQ's stored part or live after its EOSE. */
  readonly received = new Map<string, 'stored' | 'live'>();
  /** The largest stored part of one REQ: below REQ_LIMIT means no REQ was cut short by its limit. */
  largestStoredPart = 0;
  private since: number;
  private storedPart = 0;
  private eose = false;

  constructor(url: string, since: number) {
    super(url);
    this.since = since;
  }

  protected opened(): void {
    this.eose = false;
    this.storedPart = 0;
    this.send(['REQ', 'feed', { '#t': [run], since: this.since, limit: REQ_LIMIT }]);
  }

  protected message(m: unknown[], connection: Connection): void {
    if (m[0] === 'EOSE' && m[1] === 'feed') {
      connection.served = true;
      this.eose = true;
      this.largestStoredPart = Math.max(this.largestStoredPart, this.storedPart);
    } else if (m[0] === 'EVENT' && m[1] === 'feed') {
      const id = (m[2] as NostrEvent).id;
      if (!this.eose) this.storedPart++;
      if (!this.received.has(id)) this.received.set(id, this.eose ? 'live' : 'stored');
    }
  }

  protected closed(): void {
    if (this.eose) this.since = Math.floor(Date.now() / 1000) - SINCE_MARGIN_S;
  }
}

const relayEnv = (databaseUrl: string) => ({
  DATABASE_URL: databaseUrl,
  SHUTDOWN_DRAIN_MS: String(DRAIN_MS),
  HOT_TIER_SNAPSHOT: 'false',
});

let proxy: ReadyProxy | undefined;
const relays: RelayProcess[] = [];
/** Every relay process started, restarted ones included: their logs are checked at the end. */
const started: RelayProcess[] = [];
const clients: ReconnectingClient[] = [];
let pool: pg.Pool | undefined;

afterAll(async () => {
  clients.forEach((c) => c.stop());
  await proxy?.close();
  for (const relay of started) if (relay.child.exitCode === null && relay.child.signalCode === null) relay.child.kill('SIGKILL');
  await pool?.end();
});

describe('a rolling restart behind a balancer that checks /ready', () => {
  it('loses no acknowledged event, serves every reconnected client, and every subscriber gets every stored event', async () => {
    const databaseUrl = await createTestDatabase();
    pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
    for (let i = 0; i < 2; i++) relays.push(await startRelayProcess(relayEnv(databaseUrl)));
    started.push(...relays);
    const ports = relays.map((r) => Number(new URL(r.url).port));
    proxy = await startReadyProxy(ports, { intervalMs: CHECK_MS });
    const startedAt = Math.floor(Date.now() / 1000) - 1;

    const publishers = Array.from({ length: PUBLISHERS }, () => new Publisher(proxy!.url));
    const subscribers = Array.from({ length: SUBSCRIBERS }, () => new Subscriber(proxy!.url, startedAt));
    clients.push(...subscribers, ...publishers);
    subscribers.forEach((s) => s.start());
    await until(() => subscribers.every((s) => s.connections[0]?.served), 'every subscriber subscribed');
    publishers.forEach((p) => p.start());
    const acked = () => publishers.reduce((n, p) => n + p.acked.size, 0);
    const underLoad = async (what: string) => {
      const from = acked();
      await until(() => acked() >= from + STEP_EVENTS, `${STEP_EVENTS} more events acknowledged ${what}`, 60_000);
    };
    await underLoad('before the first restart');

    for (const which of [0, 1]) {
      const old = relays[which];
      const exited = new Promise<number | null>((resolve) => old.child.once('exit', resolve));
      old.child.kill('SIGTERM');
      expect(await exited).toBe(0);
      relays[which] = await startRelayProcess({ ...relayEnv(databaseUrl), PORT: String(ports[which]) });
      started.push(relays[which]);
      await until(() => proxy!.isReady(ports[which]), 'the balancer to see the restarted relay ready');
      await underLoad(`after restarting relay ${which === 0 ? 'A' : 'B'}`);
    }

    // Publishing stops; whatever is still unacknowledged is re-sent until answered.
    publishers.forEach((p) => (p.producing = false));
    await until(() => publishers.every((p) => p.unacked.size === 0), 'every event acknowledged', 60_000);
    const ackedIds = publishers.flatMap((p) => [...p.acked]).sort();
    const { rows } = await pool.query<{ id: string }>("SELECT encode(id, 'hex') AS id FROM events WHERE pubkey = ANY($1::bytea[])", [
      publishers.map((p) => Buffer.from(p.signer.pubkey, 'hex')),
    ]);
    const storedIds = rows.map((r) => r.id).sort();
    expect(storedIds).toEqual(ackedIds);
    for (const p of publishers) expect(p.refusals.filter((r) => !r.startsWith('error: relay is shutting down'))).toEqual([]);

    await until(() => subscribers.every((s) => storedIds.every((id) => s.received.has(id))), 'every subscriber to have every stored event', 60_000);
    for (const s of subscribers) {
      expect(storedIds.filter((id) => !s.received.has(id))).toEqual([]);
      expect(s.largestStoredPart).toBeLessThan(REQ_LIMIT);
    }

    // Each relay served clients through the balancer, and each client had to reconnect.
    for (const port of ports) expect(proxy.sent.get(port)).toBeGreaterThan(0);
    for (const c of clients) {
      expect(c.connections.length).toBeGreaterThan(1);
      expect(c.connections.filter((conn) => !conn.served)).toEqual([]);
      // The drain outlasted the balancer's checks: no reconnect was sent to a relay that was stopping.
      expect(c.failedAttempts).toBe(0);
    }
    for (const s of subscribers) expect([...s.received.values()].filter((how) => how === 'live').length).toBeGreaterThan(0);
    // Nor was anything about it an error to the relays.
    expect(started.flatMap((r) => r.logs.filter((l) => (l.level as number) >= 50).map((l) => l.msg))).toEqual([]);

  }, 240_000);
});
