// The write-policy plugin's processes: starting the operator's program (in a process group of its
// own), its stderr in the log within a budget, noticing when it dies, starting the new version when
// its file changes while the old one finishes what it has, and deciding when the next one starts.
// Which events go to which process, and what a death means for them, is write-plugin.ts's.
//
// When the next one starts: at once after a plugin dies (the event it died on is known or will be
// found; the plugin is fine for the others). Only while plugins keep dying with no answer in between
// does the next wait, 100 ms doubling to 5 s. And after one died on its own before answering
// anything, which may mean it cannot start at all, the next is given events only once it has stayed
// up PROBATION_MS: a program that cannot start then dies with nothing written to it, rather than
// with an event it would seem to have died on.
import { spawn, type ChildProcess } from 'node:child_process';
import { statSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import type { Logger } from '../log.js';

const BACKOFF_FIRST_MS = 100;
const BACKOFF_MAX_MS = 5000;
/** How long a plugin started after one that died unanswered must stay up before it is given events. */
const PROBATION_MS = 500;
/** An answer longer than this is not one (a plugin printing without newlines). */
const MAX_LINE_CHARS = 1 << 20;
/** Lines of the plugin's stderr (and of its garbage) logged per LOG_WINDOW_MS; the rest are counted. */
const LOG_LINES = 50;
const LOG_WINDOW_MS = 10_000;
const LOG_LINE_CHARS = 2000;
/** A replaced version that has answered its last event gets this long to exit after its stdin closes. */
const RETIRE_GRACE_MS = 2000;

/** How a plugin was lost, as onRestart and the metrics name it. */
export type LossCause = 'exit' | 'timeout';

/** One running version of the plugin: its process, what is buffered for its stdin, and its stdout's partial line. */
export class PluginChild {
  /** Events written to this child and not answered (kept by write-plugin.ts). */
  inFlight = 0;
  exited = false;
  /** Replaced by a newer version: finishes what it has, then its stdin is closed. */
  retiring = false;
  /** Gave a verdict: it started, whatever kills it later. */
  answered = false;
  /** May be given events (false while on probation). */
  ready = true;
  /** Lines for stdin not yet written: written once per tick, and held while stdin is over its high-water mark. */
  private pending = '';
  private waitingForDrain = false;
  partial = '';

  constructor(readonly process: ChildProcess) {}

  get pid(): number | undefined {
    return this.process.pid;
  }

  /** Buffers a line for stdin; flush() writes it. */
  write(line: string): void {
    this.pending += line;
  }

  /** Writes what is pending unless stdin asked us to wait ('drain'). */
  flush(): void {
    if (this.pending === '' || this.waitingForDrain || this.exited) return;
    const text = this.pending;
    this.pending = '';
    if (!this.process.stdin!.write(text)) this.waitingForDrain = true;
  }

  drained(): void {
    this.waitingForDrain = false;
    this.flush();
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

/** The wait before the next start, after `failed` plugins in a row died without an answer between them. */
function backoffMs(failed: number): number {
  return failed <= 1 ? 0 : Math.min(BACKOFF_FIRST_MS * 2 ** (failed - 2), BACKOFF_MAX_MS);
}

export interface PluginProcessSettings {
  log: Logger;
  /** The plugin was stopped and will be started again: `exit`, `timeout`, `reload`, `spawn`. */
  onRestart?(reason: string): void;
  /** A line from a child's stdout. */
  onLine(child: PluginChild, line: string): void;
  /** A child died on its own (not through stop()); what was written to it is the caller's to answer. */
  onLost(child: PluginChild, why: string): void;
  /** A plugin may be given events again (its backoff or its probation is over). */
  onReady(): void;
}

/** The plugin's versions: the current one, those retiring, and when the next one may start. */
export class PluginProcesses {
  /** A path (no spaces): spawned directly, and reloaded when its mtime changes. Else a shell command. */
  private readonly path: string | undefined;
  private current: PluginChild | undefined;
  /** Replaced versions still answering their last events. */
  private readonly retiring = new Set<PluginChild>();
  private mtimeMs: number | undefined;
  /** Plugins lost in a row with no answer between them. */
  private failedInARow = 0;
  /** Date.now() before which no new plugin is started. */
  private startAt = 0;
  /** The next plugin is on probation (the last one died before answering anything). */
  private probation = false;
  private wakeTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly logBudget: LogBudget;
  restarts = 0;
  lastError: string | undefined;

  constructor(
    readonly command: string,
    private readonly settings: PluginProcessSettings,
  ) {
    // Relative to the working directory, where its mtime is read (spawn would search PATH for a bare name).
    this.path = command.includes(' ') ? undefined : resolvePath(command);
    this.logBudget = new LogBudget(settings.log);
  }

  /** The live current version, whether or not it may be given events yet. */
  get running(): PluginChild | undefined {
    return this.current !== undefined && !this.current.exited ? this.current : undefined;
  }

  /**
   * The version to give events to now. When there is none, one is started: now if it may start,
   * else once its wait is over; onReady says when it can be given events.
   */
  usable(): PluginChild | undefined {
    const child = this.current;
    if (child !== undefined && !child.exited) return child.ready ? child : undefined;
    if (this.closed) return undefined;
    const wait = this.startAt - Date.now();
    if (wait > 0) {
      this.wakeIn(wait);
      return undefined;
    }
    const started = this.spawnChild();
    if (started === undefined) this.wakeIn(this.startAt - Date.now());
    return started?.ready ? started : undefined;
  }

  /** The child gave a verdict: it runs, and the next loss of it restarts at once. */
  answered(child: PluginChild): void {
    child.answered = true;
    if (child === this.current) this.failedInARow = 0;
  }

  /** Writes what every version has pending (once per tick). */
  flush(): void {
    this.current?.flush();
    for (const child of this.retiring) child.flush();
  }

  /** strfry's rule: a plugin given as a path is started again when its file changes. */
  checkFile(): void {
    const child = this.current;
    if (this.path === undefined || child === undefined || child.exited) return;
    const mtimeMs = statSync(this.path, { throwIfNoEntry: false })?.mtimeMs;
    if (mtimeMs === this.mtimeMs) return;
    this.settings.log.info({ plugin: this.command, pid: child.pid }, 'write policy plugin changed: starting the new version');
    this.restarts++;
    this.settings.onRestart?.('reload');
    this.current = undefined;
    child.retiring = true;
    this.retiring.add(child);
    if (child.inFlight === 0) this.endRetired(child);
    this.startAt = 0;
  }

  /** A replaced version has answered its last event: its stdin is closed (EOF), and it is killed if it lingers. */
  endRetired(child: PluginChild): void {
    child.flush();
    child.process.stdin!.end();
    setTimeout(() => child.exited || child.kill('SIGKILL'), RETIRE_GRACE_MS).unref();
  }

  /** Gives up on a child that did not answer in time: killed with its group; what it had is the caller's. */
  stop(child: PluginChild, why: string): void {
    if (child.exited) return;
    child.kill('SIGKILL');
    this.recordLoss(child, 'timeout', why);
  }

  /** Logs a line from the plugin that is not an answer, within the log budget. */
  ignored(child: PluginChild, what: string, line: string): void {
    if (this.logBudget.take()) this.settings.log.warn({ plugin: this.command, pid: child.pid, line: clip(line) }, `write policy plugin: ignored ${what}`);
  }

  /** Kills every version (SIGTERM, then SIGKILL) and resolves once they are gone. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.wakeTimer);
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
    const force = setTimeout(() => children.forEach((c) => c.kill('SIGKILL')), RETIRE_GRACE_MS);
    // Killed with its whole process group, a child closes its pipes; the cap only guards against the unforeseen.
    await Promise.race([Promise.all(gone), new Promise((r) => setTimeout(r, 2 * RETIRE_GRACE_MS).unref())]);
    clearTimeout(force);
  }

  /** One timer to start the next plugin (not unref'd: events wait on it). */
  private wakeIn(ms: number): void {
    if (this.wakeTimer !== undefined) return;
    this.wakeTimer = setTimeout(() => {
      this.wakeTimer = undefined;
      if (!this.closed) this.settings.onReady();
    }, Math.max(0, ms));
  }

  private spawnChild(): PluginChild | undefined {
    const { log } = this.settings;
    if (this.path !== undefined) {
      // A missing file is known now, not when spawn's error arrives.
      const mtimeMs = statSync(this.path, { throwIfNoEntry: false })?.mtimeMs;
      if (mtimeMs === undefined) return this.cannotStart(`${this.path} does not exist`);
      this.mtimeMs = mtimeMs;
    }
    let proc: ChildProcess;
    try {
      proc =
        this.path !== undefined
          ? spawn(this.path, [], { stdio: 'pipe', detached: true })
          : spawn('/bin/sh', ['-c', this.command], { stdio: 'pipe', detached: true });
    } catch (err) {
      return this.cannotStart((err as Error).message);
    }
    // A spawn that failed (not executable, say) has no pid now; its 'error' event follows.
    if (proc.pid === undefined) {
      proc.on('error', (err) => this.cannotStart(err.message));
      return undefined;
    }
    const child = new PluginChild(proc);
    this.current = child;
    proc.stdin!.on('error', (err) => log.debug({ err: err.message }, 'write policy plugin: stdin error')); // the exit says why
    proc.stdin!.on('drain', () => child.drained());
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (chunk: string) => this.read(child, chunk));
    proc.stderr!.setEncoding('utf8');
    let errPartial = '';
    proc.stderr!.on('data', (chunk: string) => {
      const lines = (errPartial + chunk).split('\n');
      errPartial = lines.pop()!.slice(0, MAX_LINE_CHARS);
      for (const line of lines) if (line !== '' && this.logBudget.take()) log.warn({ plugin: this.command, pid: child.pid, stderr: clip(line) }, 'write policy plugin says');
    });
    proc.on('error', (err) => log.warn({ plugin: this.command, pid: child.pid, err: err.message }, 'write policy plugin: process error'));
    // 'close' comes once stdout is read to its end (answers sent just before exiting count); a
    // grandchild holding stdout open must not delay it for ever.
    proc.on('exit', (code, signal) => {
      const why = signal ? `killed by ${signal}` : `exited with code ${code}`;
      setTimeout(() => this.lost(child, why), RETIRE_GRACE_MS).unref();
    });
    proc.on('close', (code, signal) => this.lost(child, signal ? `killed by ${signal}` : `exited with code ${code}`));
    if (this.probation) {
      child.ready = false;
      setTimeout(() => {
        if (child.exited || this.closed) return;
        child.ready = true;
        this.settings.onReady();
      }, PROBATION_MS);
    }
    log.info({ plugin: this.command, pid: proc.pid }, 'write policy plugin started');
    return child;
  }

  /** Nothing ran: counted as a plugin lost before answering anything. */
  private cannotStart(why: string): undefined {
    if (this.closed) return undefined;
    this.lastError = `could not start: ${why}`;
    this.settings.log.error({ plugin: this.command }, `write policy plugin ${this.lastError}`);
    this.restarts++;
    this.settings.onRestart?.('spawn');
    this.failedInARow++;
    this.startAt = Date.now() + backoffMs(this.failedInARow);
    this.probation = true;
    return undefined;
  }

  private lost(child: PluginChild, why: string): void {
    if (child.exited) return;
    this.recordLoss(child, 'exit', why);
    if (!this.closed) this.settings.onLost(child, why);
  }

  /** A child is gone: the current one is counted as a restart, and the next start is decided. */
  private recordLoss(child: PluginChild, cause: LossCause, why: string): void {
    child.exited = true;
    this.retiring.delete(child);
    if (this.closed) return;
    const wasCurrent = child === this.current;
    if (wasCurrent || cause === 'timeout') {
      this.lastError = why;
      this.settings.log.warn({ plugin: this.command, pid: child.pid, inFlight: child.inFlight }, `write policy plugin ${why}`);
    }
    if (!wasCurrent) return;
    this.current = undefined;
    this.restarts++;
    this.settings.onRestart?.(cause);
    this.failedInARow++;
    this.startAt = Date.now() + backoffMs(this.failedInARow);
    // One killed for a timeout had started; one that died on its own before any answer may not have.
    this.probation = cause === 'exit' && !child.answered;
  }

  private read(child: PluginChild, chunk: string): void {
    let text = child.partial === '' ? chunk : child.partial + chunk;
    let start = 0;
    for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n', start)) {
      const line = text.slice(start, nl);
      start = nl + 1;
      if (line.trim() !== '') this.settings.onLine(child, line);
    }
    text = start === 0 ? text : text.slice(start);
    if (text.length > MAX_LINE_CHARS) {
      this.ignored(child, 'a line too long', text);
      text = '';
    }
    child.partial = text;
  }
}
