// Checkpoints of long operator commands (table ops_checkpoints): the last key fully processed and
// the running totals, so an interrupted run resumes where it stopped and still reports the totals of
// the whole job.
import type pg from 'pg';

export interface Checkpoint<Counts> {
  position: string;
  counts: Counts;
  updatedAt: Date;
}

type Queryable = Pick<pg.Pool, 'query'>;

export async function readCheckpoint<Counts>(db: Queryable, name: string): Promise<Checkpoint<Counts> | undefined> {
  const { rows } = await db.query<{ position: string; counts: Counts; updated_at: Date }>(
    'SELECT position, counts, updated_at FROM ops_checkpoints WHERE name = $1',
    [name],
  );
  return rows[0] && { position: rows[0].position, counts: rows[0].counts, updatedAt: rows[0].updated_at };
}

export async function saveCheckpoint(db: Queryable, name: string, position: string, counts: object): Promise<void> {
  await db.query(
    `INSERT INTO ops_checkpoints (name, position, counts, updated_at) VALUES ($1, $2, $3, now())
     ON CONFLICT (name) DO UPDATE SET position = EXCLUDED.position, counts = EXCLUDED.counts, updated_at = now()`,
    [name, position, JSON.stringify(counts)],
  );
}

export async function clearCheckpoint(db: Queryable, name: string): Promise<void> {
  await db.query('DELETE FROM ops_checkpoints WHERE name = $1', [name]);
}
