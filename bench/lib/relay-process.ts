// Starts the relay as a separate process (as operators run it), so a benchmark's client never
// shares an event loop with the relay it measures.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { packageRoot } from '../../src/paths.js';

export interface RelayProcess {
  url: string;
  pid: number;
  child: ChildProcess;
  /** Every JSON log line the relay has written so far. */
  logs: Array<Record<string, unknown>>;
  stop(): Promise<void>;
}

// The compiled relay, also when this module runs from TypeScript sources (tests), with the V8 flags
// `npm start` gives it (package.json).
const MAIN = path.join(packageRoot(), 'dist/src/main.js');
const NODE_FLAGS = ['--max-semi-space-size=64', '--no-allocation-site-pretenuring'];

/**
 * `env` overrides the relay's configuration; LOG_LEVEL stays `info`, since its start-up line carries the URL.
 * Error lines are echoed on stderr unless `echoErrors` is false (a bench that causes them on purpose counts them in `logs`).
 */
export async function startRelayProcess(env: Record<string, string> = {}, { echoErrors = true } = {}): Promise<RelayProcess> {
  const child = spawn(process.execPath, [...NODE_FLAGS, MAIN], {
    // Every benchmark client connects from loopback, far faster than a client should: exempt it from
    // the rate limits (they are still checked: an exemption lookup per message).
    // (RATE_LIMIT_EXEMPT= in the environment charges them, to measure the buckets themselves.)
    env: { RATE_LIMIT_EXEMPT: '127.0.0.0/8,::1', ...process.env, PORT: '0', ...env, LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const logs: Array<Record<string, unknown>> = [];
  const url = await new Promise<string>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    const timer = setTimeout(() => reject(new Error('relay did not start listening within 120 s')), 120_000);
    child.once('exit', (code) => reject(new Error(`relay exited with code ${code} before listening`)));
    lines.on('line', (line) => {
      try {
        const entry = JSON.parse(line);
        logs.push(entry);
        if (entry.msg === 'relay listening') {
          clearTimeout(timer);
          resolve(entry.url);
        }
        if (entry.level >= 50 && echoErrors) console.error(line);
      } catch {
        /* not a log line */
      }
    });
  });
  return {
    url,
    pid: child.pid!,
    child,
    logs,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

/**
 * Waits until the relay's hot tier has filled (its "hot tier filled" log line, from the database or
 * from the snapshot the last stop wrote) in each of its `workers` processes, when it has one
 * (HOT_TIER_MB not 0): a benchmark of REQs then measures the tier, not its warm-up.
 */
export async function waitForHotTier(relay: RelayProcess, timeoutMs = 15 * 60_000, workers = 1): Promise<Record<string, unknown> | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    // Each process of WORKERS fills its own tier (or reads its own snapshot back): the last one's line.
    const filled = relay.logs.filter((l) => l.msg === 'hot tier filled');
    if (filled.length >= workers) return filled[filled.length - 1];
    // No tier: no line of it at all (a start logs `hot tier filling`, or `hot tier reading its snapshot`).
    if (!relay.logs.some((l) => typeof l.msg === 'string' && l.msg.startsWith('hot tier'))) return undefined;
    if (Date.now() > deadline) throw new Error('the hot tier did not fill in time');
    await new Promise((r) => setTimeout(r, 200));
  }
}
