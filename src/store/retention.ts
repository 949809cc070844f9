// Retention by age and/or kind, beside expiry (expiry.ts): the relay runs it periodically
// (RETENTION_*) and `npm run cli -- prune` on demand. Events are found oldest first along an index in keyset
// order ((created_at, id), per kind when kinds are given) and deleted by id in small batches, each
// its own short transaction, so a relay serving traffic never waits long on a lock; their event_tags
// rows go with them (the removals trigger on events deletes them in the same statement).
//
// Kept unless asked for: replaceable and addressable events (only the current version of each is
// stored, so removing it loses the profile, contact list, … itself: --include-replaceable), and
// NIP-09 deletion requests (kind 5: relays SHOULD keep serving them, and they block their targets
// from being published again: only removed when kind 5 is listed in --kinds explicitly).
import type pg from 'pg';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import { KIND_DELETION } from '../nostr/kinds.js';

/** Where a run reports how far it is (ops/progress.ts draws a bar or logs; the relay passes nothing). */
export interface PruneProgress {
  setTotal(total: number): void;
  update(done: number): void;
  stop(): void;
}
const noProgress: PruneProgress = { setTotal() {}, update() {}, stop() {} };

export interface PruneOptions {
  /** Remove events with created_at older than this many seconds before now. */
  olderThanSeconds?: number;
  /** Remove only events of these kinds. */
  kinds?: number[];
  /** Also remove replaceable and addressable events (their current versions). */
  includeReplaceable?: boolean;
  /** Count what would be removed, by kind, and remove nothing. */
  dryRun?: boolean;
  /** Events per delete transaction. */
  batchSize?: number;
  /** Seconds since the epoch to measure the age from (default: now). */
  now?: number;
  signal?: AbortSignal;
  progress?: PruneProgress;
}

export interface PruneResult {
  /** Events removed (or, in a dry run, that would be). */
  removed: number;
  byKind: Record<number, number>;
  /** The created_at bound used: events strictly older were candidates. */
  cutoff?: number;
  complete: boolean;
  seconds: number;
}

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 };
export const DURATION = /^(\d+)([smhdw])$/;

/** "30d", "12h", "90m", "3600s", "2w" → seconds. */
export function parseDuration(text: string): number {
  const m = DURATION.exec(text.trim());
  if (!m) throw new Error(`"${text}" is not a duration (a number followed by s, m, h, d or w, e.g. 30d)`);
  return Number(m[1]) * UNITS[m[2]];
}

/** "1,7,30023" → [1, 7, 30023]. */
export function parseKinds(text: string): number[] {
  const kinds = text.split(',').map((k) => k.trim()).filter(Boolean).map(Number);
  if (kinds.length === 0 || !kinds.every((k) => Number.isInteger(k) && k >= 0 && k <= 65535))
    throw new Error(`"${text}" is not a comma-separated list of kinds (integers 0-65535)`);
  return [...new Set(kinds)];
}

/** The conditions every candidate meets, shared by counting and deleting (`kinds`: the kinds in scope). */
function candidateWhere(options: PruneOptions, cutoff: number | undefined, add: (v: unknown) => string, kinds = options.kinds): string[] {
  const where: string[] = [];
  if (cutoff !== undefined) where.push(`created_at < ${add(cutoff)}`);
  if (kinds?.length === 1) where.push(`kind = ${add(kinds[0])}`);
  else if (kinds) where.push(`kind = ANY(${add(kinds)}::int[])`);
  if (!options.kinds?.includes(KIND_DELETION)) where.push(`kind <> ${KIND_DELETION}`);
  if (!options.includeReplaceable) where.push('d_tag IS NULL');
  return where;
}

function params() {
  const values: unknown[] = [];
  return { values, add: (v: unknown) => (values.push(v), `$${values.length}`) };
}

async function countByKind(pool: pg.Pool, options: PruneOptions, cutoff: number | undefined): Promise<Record<number, number>> {
  const { values, add } = params();
  const where = candidateWhere(options, cutoff, add);
  const { rows } = await pool.query<{ kind: number; n: string }>(
    `SELECT kind, count(*) AS n FROM events WHERE ${where.join(' AND ')} GROUP BY kind ORDER BY kind`,
    values,
  );
  return Object.fromEntries(rows.map((r) => [r.kind, Number(r.n)]));
}

export async function pruneEvents(pool: pg.Pool, options: PruneOptions): Promise<PruneResult> {
  if (options.olderThanSeconds === undefined && !options.kinds?.length)
    throw new Error('prune needs an age (--older-than) and/or kinds (--kinds): it never removes everything');
  const started = Date.now();
  const now = options.now ?? Math.floor(Date.now() / 1000);
  const cutoff = options.olderThanSeconds === undefined ? undefined : now - options.olderThanSeconds;
  const batchSize = options.batchSize ?? 1000;
  const progress = options.progress ?? noProgress;
  const result: PruneResult = { removed: 0, byKind: {}, cutoff, complete: true, seconds: 0 };

  if (options.dryRun || options.progress) {
    const byKind = await countByKind(pool, options, cutoff);
    if (options.dryRun) {
      const removed = Object.values(byKind).reduce((a, b) => a + b, 0);
      return { ...result, removed, byKind, seconds: (Date.now() - started) / 1000 };
    }
    progress.setTotal(Object.values(byKind).reduce((a, b) => a + b, 0));
    progress.update(0);
  }

  // One keyset walk per kind (on events_kind_time), or one over events_time without kinds; both
  // read (created_at ASC, id DESC), the backward order of their index.
  const scopes: Array<number | undefined> = options.kinds ?? [undefined];
  try {
    for (const kind of scopes) {
      let after: { createdAt: string; id: Buffer } | undefined;
      for (;;) {
        if (options.signal?.aborted) {
          result.complete = false;
          return result;
        }
        const { values, add } = params();
        const where = candidateWhere(options, cutoff, add, kind === undefined ? undefined : [kind]);
        if (after) where.push(`(created_at > ${add(after.createdAt)} OR (created_at = ${add(after.createdAt)} AND id < ${add(after.id)}))`);
        const { rows } = await pool.query<{ id: Buffer; created_at: string }>(
          `SELECT id, created_at FROM events WHERE ${where.join(' AND ')} ORDER BY created_at ASC, id DESC LIMIT ${add(batchSize)}`,
          values,
        );
        if (rows.length === 0) break;
        after = { createdAt: rows[rows.length - 1].created_at, id: rows[rows.length - 1].id };
        const deleted = await pool.query<{ kind: number }>('DELETE FROM events WHERE id = ANY($1::bytea[]) RETURNING kind', [rows.map((r) => r.id)]);
        for (const r of deleted.rows) result.byKind[r.kind] = (result.byKind[r.kind] ?? 0) + 1;
        result.removed += deleted.rowCount ?? 0;
        progress.update(result.removed);
        if (rows.length < batchSize) break;
      }
    }
  } finally {
    progress.stop();
    result.seconds = (Date.now() - started) / 1000;
  }
  return result;
}

export interface RetentionSettings {
  olderThanSeconds: number;
  kinds?: number[];
  includeReplaceable: boolean;
  intervalSeconds: number;
}

/** The relay's periodic retention from its configuration; undefined when RETENTION_OLDER_THAN is unset. */
export function retentionFromConfig(
  config: Pick<Config, 'RETENTION_OLDER_THAN' | 'RETENTION_KINDS' | 'RETENTION_INCLUDE_REPLACEABLE' | 'RETENTION_INTERVAL_SECONDS'>,
): RetentionSettings | undefined {
  if (!config.RETENTION_OLDER_THAN) return undefined;
  return {
    olderThanSeconds: parseDuration(config.RETENTION_OLDER_THAN),
    kinds: config.RETENTION_KINDS ? parseKinds(config.RETENTION_KINDS) : undefined,
    includeReplaceable: config.RETENTION_INCLUDE_REPLACEABLE,
    intervalSeconds: config.RETENTION_INTERVAL_SECONDS,
  };
}

/**
 * Runs prune inside the relay every RETENTION_INTERVAL_SECONDS (the first run right after start)
 * when RETENTION_OLDER_THAN is set. Returns a stop function: no new run starts, and a run in progress
 * stops after its current batch.
 */
export function startRetention(pool: pg.Pool, config: Config, log: Logger): () => void {
  const settings = retentionFromConfig(config);
  if (!settings) return () => undefined;
  const stop = new AbortController();
  let running = false;
  const run = async () => {
    if (running || stop.signal.aborted) return;
    running = true;
    try {
      const result = await pruneEvents(pool, { ...settings, signal: stop.signal });
      if (result.removed) log.info({ removed: result.removed, byKind: result.byKind, cutoff: result.cutoff }, 'retention: old events removed');
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'retention run failed');
    } finally {
      running = false;
    }
  };
  log.info({ olderThan: config.RETENTION_OLDER_THAN, kinds: settings.kinds, every: settings.intervalSeconds }, 'retention enabled');
  const first = setTimeout(run, 0);
  const timer = setInterval(run, settings.intervalSeconds * 1000);
  first.unref();
  timer.unref();
  return () => {
    clearTimeout(first);
    clearInterval(timer);
    stop.abort();
  };
}
