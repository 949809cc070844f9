// The hot tier's fill: the stored events newest first, read by one statement (one snapshot), and
// each row made into what the tier holds with as little parsing as it needs.
//
// Why one statement: the fill used to read pages of 2,000 rows by keyset (`created_at < $1 OR
// (created_at = $1 AND id > $2)`); PostgreSQL cannot start an index scan at an OR of that shape, so
// each page walked the index from the newest row and filtered out every row before it (EXPLAIN:
// 800,001 rows removed by the filter for a page at 800,000). The fill was quadratic: 160-267 s for a
// million events, 27 s for the first 400,000. One cursor walks the index once (2-4 s for a million
// rows), and the next batch is asked for before the current one is held, so PostgreSQL reads it
// while this process parses.
import type pg from 'pg';
import Cursor from 'pg-cursor';
import { kindClass } from '../../nostr/kinds.js';
import { dTagOf, expirationOf, indexedTags } from '../../nostr/tags.js';
import { prepareStored, type PreparedEvent } from '../prepared-event.js';

/**
 * Rows per batch: held in 5-10 ms (a million events take 18-22 s on the 2-core bench machine, most
 * of it holding them: tier.ts), so a REQ that arrives meanwhile waits about that long at each of its
 * steps (its freshness read, its answer): probe REQs had a p50 of ~35 ms during the fill, ~160 ms
 * with batches of 2,000.
 */
export const FILL_BATCH_ROWS = 500;

const NEWEST_FIRST_SQL = 'SELECT raw FROM events ORDER BY created_at DESC, id';
/** The replaceable kinds (nostr/kinds.ts) as a condition on events. */
export const REPLACEABLE_KINDS_SQL = 'kind = 0 OR kind = 3 OR (kind >= 10000 AND kind < 20000)';
/**
 * The fill's first pass (HotTier.preHold): every stored replaceable event (nostr/kinds.ts), so the
 * tier answers profiles, follow lists and the like from memory within seconds of a start, long
 * before the newest-first pass reaches them. By the kind index, in no order.
 */
export const REPLACEABLE_SQL = `SELECT raw FROM events WHERE ${REPLACEABLE_KINDS_SQL}`;

/**
 * What changed while the fill reads, which its statement's snapshot may not show: ids removed (a row
 * read later may still hold them), and events stored older than the window then (the rows read
 * later do not hold them), held as soon as the window reaches their created_at. A snapshot read
 * back and checked (warm-start.ts) applies the same once its statement snapshot is over.
 */
export interface DuringFill {
  removed: Set<string>;
  waiting: Map<string, PreparedEvent>;
}

/**
 * Reads every stored event's raw JSON newest first (created_at DESC, id ASC: the tier's order), in
 * one snapshot, and hands each batch to `onBatch` in order; `onBatch` returns false to stop. While a
 * batch is handed over the next one is already asked for. Resolves true when the table's end was
 * reached (also if `onBatch` said stop at the last batch), false when `onBatch` stopped it before.
 * `onRead` (benchmarks) gets the milliseconds spent waiting for each batch.
 */
export function readNewestFirst(pool: pg.Pool, onBatch: (raws: string[]) => boolean, onRead?: (ms: number) => void, batchRows = FILL_BATCH_ROWS): Promise<boolean> {
  return readBatches(pool, NEWEST_FIRST_SQL, onBatch, onRead, batchRows);
}

/** The rows of one statement selecting `raw` (REPLACEABLE_SQL, NEWEST_FIRST_SQL), read as readNewestFirst reads. */
export async function readBatches(pool: pg.Pool, sql: string, onBatch: (raws: string[]) => boolean, onRead?: (ms: number) => void, batchRows = FILL_BATCH_ROWS): Promise<boolean> {
  const client = await pool.connect();
  let cursor: Cursor<[string]> | undefined;
  let failed = false;
  try {
    // In a transaction of its own: the pool's statement timeout (QUERY_TIMEOUT_MS, for REQs) would
    // end the cursor's one statement after a few seconds of reading.
    await client.query('BEGIN READ ONLY');
    await client.query('SET LOCAL statement_timeout = 0');
    cursor = client.query(new Cursor<[string]>(sql, [], { rowMode: 'array' }));
    let next = cursor.read(batchRows);
    for (;;) {
      const started = performance.now();
      const rows = await next;
      onRead?.(performance.now() - started);
      const end = rows.length < batchRows;
      if (!end) next = cursor.read(batchRows);
      const raws = new Array<string>(rows.length);
      for (let i = 0; i < rows.length; i++) raws[i] = rows[i][0];
      if (!onBatch(raws)) {
        if (!end) await next.catch(() => undefined);
        return end;
      }
      if (end) return true;
    }
  } catch (err) {
    failed = true;
    throw err;
  } finally {
    if (!failed)
      await cursor!
        .close()
        .then(() => client.query('COMMIT'))
        .catch(() => (failed = true));
    client.release(failed);
  }
}

const CONTENT_KEY = '],"content":"';
/** Where canonical JSON (nostr/event.ts) puts its fixed-width fields: `{"id":"<64>","pubkey":"<64>","created_at":`. */
export const ID_AT = 7;
export const PUBKEY_AT = 83;
export const CREATED_AT_AT = 162;

/** The digits of a non-negative integer at raw[i..] as [value, index after them], or undefined. */
function integerAt(raw: string, i: number): [number, number] | undefined {
  let n = 0;
  const first = i;
  for (let c = raw.charCodeAt(i); c >= 48 && c <= 57; c = raw.charCodeAt(++i)) n = n * 10 + (c - 48);
  return i > first && i - first <= 15 ? [n, i] : undefined;
}

/**
 * What the tier needs of a stored event, as prepareStored(raw, false) gives it, without parsing
 * most of the bytes: canonical JSON (nostr/event.ts) is `{"id":"…","pubkey":"…","created_at":N,
 * "kind":N,"tags":[…],"content":"…","sig":"…"}`, so id and pubkey are at fixed places, the integers
 * follow, and only the tags are parsed (JSON.parse). The first `],"content":"` after `"tags":` ends
 * the tags: a `"` not preceded by a backslash is never inside a string, and `"content"` followed by
 * `:` is a key, which only the top-level object has. A row in any other shape (written by hand) is
 * parsed whole. The event's content and sig read as empty: the tier never uses them (held-event.ts).
 * id and pubkey are slices of raw, which the tier holds anyway (tier.ts copies a pubkey it keeps
 * beyond its event).
 */
export function prepareHeld(raw: string): PreparedEvent {
  const head =
    raw.startsWith('{"id":"') && raw.startsWith('","pubkey":"', ID_AT + 64) && raw.startsWith('","created_at":', PUBKEY_AT + 64) && raw.lastIndexOf('\\', CREATED_AT_AT) < 0
      ? integerAt(raw, CREATED_AT_AT)
      : undefined;
  const kindAt = head && raw.startsWith(',"kind":', head[1]) ? integerAt(raw, head[1] + 8) : undefined;
  const tagsAt = kindAt && raw.startsWith(',"tags":[', kindAt[1]) ? kindAt[1] + 8 : -1;
  const cut = tagsAt < 0 ? -1 : raw.indexOf(CONTENT_KEY, tagsAt);
  if (cut < 0) return prepareStored(raw, false);
  let tags: string[][];
  try {
    tags = cut === tagsAt + 1 ? [] : (JSON.parse(raw.slice(tagsAt, cut + 1)) as string[][]);
  } catch {
    return prepareStored(raw, false);
  }
  const kind = kindAt![0];
  const cls = kindClass(kind);
  return {
    event: { id: raw.slice(ID_AT, ID_AT + 64), pubkey: raw.slice(PUBKEY_AT, PUBKEY_AT + 64), created_at: head![0], kind, tags, content: '', sig: '' },
    raw,
    kindClass: cls,
    dTag: cls === 'replaceable' ? '' : cls === 'addressable' ? dTagOf(tags) : null,
    expiresAt: expirationOf(tags) ?? null,
    tags: indexedTags(tags),
    search: undefined,
  };
}
