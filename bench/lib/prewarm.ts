// Loads the relations REQs read into PostgreSQL's buffer pool (pg_prewarm, shipped with PostgreSQL),
// so a benchmark's first steps measure the relay rather than disk reads after a fresh server start:
// this VM reclaims its page cache within minutes, so "warm" has to mean PostgreSQL's own buffers.
import type pg from 'pg';

const READ_BY_REQS = ['events', 'events_pkey', 'events_pubkey_time', 'events_kind_time', 'events_time', 'events_replace_key', 'event_tags_value_time'];

/** Returns the bytes loaded, or undefined when pg_prewarm is unavailable (e.g. no right to create it). */
export async function prewarm(pool: pg.Pool): Promise<number | undefined> {
  try {
    await pool.query('CREATE EXTENSION IF NOT EXISTS pg_prewarm');
    const { rows } = await pool.query<{ blocks: string }>(
      `SELECT sum(pg_prewarm(r))::bigint AS blocks FROM unnest($1::regclass[]) r`,
      [READ_BY_REQS],
    );
    const { rows: size } = await pool.query<{ bs: string }>('SHOW block_size');
    return Number(rows[0].blocks) * Number(size[0].bs);
  } catch {
    return undefined;
  }
}
