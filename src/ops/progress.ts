// Progress of a long operator command: a bar with rate and ETA on a terminal, a log line every few
// seconds otherwise (cron, systemd, a pipe), so a run of hours is never silent. Operations report
// into the `Progress` interface and never know which one they are talking to.
import cliProgress from 'cli-progress';
import type pg from 'pg';
import type { Logger } from '../log.js';

export interface Progress {
  /** The amount of work, when known (an estimate is fine: it only drives the percentage and ETA). */
  setTotal(total: number): void;
  /** The work done so far, counted from the start of the whole job (a resumed run starts above 0). */
  update(done: number): void;
  /** Final state: the bar is drawn complete, or a last log line is written. */
  stop(): void;
}

export const noProgress: Progress = { setTotal() {}, update() {}, stop() {} };

/** Work per second over the last stretch (a window of samples), so the ETA follows the current pace. */
export class RateMeter {
  private samples: Array<{ at: number; done: number }> = [];

  constructor(private readonly windowMs = 30_000) {}

  add(done: number, at = Date.now()): void {
    this.samples.push({ at, done });
    while (this.samples.length > 2 && at - this.samples[1].at > this.windowMs) this.samples.shift();
  }

  /** Units per second, or 0 before two samples. */
  rate(): number {
    if (this.samples.length < 2) return 0;
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    const seconds = (last.at - first.at) / 1000;
    return seconds > 0 ? (last.done - first.done) / seconds : 0;
  }

  /** Seconds left at the current rate, or undefined when unknown. */
  eta(done: number, total: number | undefined): number | undefined {
    const rate = this.rate();
    if (!total || rate <= 0) return undefined;
    return Math.max(0, (total - done) / rate);
  }
}

export function formatDuration(seconds: number | undefined): string {
  if (seconds === undefined || !Number.isFinite(seconds)) return '?';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

export interface ProgressOptions {
  /** What is being counted, e.g. "events". */
  unit: string;
  log: Logger;
  /** Where the bar goes; it is drawn only if this is a terminal. */
  stream?: NodeJS.WriteStream;
  /** Seconds between log lines when not on a terminal. */
  logEverySeconds?: number;
}

/** A bar on a terminal, periodic log lines elsewhere. */
export function createProgress(label: string, options: ProgressOptions): Progress {
  const stream = options.stream ?? process.stderr;
  return stream.isTTY ? terminalProgress(label, options.unit, stream) : loggedProgress(label, options);
}

function terminalProgress(label: string, unit: string, stream: NodeJS.WriteStream): Progress {
  const meter = new RateMeter();
  const bar = new cliProgress.SingleBar(
    {
      stream,
      format: `${label} [{bar}] {percentage}% | {value}/{total} ${unit} | {rate}/s | ETA {etaText}`,
      barsize: 30,
      hideCursor: true,
      fps: 5,
    },
    cliProgress.Presets.shades_classic,
  );
  let total = 0;
  let started = false;
  const payload = (done: number) => ({ rate: Math.round(meter.rate()).toLocaleString('en-US'), etaText: formatDuration(meter.eta(done, total)) });
  return {
    setTotal(t) {
      total = Math.max(t, 0);
      if (started) bar.setTotal(total);
    },
    update(done) {
      meter.add(done);
      if (!started) {
        started = true;
        bar.start(Math.max(total, done), done, payload(done));
      } else {
        if (done > total) bar.setTotal((total = done));
        bar.update(done, payload(done));
      }
    },
    stop() {
      if (started) bar.stop();
    },
  };
}

function loggedProgress(label: string, options: ProgressOptions): Progress {
  const meter = new RateMeter();
  const every = (options.logEverySeconds ?? 10) * 1000;
  let total: number | undefined;
  let done = 0;
  let lastLog = 0;
  const write = () => {
    lastLog = Date.now();
    const rate = Math.round(meter.rate());
    const eta = meter.eta(done, total);
    options.log.info(
      { done, total, rate, etaSeconds: eta === undefined ? undefined : Math.round(eta) },
      `${label}: ${done.toLocaleString('en-US')}${total ? `/${total.toLocaleString('en-US')}` : ''} ${options.unit}, ${rate.toLocaleString('en-US')}/s, ETA ${formatDuration(eta)}`,
    );
  };
  return {
    setTotal(t) {
      total = t;
    },
    update(d) {
      done = d;
      meter.add(d);
      if (lastLog === 0) lastLog = Date.now();
      else if (Date.now() - lastLog >= every) write();
    },
    stop() {
      if (lastLog !== 0) write();
    },
  };
}

/**
 * A progress total for `events` (in whichever database `db` is): the planner's estimate, which costs
 * nothing, or an exact count when the table was never analysed.
 */
export async function estimatedEvents(db: pg.Pool): Promise<number> {
  const { rows } = await db.query<{ n: string }>("SELECT reltuples::bigint AS n FROM pg_class WHERE oid = to_regclass('events')");
  const estimate = Number(rows[0]?.n ?? 0);
  if (estimate > 0) return estimate;
  const count = await db.query<{ n: string }>('SELECT count(*) AS n FROM events');
  return Number(count.rows[0].n);
}
