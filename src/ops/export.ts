// export: stored events as JSONL (one canonical event JSON per line, as stored: never re-serialised),
// read through a server-side cursor in batches and written with backpressure, so memory stays flat
// whatever the size. Without a filter every stored, unexpired event is written, in storage order
// (the cheapest scan). With a NIP-01 filter the relay's own query is used (newest first); a filter
// without `limit` is not capped: the relay's default and maximum limits apply to REQs, not here.
import type { Writable } from 'node:stream';
import type pg from 'pg';
import Cursor from 'pg-cursor';
import { parseFilter, type Filter } from '../nostr/filter.js';
import { reqToSql, type SqlQuery } from '../store/query.js';
import { noProgress, type Progress } from './progress.js';

export interface ExportOptions {
  /** NIP-01 filters (ORed); none = every event. */
  filters?: Filter[];
  /** Rows fetched per cursor read. */
  batchSize?: number;
  progress?: Progress;
  signal?: AbortSignal;
}

export interface ExportResult {
  events: number;
  bytes: number;
  seconds: number;
  complete: boolean;
}

const UNLIMITED = Number.MAX_SAFE_INTEGER;

/** Parses `--filter` JSON (an object, or an array of objects) with no cap on limit or list sizes. */
export function parseExportFilters(json: string): Filter[] {
  let input: unknown;
  try {
    input = JSON.parse(json);
  } catch {
    throw new Error('--filter is not valid JSON');
  }
  const list = Array.isArray(input) ? input : [input];
  if (list.length === 0) throw new Error('--filter: an empty list matches nothing');
  return list.map((f) => {
    const parsed = parseFilter(f, { maxValuesPerArray: UNLIMITED, defaultLimit: UNLIMITED, maxLimit: UNLIMITED });
    if (!parsed.ok) throw new Error(`--filter: ${parsed.reason}`);
    return parsed.value;
  });
}

function exportQuery(filters: Filter[] | undefined, now: number): SqlQuery | undefined {
  if (!filters?.length) {
    return { text: 'SELECT raw FROM events WHERE expires_at IS NULL OR expires_at > $1', values: [now] };
  }
  return reqToSql(filters, now);
}

async function write(out: Writable, chunk: string): Promise<void> {
  if (out.write(chunk)) return;
  await new Promise<void>((resolve, reject) => {
    const done = (err?: Error) => {
      out.off('drain', done);
      out.off('error', done);
      out.off('close', closed);
      if (err) reject(err);
      else resolve();
    };
    const closed = () => done(new Error('output closed'));
    out.once('drain', done);
    out.once('error', done);
    out.once('close', closed);
  });
}

export async function exportEvents(pool: pg.Pool, out: Writable, options: ExportOptions = {}): Promise<ExportResult> {
  const progress = options.progress ?? noProgress;
  const batchSize = options.batchSize ?? 2000;
  const started = Date.now();
  const result: ExportResult = { events: 0, bytes: 0, seconds: 0, complete: true };
  const sql = exportQuery(options.filters, Math.floor(Date.now() / 1000));
  if (!sql) return { ...result, seconds: 0 };

  const client = await pool.connect();
  let broken = false;
  try {
    // One transaction: the cursor reads one consistent snapshot, and a whole-database export may
    // take longer than the pool's statement timeout, which applies to the relay's REQs.
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    await client.query('SET LOCAL statement_timeout = 0');
    if (!options.filters?.length) {
      const { rows } = await client.query<{ n: number }>("SELECT reltuples::bigint AS n FROM pg_class WHERE oid = 'events'::regclass");
      if (Number(rows[0]?.n) > 0) progress.setTotal(Number(rows[0].n));
    }
    const cursor = client.query(new Cursor<{ raw: string }>(sql.text, sql.values));
    try {
      for (;;) {
        if (options.signal?.aborted) {
          result.complete = false;
          break;
        }
        const rows = await cursor.read(batchSize);
        if (rows.length === 0) break;
        let chunk = '';
        for (const r of rows) chunk += r.raw + '\n';
        await write(out, chunk);
        result.events += rows.length;
        result.bytes += Buffer.byteLength(chunk);
        progress.update(result.events);
      }
    } finally {
      await cursor.close().catch(() => undefined);
    }
    await client.query('COMMIT');
  } catch (err) {
    broken = true;
    throw err;
  } finally {
    client.release(broken ? true : undefined);
    progress.stop();
  }
  result.seconds = (Date.now() - started) / 1000;
  return result;
}
