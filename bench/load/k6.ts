// Finding and running k6: one `k6 run` per ladder step, its summary exported as JSON and its output
// kept in a log file beside it.
import { execFileSync, spawn } from 'node:child_process';
import { createWriteStream, existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { packageRoot } from '../../src/paths.js';
import type { K6Summary } from './report.js';

/** k6 from --k6, $K6, PATH, or where `go install` puts it. */
export function findK6(explicit?: string): string {
  const candidates = [explicit, process.env.K6];
  try {
    candidates.push(execFileSync('sh', ['-c', 'command -v k6'], { encoding: 'utf8' }).trim());
  } catch {
    /* not on PATH */
  }
  try {
    const gopath = execFileSync('go', ['env', 'GOPATH'], { encoding: 'utf8' }).trim();
    candidates.push(path.join(gopath, 'bin', 'k6'));
  } catch {
    /* no Go */
  }
  candidates.push(path.join(os.homedir(), 'go', 'bin', 'k6'));
  const found = candidates.find((c) => c && existsSync(c));
  if (!found) throw new Error('k6 not found: install it with `npm run load:install-k6` (or pass --k6 PATH)');
  return found;
}

/** The k6 with the k6/x/nostr module (load/k6-nostr), from --k6, $K6_NOSTR or load/bin/k6-nostr. */
export function findK6Nostr(explicit?: string): string {
  const found = [explicit, process.env.K6_NOSTR, path.join(packageRoot(), 'load', 'bin', 'k6-nostr')].find((c) => c && existsSync(c));
  if (!found) throw new Error('the k6 with k6/x/nostr is not built: run `npm run load:build-k6-nostr` (needs Go), or pass --k6 PATH');
  return found;
}

export function k6Version(k6: string): string {
  try {
    return execFileSync(k6, ['version'], { encoding: 'utf8' }).split('\n')[0].trim();
  } catch {
    return 'k6 (unknown version)';
  }
}

export interface K6Run {
  exitCode: number;
  summary?: K6Summary;
  seconds: number;
}

/**
 * Runs `k6 run` on a script with the given environment (as -e flags, so k6 sees exactly these).
 * Output goes to `logFile`; the summary to `summaryFile`. `onTick` is called every second while
 * k6 runs (the runner samples the relay's memory and connections).
 */
export async function runK6(
  k6: string,
  script: string,
  env: Record<string, string | number>,
  files: { summary: string; log: string },
  onTick?: () => void,
): Promise<K6Run> {
  const args = ['run', '--quiet', '--no-color', '--summary-export', files.summary];
  for (const [k, v] of Object.entries(env)) args.push('-e', `${k}=${v}`);
  args.push(script);
  const started = Date.now();
  const log = createWriteStream(files.log);
  log.write(`$ k6 ${args.join(' ')}\n`);
  // GOGC=1000: k6's Go heap grows to 11x what is live before a collection, not 2x. At ~270 messages
  // per REQ the client's garbage collector was a fifth of its CPU, and k6 shares the relay's cores.
  // Against bench:stub-relay: 1.26 ms of k6 CPU per REQ at the default, 1.02 at 400 (~560 MB); at
  // 200 VUs 1,703–1,706 REQ/s at 400 against 1,825–1,888 at 1000 (~1.3 GB). A GOGC in the
  // environment wins.
  const child = spawn(k6, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { GOGC: '1000', ...process.env } });
  child.stdout.pipe(log, { end: false });
  child.stderr.pipe(log, { end: false });
  const timer = onTick ? setInterval(onTick, 1000) : undefined;
  const exitCode = await new Promise<number>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  }).finally(() => clearInterval(timer));
  await new Promise<void>((resolve) => log.end(resolve));
  let summary: K6Summary | undefined;
  try {
    summary = JSON.parse(await readFile(files.summary, 'utf8'));
  } catch {
    summary = undefined;
  }
  return { exitCode, summary, seconds: (Date.now() - started) / 1000 };
}
