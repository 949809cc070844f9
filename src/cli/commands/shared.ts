// What the operator commands share: opening the store, option parsing, Ctrl-C handling.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { UsageError } from '../command.js';
import type { Config } from '../../config.js';
import type { Logger } from '../../log.js';
import { staticModeration } from '../../policy/moderation.js';
import { policyFrom, type Policy } from '../../policy/policy.js';
import { openDatabase, type Database } from '../../store/database.js';
import { loadModeration } from '../../store/moderation.js';
import { computeWebOfTrust } from '../../store/web-of-trust.js';

export { UsageError } from '../command.js';

/**
 * The store, as the relay opens it (pending migrations applied), joining a running embedded server
 * without taking it over. No statement timeout: a command's statements may legitimately run longer
 * than a REQ may (QUERY_TIMEOUT_MS is for the relay's clients).
 */
export function openStore(config: Config, log: Logger): Promise<Database> {
  return openDatabase({ ...config, QUERY_TIMEOUT_MS: 0 }, log, { ownEmbeddedServer: false });
}

/**
 * The relay's rules for an import, with the operator's lists as they are now (bans hold in imports
 * too), and the web of trust (WOT_ROOTS) as the stored follow lists make it when the command starts.
 */
export async function importPolicy(config: Config, db: Database): Promise<Policy> {
  const policy = policyFrom(config, staticModeration((await loadModeration(db.pool)).lists));
  if (policy.webOfTrust) policy.webOfTrust.current = await computeWebOfTrust(db.pool, policy.webOfTrust.settings);
  return policy;
}

/** node:util parseArgs, with errors turned into UsageError. */
export function parseOptions<T extends NonNullable<ParseArgsConfig['options']>>(args: string[], options: T, allowPositionals = false) {
  try {
    return parseArgs({ args, options, allowPositionals, strict: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

export function intOption(value: string | undefined, name: string, min: number, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) throw new UsageError(`--${name} must be an integer >= ${min} (got "${value}")`);
  return n;
}

/**
 * The first Ctrl-C (or SIGTERM) asks the operation to stop after the batch in progress, keeping its
 * checkpoint; a second one exits at once.
 */
export function stopOnSignals(log: Logger): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const onSignal = (name: NodeJS.Signals) => {
    if (controller.signal.aborted) process.exit(130);
    log.warn({ signal: name }, 'stopping after the current batch (again to quit at once)');
    process.stderr.write('\nstopping after the current batch; press Ctrl-C again to quit at once\n');
    controller.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return {
    signal: controller.signal,
    dispose() {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}

export const formatCount = (n: number) => n.toLocaleString('en-US');

/** "1,234 events in 5.0 s (246/s)". */
export function formatRate(count: number, seconds: number, unit = 'events'): string {
  const rate = seconds > 0 ? Math.round(count / seconds) : count;
  return `${formatCount(count)} ${unit} in ${seconds.toFixed(1)} s (${formatCount(rate)}/s)`;
}

/** Reason counts, most frequent first, one per line. */
export function formatReasons(reasons: Record<string, number>, indent = '  '): string[] {
  return Object.entries(reasons)
    .sort((a, b) => b[1] - a[1])
    .map(([reason, n]) => `${indent}${formatCount(n).padStart(10)}  ${reason}`);
}

/** Prints refusals one per line to stderr, up to `max`, then one line saying how many more there were. */
export function refusalPrinter(max: number, label: string): { print(where: string | number, reason: string): void; finish(): void } {
  let shown = 0;
  let hidden = 0;
  return {
    print(where, reason) {
      if (shown < max) {
        shown++;
        process.stderr.write(`${label} ${where}: ${reason}\n`);
      } else hidden++;
    },
    finish() {
      if (hidden) process.stderr.write(`… and ${formatCount(hidden)} more refused (raise --max-reports to see them)\n`);
    },
  };
}
