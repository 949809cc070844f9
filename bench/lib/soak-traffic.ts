// The soak's clients (npm run soak): publishers at a fixed total rate, REQ clients with a mix of
// filters, live subscribers that connect, stay 10–60 s and leave, and one slow reader that
// subscribes to everything and reads its socket slowly. Every EVENT's OK, every REQ's EOSE and
// every socket the relay closes is recorded, with the time, for the per-interval table.
import { setMaxListeners } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import WebSocket from 'ws';
import { canonicalEventJson } from '../../src/nostr/event.js';
import { words } from './corpus.js';
import { intBetween, prng } from './random.js';
import { signer, type Signer } from '../load/data.js';
import type { Timed } from './soak-report.js';

export interface TrafficOptions {
  url: string;
  publishers: number;
  eventsPerSecond: number;
  reqClients: number;
  reqsPerSecond: number;
  liveSubscribers: number;
  /** How long a live subscriber stays, in seconds: drawn between the two. */
  liveSeconds: [number, number];
  /** The slow reader's read rate; 0: no slow reader. */
  slowReaderBytesPerSecond: number;
  seed: number;
  /** The relay's count of connections it closed for reading too slowly (nostr_slow_client_disconnects_total). */
  relaySlowCloses(): Promise<number | null>;
}

/** A socket the relay closed: `expected` says why that was the relay's intent, else it counts as unexpected. */
export interface Disconnect {
  t: number;
  role: string;
  /** The WebSocket close code; 0: the connection could not be opened. */
  code: number;
  reason: string;
  expected?: 'announced' | 'relay counter' | 'heartbeat';
  /** The slow reader: how far behind the newest event it had read was. */
  behindSeconds?: number;
}

/** What the clients saw in one interval. */
export interface Tally {
  okMs: number[];
  reqMs: number[];
  liveMs: number[];
  acked: number;
  errors: number;
  slowCloses: number;
  unexpected: number;
}

const emptyTally = (): Tally => ({ okMs: [], reqMs: [], liveMs: [], acked: 0, errors: 0, slowCloses: 0, unexpected: 0 });

/** src/relay/server.ts pings every 30 s and cuts off a socket that has not answered the previous ping. */
const RELAY_HEARTBEAT_MS = 30_000;
const OK_TIMEOUT_MS = 60_000;
const REQ_TIMEOUT_MS = 30_000;
const MAX_PENDING_PER_PUBLISHER = 1000;
const MAX_REQS_IN_FLIGHT = 15; // per REQ client, under the relay's MAX_SUBSCRIPTIONS (20)
const AUTHORS = 20;
const HASHTAGS = 10;

function open(url: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

interface Publisher {
  ws: WebSocket | undefined;
  /** EVENT id → when it was sent (performance.now()). */
  pending: Map<string, number>;
}

interface ReqClient {
  ws: WebSocket | undefined;
  inFlight: Map<string, number>;
}

export class SoakTraffic {
  /** Every acknowledged (OK true) event id. */
  readonly acked: string[] = [];
  readonly okLatencies: Timed[] = [];
  readonly reqLatencies: Timed[] = [];
  /** Times (minutes) of OK false answers, to tell those during a database restart from the rest. */
  readonly refusedAt: number[] = [];
  readonly refusals = new Map<string, number>();
  readonly disconnects: Disconnect[] = [];
  /** EVENTs due by the clock; those not sent found their publisher reconnecting or 1000 OKs behind. */
  scheduled = 0;
  published = 0;
  /** EVENTs whose publisher's socket dropped before the OK, or whose OK never came. */
  unanswered = 0;
  liveConnections = 0;
  slowReaderConnections = 0;

  private tally = emptyTally();
  private t0 = 0;
  private sending = false;
  private readonly stopping = new AbortController();
  private readonly ours = new WeakSet<WebSocket>();
  private readonly sockets = new Set<WebSocket>();
  private readonly publishers: Publisher[] = [];
  private readonly reqClients: ReqClient[] = [];
  /** Published event id → when it was sent, for live-delivery latency (the last two minutes). */
  private readonly sentAt = new Map<string, number>();
  private readonly random: () => number;
  private readonly authors: Signer[];
  private reqsSent = 0;
  private nextSubId = 0;
  private attributedSlowCloses = 0;
  private ticker: NodeJS.Timeout | undefined;
  private readonly loops: Array<Promise<void>> = [];

  constructor(private readonly o: TrafficOptions) {
    setMaxListeners(100, this.stopping.signal); // every client loop sleeps on it
    this.random = prng(o.seed);
    this.authors = Array.from({ length: AUTHORS }, (_, i) => signer(`soak-${i}`));
  }

  /** Minutes since the traffic started. */
  now(): number {
    return (performance.now() - this.t0) / 60_000;
  }

  async start(): Promise<void> {
    this.t0 = performance.now();
    if (!this.running) return;
    for (let i = 0; i < this.o.publishers; i++) {
      const p: Publisher = { ws: undefined, pending: new Map() };
      this.publishers.push(p);
      this.loops.push(this.keepOpen('publisher', (ws) => this.attachPublisher(p, ws), () => this.dropPublisher(p)));
    }
    for (let i = 0; i < this.o.reqClients; i++) {
      const c: ReqClient = { ws: undefined, inFlight: new Map() };
      this.reqClients.push(c);
      this.loops.push(this.keepOpen('REQ client', (ws) => this.attachReqClient(c, ws), () => ((c.ws = undefined), c.inFlight.clear())));
    }
    for (let i = 0; i < this.o.liveSubscribers; i++) this.loops.push(this.liveSubscriber());
    if (this.o.slowReaderBytesPerSecond > 0) this.loops.push(this.slowReader());
    // The clock starts once the publishers and REQ clients are connected, so none of the first
    // events is skipped for want of a socket.
    for (let waited = 0; waited < 10_000 && [...this.publishers, ...this.reqClients].some((c) => !c.ws); waited += 10) await sleep(10);
    this.t0 = performance.now();
    this.sending = true;
    this.ticker = setInterval(() => this.tick(), 50);
  }

  /** The interval's tally, starting the next one. */
  take(): Tally {
    const t = this.tally;
    this.tally = emptyTally();
    const old = performance.now() - 120_000;
    for (const [id, at] of this.sentAt) {
      if (at >= old) break;
      this.sentAt.delete(id);
    }
    return t;
  }

  /** Stops publishing and querying, then waits (up to 30 s) for the OKs still due. */
  async stopSending(): Promise<void> {
    this.sending = false;
    clearInterval(this.ticker);
    for (let waited = 0; waited < 30_000 && this.publishers.some((p) => p.pending.size); waited += 100) await sleep(100);
    for (const p of this.publishers) {
      this.unanswered += p.pending.size;
      p.pending.clear();
    }
  }

  /** Closes every socket (as the client: none of these count as disconnects). */
  async close(): Promise<void> {
    this.sending = false;
    clearInterval(this.ticker);
    this.stopping.abort();
    for (const ws of this.sockets) this.closeOurs(ws);
    // A paused slow reader would wait for the relay's close frame behind its backlog.
    const cutOff = setTimeout(() => this.sockets.forEach((ws) => (this.ours.add(ws), ws.terminate())), 2000);
    await Promise.allSettled(this.loops);
    clearTimeout(cutOff);
  }

  private get running(): boolean {
    return !this.stopping.signal.aborted;
  }

  private pause(ms: number): Promise<void> {
    return sleep(ms, undefined, { signal: this.stopping.signal }).catch(() => undefined);
  }

  private closeOurs(ws: WebSocket): void {
    this.ours.add(ws);
    if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000);
  }

  /** Opens a socket, counting a failure to connect as an unexpected disconnect. */
  private async connect(role: string): Promise<WebSocket | undefined> {
    try {
      const ws = await open(this.o.url);
      this.sockets.add(ws);
      ws.on('error', () => this.tally.errors++);
      if (!this.running) this.closeOurs(ws); // opened while closing down
      return ws;
    } catch (err) {
      this.recordDisconnect({ t: this.now(), role, code: 0, reason: `connect failed: ${(err as Error).message}` });
      return undefined;
    }
  }

  /** Resolves when the socket closes: undefined if we closed it, else what the relay said. */
  private closed(ws: WebSocket): Promise<{ code: number; reason: string } | undefined> {
    return new Promise((resolve) =>
      ws.once('close', (code: number, reason: Buffer) => {
        this.sockets.delete(ws);
        resolve(this.ours.has(ws) ? undefined : { code, reason: reason.toString() });
      }),
    );
  }

  private recordDisconnect(d: Disconnect): void {
    this.disconnects.push(d);
    if (d.expected) this.tally.slowCloses++;
    else this.tally.unexpected++;
  }

  /**
   * A close the client did not ask for is the relay's intent only when the relay said so: a 1008
   * "too slowly" close, its slow-client counter moving past the closes already put down to it, or
   * (the slow reader) a heartbeat cut-off of a reader that was further behind than the relay's ping
   * interval, so could not have answered the ping in time.
   */
  private async classify(role: string, close: { code: number; reason: string }, behindMs = 0): Promise<void> {
    const d: Disconnect = { t: this.now(), role, ...close, ...(role === 'slow reader' ? { behindSeconds: Math.round(behindMs / 1000) } : {}) };
    const counted = await this.o.relaySlowCloses();
    if (/too slowly/.test(close.reason)) d.expected = 'announced';
    else if (counted !== null && counted > this.attributedSlowCloses) d.expected = 'relay counter';
    else if (role === 'slow reader' && close.code === 1006 && behindMs > RELAY_HEARTBEAT_MS) d.expected = 'heartbeat';
    if (counted !== null) this.attributedSlowCloses = counted;
    this.recordDisconnect(d);
  }

  /** A socket that should stay open for the whole run: reopened (after 1 s) whenever it drops. */
  private async keepOpen(role: string, attach: (ws: WebSocket) => void, detach: () => void): Promise<void> {
    while (this.running) {
      const ws = await this.connect(role);
      if (!ws) {
        await this.pause(1000);
        continue;
      }
      attach(ws);
      const close = await this.closed(ws);
      detach();
      if (!close) return;
      await this.classify(role, close);
      await this.pause(1000);
    }
  }

  private attachPublisher(p: Publisher, ws: WebSocket): void {
    p.ws = ws;
    ws.on('message', (data: Buffer) => {
      const m = JSON.parse(data.toString());
      if (m[0] !== 'OK') return;
      const sentAt = p.pending.get(m[1]);
      if (sentAt === undefined) return;
      p.pending.delete(m[1]);
      const ms = performance.now() - sentAt;
      this.okLatencies.push({ t: this.now(), ms });
      this.tally.okMs.push(ms);
      if (m[2] === true) {
        this.acked.push(m[1]);
        this.tally.acked++;
      } else {
        this.refusedAt.push(this.now());
        const prefix = String(m[3]).split(':')[0];
        this.refusals.set(prefix, (this.refusals.get(prefix) ?? 0) + 1);
        this.tally.errors++;
      }
    });
  }

  private dropPublisher(p: Publisher): void {
    p.ws = undefined;
    this.unanswered += p.pending.size;
    p.pending.clear();
  }

  private attachReqClient(c: ReqClient, ws: WebSocket): void {
    c.ws = ws;
    ws.on('message', (data: Buffer) => {
      const text = data.toString();
      if (text.startsWith('["EVENT"')) return;
      const m = JSON.parse(text);
      const sentAt = c.inFlight.get(m[1]);
      if (sentAt === undefined) return;
      if (m[0] === 'EOSE') {
        const ms = performance.now() - sentAt;
        this.reqLatencies.push({ t: this.now(), ms });
        this.tally.reqMs.push(ms);
        ws.send(JSON.stringify(['CLOSE', m[1]]));
        c.inFlight.delete(m[1]);
      } else if (m[0] === 'CLOSED') {
        this.tally.errors++;
        c.inFlight.delete(m[1]);
      }
    });
  }

  /** Open-loop: publishes and queries what is due by now, whatever the answers' pace. */
  private tick(): void {
    if (!this.sending) return;
    const elapsed = (performance.now() - this.t0) / 1000;
    const events = Math.min(Math.floor(elapsed * this.o.eventsPerSecond) - this.scheduled, Math.ceil(this.o.eventsPerSecond));
    for (let i = 0; i < events; i++) this.publishOne(this.publishers[this.scheduled++ % this.publishers.length]);
    const reqs = Math.min(Math.floor(elapsed * this.o.reqsPerSecond) - this.reqsSent, Math.ceil(this.o.reqsPerSecond));
    for (let i = 0; i < reqs; i++) this.queryOne(this.reqClients[this.reqsSent++ % this.reqClients.length]);
    const now = performance.now();
    for (const p of this.publishers)
      for (const [id, at] of p.pending) {
        if (now - at < OK_TIMEOUT_MS) break;
        p.pending.delete(id);
        this.unanswered++;
      }
    for (const c of this.reqClients)
      for (const [subId, at] of c.inFlight) {
        if (now - at < REQ_TIMEOUT_MS) break;
        c.inFlight.delete(subId);
        c.ws?.send(JSON.stringify(['CLOSE', subId]));
        this.tally.errors++;
      }
  }

  private author(): Signer {
    return this.authors[Math.floor(this.random() * AUTHORS)];
  }

  private recentAcked(): string | undefined {
    return this.acked.length ? this.acked[this.acked.length - 1 - Math.floor(this.random() * Math.min(200, this.acked.length))] : undefined;
  }

  /** Regular kinds only (notes, reactions): a replaceable or deleting event would make "acknowledged but not stored" legitimate. */
  private publishOne(p: Publisher | undefined): void {
    if (!p?.ws || p.ws.readyState !== WebSocket.OPEN || p.pending.size >= MAX_PENDING_PER_PUBLISHER) return;
    const n = this.published++;
    const target = this.recentAcked();
    const mention = this.author().pubkey;
    const reaction = n % 10 === 9 && target !== undefined;
    const tags = reaction ? [['e', target], ['p', mention]] : [['t', `soak${n % HASHTAGS}`], ['p', mention], ...(target && n % 3 === 0 ? [['e', target]] : [])];
    const event = this.author().sign({
      kind: reaction ? 7 : 1,
      created_at: Math.floor(Date.now() / 1000),
      tags,
      content: reaction ? '+' : `soak note ${n}: ${words(this.random, intBetween(this.random, 60, 600))}`,
    });
    const now = performance.now();
    p.pending.set(event.id, now);
    this.sentAt.set(event.id, now);
    p.ws.send(`["EVENT",${canonicalEventJson(event)}]`);
  }

  /** The REQ mix: an author's notes, a home feed, a hashtag, mentions, the last minute, ids just acknowledged. */
  private filter(): Record<string, unknown> {
    const pubkeys = (n: number) => Array.from({ length: n }, () => this.author().pubkey);
    switch (this.reqsSent % 6) {
      case 0:
        return { kinds: [1], authors: pubkeys(1), limit: 20 };
      case 1:
        return { kinds: [1, 7], authors: [...new Set(pubkeys(5))], limit: 50 };
      case 2:
        return { '#t': [`soak${Math.floor(this.random() * HASHTAGS)}`], limit: 50 };
      case 3:
        return { '#p': pubkeys(1), limit: 20 };
      case 4:
        return { since: Math.floor(Date.now() / 1000) - 60, limit: 100 };
      default: {
        const ids = [...new Set(Array.from({ length: 5 }, () => this.recentAcked()).filter((x) => x !== undefined))];
        return ids.length ? { ids } : { kinds: [7], limit: 20 };
      }
    }
  }

  private queryOne(c: ReqClient | undefined): void {
    if (!c?.ws || c.ws.readyState !== WebSocket.OPEN || c.inFlight.size >= MAX_REQS_IN_FLIGHT) return;
    const subId = `q${this.nextSubId++}`;
    c.inFlight.set(subId, performance.now());
    c.ws.send(JSON.stringify(['REQ', subId, this.filter()]));
  }

  /** One live-subscriber slot: connect, subscribe, stay a while, leave, and again. */
  private async liveSubscriber(): Promise<void> {
    await this.pause(this.random() * 5000); // spread the first connections
    while (this.running) {
      const ws = await this.connect('live subscriber');
      if (!ws) {
        await this.pause(1000);
        continue;
      }
      this.liveConnections++;
      const filters = [
        { kinds: [1], '#t': [`soak${Math.floor(this.random() * HASHTAGS)}`], limit: 10 },
        { authors: [this.author().pubkey, this.author().pubkey], limit: 10 },
        { '#p': [this.author().pubkey], limit: 0 },
        { kinds: [7], limit: 5 },
      ];
      let live = false;
      ws.on('message', (data: Buffer) => {
        const text = data.toString();
        if (text.startsWith('["EOSE"')) live = true;
        else if (text.startsWith('["CLOSED"')) this.tally.errors++;
        else if (live && text.startsWith('["EVENT"')) {
          const at = this.sentAt.get(text.slice(text.indexOf('"id":"') + 6).slice(0, 64));
          if (at !== undefined) this.tally.liveMs.push(performance.now() - at);
        }
      });
      ws.send(JSON.stringify(['REQ', 'live', filters[Math.floor(this.random() * filters.length)]]));
      const closed = this.closed(ws);
      const stay = 1000 * (this.o.liveSeconds[0] + this.random() * (this.o.liveSeconds[1] - this.o.liveSeconds[0]));
      const result = await Promise.race([closed, this.pause(stay).then(() => 'stayed' as const)]);
      if (result === 'stayed') {
        this.closeOurs(ws);
        await closed;
      } else if (result) await this.classify('live subscriber', result);
    }
  }

  /**
   * Subscribes to everything and reads at most `slowReaderBytesPerSecond` on average: the socket is
   * paused whenever more than that has been read since the connection opened, so the relay's send
   * buffer for it grows. When the relay cuts it off, a new one takes its place 5 s later.
   */
  private async slowReader(): Promise<void> {
    const rate = this.o.slowReaderBytesPerSecond;
    while (this.running) {
      const ws = await this.connect('slow reader');
      if (!ws) {
        await this.pause(1000);
        continue;
      }
      this.slowReaderConnections++;
      const opened = performance.now();
      let bytes = 0;
      let behindMs = 0;
      let resume: NodeJS.Timeout | undefined;
      ws.on('message', (data: Buffer) => {
        bytes += data.length;
        const text = data.toString();
        if (text.startsWith('["EVENT"')) {
          const createdAt = JSON.parse(text)[2].created_at as number;
          behindMs = Date.now() - createdAt * 1000;
        }
        const allowed = (rate * (performance.now() - opened)) / 1000;
        if (bytes > allowed && !ws.isPaused) {
          ws.pause();
          resume = setTimeout(() => ws.resume(), ((bytes - allowed) / rate) * 1000);
        }
      });
      ws.send(JSON.stringify(['REQ', 'all', { limit: 200 }]));
      // Backlogged by megabytes, the reader would see the relay's close only after reading them all;
      // a write to a socket the relay has closed comes back at once as a reset.
      const probe = setInterval(() => ws.readyState === WebSocket.OPEN && ws.send('["CLOSE","probe"]'), 5000);
      const close = await this.closed(ws);
      clearInterval(probe);
      clearTimeout(resume);
      if (!close) return;
      await this.classify('slow reader', close, behindMs);
      await this.pause(5000);
    }
  }
}
