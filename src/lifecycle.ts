// The relay process from start to exit. What start-up opens (the database, the relay) is registered
// here, and it is all closed, newest first, however the process ends:
// - a signal (SIGTERM, SIGINT): first the drain (SHUTDOWN_DRAIN_MS: /ready says 503 and the clients
//   already connected are served while a load balancer takes the relay out of rotation; a second
//   signal ends it), then shut down in order, exit 0;
// - a failure while starting (the port in use, the database refusing, a migration failing …): one
//   line on stderr saying what is wrong and what to do, close what was opened (an embedded PostgreSQL
//   this process started is stopped; one it found running stays), exit 1;
// - an uncaught exception or unhandled rejection once running: the process is in an unknown state,
//   so it logs the error, shuts down in order (in-flight writes answered, sockets closed, the embedded
//   database stopped) and exits 1 for its supervisor to restart it. Never a zombie that serves nothing.
//   No drain then: serving on for seconds in an unknown state is worse than a few clients reconnecting.
import type { Logger } from './log.js';
import { ConfigError } from './config.js';
import { describeStartupError } from './fatal.js';

/** Why the process stops: asked to (a signal), a failure once running, or a failed start. */
export type StopReason = 'signal' | 'failure' | 'startup-failed';

/** What a registered stop is told: why, and an abort signal raised by a second SIGINT or SIGTERM. */
export type StopFunction = (reason: StopReason, hurry: AbortSignal) => Promise<void>;

/** Past this, a stop that hangs is cut short and the process exits anyway. */
const STOP_DEADLINE_EXTRA_MS = 15_000;

export class Lifecycle {
  private readonly stops: Array<{ name: string; stop: StopFunction }> = [];
  private readonly hurry = new AbortController();
  private running = false;
  private stopping = false;
  /** The exit code of a failed start (a cluster worker uses its own, so the primary knows). */
  startFailureCode = 1;

  constructor(
    private readonly log: Logger,
    private readonly settings: { PORT: number; HOST: string; SHUTDOWN_TIMEOUT_MS: number; SHUTDOWN_DRAIN_MS: number },
  ) {}

  /** Installs the process handlers: signals, uncaught exceptions, unhandled rejections. */
  install(): this {
    process.on('SIGINT', () => this.signal('SIGINT'));
    process.on('SIGTERM', () => this.signal('SIGTERM'));
    process.on('uncaughtException', (err) => void this.fail(err, 'uncaught exception'));
    process.on('unhandledRejection', (err) => void this.fail(err, 'unhandled rejection'));
    return this;
  }

  /** Something start-up opened, to be closed at exit (in the reverse order of opening). */
  add(name: string, stop: StopFunction): void {
    this.stops.push({ name, stop });
  }

  /** Start-up is over: from now on an error is a runtime error. */
  started(): void {
    this.running = true;
  }

  get isStopping(): boolean {
    return this.stopping;
  }

  /** A failure: while starting, one line for the user; once running, the error with its stack. Then exit 1. */
  async fail(err: unknown, context = 'start-up failed'): Promise<void> {
    if (this.stopping) {
      // Already on the way out: record it, the exit follows.
      this.log.error({ err: errorFields(err) }, `${context} while stopping`);
      return;
    }
    if (!this.running) {
      const line = describeStartupError(err, this.settings).replace(/\s*\n\s*/g, ' ');
      this.log.fatal({ err: errorFields(err) }, line);
      process.stderr.write(`pgrelay: ${line}\n`);
      return this.stop('start-up failure', err instanceof ConfigError ? 2 : this.startFailureCode, 'startup-failed');
    }
    this.log.fatal({ err: errorFields(err) }, `${context}: shutting down (the process state is unknown; a supervisor should restart it)`);
    return this.stop(context, 1, 'failure');
  }

  /** The first signal stops the process; one more while it stops cuts the drain short. */
  private signal(name: NodeJS.Signals): void {
    if (!this.stopping) return void this.stop(name, 0, 'signal');
    if (this.hurry.signal.aborted) return;
    this.log.info({ signal: name }, 'second signal: ending the drain');
    this.hurry.abort();
  }

  /** Closes everything registered, newest first, then exits with `code`. Idempotent. */
  async stop(why: string, code: number, reason: StopReason): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    if (reason !== 'startup-failed') this.log.info({ reason: why }, 'shutting down');
    const drainMs = reason === 'signal' ? this.settings.SHUTDOWN_DRAIN_MS : 0;
    const deadline = setTimeout(() => {
      this.log.error({ reason: why }, 'shutdown did not finish in time: exiting anyway');
      void this.exit(code || 1);
    }, drainMs + this.settings.SHUTDOWN_TIMEOUT_MS + STOP_DEADLINE_EXTRA_MS);
    deadline.unref();
    for (const { name, stop } of this.stops.reverse()) {
      try {
        await stop(reason, this.hurry.signal);
      } catch (err) {
        this.log.error({ err: errorFields(err), step: name }, 'error while stopping');
      }
    }
    await this.exit(code);
  }

  private async exit(code: number): Promise<never> {
    // The log is written asynchronously: flush it, or the last lines are lost at exit.
    await new Promise<void>((resolve) => this.log.flush(() => resolve()));
    process.exit(code);
  }
}

function errorFields(err: unknown): { message: string; code?: string; stack?: string } {
  if (!(err instanceof Error)) return { message: String(err) };
  return { message: err.message, code: (err as { code?: string }).code, stack: err.stack };
}
