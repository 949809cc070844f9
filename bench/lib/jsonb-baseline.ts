// The baseline we replace: tags in a JSONB column with a GIN index, tag filters as OR-ed `@>`
// containment (the nostream query shape). Benchmark-only: created and dropped by bench:query.
import type pg from 'pg';
import type { Filter } from './shapes.js';

export const BASELINE_TABLE = 'bench_jsonb_events';

export async function createBaseline(pool: pg.Pool, log: (s: string) => void): Promise<void> {
  await pool.query(`DROP TABLE IF EXISTS ${BASELINE_TABLE}`);
  log('baseline: copying events into a JSONB table…');
  await pool.query(`CREATE TABLE ${BASELINE_TABLE} AS
    SELECT id, pubkey, kind, created_at, (raw::jsonb) -> 'tags' AS tags, raw FROM events`);
  log('baseline: indexing (btree on id, pubkey, kind, created_at; GIN on tags)…');
  await pool.query(`ALTER TABLE ${BASELINE_TABLE} ADD PRIMARY KEY (id)`);
  await pool.query(`CREATE INDEX ON ${BASELINE_TABLE} (pubkey)`);
  await pool.query(`CREATE INDEX ON ${BASELINE_TABLE} (kind)`);
  await pool.query(`CREATE INDEX ON ${BASELINE_TABLE} (created_at DESC)`);
  await pool.query(`CREATE INDEX ON ${BASELINE_TABLE} USING gin (tags)`);
  await pool.query(`VACUUM ANALYZE ${BASELINE_TABLE}`);
}

export async function dropBaseline(pool: pg.Pool): Promise<void> {
  await pool.query(`DROP TABLE IF EXISTS ${BASELINE_TABLE}`);
}

/** One REQ as nostream-style SQL: per filter `(tags @> '[["p","v1"]]' OR tags @> …)`, then ORDER BY LIMIT. */
export function baselineSql(filters: Filter[], defaultLimit = 500): { text: string; values: unknown[] } {
  const values: unknown[] = [];
  const add = (v: unknown) => (values.push(v), `$${values.length}`);
  const parts = filters.map((f) => {
    const where: string[] = [];
    for (const [key, v] of Object.entries(f)) {
      const list = v as unknown[];
      if (key === 'ids') where.push(`id = ANY(${add((list as string[]).map((x) => Buffer.from(x, 'hex')))}::bytea[])`);
      else if (key === 'authors') where.push(`pubkey = ANY(${add((list as string[]).map((x) => Buffer.from(x, 'hex')))}::bytea[])`);
      else if (key === 'kinds') where.push(`kind = ANY(${add(list)}::int[])`);
      else if (key === 'since') where.push(`created_at >= ${add(v)}`);
      else if (key === 'until') where.push(`created_at <= ${add(v)}`);
      else if (key.startsWith('#'))
        where.push(`(${list.map((value) => `tags @> ${add(JSON.stringify([[key.slice(1), value]]))}::jsonb`).join(' OR ')})`);
    }
    const limit = (f.limit as number | undefined) ?? defaultLimit;
    return `(SELECT id, created_at, raw FROM ${BASELINE_TABLE} WHERE ${where.join(' AND ') || 'true'} ORDER BY created_at DESC, id LIMIT ${add(limit)})`;
  });
  return { text: `SELECT DISTINCT ON (created_at, id) raw FROM (${parts.join(' UNION ALL ')}) u ORDER BY created_at DESC, id`, values };
}
