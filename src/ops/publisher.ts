// Sending events to another relay with EVENT over an open connection, a window of them awaiting their
// OK: `sync`'s upload (sync.ts) and the router's `up` (router/link.ts). `duplicate:` is success.
// `rate-limited:` starts a slowdown as TCP does it: a pause, then the window again from 1, the
// threshold at half the window it had, growing back by one per OK up to the threshold and by one per
// window of OKs beyond it; the refusals of events already in flight belong to the same slowdown. An
// event refused `rate-limited:`, or answered `error:`, is sent again as many times as the caller says
// (the router: for as long as the connection lasts, since skipping would leave a gap; sync: a few),
// then counted refused. Answers are also counted in the order events were queued, so a caller can
// wait for "everything queued up to here is answered" (the router's positions). No OK within the
// timeout while events are in flight cuts the connection: what was not answered stays unanswered.
import { MAX_BACKOFF_MS, type RemoteRelay } from './relay-client.js';

export type PublishOutcome = 'accepted' | 'duplicate' | 'refused';

export interface PublisherOptions {
  /** No OK for this long while events are in flight cuts the connection. */
  timeoutMs: number;
  /** The most events awaiting their OK. */
  maxWindow: number;
  /** A slowdown's first pause; each slowdown doubles it (up to 10 s), a growing window halves it back. */
  firstPauseMs: number;
  /** Times an event refused `rate-limited:` is sent again (Infinity: for as long as the connection lasts). */
  rateLimitRetries: number;
  /** Times an event answered `error:` is sent again (the remote's trouble may pass). */
  errorRetries: number;
  /** Each event's final answer. */
  onAnswer(id: string, outcome: PublishOutcome, reason: string): void;
}

const FIRST_WINDOW = 16;
const FIRST_THRESHOLD = 64;

interface Item {
  id: string;
  raw: string;
  /** Its place in the queue (completion is counted in this order). */
  seq: number;
  /** The order of its last sending (which slowdown a refusal belongs to). */
  sent: number;
  rateLimited: number;
  errors: number;
}

export class Publisher {
  /** Events queued so far (each a sequence number, from 1). */
  queuedTotal = 0;
  /** Every event up to this sequence number has its final answer. */
  completedThrough = 0;
  /** Events sent at least once. */
  sent = 0;
  /** Refusals (rate-limited:, error:) answered by sending the event again. */
  retried = 0;
  /** Why it sends nothing more: the connection ended, went silent, or stop() or close() was called. */
  ended: string | undefined;
  private readonly waiting: Item[] = [];
  /** Refused for now: sent before `waiting`. */
  private readonly again: Item[] = [];
  private readonly inFlight = new Map<string, Item>();
  /** Queued or in flight, by id. */
  private readonly pending = new Map<string, Item>();
  private readonly finished = new Set<number>();
  private readonly watchers: Array<{ seq: number; resolve: (answered: boolean) => void }> = [];
  private readonly endWatchers: Array<() => void> = [];
  private window: number;
  private threshold: number;
  private growth = 0;
  private sends = 0;
  /** `sends` when the last slowdown began: refusals of events sent before it are part of it. */
  private slowedAt = 0;
  private pauseUntil = 0;
  private pauseMs: number;
  private timer: NodeJS.Timeout | undefined;
  private lastAnswer = Date.now();
  private stopping = false;
  private readonly offs: Array<() => void>;

  constructor(
    private readonly remote: RemoteRelay,
    private readonly options: PublisherOptions,
  ) {
    this.window = Math.min(FIRST_WINDOW, options.maxWindow);
    this.threshold = Math.min(FIRST_THRESHOLD, options.maxWindow);
    this.pauseMs = options.firstPauseMs;
    this.offs = [
      remote.listen((m) => {
        if (m[0] === 'OK' && typeof m[1] === 'string') this.answered(m[1], m[2] === true, typeof m[3] === 'string' ? m[3] : '');
      }),
      remote.onEnd((err) => this.end(err.message)),
    ];
    if (remote.ended) this.end(remote.ended.message);
  }

  /** Events queued or in flight (for backpressure). */
  get backlog(): number {
    return this.waiting.length + this.again.length + this.inFlight.size;
  }

  /** Queues an event unless it is already queued or in flight. Returns its sequence number (or the earlier one's). */
  enqueue(id: string, raw: string): number {
    const already = this.pending.get(id);
    if (already) return already.seq;
    const item: Item = { id, raw, seq: ++this.queuedTotal, sent: 0, rateLimited: 0, errors: 0 };
    this.pending.set(id, item);
    this.waiting.push(item);
    this.pump();
    return item.seq;
  }

  /** True once every event queued up to `seq` has its final answer; false if the publisher ends first. */
  completed(seq: number): Promise<boolean> {
    if (this.completedThrough >= seq) return Promise.resolve(true);
    if (this.ended) return Promise.resolve(false);
    return new Promise((resolve) => this.watchers.push({ seq, resolve }));
  }

  /** Sends nothing more; resolves once what is in flight has its answer (or the connection ends). */
  stop(): Promise<void> {
    this.stopping = true;
    if (this.inFlight.size === 0) this.end('stopped');
    if (this.ended) return Promise.resolve();
    return new Promise((resolve) => this.endWatchers.push(resolve));
  }

  close(): void {
    this.end('closed');
  }

  private end(why: string): void {
    if (this.ended) return;
    this.ended = why;
    clearTimeout(this.timer);
    for (const off of this.offs) off();
    for (const w of this.watchers.splice(0)) w.resolve(false);
    for (const resolve of this.endWatchers.splice(0)) resolve();
  }

  private pump(): void {
    if (this.ended || this.stopping) return;
    const now = Date.now();
    if (now < this.pauseUntil) return this.wakeAt(this.pauseUntil - now);
    while (this.inFlight.size < this.window && (this.again.length > 0 || this.waiting.length > 0)) {
      const item = this.again.shift() ?? this.waiting.shift()!;
      if (this.inFlight.size === 0) this.lastAnswer = now;
      if (item.sent === 0) this.sent++;
      item.sent = ++this.sends;
      this.inFlight.set(item.id, item);
      this.remote.send(`["EVENT",${item.raw}]`);
    }
    if (this.inFlight.size > 0) this.wakeAt(Math.max(1, this.options.timeoutMs - (now - this.lastAnswer)));
  }

  private wakeAt(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      if (this.ended) return;
      if (this.inFlight.size > 0 && Date.now() - this.lastAnswer >= this.options.timeoutMs) {
        this.end(`no OK from the remote within ${this.options.timeoutMs / 1000} s`);
        this.remote.terminate(); // a silent connection is of no more use
        return;
      }
      this.pump();
    }, ms);
    this.timer.unref();
  }

  private answered(id: string, accepted: boolean, why: string): void {
    const item = this.inFlight.get(id);
    if (!item) return;
    this.inFlight.delete(id);
    this.lastAnswer = Date.now();
    if (!accepted && this.sendsAgain(item, why)) {
      this.retried++;
      this.again.push(item);
      if (item.sent > this.slowedAt) this.slowDown();
    } else {
      const duplicate = why.startsWith('duplicate:');
      if (accepted || duplicate) this.grow();
      this.pending.delete(id);
      this.options.onAnswer(id, duplicate ? 'duplicate' : accepted ? 'accepted' : 'refused', why);
      this.finished.add(item.seq);
      while (this.finished.delete(this.completedThrough + 1)) this.completedThrough++;
      for (let i = this.watchers.length - 1; i >= 0; i--)
        if (this.watchers[i].seq <= this.completedThrough) this.watchers.splice(i, 1)[0].resolve(true);
    }
    if (this.stopping && this.inFlight.size === 0) return this.end('stopped');
    this.pump();
  }

  /** Whether a refusal is one to send the event again for, counting the attempt. */
  private sendsAgain(item: Item, why: string): boolean {
    if (why.startsWith('rate-limited:') && item.rateLimited < this.options.rateLimitRetries) {
      item.rateLimited++;
      return true;
    }
    if (why.startsWith('error:') && item.errors < this.options.errorRetries) {
      item.errors++;
      return true;
    }
    return false;
  }

  private slowDown(): void {
    this.threshold = Math.max(2, Math.floor(this.window / 2));
    this.window = 1;
    this.growth = 0;
    this.slowedAt = this.sends;
    this.pauseUntil = Date.now() + this.pauseMs;
    this.pauseMs = Math.min(this.pauseMs * 2, MAX_BACKOFF_MS);
  }

  /** One more in flight per OK up to the threshold, then one more per window of OKs; pauses shorten. */
  private grow(): void {
    if (this.window < this.threshold) this.window = Math.min(this.options.maxWindow, this.window + 1);
    else if (++this.growth >= this.window) {
      this.growth = 0;
      this.window = Math.min(this.options.maxWindow, this.window + 1);
      this.pauseMs = Math.max(this.options.firstPauseMs, this.pauseMs / 2);
    }
  }
}
