// strfry's write-policy plugins (strfry docs/plugins.md, pgrelay docs/mesh.md): an operator's program
// that decides, event by event, whether the relay keeps an event that passed the relay's own checks.
// One long-lived child per process (plugin-process.ts). Each event is one JSON line on its stdin; the
// plugin answers one JSON line on stdout naming the event's id (plugin-protocol.ts), so many events
// are in flight at once and answers may come in any order. This file decides which events are
// written when, and what a fault means for them.
//
// A fault is the plugin's bug, and one odd event that triggers it must not turn into refused writes:
// - A plugin that dies is started again at once, for the next event (plugin-process.ts backs off only
//   while plugins keep dying with no answer in between). Events arriving meanwhile wait for it.
// - What was in flight when it died is suspect, not refused. An event alone in flight is the one it
//   died on: answered `error:`. Several are written again to the new process one at a time, ahead of
//   new events, so the one that kills it again is found alone; the others get a healthy plugin's
//   verdict, and pipelining resumes once they are through.
// - An event unanswered after timeoutMs is the one the plugin hangs on: `error:`, and the process is
//   killed; what was in flight with it is suspect in the same way.
// - So an event is answered `error:` at the latest once it has been alone in flight at a death or a
//   timeout: none is written again and again.
// - An event that has waited timeoutMs with no plugin to be given to is answered `error:`.
import type { NostrEvent } from '../nostr/event.js';
import type { Logger } from '../log.js';
import * as reason from '../nostr/reason.js';
import { PluginProcesses, type PluginChild } from './plugin-process.js';
import { parseAnswer, requestLine, sameSource, type PluginAction, type PluginSource, type PluginVerdict } from './plugin-protocol.js';
import type { Session } from './session.js';

export type { PluginAction, PluginSource, PluginSourceType, PluginVerdict } from './plugin-protocol.js';

export interface WritePluginSettings {
  /**
   * How long a plugin has to answer an event (WRITE_POLICY_TIMEOUT_MS); past it, it is restarted.
   * Also how long an event waits for a plugin that is not running before it is answered `error:`.
   */
  timeoutMs: number;
  log: Logger;
  /** One per event the plugin decided (or a fault decided for it), with the seconds it took. */
  onDecision?(action: PluginAction | 'error', seconds: number): void;
  /** The plugin was stopped and will be started again: `exit`, `timeout`, `reload`, `spawn`. */
  onRestart?(reason: string): void;
  /**
   * Events the queue may hold past MAX_IN_FLIGHT before new ones are refused `rate-limited:`
   * (default MAX_QUEUED). The importers, which bound what they read ahead, wait instead: Infinity.
   */
  maxQueued?: number;
}

export interface WritePluginState {
  command: string;
  running: boolean;
  pid?: number;
  /** Times the plugin was lost or replaced (exit, timeout, reload, failed start). */
  restarts: number;
  /** Events awaiting the plugin's answer: written to it, or waiting to be. */
  inFlight: number;
  /** Of those, the ones waiting. */
  queued: number;
  lastError?: string;
}

/** Events written to the plugin and not yet answered; more wait in a queue (stdin stays small). */
export const MAX_IN_FLIGHT = 1000;
/**
 * Events the queue holds past MAX_IN_FLIGHT; more are refused `rate-limited:` at once. The relay is
 * busy, not broken: a client should try again shortly, as when the writer's queue is full.
 */
export const MAX_QUEUED = 10_000;

/** Prefixes of ours that CLOSED and NEG-ERR use but OK does not: in a plugin's message, they are text. */
const NOT_OK_PREFIXES: ReadonlySet<string> = new Set<reason.Prefix>(['unsupported', 'closed']);

/**
 * A client's connection as the plugin is told of it: IP4 or IP6 and the client's address (the one
 * relay/client-address.ts settled on), and the first pubkey it authenticated as (NIP-42).
 */
export function connectionSource(session: Session): PluginSource {
  const info = session.address ?? '';
  const type = info.includes(':') ? 'IP6' : 'IP4';
  if (session.pubkeys.size === 0) return { type, info };
  return { type, info, authed: session.pubkeys.values().next().value };
}

/** The OK reason for a rejected verdict: msg as sent, or prefixed `blocked: ` when it has no NIP-01 prefix. */
export function rejectionReason(msg: string): string {
  const prefix = reason.prefixOf(msg);
  if (prefix !== undefined && !NOT_OK_PREFIXES.has(prefix)) return msg;
  return reason.blocked(msg === '' ? 'refused by the write policy' : msg);
}

/** One event written (or to be written) to the plugin; events alike in id and source share one. */
interface Request {
  readonly id: string;
  readonly source: PluginSource;
  /** The request line, kept until answered: a suspect is written again. */
  line: string;
  /** performance.now() when decide() was called. */
  readonly started: number;
  /** performance.now() past which the plugin is too late; set when written. */
  deadline: number;
  /** performance.now() when it began to wait to be written (queued, or made a suspect). */
  waitingSince: number;
  /** The child it is written to; undefined while it waits. */
  child: PluginChild | undefined;
  /** In flight when a plugin died with others: written again alone. */
  suspect: boolean;
  done: boolean;
  resolve: (verdict: PluginVerdict) => void;
  /** Further callers with the same id and source (a client sending an event again): one answer each. */
  also: Array<(verdict: PluginVerdict) => void> | undefined;
}

export class WritePlugin {
  private readonly processes: PluginProcesses;
  /** Unanswered requests by event id: one, or several (other sources, or sent to two versions). */
  private readonly open = new Map<string, Request | Request[]>();
  /** New requests waiting to be written, oldest first. */
  private queue: Request[] = [];
  private queueHead = 0;
  /** Suspects waiting to be written alone, ahead of the queue. */
  private suspects: Request[] = [];
  /** Suspects not answered yet (waiting or in flight): while any, one event at a time is in flight. */
  private suspectsOpen = 0;
  /** Written requests in the order written: the oldest unanswered one is the next to time out. */
  private written: Request[] = [];
  private writtenHead = 0;
  private inFlight = 0;
  private timer: NodeJS.Timeout | undefined;
  /** performance.now() since when events wait with no plugin to write to; undefined while there is one. */
  private downSince: number | undefined;
  /** Answers `error:` to requests that waited timeoutMs of that. */
  private waitTimer: NodeJS.Timeout | undefined;
  private tickScheduled = false;
  /** The file was looked at this tick (reload is checked once per tick, not per event). */
  private statDone = false;
  private closed = false;

  constructor(
    readonly command: string,
    private readonly settings: WritePluginSettings,
  ) {
    this.processes = new PluginProcesses(command, {
      log: settings.log,
      onRestart: settings.onRestart,
      onLine: (child, line) => this.answer(child, line),
      onLost: (child, why) => this.lost(child, why),
      onReady: () => this.pump(),
    });
  }

  /** Starts the plugin now rather than with the first event, so a broken one shows in the log at once. */
  start(): this {
    if (!this.closed) this.processes.usable();
    return this;
  }

  /** The plugin's verdict on an event; never rejects (faults answer `error:`). */
  decide(event: NostrEvent, source: PluginSource, receivedAt: number = Math.floor(Date.now() / 1000)): Promise<PluginVerdict> {
    if (this.closed) return this.fault(reason.error('the relay is closing'));
    if (!this.statDone) {
      this.statDone = true;
      this.scheduleTick();
      this.processes.checkFile();
    }
    const same = this.open.get(event.id);
    if (same !== undefined) {
      const shared = this.shareable(same, source);
      if (shared) return new Promise((resolve) => (shared.also ??= []).push(resolve));
    }
    if (this.inFlight + this.waiting() >= MAX_IN_FLIGHT + (this.settings.maxQueued ?? MAX_QUEUED)) return this.fault(reason.rateLimited('the write policy plugin is busy, try again shortly'));
    return new Promise((resolve) => {
      const request: Request = {
        id: event.id,
        source,
        line: requestLine(event, source, receivedAt),
        started: performance.now(),
        deadline: 0,
        waitingSince: 0,
        child: undefined,
        suspect: false,
        done: false,
        resolve,
        also: undefined,
      };
      this.addOpen(request);
      if (this.suspectsOpen === 0 && this.inFlight < MAX_IN_FLIGHT && this.queueLength() === 0) {
        const child = this.processes.usable();
        if (child !== undefined) return this.send(request, child);
      }
      request.waitingSince = request.started;
      this.queue.push(request);
      this.pump();
    });
  }

  state(): WritePluginState {
    const child = this.processes.running;
    return {
      command: this.command,
      running: child?.pid !== undefined,
      pid: child?.pid,
      restarts: this.processes.restarts,
      inFlight: this.inFlight + this.waiting(),
      queued: this.waiting(),
      lastError: this.processes.lastError,
    };
  }

  /** Kills the plugin (all versions) and answers every waiting event `error:`. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    clearTimeout(this.waitTimer);
    const stopped = this.processes.close();
    const closing = reason.error('the relay is closing');
    const waiting = [...this.suspects, ...this.queue.slice(this.queueHead)];
    this.suspects = [];
    this.queue = [];
    this.queueHead = 0;
    for (const r of [...this.writtenTo(undefined), ...waiting]) this.settle(r, undefined, closing);
    await stopped;
  }

  // --- writing -------------------------------------------------------------------------------------

  private send(request: Request, child: PluginChild): void {
    request.child = child;
    request.deadline = performance.now() + this.settings.timeoutMs;
    child.inFlight++;
    this.inFlight++;
    child.write(request.line);
    // Keep the list of written requests short: drop the answered ones at its head.
    while (this.writtenHead < this.written.length && this.written[this.writtenHead].done) this.writtenHead++;
    if (this.writtenHead > 4096 && this.writtenHead * 2 > this.written.length) {
      this.written = this.written.slice(this.writtenHead);
      this.writtenHead = 0;
    }
    this.written.push(request);
    this.scheduleTick();
    if (this.timer === undefined) this.armTimer();
  }

  /**
   * Writes what waits as far as the plugin may take it: suspects one at a time, alone in flight;
   * then new events up to MAX_IN_FLIGHT. With no plugin to write to, they wait (waitForPlugin).
   */
  private pump(): void {
    if (this.closed) return;
    if (this.waiting() === 0) {
      this.downSince = undefined;
      return;
    }
    const child = this.processes.usable();
    if (child === undefined) return this.waitForPlugin();
    this.downSince = undefined;
    if (this.waitTimer !== undefined) {
      clearTimeout(this.waitTimer);
      this.waitTimer = undefined;
    }
    if (this.suspectsOpen > 0) {
      while (this.suspects.length > 0 && this.suspects[0].done) this.suspects.shift();
      if (child.inFlight === 0 && this.suspects.length > 0) this.send(this.suspects.shift()!, child);
      return;
    }
    while (this.inFlight < MAX_IN_FLIGHT && this.queueHead < this.queue.length) {
      const request = this.queue[this.queueHead++];
      if (!request.done) this.send(request, child);
    }
    if (this.queueHead === this.queue.length) {
      this.queue = [];
      this.queueHead = 0;
    }
  }

  /** Stdin is written once per tick, every line of the tick at once. */
  private scheduleTick(): void {
    if (this.tickScheduled) return;
    this.tickScheduled = true;
    process.nextTick(this.endOfTick);
  }

  private readonly endOfTick = (): void => {
    this.tickScheduled = false;
    this.statDone = false;
    this.processes.flush();
  };

  // --- a plugin lost -------------------------------------------------------------------------------

  /**
   * A child died (or was killed for `timedOut`): what was in flight on it is answered or made
   * suspect, and the rest goes to the next plugin.
   */
  private lost(child: PluginChild, why: string, timedOut?: Request): void {
    const inFlight = this.writtenTo(child);
    this.written = this.written.slice(this.writtenHead).filter((r) => !r.done && r.child !== child);
    this.writtenHead = 0;
    for (const r of inFlight) {
      r.child = undefined;
      child.inFlight--;
      this.inFlight--;
    }
    const now = performance.now();
    const suspects = inFlight.filter((r) => r !== timedOut);
    const culprit = timedOut ?? (suspects.length === 1 ? suspects.pop() : undefined);
    for (const r of suspects) {
      if (!r.suspect) this.suspectsOpen++;
      r.suspect = true;
      r.waitingSince = now;
      this.suspects.push(r);
    }
    if (culprit !== undefined) {
      const msg = culprit === timedOut ? `did not answer within ${this.settings.timeoutMs} ms` : `${why} on this event`;
      this.settle(culprit, undefined, reason.error(`the write policy plugin ${msg}`));
    }
    this.pump();
  }

  /**
   * No plugin can be given events now: what waits timeoutMs of this (since it began to wait, or since
   * the plugin went, whichever is later) is answered `error:`.
   */
  private waitForPlugin(): void {
    this.downSince ??= performance.now();
    if (this.waitTimer !== undefined) return;
    const oldest = Math.min(this.oldestWaiting(this.suspects, 0), this.oldestWaiting(this.queue, this.queueHead));
    if (oldest === Infinity) return;
    const wait = Math.max(0, Math.max(oldest, this.downSince) + this.settings.timeoutMs - performance.now());
    // Not unref'd: an importer awaiting a verdict keeps its process alive on it.
    this.waitTimer = setTimeout(this.expireWaiting, wait + 1);
  }

  private oldestWaiting(list: Request[], from: number): number {
    for (let i = from; i < list.length; i++) if (!list[i].done) return list[i].waitingSince;
    return Infinity;
  }

  private readonly expireWaiting = (): void => {
    this.waitTimer = undefined;
    if (this.closed) return;
    if (this.processes.usable() !== undefined) return this.pump();
    // Both lists are in the order their requests began to wait.
    const cutoff = performance.now() - this.settings.timeoutMs;
    const expired: Request[] = [];
    if (this.downSince === undefined || this.downSince > cutoff) return this.pump();
    while (this.suspects.length > 0 && (this.suspects[0].done || this.suspects[0].waitingSince <= cutoff)) expired.push(this.suspects.shift()!);
    while (this.queueHead < this.queue.length && (this.queue[this.queueHead].done || this.queue[this.queueHead].waitingSince <= cutoff)) expired.push(this.queue[this.queueHead++]);
    const msg = reason.error(`the write policy plugin is not running (${this.processes.lastError ?? 'starting'})`);
    for (const r of expired) this.settle(r, undefined, msg);
    this.pump();
  };

  // --- answers -------------------------------------------------------------------------------------

  private answer(child: PluginChild, line: string): void {
    const answer = parseAnswer(line);
    if (typeof answer === 'string') return this.processes.ignored(child, answer, line);
    const request = this.takeOpen(answer.id, child);
    if (request === undefined) return this.processes.ignored(child, 'an id no event awaits', line);
    if (answer.action !== undefined) {
      if (!child.answered) this.processes.answered(child);
      return this.settle(request, answer.action, answer.msg);
    }
    // It did answer this event, wrongly: the event gets an error now rather than after the timeout.
    this.processes.ignored(child, 'an unknown action', line);
    this.settle(request, undefined, reason.error('the write policy plugin gave an unknown action'));
  }

  /** Answers a request: the plugin's verdict, or a fault's `error:` reason. */
  private settle(request: Request, action: PluginAction | undefined, msg: string): void {
    if (request.done) return;
    request.done = true;
    request.line = '';
    this.removeOpen(request);
    const child = request.child;
    if (child !== undefined) {
      child.inFlight--;
      this.inFlight--;
      if (child.retiring && child.inFlight === 0 && !child.exited) this.processes.endRetired(child);
    }
    if (request.suspect) this.suspectsOpen--;
    this.settings.onDecision?.(action ?? 'error', (performance.now() - request.started) / 1000);
    const verdict: PluginVerdict = action === undefined ? { action: 'reject', msg, fault: true } : { action, msg };
    request.resolve(verdict);
    if (request.also) for (const resolve of request.also) resolve(verdict);
    if (this.waiting() > 0) this.pump();
  }

  /** A verdict that never reached the plugin: counted as an error, answered at once. */
  private fault(msg: string): Promise<PluginVerdict> {
    this.settings.onDecision?.('error', 0);
    return Promise.resolve({ action: 'reject', msg, fault: true });
  }

  // --- bookkeeping ---------------------------------------------------------------------------------

  /** Requests that share an answer with a new one: same id, same source, not written to a replaced version. */
  private shareable(same: Request | Request[], source: PluginSource): Request | undefined {
    const current = this.processes.running;
    const fits = (r: Request) => sameSource(r.source, source) && (r.child === undefined || r.child === current);
    if (!Array.isArray(same)) return fits(same) ? same : undefined;
    return same.find(fits);
  }

  private addOpen(request: Request): void {
    const same = this.open.get(request.id);
    if (same === undefined) this.open.set(request.id, request);
    else if (Array.isArray(same)) same.push(request);
    else this.open.set(request.id, [same, request]);
  }

  /** The oldest open request for this id written to this child (answers to one id come in order). */
  private takeOpen(id: string, child: PluginChild): Request | undefined {
    const same = this.open.get(id);
    if (same === undefined) return undefined;
    if (!Array.isArray(same)) return same.child === child ? same : undefined;
    return same.find((r) => r.child === child);
  }

  private removeOpen(request: Request): void {
    const same = this.open.get(request.id);
    if (same === request) this.open.delete(request.id);
    else if (Array.isArray(same)) {
      const at = same.indexOf(request);
      if (at >= 0) same.splice(at, 1);
      if (same.length === 1) this.open.set(request.id, same[0]);
    }
  }

  private queueLength(): number {
    return this.queue.length - this.queueHead;
  }

  /** Requests not written yet: suspects and the queue. */
  private waiting(): number {
    return this.suspects.length + this.queue.length - this.queueHead;
  }

  /** The unanswered requests written to a child (all children: undefined), in the order written. */
  private writtenTo(child: PluginChild | undefined): Request[] {
    const found: Request[] = [];
    for (let i = this.writtenHead; i < this.written.length; i++) {
      const r = this.written[i];
      if (!r.done && (child === undefined || r.child === child)) found.push(r);
    }
    return found;
  }

  // --- timeouts ------------------------------------------------------------------------------------

  /** One timer, for the oldest written request: every request has the same timeout, so it is the next to expire. */
  private armTimer(): void {
    while (this.writtenHead < this.written.length && this.written[this.writtenHead].done) this.writtenHead++;
    if (this.writtenHead === this.written.length) {
      this.written = [];
      this.writtenHead = 0;
      this.timer = undefined;
      return;
    }
    const wait = Math.max(0, this.written[this.writtenHead].deadline - performance.now());
    this.timer = setTimeout(this.expire, wait + 1);
    this.timer.unref();
  }

  private readonly expire = (): void => {
    this.timer = undefined;
    const now = performance.now();
    // Deadlines grow in the order written, so only the oldest unanswered request can have expired;
    // giving up on its child moves that child's requests on, and the next oldest is looked at.
    for (;;) {
      while (this.writtenHead < this.written.length && this.written[this.writtenHead].done) this.writtenHead++;
      const r = this.written[this.writtenHead];
      if (r === undefined || r.deadline > now) break;
      // It hangs, or it dropped the event: either way it is given up on and started again.
      const child = r.child!;
      this.processes.stop(child, `did not answer within ${this.settings.timeoutMs} ms`);
      this.lost(child, 'timed out', r);
    }
    if (this.closed) return;
    clearTimeout(this.timer); // lost() may have armed it for what it wrote
    this.armTimer();
  };
}
