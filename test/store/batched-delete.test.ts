// Expiry and purging a pubkey delete in batches; each batch must stay a short statement whatever
// the table's statistics say. The hard case: statistics taken while `events` held pages but no live
// row (everything deleted, then analyzed), and many rows stored since. With those, the former
// `DELETE … WHERE id IN (SELECT id … LIMIT n)` ran past the 5 s statement timeout.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteExpiredEvents } from '../../src/store/expiry.js';
import { purgePubkey } from '../../src/store/moderation.js';
import type { Database } from '../../src/store/database.js';
import { openTestStore } from '../ops/helpers.js';

const ROWS = 20_000;
const [A, B] = ['aa'.repeat(32), 'bb'.repeat(32)];
let db: Database;

beforeAll(async () => {
  db = await openTestStore();
});
afterAll(async () => {
  await db?.close();
});

/** `count` events of `pubkey`, expiring at `expiresAt` (or never); `salt` keeps ids apart between calls. */
async function insert(pubkey: string, count: number, expiresAt: number | null, salt: string): Promise<void> {
  await db.pool.query(
    `INSERT INTO events (id, pubkey, kind, created_at, raw, expires_at)
     SELECT decode(md5($3 || i::text) || md5(i::text || $3), 'hex'), decode($1::text, 'hex'), 1, 1000 + i, '{}', $2::bigint
       FROM generate_series(1, $4::int) i`,
    [pubkey, expiresAt, salt, count],
  );
}

/** Leaves `events` empty with statistics that say so, but with the pages of ROWS deleted rows. */
async function staleStatistics(salt: string): Promise<void> {
  await db.pool.query('DELETE FROM events');
  await insert(A, ROWS, null, `${salt}-before`);
  await db.pool.query('DELETE FROM events');
  await db.pool.query('ANALYZE events');
  const { rows } = await db.pool.query<{ reltuples: number; relpages: number }>("SELECT reltuples, relpages FROM pg_class WHERE relname = 'events'");
  expect(rows[0].reltuples).toBe(0);
  expect(rows[0].relpages).toBeGreaterThan(0);
}

const pubkeysLeft = async () =>
  (await db.pool.query<{ pubkey: string; n: number }>("SELECT encode(pubkey, 'hex') AS pubkey, count(*)::int AS n FROM events GROUP BY pubkey")).rows;

describe('batched deletes on statistics of an empty table', () => {
  it('the expiry sweep removes every expired event, and only those', async () => {
    await staleStatistics('expiry');
    await insert(A, ROWS, 5, 'expired');
    await insert(B, 10, 50, 'later');
    expect(await deleteExpiredEvents(db.pool, 10)).toBe(ROWS);
    expect(await pubkeysLeft()).toEqual([{ pubkey: B, n: 10 }]);
    expect(await deleteExpiredEvents(db.pool, 10)).toBe(0);
  });

  it('purging a pubkey removes all its events, and nobody else', async () => {
    await staleStatistics('purge');
    await insert(A, ROWS, null, 'purged');
    await insert(B, 10, null, 'kept');
    expect(await purgePubkey(db.pool, A)).toBe(ROWS);
    expect(await pubkeysLeft()).toEqual([{ pubkey: B, n: 10 }]);
  });

  it('stops at a batch that is not full, and counts a batch of exactly the limit', async () => {
    await db.pool.query('DELETE FROM events');
    await insert(A, 2_000, 5, 'exact');
    expect(await deleteExpiredEvents(db.pool, 10, 1_000)).toBe(2_000);
    expect(await pubkeysLeft()).toEqual([]);
  });
});
