// A plain WebSocket test client that records every message, so tests can assert exact replies.
import type { IncomingHttpHeaders } from 'node:http';
import WebSocket, { type ClientOptions } from 'ws';
import type { NostrEvent } from '../../src/nostr/event.js';
import { now, type Signer } from './keys.js';

export type RelayMessage = [string, ...unknown[]];

export class TestClient {
  readonly messages: RelayMessage[] = [];
  private waiters: Array<() => void> = [];
  private syncs = 0;
  closeInfo: { code: number; reason: string } | undefined;
  /** The headers of the relay's upgrade response (e.g. X-Relay-Process under WORKERS). */
  upgradeHeaders: IncomingHttpHeaders = {};

  private constructor(
    readonly ws: WebSocket,
    readonly url: string,
  ) {
    ws.once('upgrade', (response) => (this.upgradeHeaders = response.headers));
    ws.on('message', (data) => {
      this.messages.push(JSON.parse(data.toString()));
      this.wake();
    });
    ws.on('close', (code, reason) => {
      this.closeInfo = { code, reason: reason.toString() };
      this.wake();
    });
  }

  /** `options`: ws client options (a source address, extra headers, a CA for wss://). */
  static async connect(url: string, options: ClientOptions = {}): Promise<TestClient> {
    const ws = new WebSocket(url, options);
    const client = new TestClient(ws, url);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return client;
  }

  /** The NIP-42 challenge the relay sent when the connection opened. */
  async challenge(): Promise<string> {
    const m = await this.waitFor((m) => m[0] === 'AUTH', 10_000, 0);
    return m[1] as string;
  }

  /** Authenticates as `signer` (NIP-42) naming `relayUrl`; returns the OK as [accepted, reason]. */
  async auth(signer: Signer, relayUrl = this.url, overrides: Partial<NostrEvent> = {}): Promise<[boolean, string]> {
    const challenge = await this.challenge();
    const event = signer.sign({ kind: 22242, created_at: now(), tags: [['relay', relayUrl], ['challenge', challenge]], content: '', ...overrides });
    return this.sendAuth(event);
  }

  /** Sends ["AUTH", event] and returns its OK as [accepted, reason]. */
  async sendAuth(event: NostrEvent | Record<string, unknown>): Promise<[boolean, string]> {
    const from = this.messages.length;
    this.send(['AUTH', event]);
    const ok = await this.waitFor((m) => m[0] === 'OK' && m[1] === event.id, 10_000, from);
    return [ok[2] as boolean, ok[3] as string];
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    waiters.forEach((w) => w());
  }

  send(message: unknown): void {
    this.ws.send(typeof message === 'string' ? message : JSON.stringify(message));
  }

  /** Waits for the first message (from `from` on) that satisfies `test`; returns its index too. */
  async waitFor(test: (m: RelayMessage) => boolean, timeoutMs = 10_000, from = 0): Promise<RelayMessage> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.messages.slice(from).find(test);
      if (found) return found;
      if (this.closeInfo) throw new Error(`socket closed (${this.closeInfo.code} ${this.closeInfo.reason}) while waiting`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting; got ${JSON.stringify(this.messages.slice(-5))}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => (clearTimeout(timer), resolve()));
      });
    }
  }

  /** Sends an EVENT and returns its OK as [accepted, reason] (`timeoutMs`: longer while the database fails over). */
  async publish(event: NostrEvent | Record<string, unknown>, timeoutMs = 10_000): Promise<[boolean, string]> {
    const from = this.messages.length;
    this.send(['EVENT', event]);
    const ok = await this.waitFor((m) => m[0] === 'OK' && m[1] === event.id, timeoutMs, from);
    return [ok[2] as boolean, ok[3] as string];
  }

  /** Sends a REQ and returns the stored events up to EOSE, or throws with the CLOSED reason. */
  async query(subId: string, ...filters: object[]): Promise<NostrEvent[]> {
    const from = this.messages.length;
    this.send(['REQ', subId, ...filters]);
    const end = await this.waitFor((m) => (m[0] === 'EOSE' || m[0] === 'CLOSED') && m[1] === subId, 10_000, from);
    if (end[0] === 'CLOSED') throw new Error(`CLOSED: ${end[2]}`);
    const endIndex = this.messages.indexOf(end);
    return this.messages
      .slice(from, endIndex)
      .filter((m) => m[0] === 'EVENT' && m[1] === subId)
      .map((m) => m[2] as NostrEvent);
  }

  /** A one-shot query: the stored events up to EOSE, then CLOSE (so subscriptions do not pile up). */
  async fetch(subId: string, ...filters: object[]): Promise<NostrEvent[]> {
    const events = await this.query(subId, ...filters);
    this.send(['CLOSE', subId]);
    return events;
  }

  /** Sends a REQ expected to be refused; returns the CLOSED reason. */
  async refused(subId: string, ...filters: unknown[]): Promise<string> {
    const from = this.messages.length;
    this.send(['REQ', subId, ...filters]);
    const closed = await this.waitFor((m) => m[0] === 'CLOSED' && m[1] === subId, 10_000, from);
    return closed[2] as string;
  }

  /** The index the next message will get: pass it as `from` to look only at what arrives later. */
  get mark(): number {
    return this.messages.length;
  }

  /** Sends a frame exactly as given: a string as a text frame, a Buffer as a binary one (or text). */
  sendRaw(data: string | Buffer, binary = Buffer.isBuffer(data)): void {
    this.ws.send(data, { binary });
  }

  /** Waits for the next NOTICE (from `from` on) and returns its text. */
  async notice(from = this.mark): Promise<string> {
    const m = await this.waitFor((m) => m[0] === 'NOTICE', 10_000, from);
    return m[1] as string;
  }

  /** Sends a COUNT and returns the count, or throws with the CLOSED reason. */
  async count(subId: string, ...filters: unknown[]): Promise<number> {
    return (await this.countReply(subId, ...filters)).count;
  }

  /** Sends a COUNT and returns the reply's object (NIP-45: count, and hll when given). */
  async countReply(subId: string, ...filters: unknown[]): Promise<{ count: number; hll?: string }> {
    const from = this.messages.length;
    this.send(['COUNT', subId, ...filters]);
    const reply = await this.waitFor((m) => (m[0] === 'COUNT' || m[0] === 'CLOSED') && m[1] === subId, 10_000, from);
    if (reply[0] === 'CLOSED') throw new Error(`CLOSED: ${reply[2]}`);
    return reply[2] as { count: number; hll?: string };
  }

  /**
   * A round trip through the relay (a COUNT that matches nothing): when it resolves, every message the
   * relay sent on this connection before it read the COUNT has arrived. Lets a test assert that
   * something was NOT sent without sleeping. (Answers still waiting on the database may come later.)
   */
  async sync(): Promise<void> {
    const id = `sync-${++this.syncs}`;
    const from = this.messages.length;
    this.send(['COUNT', id, { ids: [] }]);
    await this.waitFor((m) => m[0] === 'COUNT' && m[1] === id, 10_000, from);
  }

  /** The events a subscription received after its latest EOSE: its live events. */
  liveEvents(subId: string): NostrEvent[] {
    let eose = -1;
    this.messages.forEach((m, i) => {
      if (m[0] === 'EOSE' && m[1] === subId) eose = i;
    });
    if (eose < 0) throw new Error(`no EOSE for ${subId}`);
    return this.eventsFor(subId, eose + 1);
  }

  /** Waits until the socket is closed and returns the close code and reason. */
  async closed(timeoutMs = 10_000): Promise<{ code: number; reason: string }> {
    const deadline = Date.now() + timeoutMs;
    while (!this.closeInfo) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error('timed out waiting for the socket to close');
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => (clearTimeout(timer), resolve()));
      });
    }
    return this.closeInfo;
  }

  eventsFor(subId: string, from = 0): NostrEvent[] {
    return this.messages.slice(from).filter((m) => m[0] === 'EVENT' && m[1] === subId).map((m) => m[2] as NostrEvent);
  }

  close(): void {
    this.ws.close();
  }
}
