// The seeded corpus' manifest lives in the database it describes (a benchmark-only table), so a
// query benchmark against a DATA_DIR or DATABASE_URL always draws filters from matching data.
import type pg from 'pg';
import type { Manifest } from './corpus.js';

export async function saveManifest(pool: pg.Pool, manifest: Manifest): Promise<void> {
  await pool.query('CREATE TABLE IF NOT EXISTS bench_manifest (id integer PRIMARY KEY, data jsonb NOT NULL)');
  await pool.query('INSERT INTO bench_manifest VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data', [JSON.stringify(manifest)]);
}

export async function loadManifest(pool: pg.Pool): Promise<Manifest | undefined> {
  const exists = await pool.query("SELECT to_regclass('bench_manifest') IS NOT NULL AS ok");
  if (!exists.rows[0].ok) return undefined;
  const { rows } = await pool.query('SELECT data FROM bench_manifest WHERE id = 1');
  return rows[0]?.data;
}
