// Loads the relations REQs read and EVENT writes probe into PostgreSQL's buffer pool (pg_prewarm, shipped with PostgreSQL),
// so a benchmark's first steps measure the relay rather than disk reads after a fresh server start:
// this VM reclaims its page cache within minutes, so "warm" has to mean PostgreSQL's own buffers.
import type pg from 'pg';

// event_tags_pkey is keyed by event id, so every stored event's tag rows land on random leaves of it:
// left cold, one insert waited 40–140 ms on three disk reads (auto_explain, I/O timings).
const HOT_RELATIONS = [
  'events', 'events_pkey', 'events_pubkey_time', 'events_kind_time', 'events_time', 'events_replace_key',
  'event_tags_value_time', 'event_tags_pkey',
];

/** Returns the bytes loaded, or the reason pg_prewarm could not run (e.g. no right to create it). */
export async function prewarm(pool: pg.Pool): Promise<number | string> {
  const client = await pool.connect();
  try {
    await client.query('SET statement_timeout = 0'); // reading gigabytes takes longer than a REQ may
    await client.query('CREATE EXTENSION IF NOT EXISTS pg_prewarm');
    const { rows } = await client.query<{ bytes: string }>(
      `SELECT (sum(pg_prewarm(r)) * current_setting('block_size')::int)::bigint AS bytes FROM unnest($1::regclass[]) r`,
      [HOT_RELATIONS],
    );
    return Number(rows[0].bytes);
  } catch (err) {
    return (err as Error).message;
  } finally {
    client.release(true); // not back into the pool with its timeout changed
  }
}
