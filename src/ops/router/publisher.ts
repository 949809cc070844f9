// Sending events up to one remote over its open connection: EVENT, then its OK, a window of events in
// flight. `duplicate:` is success. `rate-limited:` is sent again, for as long as the connection lasts
// (the remote says "slower", not "no": skipping would leave a gap), after a slowdown as TCP does it:
// a pause, then the window again from 1, growing back; the refusals of events already in flight
// belong to the same slowdown. `error:` is sent again a few times (the remote's trouble may pass),
// then counted refused like any other refusal. Completion is counted in the order events were queued,
// so a position can say "everything queued before this is answered" (link.ts). No OK within the
// timeout while events are in flight ends the connection: the next one catches up.
import type { RemoteRelay } from '../relay-client.js';
import type { UpOutcome } from './metrics.js';

const MAX_WINDOW = 200;
const FIRST_WINDOW = 16;
const FIRST_THRESHOLD = 64;
/** Times an event answered `error:` is sent again. */
const ERROR_RETRIES = 8;
const FIRST_PAUSE_MS = 250;
const MAX_PAUSE_MS = 10_000;

interface Item {
  id: string;
  raw: string;
  /** Its place in the queue (completion is counted in this order). */
  seq: number;
  /** The order of its last sending (which slowdown a refusal belongs to). */
  sent: number;
  attempts: number;
}

export class Publisher {
  /** Events queued so far (each a sequence number, from 1). */
  queuedTotal = 0;
  /** Every event up to this sequence number has its final answer. */
  completedThrough = 0;
  private readonly waiting: Item[] = [];
  private readonly inFlight = new Map<string, Item>();
  /** Queued or in flight, by id. */
  private readonly pending = new Map<string, Item>();
  private readonly finished = new Set<number>();
  private readonly watchers: Array<{ seq: number; resolve: () => void }> = [];
  private window = FIRST_WINDOW;
  private threshold = FIRST_THRESHOLD;
  private growth = 0;
  private sends = 0;
  /** `sends` when the last slowdown began: refusals of events sent before it are part of it. */
  private slowedAt = 0;
  private pauseUntil = 0;
  private pauseMs = FIRST_PAUSE_MS;
  private timer: NodeJS.Timeout | undefined;
  private lastAnswer = Date.now();
  private closed = false;
  private readonly off: () => void;

  constructor(
    private readonly remote: RemoteRelay,
    private readonly timeoutMs: number,
    private readonly onAnswer: (id: string, outcome: UpOutcome, reason: string) => void,
  ) {
    this.off = remote.listen((m) => {
      if (m[0] === 'OK' && typeof m[1] === 'string') this.answered(m[1], m[2] === true, typeof m[3] === 'string' ? m[3] : '');
    });
  }

  /** Events queued or in flight (for backpressure). */
  get backlog(): number {
    return this.waiting.length + this.inFlight.size;
  }

  /** Queues an event unless it is already queued or in flight. Returns its sequence number (or the earlier one's). */
  enqueue(id: string, raw: string): number {
    const already = this.pending.get(id);
    if (already) return already.seq;
    const item: Item = { id, raw, seq: ++this.queuedTotal, sent: 0, attempts: 0 };
    this.pending.set(id, item);
    this.waiting.push(item);
    this.pump();
    return item.seq;
  }

  /** Resolves once every event queued up to `seq` has its final answer (never, if the connection ends first). */
  completed(seq: number): Promise<void> {
    if (this.completedThrough >= seq) return Promise.resolve();
    return new Promise((resolve) => this.watchers.push({ seq, resolve }));
  }

  close(): void {
    this.closed = true;
    this.off();
    clearTimeout(this.timer);
  }

  private pump(): void {
    if (this.closed || this.remote.ended) return;
    const now = Date.now();
    if (now < this.pauseUntil) return this.wakeAt(this.pauseUntil - now);
    while (this.inFlight.size < this.window && this.waiting.length > 0) {
      const item = this.waiting.shift()!;
      if (this.inFlight.size === 0) this.lastAnswer = now;
      item.sent = ++this.sends;
      this.inFlight.set(item.id, item);
      this.remote.send(`["EVENT",${item.raw}]`);
    }
    if (this.inFlight.size > 0) this.wakeAt(Math.max(1, this.timeoutMs - (now - this.lastAnswer)));
  }

  private wakeAt(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      if (this.closed) return;
      if (this.inFlight.size > 0 && Date.now() - this.lastAnswer >= this.timeoutMs) {
        this.remote.terminate(); // silent: the link reconnects and catches up
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
    const rateLimited = !accepted && why.startsWith('rate-limited:');
    if (rateLimited || (!accepted && why.startsWith('error:') && item.attempts < ERROR_RETRIES)) {
      item.attempts++;
      this.waiting.unshift(item);
      if (item.sent > this.slowedAt) {
        this.threshold = Math.max(2, Math.floor(this.window / 2));
        this.window = 1;
        this.growth = 0;
        this.slowedAt = this.sends;
        this.pauseUntil = Date.now() + this.pauseMs;
        this.pauseMs = Math.min(this.pauseMs * 2, MAX_PAUSE_MS);
      }
      return this.pump();
    }
    if (accepted) this.grow();
    this.pending.delete(id);
    const outcome: UpOutcome = why.startsWith('duplicate:') ? 'duplicate' : accepted ? 'accepted' : 'refused';
    this.onAnswer(id, outcome, why);
    this.finished.add(item.seq);
    while (this.finished.delete(this.completedThrough + 1)) this.completedThrough++;
    for (let i = this.watchers.length - 1; i >= 0; i--) {
      if (this.watchers[i].seq <= this.completedThrough) {
        this.watchers[i].resolve();
        this.watchers.splice(i, 1);
      }
    }
    this.pump();
  }

  /** One more in flight per OK up to the threshold, then one more per window of OKs; pauses shorten. */
  private grow(): void {
    if (this.window < this.threshold) this.window++;
    else if (++this.growth >= this.window) {
      this.growth = 0;
      this.window = Math.min(MAX_WINDOW, this.window + 1);
      this.pauseMs = Math.max(FIRST_PAUSE_MS, this.pauseMs / 2);
    }
  }
}
