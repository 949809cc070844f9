// strfry's write-policy plugins (strfry docs/plugins.md, pgrelay docs/mesh.md): an operator's program
// that decides, event by event, whether the relay keeps an event that passed the relay's own checks.
// One long-lived child per process. Each event is one JSON line on its stdin; the plugin answers one
// JSON line on stdout naming the event's id, so many events are in flight at once and answers may
// come in any order. A fault (exit, hang, garbage) is the operator's bug: the events it concerns are
// answered `error:`, the plugin is restarted with backoff, and nothing else in the relay waits.
import { spawn, type ChildProcess } from 'node:child_process';
import { statSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import type { Logger } from '../log.js';
import type { NostrEvent } from '../nostr/event.js';
import * as reason from '../nostr/reason.js';
import type { Session } from './session.js';

/** strfry's sourceType values (its docs/plugins.md): `Stored` is what the router's pluginUp is told. */
export type PluginSourceType = 'IP4' | 'IP6' | 'Import' | 'Stream' | 'Sync' | 'Stored';
/** Where an event came from, as the plugin is told: `info` is the client's address or a relay's URL. */
export interface PluginSource {
  type: PluginSourceType;
  info: string;
  /** NIP-42: a pubkey the connection authenticated as (hex). */
  authed?: string;
}
export type PluginAction = 'accept' | 'reject' | 'shadowReject';
/** msg as the plugin sent it ('' if none); faults give { action: 'reject', msg: 'error: …' }. */
export interface PluginVerdict {
  action: PluginAction;
  msg: string;
}

export interface WritePluginSettings {
  /** How long a plugin has to answer an event (WRITE_POLICY_TIMEOUT_MS); past it, it is restarted. */
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
  /** Events awaiting the plugin's answer: written to it, or queued behind MAX_IN_FLIGHT. */
  inFlight: number;
  /** Of those, the ones queued. */
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
const BACKOFF_FIRST_MS = 100;
const BACKOFF_MAX_MS = 5000;
/** A plugin that ran this long before it failed was fine: its next restart waits BACKOFF_FIRST_MS. */
const HEALTHY_AFTER_MS = 30_000;
/** An answer longer than this is not one (a plugin printing without newlines). */
const MAX_LINE_CHARS = 1 << 20;
/** Lines of the plugin's stderr (and of its garbage) logged per LOG_WINDOW_MS; the rest are counted. */
const LOG_LINES = 50;
const LOG_WINDOW_MS = 10_000;
const LOG_LINE_CHARS = 2000;
/** A replaced version that has answered its last event gets this long to exit after its stdin closes. */
const RETIRE_GRACE_MS = 2000;

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
  /** The request line, until it is written (then dropped: requests are kept until the timeout's turn). */
  line: string;
  /** performance.now() when decide() was called. */
  readonly started: number;
  /** performance.now() past which the plugin is too late; set when written. */
  deadline: number;
  /** The child it was written to; undefined while queued. */
  child: PluginChild | undefined;
  done: boolean;
  resolve: (verdict: PluginVerdict) => void;
  /** Further callers with the same id and source (a client sending an event again): one answer each. */
  also: Array<(verdict: PluginVerdict) => void> | undefined;
}

/** One running version of the plugin: its process, what is buffered for its stdin, and its stdout's partial line. */
class PluginChild {
  readonly startedAt = Date.now();
  /** Requests written to this child and not answered. */
  inFlight = 0;
  exited = false;
  /** Replaced by a newer version: finishes what it has, then its stdin is closed. */
  retiring = false;
  /** Lines for stdin not yet written: written once per tick, and held while stdin is over its high-water mark. */
  pending = '';
  waitingForDrain = false;
  partial = '';

  constructor(readonly process: ChildProcess) {}

  get pid(): number | undefined {
    return this.process.pid;
  }

  /** Writes what is pending unless stdin asked us to wait ('drain'). */
  flush(): void {
    if (this.pending === '' || this.waitingForDrain || this.exited) return;
    const text = this.pending;
    this.pending = '';
    if (!this.process.stdin!.write(text)) this.waitingForDrain = true;
  }

  /** Kills the child and everything it started (it leads its own process group). */
  kill(signal: NodeJS.Signals): void {
    const pid = this.process.pid;
    try {
      if (pid !== undefined) process.kill(-pid, signal);
    } catch {
      this.process.kill(signal); // not a group leader (or already gone)
    }
  }
}

/** A budget of log lines per window, so a chatty plugin cannot flood the relay's log. */
class LogBudget {
  private windowStart = 0;
  private used = 0;
  private dropped = 0;

  constructor(private readonly log: Logger) {}

  take(): boolean {
    const now = Date.now();
    if (now - this.windowStart >= LOG_WINDOW_MS) {
      if (this.dropped > 0) this.log.warn({ dropped: this.dropped }, 'write policy plugin: lines not logged (too many)');
      this.windowStart = now;
      this.used = 0;
      this.dropped = 0;
    }
    if (this.used < LOG_LINES) {
      this.used++;
      return true;
    }
    this.dropped++;
    return false;
  }
}

const clip = (line: string) => (line.length > LOG_LINE_CHARS ? line.slice(0, LOG_LINE_CHARS) + '…' : line);

function sameSource(a: PluginSource, b: PluginSource): boolean {
  return a.type === b.type && a.info === b.info && a.authed === b.authed;
}

/** The request line: built by hand around the event's JSON, one string per event. */
function requestLine(event: NostrEvent, source: PluginSource, receivedAt: number): string {
  return (
    '{"type":"new","event":' +
    JSON.stringify(event) +
    ',"receivedAt":' +
    receivedAt +
    ',"sourceType":"' +
    source.type +
    '","sourceInfo":' +
    JSON.stringify(source.info) +
    (source.authed === undefined ? '' : ',"authed":' + JSON.stringify(source.authed)) +
    '}\n'
  );
}

export class WritePlugin {
  /** A path (no spaces): spawned directly, and reloaded when its mtime changes. Else a shell command. */
  private readonly path: string | undefined;
  private current: PluginChild | undefined;
  /** Replaced versions still answering their last events. */
  private readonly retiring = new Set<PluginChild>();
  /** Unanswered requests by event id: one, or several (other sources, or sent to two versions). */
  private readonly open = new Map<string, Request | Request[]>();
  /** Requests waiting for room under MAX_IN_FLIGHT, oldest first. */
  private queue: Request[] = [];
  private queueHead = 0;
  /** Written requests in the order written: the oldest unanswered one is the next to time out. */
  private written: Request[] = [];
  private writtenHead = 0;
  private inFlight = 0;
  private timer: NodeJS.Timeout | undefined;
  private tickScheduled = false;
  /** The file was looked at this tick (reload is checked once per tick, not per event). */
  private statDone = false;
  private mtimeMs: number | undefined;
  private backoffMs = BACKOFF_FIRST_MS;
  /** Date.now() before which a lost plugin is not started again. */
  private retryAt = 0;
  private restarts = 0;
  private lastError: string | undefined;
  private closed = false;
  private readonly logBudget: LogBudget;

  constructor(
    readonly command: string,
    private readonly settings: WritePluginSettings,
  ) {
    // Relative to the working directory, where its mtime is read (spawn would search PATH for a bare name).
    this.path = command.includes(' ') ? undefined : resolvePath(command);
    this.logBudget = new LogBudget(settings.log);
  }

  /** Starts the plugin now rather than with the first event, so a broken one shows in the log at once. */
  start(): this {
    if (!this.closed) this.running();
    return this;
  }

  /** The plugin's verdict on an event; never rejects (faults answer `error:`). */
  decide(event: NostrEvent, source: PluginSource, receivedAt: number = Math.floor(Date.now() / 1000)): Promise<PluginVerdict> {
    if (this.closed) return this.fault(reason.error('the relay is closing'));
    if (this.path !== undefined && !this.statDone) this.checkFile();
    const child = this.running();
    if (!child) return this.fault(reason.error(`the write policy plugin is not running (${this.lastError ?? 'starting'})`));

    const same = this.open.get(event.id);
    if (same !== undefined) {
      const shared = this.shareable(same, source);
      if (shared) return new Promise((resolve) => (shared.also ??= []).push(resolve));
    }
    if (this.queueLength() >= (this.settings.maxQueued ?? MAX_QUEUED)) return this.fault(reason.rateLimited('the write policy plugin is busy, try again shortly'));
    return new Promise((resolve) => {
      const request: Request = {
        id: event.id,
        source,
        line: requestLine(event, source, receivedAt),
        started: performance.now(),
        deadline: 0,
        child: undefined,
        done: false,
        resolve,
        also: undefined,
      };
      this.addOpen(request);
      if (this.inFlight < MAX_IN_FLIGHT && this.queueLength() === 0) this.send(request, child);
      else this.queue.push(request);
    });
  }

  state(): WritePluginState {
    const child = this.current !== undefined && !this.current.exited ? this.current : undefined;
    return {
      command: this.command,
      running: child?.pid !== undefined,
      pid: child?.pid,
      restarts: this.restarts,
      inFlight: this.inFlight + this.queueLength(),
      queued: this.queueLength(),
      lastError: this.lastError,
    };
  }

  /** Kills the plugin (all versions) and answers every waiting event `error:`. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    const children = [...this.retiring, ...(this.current ? [this.current] : [])].filter((c) => !c.exited);
    const gone = children.map(
      (c) =>
        new Promise<void>((resolve) => {
          c.process.once('close', () => resolve());
          c.process.once('error', () => resolve());
        }),
    );
    for (const c of children) {
      c.process.stdin?.end();
      c.kill('SIGTERM');
    }
    const closing = reason.error('the relay is closing');
    for (const r of this.writtenTo(undefined)) this.settle(r, undefined, closing);
    this.failQueued(closing);
    const force = setTimeout(() => children.forEach((c) => c.kill('SIGKILL')), RETIRE_GRACE_MS);
    // Killed with its whole process group, a child closes its pipes; the cap only guards against the unforeseen.
    await Promise.race([Promise.all(gone), new Promise((r) => setTimeout(r, 2 * RETIRE_GRACE_MS).unref())]);
    clearTimeout(force);
  }

  // --- the running child ---------------------------------------------------------------------------

  /** The current version, started if there is none and its backoff has passed; undefined if it cannot run. */
  private running(): PluginChild | undefined {
    if (this.current !== undefined && !this.current.exited) return this.current;
    if (Date.now() < this.retryAt) return undefined;
    return this.spawnChild();
  }

  private spawnChild(): PluginChild | undefined {
    const { log } = this.settings;
    if (this.path !== undefined) {
      // A missing file is answered now, not when spawn's error arrives.
      const mtimeMs = statSync(this.path, { throwIfNoEntry: false })?.mtimeMs;
      if (mtimeMs === undefined) {
        this.cannotStart(`${this.path} does not exist`);
        return undefined;
      }
      this.mtimeMs = mtimeMs;
    }
    let proc: ChildProcess;
    try {
      proc =
        this.path !== undefined
          ? spawn(this.path, [], { stdio: 'pipe', detached: true })
          : spawn('/bin/sh', ['-c', this.command], { stdio: 'pipe', detached: true });
    } catch (err) {
      this.cannotStart((err as Error).message);
      return undefined;
    }
    const child = new PluginChild(proc);
    this.current = child;
    proc.stdin!.on('error', (err) => log.debug({ err: err.message }, 'write policy plugin: stdin error')); // the exit says why
    proc.stdin!.on('drain', () => {
      child.waitingForDrain = false;
      child.flush();
    });
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (chunk: string) => this.read(child, chunk));
    proc.stderr!.setEncoding('utf8');
    let errPartial = '';
    proc.stderr!.on('data', (chunk: string) => {
      const lines = (errPartial + chunk).split('\n');
      errPartial = lines.pop()!.slice(0, MAX_LINE_CHARS);
      for (const line of lines) if (line !== '' && this.logBudget.take()) log.warn({ plugin: this.command, pid: child.pid, stderr: clip(line) }, 'write policy plugin says');
    });
    proc.on('error', (err) => this.lost(child, 'spawn', `could not start: ${err.message}`));
    // 'close' comes once stdout is read to its end (answers sent just before exiting count); a
    // grandchild holding stdout open must not delay it for ever.
    proc.on('exit', (code, signal) => {
      const why = signal ? `killed by ${signal}` : `exited with code ${code}`;
      setTimeout(() => this.lost(child, 'exit', why), RETIRE_GRACE_MS).unref();
    });
    proc.on('close', (code, signal) => this.lost(child, 'exit', signal ? `killed by ${signal}` : `exited with code ${code}`));
    log.info({ plugin: this.command, pid: proc.pid }, 'write policy plugin started');
    return child;
  }

  private cannotStart(why: string): void {
    this.lastError = `could not start: ${why}`;
    this.settings.log.error({ plugin: this.command }, `write policy plugin ${this.lastError}`);
    this.restarts++;
    this.settings.onRestart?.('spawn');
    this.backOff(0);
  }

  /** strfry's rule: a plugin given as a path is started again when its file changes; once per tick. */
  private checkFile(): void {
    this.statDone = true;
    this.scheduleTick();
    const child = this.current;
    if (child === undefined || child.exited) return;
    const mtimeMs = statSync(this.path!, { throwIfNoEntry: false })?.mtimeMs;
    if (mtimeMs === this.mtimeMs) return;
    this.settings.log.info({ plugin: this.command, pid: child.pid }, 'write policy plugin changed: starting the new version');
    this.restarts++;
    this.settings.onRestart?.('reload');
    this.current = undefined;
    this.retire(child);
    this.retryAt = 0;
  }

  /** A replaced version answers what was written to it; then its stdin is closed (EOF), and it is killed if it lingers. */
  private retire(child: PluginChild): void {
    child.retiring = true;
    this.retiring.add(child);
    if (child.inFlight === 0) this.endRetired(child);
  }

  private endRetired(child: PluginChild): void {
    child.flush();
    child.process.stdin!.end();
    setTimeout(() => child.exited || child.kill('SIGKILL'), RETIRE_GRACE_MS).unref();
  }

  /** The child is gone (or given up on): everything written to it is answered `error:`; the current one is restarted after a backoff. */
  private lost(child: PluginChild, restartReason: string, why: string, timedOut?: Request): void {
    if (child.exited) return;
    child.exited = true;
    this.retiring.delete(child);
    if (this.closed) return;
    const wasCurrent = child === this.current && !child.retiring;
    if (wasCurrent || timedOut) {
      this.lastError = why;
      this.settings.log.warn({ plugin: this.command, pid: child.pid, inFlight: child.inFlight }, `write policy plugin ${why}`);
    }
    const restarting = reason.error(timedOut ? 'the write policy plugin timed out on another event' : `the write policy plugin ${why}`);
    if (timedOut) this.settle(timedOut, undefined, reason.error(`the write policy plugin did not answer within ${this.settings.timeoutMs} ms`));
    for (const r of this.writtenTo(child)) this.settle(r, undefined, restarting);
    if (!wasCurrent) return;
    this.current = undefined;
    this.restarts++;
    this.settings.onRestart?.(restartReason);
    this.backOff(Date.now() - child.startedAt);
    // Events queued behind it were waiting on it too.
    this.failQueued(restarting);
  }

  private backOff(ranMs: number): void {
    if (ranMs >= HEALTHY_AFTER_MS) this.backoffMs = BACKOFF_FIRST_MS;
    this.retryAt = Date.now() + this.backoffMs;
    this.backoffMs = Math.min(this.backoffMs * 2, BACKOFF_MAX_MS);
  }

  // --- requests ------------------------------------------------------------------------------------

  private send(request: Request, child: PluginChild): void {
    request.child = child;
    request.deadline = performance.now() + this.settings.timeoutMs;
    child.inFlight++;
    this.inFlight++;
    child.pending += request.line;
    request.line = '';
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

  /** Stdin is written once per tick, every line of the tick at once. */
  private scheduleTick(): void {
    if (this.tickScheduled) return;
    this.tickScheduled = true;
    process.nextTick(this.endOfTick);
  }

  private readonly endOfTick = (): void => {
    this.tickScheduled = false;
    this.statDone = false;
    this.current?.flush();
    for (const child of this.retiring) child.flush();
  };

  /** Requests that share an answer with a new one: same id, same source, not written to a replaced version. */
  private shareable(same: Request | Request[], source: PluginSource): Request | undefined {
    const fits = (r: Request) => sameSource(r.source, source) && (r.child === undefined || r.child === this.current);
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

  /** Answers a request: the plugin's verdict, or a fault's `error:` reason. */
  private settle(request: Request, action: PluginAction | undefined, msg: string): void {
    if (request.done) return;
    request.done = true;
    this.removeOpen(request);
    const child = request.child;
    if (child !== undefined) {
      child.inFlight--;
      this.inFlight--;
      if (child.retiring && child.inFlight === 0 && !child.exited) this.endRetired(child);
    }
    this.settings.onDecision?.(action ?? 'error', (performance.now() - request.started) / 1000);
    const verdict: PluginVerdict = { action: action ?? 'reject', msg };
    request.resolve(verdict);
    if (request.also) for (const resolve of request.also) resolve(verdict);
    if (this.queueLength() > 0) this.sendQueued();
  }

  private sendQueued(): void {
    const child = this.current;
    if (child === undefined || child.exited || this.closed) return;
    while (this.inFlight < MAX_IN_FLIGHT && this.queueHead < this.queue.length) {
      const request = this.queue[this.queueHead++];
      if (!request.done) this.send(request, child);
    }
    if (this.queueHead === this.queue.length) {
      this.queue = [];
      this.queueHead = 0;
    }
  }

  private queueLength(): number {
    return this.queue.length - this.queueHead;
  }

  private failQueued(msg: string): void {
    const queued = this.queue.slice(this.queueHead);
    this.queue = [];
    this.queueHead = 0;
    for (const r of queued) this.settle(r, undefined, msg);
  }

  /** The unanswered requests written to a child (all children: undefined), collected before any is settled. */
  private writtenTo(child: PluginChild | undefined): Request[] {
    const found: Request[] = [];
    for (let i = this.writtenHead; i < this.written.length; i++) {
      const r = this.written[i];
      if (!r.done && (child === undefined || r.child === child)) found.push(r);
    }
    return found;
  }

  /** A verdict that never reached the plugin: counted as an error, answered at once. */
  private fault(msg: string): Promise<PluginVerdict> {
    this.settings.onDecision?.('error', 0);
    return Promise.resolve({ action: 'reject', msg });
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
    // giving up on its child answers all of that child's requests, and the next oldest is looked at.
    for (;;) {
      while (this.writtenHead < this.written.length && this.written[this.writtenHead].done) this.writtenHead++;
      const r = this.written[this.writtenHead];
      if (r === undefined || r.deadline > now) break;
      // It hangs, or it dropped the event: either way it is given up on and started again.
      const child = r.child!;
      child.kill('SIGKILL');
      this.lost(child, 'timeout', `did not answer within ${this.settings.timeoutMs} ms`, r);
    }
    if (!this.closed) this.armTimer();
  };

  // --- answers -------------------------------------------------------------------------------------

  private read(child: PluginChild, chunk: string): void {
    let text = child.partial === '' ? chunk : child.partial + chunk;
    let start = 0;
    for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n', start)) {
      this.answer(child, text.slice(start, nl));
      start = nl + 1;
    }
    text = start === 0 ? text : text.slice(start);
    if (text.length > MAX_LINE_CHARS) {
      this.garbage(child, 'a line too long', text);
      text = '';
    }
    child.partial = text;
  }

  private answer(child: PluginChild, line: string): void {
    if (line.trim() === '') return;
    let message: { id?: unknown; action?: unknown; msg?: unknown };
    try {
      message = JSON.parse(line);
    } catch {
      return this.garbage(child, 'not JSON', line);
    }
    if (typeof message !== 'object' || message === null || typeof message.id !== 'string') return this.garbage(child, 'no id', line);
    const request = this.takeOpen(message.id, child);
    if (request === undefined) return this.garbage(child, 'an id no event awaits', line);
    const { action } = message;
    const msg = typeof message.msg === 'string' ? message.msg : '';
    if (action === 'accept' || action === 'reject' || action === 'shadowReject') return this.settle(request, action, msg);
    // It did answer this event, wrongly: the event gets an error now rather than after the timeout.
    this.garbage(child, 'an unknown action', line);
    this.settle(request, undefined, reason.error('the write policy plugin gave an unknown action'));
  }

  private garbage(child: PluginChild, what: string, line: string): void {
    if (this.logBudget.take()) this.settings.log.warn({ plugin: this.command, pid: child.pid, line: clip(line) }, `write policy plugin: ignored ${what}`);
  }
}
