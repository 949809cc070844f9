// stats: what the store holds. Event counts by kind, event_tags rows, and the size on disk of each
// table (heap, TOAST, indexes) and of each index, from PostgreSQL's own size functions.
import type pg from 'pg';

export interface TableSize {
  table: string;
  rows: number;
  /** The heap alone (pg_relation_size). */
  tableBytes: number;
  /** TOAST: raw JSON over ~2 kB is stored there, compressed. */
  toastBytes: number;
  indexBytes: number;
  /** Everything (pg_total_relation_size). */
  totalBytes: number;
}

export interface IndexSize {
  index: string;
  table: string;
  bytes: number;
}

export interface StoreStats {
  events: number;
  byKind: Array<{ kind: number; count: number }>;
  /** Stored but past their NIP-40 expiration, waiting for the sweep. */
  expired: number;
  oldest?: number;
  newest?: number;
  tagRows: number;
  tables: TableSize[];
  indexes: IndexSize[];
  databaseBytes: number;
}

const TABLES = ['events', 'event_tags', 'ops_checkpoints'];

export async function storeStats(pool: pg.Pool): Promise<StoreStats> {
  const now = Math.floor(Date.now() / 1000);
  const [byKind, overview, tags, tables, indexes, database] = await Promise.all([
    pool.query<{ kind: number; n: string }>('SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY count(*) DESC, kind'),
    pool.query<{ expired: string; oldest: string | null; newest: string | null }>(
      `SELECT (SELECT count(*) FROM events WHERE expires_at IS NOT NULL AND expires_at <= $1) AS expired,
              (SELECT min(created_at) FROM events) AS oldest, (SELECT max(created_at) FROM events) AS newest`,
      [now],
    ),
    pool.query<{ n: string }>('SELECT count(*) AS n FROM event_tags'),
    pool.query<{ table: string; rows: string; heap: string; toast: string; indexes: string; total: string }>(
      `SELECT c.relname AS table, c.reltuples::bigint AS rows, pg_relation_size(c.oid) AS heap,
              COALESCE(pg_total_relation_size(c.reltoastrelid), 0) AS toast,
              pg_indexes_size(c.oid) AS indexes, pg_total_relation_size(c.oid) AS total
         FROM pg_class c
        WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace AND c.relname = ANY($1)
        ORDER BY pg_total_relation_size(c.oid) DESC`,
      [TABLES],
    ),
    pool.query<{ index: string; table: string; bytes: string }>(
      `SELECT i.relname AS index, t.relname AS table, pg_relation_size(i.oid) AS bytes
         FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
        WHERE t.relnamespace = 'public'::regnamespace AND t.relname = ANY($1)
        ORDER BY pg_relation_size(i.oid) DESC`,
      [TABLES],
    ),
    pool.query<{ bytes: string }>('SELECT pg_database_size(current_database()) AS bytes'),
  ]);
  const counts = byKind.rows.map((r) => ({ kind: r.kind, count: Number(r.n) }));
  const events = counts.reduce((sum, k) => sum + k.count, 0);
  const tagRows = Number(tags.rows[0].n);
  const exact: Record<string, number> = { events, event_tags: tagRows };
  return {
    events,
    byKind: counts,
    expired: Number(overview.rows[0].expired),
    oldest: overview.rows[0].oldest === null ? undefined : Number(overview.rows[0].oldest),
    newest: overview.rows[0].newest === null ? undefined : Number(overview.rows[0].newest),
    tagRows,
    tables: tables.rows.map((r) => ({
      table: r.table,
      // Exact where counted; the planner's estimate otherwise.
      rows: exact[r.table] ?? Math.max(0, Number(r.rows)),
      tableBytes: Number(r.heap),
      toastBytes: Number(r.toast),
      indexBytes: Number(r.indexes),
      totalBytes: Number(r.total),
    })),
    indexes: indexes.rows.map((r) => ({ index: r.index, table: r.table, bytes: Number(r.bytes) })),
    databaseBytes: Number(database.rows[0].bytes),
  };
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

/** A plain-text report for a terminal. */
export function formatStats(s: StoreStats): string {
  const n = (x: number) => x.toLocaleString('en-US');
  const date = (t: number | undefined) => (t === undefined ? '-' : new Date(t * 1000).toISOString().replace('.000Z', 'Z'));
  const lines = [
    `events        ${n(s.events)}${s.expired ? ` (${n(s.expired)} expired, awaiting the sweep)` : ''}`,
    `event_tags    ${n(s.tagRows)} rows`,
    `created_at    ${date(s.oldest)} .. ${date(s.newest)}`,
    `database      ${formatBytes(s.databaseBytes)}`,
    '',
    'events by kind:',
    ...s.byKind.map((k) => `  ${String(k.kind).padStart(6)}  ${n(k.count).padStart(12)}`),
    '',
    'tables:                    rows        heap       toast     indexes       total',
    ...s.tables.map(
      (t) =>
        `  ${t.table.padEnd(16)} ${n(t.rows).padStart(12)} ${formatBytes(t.tableBytes).padStart(11)} ${formatBytes(t.toastBytes).padStart(11)} ${formatBytes(t.indexBytes).padStart(11)} ${formatBytes(t.totalBytes).padStart(11)}`,
    ),
    '',
    'indexes:',
    ...s.indexes.map((i) => `  ${i.index.padEnd(28)} ${i.table.padEnd(16)} ${formatBytes(i.bytes).padStart(11)}`),
  ];
  return lines.join('\n');
}
