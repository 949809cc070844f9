// One client connection: NIP-01 messages in, replies out. Owns the connection's subscriptions.
import { randomBytes } from 'node:crypto';
import type { Duplex } from 'node:stream';
import type pg from 'pg';
import type { WebSocket } from 'ws';
import { clientSource } from '../admission/source.js';
import { claimedId, parseEvent, type Checked } from '../nostr/event.js';
import { parseFilter, type Filter } from '../nostr/filter.js';
import {
  authMessage, closedMessage, countMessage, eoseMessage, eventMessage, negErrorMessage, noticeMessage, okMessage, parseClientMessage, type ClientMessage,
} from '../nostr/messages.js';
import * as reason from '../nostr/reason.js';
import { hllOffsetOf } from '../nostr/hll.js';
import { checkAuthEvent, MAX_AUTHENTICATED_PUBKEYS } from '../policy/auth.js';
import { checkRead, type ReadRequest } from '../policy/policy.js';
import type { Session } from '../policy/session.js';
import { hasSqlState, isPoolExhausted, SQLSTATE } from '../store/pg-errors.js';
import type { ChangeFeed } from '../store/feed.js';
import { streamStored, type Answered } from '../store/hot/read.js';
import { countWithHll, type StoredRow } from '../store/read.js';
import { needsPreparing, prepareSearch } from '../store/search.js';
import { nowSeconds, type RelayContext } from './context.js';
import { eventPrefix, textFrame, writeEventFrames } from './frames.js';
import { NegentropySessions } from './negentropy.js';
import type { ConnectionBudget } from './rate-limit.js';
import type { Subscriber } from './subscriptions.js';

/** The CLOSED reason for a failed REQ or COUNT: overload and timeouts say so; the rest is `error:`. */
function queryFailure(err: unknown, what: string): { reason: string; unexpected: boolean } {
  if (hasSqlState(err, SQLSTATE.queryCanceled)) return { reason: reason.error(`${what} timed out`), unexpected: false };
  if (isPoolExhausted(err)) return { reason: reason.rateLimited('the relay is busy answering other queries, try again shortly'), unexpected: false };
  return { reason: reason.error(`could not ${what === 'query' ? 'query stored events' : 'count events'}`), unexpected: true };
}

/** What the policy rules know of a connection (policy/session.ts). */
class ConnectionSession implements Session {
  readonly origin = 'connection';
  /** NIP-42: every pubkey that answered this connection's challenge. */
  readonly pubkeys = new Set<string>();

  constructor(readonly address: string) {}
}

/** Who the client is, as the HTTP upgrade tells (see server.ts). */
export interface Peer {
  /** The client's address (relay/client-address.ts: the socket's, or a trusted proxy's X-Forwarded-For). */
  address: string;
  /** This relay as NIP-42 AUTH events must name it (policy/auth.ts relayIdentity), if known. */
  relay: string | undefined;
}

const TOO_SLOW = reason.error('client is reading too slowly');

/** A REQ: stored events first, then live ones. Live matches that arrive before EOSE wait in a queue. */
class Subscription implements Subscriber {
  closed = false;
  /** `["EVENT",<id>,` as bytes, for the stored events' frames (frames.ts). */
  readonly prefix: Buffer;
  private sent: string[] | undefined = []; // ids sent before EOSE, to skip them if queued
  private queued: Array<{ id: string; raw: string }> = [];
  /**
   * After EOSE, the ids sent as stored until the feed has read past the query (see goLive): kept
   * until feed.readSince(mark), `mark` its readMark() at EOSE; made a Set only if a live event
   * arrives meanwhile, which most subscriptions never see.
   */
  private recent: { ids: string[] | Set<string>; feed: ChangeFeed; mark: number } | undefined;

  constructor(
    readonly id: string,
    private readonly connection: Connection,
  ) {
    this.prefix = eventPrefix(id);
  }

  deliver(id: string, raw: string): void {
    if (this.closed || this.sentRecently(id)) return;
    if (this.sent) this.queued.push({ id, raw });
    else this.connection.send(eventMessage(this.id, raw));
  }

  private sentRecently(id: string): boolean {
    const recent = this.recent;
    if (recent === undefined) return false;
    if (recent.feed.readSince(recent.mark)) {
      this.recent = undefined;
      return false;
    }
    if (Array.isArray(recent.ids)) recent.ids = new Set(recent.ids);
    return recent.ids.has(id);
  }

  /** These stored events have been written to the socket. */
  sentStored(rows: readonly StoredRow[], from: number, to: number): void {
    for (let i = from; i < to; i++) this.sent!.push(rows[i]!.id);
  }

  /** EOSE as a whole frame, to leave in the same write as the last stored events (frames.ts). */
  eoseFrame(): Buffer {
    return textFrame(eoseMessage(this.id));
  }

  /**
   * EOSE (unless it went with the stored events), then whatever went live meanwhile and was not
   * already among the stored events. Another process's event can be in the query's answer and still
   * be on its way through the feed (store/feed.ts): its ids stay here until a feed read that starts
   * now has finished and delivered what it read. Asked when an event arrives, not called back by the
   * feed: a callback would hold every answered REQ (its subscription and ids) until the next read,
   * up to a second on a relay that writes little, long enough for V8 to copy them from the young
   * generation at every minor collection and then promote them (docs/scaling.md).
   */
  goLive(feed: ChangeFeed, eoseSent: boolean): void {
    const sent = this.sent!;
    this.sent = undefined;
    if (!eoseSent) this.connection.send(eoseMessage(this.id));
    if (sent.length > 0) this.recent = { ids: sent, feed, mark: feed.readMark() };
    for (const { id, raw } of this.queued) if (!this.sentRecently(id)) this.connection.send(eventMessage(this.id, raw));
    this.queued = [];
  }
}

export class Connection {
  private readonly subscriptions = new Map<string, Subscription>();
  private closed = false;
  private pendingEvents = 0;
  private corked = false;
  readonly session: ConnectionSession;
  /** NIP-42: sent when the connection opens; it holds for the connection's life. */
  readonly challenge = randomBytes(16).toString('hex');
  private readonly budget: ConnectionBudget;
  /** NIP-77 sync sessions (relay/negentropy.ts). */
  private readonly negentropy: NegentropySessions;

  constructor(
    private readonly ws: WebSocket,
    private readonly ctx: RelayContext,
    private readonly peer: Peer,
    private readonly socket: Duplex,
  ) {
    this.session = new ConnectionSession(peer.address);
    this.budget = ctx.limiter.forConnection(peer.address);
    this.negentropy = new NegentropySessions(ctx, (text) => this.send(text), (input, defaultLimit) => this.readFilter(input, defaultLimit));
    this.send(authMessage(this.challenge));
  }

  get remote(): string {
    return this.peer.address;
  }

  send(text: string): void {
    if (this.closed) return;
    if (this.ws.bufferedAmount > this.ctx.limits.maxBufferedBytes) {
      this.ctx.metrics.slowClient();
      this.close(1008, TOO_SLOW);
      return;
    }
    // Frames sent in one tick (a batch of stored events, a burst of OKs) leave in one write instead
    // of a system call each: 500 events cost ~4 ms less.
    if (!this.corked) {
      this.corked = true;
      this.socket.cork();
      process.nextTick(this.uncork);
    }
    this.ws.send(text);
  }

  /** Writes whatever this tick has queued on the socket (otherwise done at the end of the tick). */
  private readonly uncork = (): void => {
    if (!this.corked) return;
    this.corked = false;
    this.socket.uncork();
  };

  /** More than half the cap is waiting to be sent: a large answer pauses (drained) until it is not. */
  private get backlogged(): boolean {
    return this.ws.bufferedAmount > this.ctx.limits.maxBufferedBytes / 2;
  }

  /**
   * Frames may go straight to the socket (stored events, frames.ts): the WebSocket is open, so ws
   * has written no close frame they could follow, and ws writes its own frames synchronously
   * (no compression), so the order of everything sent is kept.
   */
  private get writable(): boolean {
    return !this.closed && this.ws.readyState === this.ws.OPEN;
  }

  /** Pauses a large answer until the socket is no longer backlogged (or gives up). */
  private async drained(): Promise<boolean> {
    for (let waited = 0; !this.closed && this.backlogged; waited += 10) {
      if (waited > 30_000) {
        this.ctx.metrics.slowClient();
        this.close(1008, TOO_SLOW);
        return false;
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    return !this.closed;
  }

  close(code: number, reason: string): void {
    if (this.closed) return;
    this.dispose();
    this.ws.close(code, reason);
    // A peer that never answers the close handshake is cut off.
    setTimeout(() => this.ws.terminate(), 2000).unref();
  }

  /** Drops every subscription; called when the socket closes. */
  dispose(): void {
    this.closed = true;
    this.preparing.clear(); // language searches still being stemmed never open (see prepared)
    for (const sub of this.subscriptions.values()) this.endSubscription(sub);
    this.negentropy.dispose();
  }

  async onMessage(data: Buffer): Promise<void> {
    // Every message but CLOSE spends from a budget (rate-limit.ts): REQ and COUNT from the query
    // budget, everything else (EVENT, AUTH, and what cannot be read) from the event budget.
    const { metrics } = this.ctx;
    if (data.length > this.ctx.limits.maxMessageBytes) {
      metrics.message('oversized');
      return this.withinBudget(undefined) ? this.refuseOversized(data) : this.overBudget(undefined);
    }
    const text = data.toString('utf8');
    const parsed = parseClientMessage(text);
    if (!parsed.ok) {
      metrics.message('invalid');
      return this.withinBudget(undefined) ? this.send(noticeMessage(parsed.notice)) : this.overBudget(undefined);
    }
    const m = parsed.message;
    metrics.message(m.type);
    // NEG-MSG rounds have their own budget (relay/negentropy.ts); NEG-OPEN spends from the query budget.
    if (m.type !== 'CLOSE' && m.type !== 'NEG-MSG' && m.type !== 'NEG-CLOSE' && !this.withinBudget(m)) return this.overBudget(m);
    switch (m.type) {
      case 'EVENT':
        return this.onEvent(m.event, data.length, text);
      case 'REQ':
        return this.onReq(m.subId, m.filters);
      case 'COUNT':
        return this.onCount(m.subId, m.filters);
      case 'AUTH':
        return this.onAuth(m.event);
      case 'NEG-OPEN':
        return this.negentropy.open(m.subId, m.filter, m.message);
      case 'NEG-MSG':
        return this.negentropy.message(m.subId, m.message);
      case 'NEG-CLOSE':
        return this.negentropy.close(m.subId);
      case 'CLOSE': {
        const sub = this.subscriptions.get(m.subId);
        if (sub) this.endSubscription(sub);
        this.preparing.delete(m.subId); // a language search still being stemmed never opens
        return;
      }
    }
  }

  private withinBudget(m: ClientMessage | undefined): boolean {
    if (m?.type === 'REQ' || m?.type === 'COUNT' || m?.type === 'NEG-OPEN') return this.budget.allowQuery(this.session.pubkeys);
    return this.budget.allowEvent(this.session.pubkeys);
  }

  /** A message over the budget: refused with rate-limited:, and a client that keeps on is cut off. */
  private overBudget(m: ClientMessage | undefined): void {
    const query = m?.type === 'REQ' || m?.type === 'COUNT' || m?.type === 'NEG-OPEN';
    this.ctx.metrics.limited(query ? 'query' : 'event');
    this.refuse(m, reason.rateLimited('slow down: too many messages from this address or key'));
    if (this.budget.refused()) this.close(1008, reason.rateLimited('too many messages over the rate limit'));
  }

  /** A message too large to handle: refused as invalid, answered like any other refusal. */
  private refuseOversized(data: Buffer): void {
    const parsed = parseClientMessage(data.toString('utf8'));
    this.refuse(parsed.ok ? parsed.message : undefined, reason.invalid(`message is larger than ${this.ctx.limits.maxMessageBytes} bytes`));
  }

  /**
   * Refuses a message the relay will not handle, answering the id it carries: OK false for an EVENT
   * or AUTH (NIP-42: every AUTH gets an OK), CLOSED for a REQ or COUNT (ending the subscription a REQ
   * would have replaced, so nothing follows the CLOSED), NEG-ERR for a NEG-OPEN or NEG-MSG (ending
   * that session, as NIP-77 says NEG-ERR does); anything else gets a NOTICE.
   */
  private refuse(m: ClientMessage | undefined, why: string): void {
    if (m?.type === 'NEG-OPEN' || m?.type === 'NEG-MSG') {
      this.negentropy.close(m.subId);
      this.send(negErrorMessage(m.subId, why));
    } else if (m?.type === 'REQ' || m?.type === 'COUNT') {
      const previous = this.subscriptions.get(m.subId);
      if (previous) this.endSubscription(previous);
      this.preparing.delete(m.subId);
      this.send(closedMessage(m.subId, why));
    } else {
      const id = m?.type === 'EVENT' || m?.type === 'AUTH' ? claimedId(m.event) : undefined;
      this.send(id !== undefined ? okMessage(id, false, why) : noticeMessage(why));
    }
  }

  /** OK false for the id the input claims, or a NOTICE when it claims none. */
  private refuseEvent(input: unknown, why: string): void {
    const id = claimedId(input);
    this.send(id !== undefined ? okMessage(id, false, why) : noticeMessage(why));
  }

  /** `bytes`: the size of the message that carried it. */
  /** `text`: the whole message, which the verifier's threads parse again (admit.ts). */
  private async onEvent(input: unknown, bytes: number, text: string): Promise<void> {
    // Backpressure: a publisher may have only so many events awaiting their OK, on this connection
    // and in bytes over all its address's connections.
    if (this.pendingEvents >= this.ctx.limits.maxPendingEvents)
      return this.refuseEvent(input, reason.rateLimited(`more than ${this.ctx.limits.maxPendingEvents} events awaiting OK on this connection`));
    const release = this.budget.holdPending(bytes, this.session.pubkeys);
    if (!release)
      return this.refuseEvent(input, reason.rateLimited(`more than ${this.ctx.config.MAX_PENDING_BYTES_PER_ADDRESS} bytes of events awaiting OK from this address`));
    const started = performance.now();
    this.pendingEvents++;
    let result;
    try {
      result = await this.ctx.admission.admit(input, clientSource(this.session), text);
    } finally {
      this.pendingEvents--;
      release();
    }
    // Corked (send): the OKs of one committed batch leave a connection in one write, at the end of
    // the tick (bench:ingest: ~5 % more events/s than a write for each).
    if (result.id === undefined) this.send(noticeMessage(result.reason));
    else this.send(okMessage(result.id, result.accepted, result.reason));
    this.ctx.metrics.eventAnswered(result.accepted, result.reason, performance.now() - started);
  }

  /**
   * NIP-42: an AUTH event answering this connection's challenge, naming this relay, recent, and
   * correctly signed adds its pubkey to the session; it is answered with OK like an EVENT and is
   * never stored nor broadcast.
   */
  private async onAuth(input: unknown): Promise<void> {
    const { id, refusal } = await this.checkAuth(input);
    if (id === undefined) this.send(noticeMessage(refusal!));
    else this.send(okMessage(id, refusal === undefined, refusal ?? ''));
    this.ctx.metrics.auth(refusal === undefined);
  }

  /** Adds the AUTH event's pubkey to the session when it passes; else the reason it does not. */
  private async checkAuth(input: unknown): Promise<{ id?: string; refusal?: string }> {
    const parsed = parseEvent(input);
    if (!parsed.ok) return { id: claimedId(input), refusal: parsed.reason };
    const event = parsed.value;
    const refusal = checkAuthEvent(event, this.challenge, this.peer.relay, nowSeconds());
    if (refusal) return { id: event.id, refusal };
    if (this.session.pubkeys.size >= MAX_AUTHENTICATED_PUBKEYS && !this.session.pubkeys.has(event.pubkey))
      return { id: event.id, refusal: reason.restricted(`at most ${MAX_AUTHENTICATED_PUBKEYS} keys may authenticate on one connection`) };
    this.pendingEvents++;
    let invalid;
    try {
      invalid = (await this.ctx.verifier.verify(event)).invalid;
    } finally {
      this.pendingEvents--;
    }
    if (invalid) return { id: event.id, refusal: invalid };
    this.session.pubkeys.add(event.pubkey);
    return { id: event.id };
  }

  /**
   * Sub id and filter checks shared by REQ and COUNT, then the read rules: the filters narrowed to
   * what this session may see. Sends CLOSED and returns undefined on failure.
   */
  private parseFilters(subId: string, inputs: unknown[], request: ReadRequest): Filter[] | undefined {
    const { limits } = this.ctx;
    const refuse = (why: string) => (this.send(closedMessage(subId, why)), undefined);
    if (subId.length === 0 || subId.length > limits.maxSubidLength)
      return refuse(reason.invalid(`subscription id must be 1 to ${limits.maxSubidLength} characters`));
    if (inputs.length === 0) return refuse(reason.invalid('at least one filter is required'));
    if (inputs.length > limits.maxFilters) return refuse(reason.invalid(`at most ${limits.maxFilters} filters per request`));
    const filters: Filter[] = [];
    for (const input of inputs) {
      const parsed = parseFilter(input, limits);
      if (!parsed.ok) return refuse(parsed.reason);
      filters.push(parsed.value);
    }
    const readable = this.checkRead(filters, request);
    return readable.ok ? readable.filters : refuse(readable.reason);
  }

  /** The read rules (policy/policy.ts), counted by rule: each refusal, and each REQ, COUNT or NEG-OPEN a rule narrowed. */
  private checkRead(filters: Filter[], request: ReadRequest): ReturnType<typeof checkRead> {
    const readable = checkRead(this.ctx.policy, filters, this.session, request);
    if (!readable.ok) this.ctx.metrics.readRule(readable.rule, 'refused');
    else if (readable.narrowedBy) for (const rule of readable.narrowedBy) this.ctx.metrics.readRule(rule, 'narrowed');
    return readable;
  }

  /** One filter through the same checks and read rules, for NIP-77; no limit given means `defaultLimit`. */
  private readFilter(input: unknown, defaultLimit: number): Checked<Filter> {
    const parsed = parseFilter(input, { ...this.ctx.limits, defaultLimit, maxLimit: defaultLimit });
    if (!parsed.ok) return parsed;
    const readable = this.checkRead([parsed.value], 'NEG-OPEN');
    return readable.ok ? { ok: true, value: readable.filters[0] } : { ok: false, reason: readable.reason };
  }

  private endSubscription(sub: Subscription): void {
    sub.closed = true;
    this.ctx.subscriptions.remove(sub);
    if (this.subscriptions.get(sub.id) === sub) this.subscriptions.delete(sub.id);
  }

  /**
   * NIP-50 `language:xx` searches need their words stemmed by PostgreSQL (store/search.ts) first.
   * False (CLOSED sent) when that fails, or when a newer REQ for the same id arrived meanwhile.
   */
  private async prepared(subId: string, filters: Filter[]): Promise<boolean> {
    const turn = ++this.turns;
    this.preparing.set(subId, turn);
    try {
      await prepareSearch(this.ctx.pool, filters);
    } catch (err) {
      this.ctx.log.error({ err: (err as Error).message, subId }, 'preparing a search failed');
      this.send(closedMessage(subId, reason.error('could not prepare the search')));
      return false;
    }
    if (this.preparing.get(subId) !== turn) return false;
    this.preparing.delete(subId);
    return true;
  }
  /**
   * Searches being prepared, by sub id. A newer REQ or COUNT for the id removes the entry (it
   * replaces them), and so do a CLOSE for it and the connection closing: the search then never opens.
   */
  private readonly preparing = new Map<string, number>();
  private turns = 0;

  private async onReq(subId: string, inputs: unknown[]): Promise<void> {
    const previous = this.subscriptions.get(subId);
    if (previous) this.endSubscription(previous); // NIP-01: a REQ with an open id replaces it
    this.preparing.delete(subId);
    const filters = this.parseFilters(subId, inputs, 'REQ');
    if (!filters) return;
    // Only a language search waits here: a REQ must reach subscriptions.set in the tick it arrived
    // in, or a second REQ with its id, read from the same packet, would not find it to replace.
    if (needsPreparing(filters) && !(await this.prepared(subId, filters))) return;
    if (this.subscriptions.size >= this.ctx.limits.maxSubscriptions)
      return this.send(closedMessage(subId, reason.rateLimited(`at most ${this.ctx.limits.maxSubscriptions} open subscriptions per connection`)));

    const sub = new Subscription(subId, this);
    this.subscriptions.set(subId, sub);
    this.ctx.subscriptions.add(sub, filters); // before the query, so nothing committed meanwhile is missed
    const started = performance.now();
    let rowsSent = 0;
    let eoseSent = false;
    let answered: Answered;
    try {
      // The hot tier answers what lies inside its window; the database the rest (store/hot/read.ts).
      answered = await streamStored(this.ctx.tier, () => this.readPool(), filters, nowSeconds(), async (found, last) => {
        // REPORTS_HIDE_AT: events awaiting an admin's decision leave no answer, from memory or not.
        const withheld = this.ctx.reports.withheld;
        const rows = withheld ? found.filter((r) => !withheld.has(r.id)) : found;
        // The whole answer in one call (from memory, or memory and PostgreSQL merged): EOSE leaves
        // in the same write as its last events, one system call (and one wake-up of the client)
        // fewer per REQ.
        const eose = last && rows.length > 0 ? sub.eoseFrame() : undefined;
        for (let i = 0; i < rows.length; ) {
          // Drain before each chunk, not each batch: a batch of large events (256 × up to
          // maxMessageBytes) can exceed maxBufferedBytes and cut off a client that is reading.
          // Checked without awaiting when there is room, so a batch goes out in one tick.
          if (this.backlogged && !(await this.drained())) return false;
          if (sub.closed || !this.writable) return false;
          const next = writeEventFrames(this.socket, sub.prefix, rows, i, eose);
          sub.sentStored(rows, i, next);
          rowsSent += next - i;
          i = next;
        }
        eoseSent = eose !== undefined;
        return !sub.closed;
      });
    } catch (err) {
      if (sub.closed) return;
      this.endSubscription(sub);
      const failure = queryFailure(err, 'query');
      if (failure.unexpected) this.ctx.log.error({ err: (err as Error).message, subId }, 'REQ query failed');
      return this.send(closedMessage(subId, failure.reason));
    }
    if (sub.closed) return;
    sub.goLive(this.ctx.feed, eoseSent);
    if (this.ctx.tier) this.ctx.metrics.tierReq(answered);
    this.ctx.metrics.reqAnswered(performance.now() - started, rowsSent);
  }

  /** Where a REQ's or COUNT's database part runs (store/replicas.ts); a REQ asks after add(), see there. */
  private async readPool(): Promise<pg.Pool> {
    const { pool, target } = await this.ctx.reads.route();
    this.ctx.metrics.read(target);
    return pool;
  }

  private async countInDatabase(filters: Filter[], now: number, hllOffset: number | undefined): Promise<{ count: number; hll?: string }> {
    return countWithHll(await this.readPool(), filters, now, hllOffset);
  }

  /**
   * REPORTS_HIDE_AT: how many of the events the filters match are withheld (the same filters, narrowed
   * to those ids), to take off a COUNT. The HLL sketch is left as it is: an estimate either way.
   */
  private async countWithheld(filters: Filter[], now: number, withheld: ReadonlySet<string>): Promise<number> {
    const narrowed = filters.map((f) => ({ ...f, ids: (f.ids ?? [...withheld]).filter((id) => withheld.has(id)) }));
    return (await this.ctx.tier?.count(narrowed, now)) ?? (await this.countInDatabase(narrowed, now, undefined)).count;
  }

  /** NIP-45: one count for the union of the filters; no subscription is kept. */
  private async onCount(subId: string, inputs: unknown[]): Promise<void> {
    this.preparing.delete(subId);
    const filters = this.parseFilters(subId, inputs, 'COUNT');
    if (!filters || (needsPreparing(filters) && !(await this.prepared(subId, filters)))) return;
    const started = performance.now();
    try {
      const now = nowSeconds();
      const hllOffset = hllOffsetOf(filters);
      // Plain counts inside the hot tier's window from memory; NIP-45 HLL sketches from SQL.
      const memory = hllOffset === undefined ? await this.ctx.tier?.count(filters, now) : undefined;
      const { count, hll } = memory !== undefined ? { count: memory, hll: undefined } : await this.countInDatabase(filters, now, hllOffset);
      const withheld = this.ctx.reports.withheld;
      this.send(countMessage(subId, withheld ? count - (await this.countWithheld(filters, now, withheld)) : count, hll));
      this.ctx.metrics.countAnswered(performance.now() - started);
    } catch (err) {
      this.send(closedMessage(subId, queryFailure(err, 'count').reason));
    }
  }
}
