// Reading nostream's `events` table (binary id, pubkey and signature, tags as jsonb, soft deletion in
// deleted_at, NIP-40 expiry in expires_at; the last two only in later nostream versions), in event_id
// order, in batches: one `COPY (SELECT …) TO STDOUT (FORMAT binary)` per batch (keysetBatches), or
// one streamed for a selective filter (streamedBatches). In the binary format (binary-copy.ts)
// neither side encodes hex or parses a text row protocol (a SELECT cost ~4 µs of Node CPU a row,
// this ~2), and a batch waits for its check as bytes, not as objects.
import type pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';
import { BinaryCopyCursor, BinaryCopyReader, type CopyRows } from '../binary-copy.js';

/** One nostream row, with the columns the import needs (ids, keys and signature in hex). */
export interface SourceRow {
  event_id: string;
  /** The other columns are NOT NULL in nostream; NULL (or a wrong type) is the event check's to refuse. */
  event_pubkey: string | null;
  event_kind: number | null;
  event_created_at: number | null;
  event_content: string | null;
  /** event_tags, as JSON text; NULL (the column is nullable) means no tags. */
  tags: string | null;
  event_signature: string | null;
  /** deleted_at is set. */
  deleted: boolean;
  expires_at: number | null;
}

/** nostream's table as this source has it: which optional columns exist. */
export interface NostreamTable {
  hasDeletedAt: boolean;
  hasExpiresAt: boolean;
}

const REQUIRED = ['event_id', 'event_pubkey', 'event_kind', 'event_created_at', 'event_content', 'event_tags', 'event_signature'];

/** Checks that the source has nostream's events table (in its search_path) and which version of it. */
export async function nostreamTable(source: pg.Pool): Promise<NostreamTable> {
  const { rows } = await source.query<{ column_name: string }>(
    `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'events'`,
  );
  const columns = new Set(rows.map((r) => r.column_name));
  const missing = REQUIRED.filter((c) => !columns.has(c));
  if (missing.length) throw new Error(`the source has no nostream events table (missing columns: ${missing.join(', ')})`);
  return { hasDeletedAt: columns.has('deleted_at'), hasExpiresAt: columns.has('expires_at') };
}

/**
 * One batch of source rows, as the bytes that arrived (outside the JS heap): each row is decoded
 * when it is iterated, so its strings live only as long as its check.
 */
export class SourceBatch implements Iterable<SourceRow> {
  readonly length: number;

  constructor(private readonly pieces: CopyRows[]) {
    this.length = pieces.reduce((n, p) => n + p.starts.length, 0);
  }

  /** The last row's event_id (the keyset position after this batch). */
  lastId(): Buffer {
    const last = this.pieces[this.pieces.length - 1];
    const cursor = new BinaryCopyCursor(last.data, last.starts[last.starts.length - 1]);
    return Buffer.from(cursor.hex() ?? '', 'hex');
  }

  *[Symbol.iterator](): Iterator<SourceRow> {
    for (const { data, starts } of this.pieces) for (const start of starts) yield decodeRow(new BinaryCopyCursor(data, start));
  }
}

/** The rows after `after` (an event_id) matching `where` (SQL over the events columns, our own constant), in event_id order. */
function copySql(table: NostreamTable, after: Buffer, where: string, limit?: number): string {
  // COPY takes no parameters: the position is hex we produced, the limit an integer.
  if (limit !== undefined && !Number.isSafeInteger(limit)) throw new Error(`bad batch size ${limit}`);
  return `COPY (
    SELECT event_id, event_pubkey, event_kind::int8, event_created_at::int8, event_content::text, event_tags::text, event_signature,
           ${table.hasDeletedAt ? 'deleted_at IS NOT NULL' : 'false'}, ${table.hasExpiresAt ? 'expires_at::int8' : 'NULL::int8'}
      FROM events
     WHERE event_id > decode('${after.toString('hex')}', 'hex') AND (${where})
     ORDER BY event_id${limit === undefined ? '' : ` LIMIT ${limit}`}) TO STDOUT (FORMAT binary)`;
}

/** Runs one COPY … TO on its own connection, yielding the chunks as they arrive. */
async function* copyOut(source: pg.Pool, sql: string): AsyncGenerator<Buffer> {
  const client = await source.connect();
  let done = false;
  try {
    for await (const chunk of client.query(copyTo(sql))) yield chunk as Buffer;
    done = true;
  } finally {
    client.release(!done); // a connection left inside a COPY (an error, or a consumer that stopped) is closed
  }
}

/** At most `limit` rows after `after`, in event_id order: one query. */
async function readSourceBatch(source: pg.Pool, table: NostreamTable, after: Buffer, limit: number, where = 'true'): Promise<SourceBatch> {
  const reader = new BinaryCopyReader(FIELDS);
  for await (const chunk of copyOut(source, copySql(table, after, where, limit))) reader.push(chunk);
  return new SourceBatch(reader.finish());
}

/**
 * The rows after `after`, in event_id order, in batches of `size`: one query per batch (keyset, so
 * PostgreSQL walks the event_id index however many rows there are), the next batch read while
 * this one is used.
 */
export async function* keysetBatches(source: pg.Pool, table: NostreamTable, after: Buffer, size: number, where = 'true'): AsyncGenerator<SourceBatch> {
  let next = readSourceBatch(source, table, after, size, where);
  try {
    for (;;) {
      const rows = await next;
      if (rows.length === 0) return;
      next = readSourceBatch(source, table, rows.lastId(), size, where);
      next.catch(() => undefined); // awaited by the next turn, or below
      yield rows;
    }
  } finally {
    await next.catch(() => undefined);
  }
}

/**
 * The same rows from one query, streamed (the connection's buffers hold back PostgreSQL while a
 * batch is used): for a `where` that selects few rows, which PostgreSQL then finds with one scan
 * and sorts, instead of walking the whole index batch by batch.
 */
export async function* streamedBatches(source: pg.Pool, table: NostreamTable, after: Buffer, size: number, where: string): AsyncGenerator<SourceBatch> {
  const reader = new BinaryCopyReader(FIELDS);
  for await (const chunk of copyOut(source, copySql(table, after, where))) {
    reader.push(chunk);
    while (reader.rows >= size) yield new SourceBatch(reader.take(size));
  }
  const rest = reader.finish();
  if (rest.length) yield new SourceBatch(rest);
}

/** The columns of copySql's SELECT. */
const FIELDS = 9;

function decodeRow(row: BinaryCopyCursor): SourceRow {
  return {
    event_id: row.hex() ?? '',
    event_pubkey: row.hex(),
    event_kind: row.int8(),
    event_created_at: row.int8(),
    event_content: row.text(),
    tags: row.text(),
    event_signature: row.hex(),
    deleted: row.bool() ?? false,
    expires_at: row.int8(),
  };
}
