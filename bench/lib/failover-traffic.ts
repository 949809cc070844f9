// The clients of the failover bench, each recording when things happened so that any window of the
// run can be measured afterwards: publishers of signed events (a fixed rate, each event sent again
// after a reconnect until it gets an OK), live subscribers that count every delivery, and a REQ
// prober that asks for the publishers' recent events at a fixed interval.
import { randomBytes } from 'node:crypto';
import * as secp from 'tiny-secp256k1';
import WebSocket from 'ws';
import { computeEventId, type NostrEvent } from '../../src/nostr/event.js';

/** How long an unanswered EVENT waits before it is sent again on the same connection. */
const RESEND_AFTER_MS = 15_000;
/** A REQ without EOSE or CLOSED after this long counts as failed. */
const REQ_TIMEOUT_MS = 5_000;
const RECONNECT_MS = 250;

export interface Key {
  secretKey: Buffer;
  pubkey: string;
}

export function newKey(): Key {
  for (;;) {
    const secretKey = randomBytes(32);
    if (secp.isPrivate(secretKey)) return { secretKey, pubkey: Buffer.from(secp.xOnlyPointFromScalar(secretKey)).toString('hex') };
  }
}

function signNote(key: Key, content: string): NostrEvent {
  const unsigned = { pubkey: key.pubkey, created_at: Math.floor(Date.now() / 1000), kind: 1, tags: [], content };
  const id = computeEventId(unsigned);
  return { id, ...unsigned, sig: Buffer.from(secp.signSchnorr(Buffer.from(id, 'hex'), key.secretKey, randomBytes(32))).toString('hex') };
}

/**
 * A WebSocket that comes back: reconnects after RECONNECT_MS whenever it closes, calling `onOpen`
 * each time it is open again, until `close()`.
 */
class LastingSocket {
  ws: WebSocket | undefined;
  open = false;
  reconnects = 0;
  private closed = false;

  constructor(
    private readonly url: string,
    private readonly onOpen: () => void,
    private readonly onMessage: (message: unknown[]) => void,
    private readonly onDown: () => void = () => undefined,
  ) {
    this.connect();
  }

  private connect(): void {
    if (this.closed) return;
    const ws = new WebSocket(this.url);
    this.ws = ws;
    ws.on('open', () => {
      this.open = true;
      this.onOpen();
    });
    ws.on('message', (data: Buffer) => this.onMessage(JSON.parse(data.toString()) as unknown[]));
    ws.on('error', () => undefined); // a close follows
    ws.on('close', () => {
      const wasOpen = this.open;
      this.open = false;
      if (this.closed) return;
      if (wasOpen) this.onDown();
      this.reconnects++;
      setTimeout(() => this.connect(), RECONNECT_MS);
    });
  }

  send(message: unknown): boolean {
    if (!this.open || !this.ws) return false;
    this.ws.send(JSON.stringify(message));
    return true;
  }

  close(): void {
    this.closed = true;
    this.ws?.close();
  }
}

export interface PublishRecord {
  firstSentAt: number;
  lastSentAt: number;
  /** When its OK true arrived, if it did. */
  ackedAt?: number;
  /** The OK false reason, if the relay refused it. */
  refused?: string;
  sends: number;
}

/** One publisher connection at a fixed rate; `records` has every event it made, by id. */
export class Publisher {
  readonly key = newKey();
  readonly records = new Map<string, PublishRecord>();
  private readonly unanswered = new Map<string, NostrEvent>();
  private readonly socket: LastingSocket;
  private readonly timer: NodeJS.Timeout;
  private readonly resender: NodeJS.Timeout;
  private count = 0;

  constructor(url: string, intervalMs: number, private readonly label: string) {
    this.socket = new LastingSocket(
      url,
      () => this.unanswered.forEach((event) => this.send(event)), // after a reconnect, everything still unanswered
      (m) => this.onMessage(m),
    );
    this.timer = setInterval(() => this.publishNext(), intervalMs);
    this.resender = setInterval(() => this.resendStale(), 1_000);
  }

  private publishNext(): void {
    const event = signNote(this.key, `failover bench ${this.label} ${this.count++}`);
    this.records.set(event.id, { firstSentAt: Date.now(), lastSentAt: 0, sends: 0 });
    this.unanswered.set(event.id, event);
    this.send(event);
  }

  private send(event: NostrEvent): void {
    const record = this.records.get(event.id)!;
    if (this.socket.send(['EVENT', event])) {
      record.sends++;
      record.lastSentAt = Date.now();
    }
  }

  private resendStale(): void {
    const now = Date.now();
    for (const event of this.unanswered.values()) {
      if (now - this.records.get(event.id)!.lastSentAt >= RESEND_AFTER_MS) this.send(event);
    }
  }

  private onMessage(m: unknown[]): void {
    if (m[0] !== 'OK' || typeof m[1] !== 'string') return;
    const record = this.records.get(m[1]);
    if (!record || !this.unanswered.has(m[1])) return;
    this.unanswered.delete(m[1]);
    if (m[2] === true) record.ackedAt = Date.now();
    else record.refused = String(m[3]);
  }

  get reconnects(): number {
    return this.socket.reconnects;
  }

  stop(): void {
    clearInterval(this.timer);
    clearInterval(this.resender);
    this.socket.close();
  }
}

export interface Delivery {
  at: number;
  /** True when it came after the subscription's EOSE (live), false when in the stored part of a re-subscription. */
  live: boolean;
}

/** A live subscription to the publishers' events; after a reconnect it subscribes again from a little before it went down. */
export class Subscriber {
  /** Every delivery of each event id. */
  readonly deliveries = new Map<string, Delivery[]>();
  private readonly socket: LastingSocket;
  private downAt: number | undefined;
  private subscription = 0;
  private eose = false;

  constructor(url: string, private readonly authors: string[]) {
    this.socket = new LastingSocket(
      url,
      () => this.subscribe(),
      (m) => this.onMessage(m),
      () => (this.downAt = Date.now()),
    );
  }

  private subscribe(): void {
    this.subscription++;
    this.eose = false;
    const since = this.downAt === undefined ? undefined : Math.floor(this.downAt / 1000) - 10;
    this.socket.send(['REQ', `live${this.subscription}`, since === undefined ? { authors: this.authors, limit: 0 } : { authors: this.authors, since }]);
  }

  private onMessage(m: unknown[]): void {
    if (m[1] !== `live${this.subscription}`) return;
    if (m[0] === 'EOSE') this.eose = true;
    else if (m[0] === 'EVENT') {
      const id = (m[2] as NostrEvent).id;
      const list = this.deliveries.get(id) ?? [];
      list.push({ at: Date.now(), live: this.eose });
      this.deliveries.set(id, list);
    } else if (m[0] === 'CLOSED') {
      // The relay ended the subscription (an error while it was being set up): ask again.
      setTimeout(() => this.subscribe(), RECONNECT_MS);
    }
  }

  get reconnects(): number {
    return this.socket.reconnects;
  }

  get ready(): boolean {
    return this.socket.open && this.eose;
  }

  stop(): void {
    this.socket.close();
  }
}

export interface ReqRecord {
  sentAt: number;
  /** undefined while waiting. */
  ok?: boolean;
  answeredAt?: number;
  /** CLOSED's reason, `timeout`, or `disconnected`. */
  failure?: string;
}

/** A REQ for the publishers' recent events every `intervalMs` on one connection, each recorded. */
export class ReqProber {
  readonly reqs: ReqRecord[] = [];
  private readonly pending = new Map<string, ReqRecord>();
  private readonly socket: LastingSocket;
  private readonly timer: NodeJS.Timeout;
  private count = 0;

  constructor(url: string, private readonly authors: () => string[], intervalMs: number) {
    this.socket = new LastingSocket(url, () => undefined, (m) => this.onMessage(m), () => this.failPending('disconnected'));
    this.timer = setInterval(() => this.probe(), intervalMs);
  }

  private probe(): void {
    const now = Date.now();
    for (const [id, r] of this.pending) {
      if (now - r.sentAt >= REQ_TIMEOUT_MS) this.settle(id, false, 'timeout');
    }
    const id = `q${this.count++}`;
    const record: ReqRecord = { sentAt: now };
    this.reqs.push(record);
    this.pending.set(id, record);
    if (!this.socket.send(['REQ', id, { authors: this.authors(), limit: 20 }])) this.settle(id, false, 'disconnected');
  }

  private settle(id: string, ok: boolean, failure?: string): void {
    const record = this.pending.get(id);
    if (!record) return;
    this.pending.delete(id);
    record.ok = ok;
    record.answeredAt = Date.now();
    record.failure = failure;
  }

  private failPending(why: string): void {
    for (const id of [...this.pending.keys()]) this.settle(id, false, why);
  }

  private onMessage(m: unknown[]): void {
    if (typeof m[1] !== 'string' || !this.pending.has(m[1])) return;
    if (m[0] === 'EOSE') {
      this.settle(m[1], true);
      this.socket.send(['CLOSE', m[1]]);
    } else if (m[0] === 'CLOSED') this.settle(m[1], false, String(m[2]));
  }

  stop(): void {
    clearInterval(this.timer);
    this.failPending('stopped');
    this.socket.close();
  }
}
