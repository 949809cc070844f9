// event_tags has no foreign key to events: the statement trigger on events that records removals
// deletes the removed events' tag rows, and TRUNCATE events empties event_tags. Checked here for
// every way rows leave events, by plain SQL as psql or another tool would send it.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../../migrations/index.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import type { Database } from '../../src/store/database.js';
import { openTestStore, store, tagRows, unsignedEvent } from '../ops/helpers.js';
import { until } from '../support/wait.js';

const MIGRATION = '20270111000001_event_tags_cascade_trigger';
const [A, B] = ['aa'.repeat(32), 'bb'.repeat(32)];

let db: Database;
beforeAll(async () => {
  db = await openTestStore();
});
afterAll(async () => {
  await db?.close();
});

let n = 0;
/** An event of `pubkey` with two indexed tags. */
const tagged = (pubkey: string): NostrEvent => {
  n++;
  return unsignedEvent({ pubkey, content: `event ${n}`, created_at: 1_700_000_000 + n, tags: [['t', `topic ${n}`], ['p', B]] });
};

async function reset(): Promise<void> {
  await db.pool.query('TRUNCATE events, event_tags, event_removals');
}

const count = async (sql: string, params: unknown[] = []) => (await db.pool.query<{ n: number }>(sql, params)).rows[0].n;
const orphanTagRows = () => count('SELECT count(*)::int AS n FROM event_tags t WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.id = t.event_id)');
const id = (e: NostrEvent) => Buffer.from(e.id, 'hex');
const tagRowsOf = (events: NostrEvent[]) => count('SELECT count(*)::int AS n FROM event_tags WHERE event_id = ANY ($1::bytea[])', [events.map(id)]);

describe('event_tags without a foreign key', () => {
  it("a DELETE FROM events removes exactly the deleted events' tag rows", async () => {
    await reset();
    const [gone, kept, other] = [tagged(A), tagged(A), tagged(B)];
    await store(db.pool, [gone, kept, other]);
    const before = await tagRows(db.pool);
    await db.pool.query('DELETE FROM events WHERE id = $1', [id(gone)]);
    expect(await tagRows(db.pool)).toEqual(before.filter((row) => !row.startsWith(gone.id)));
    expect(await tagRowsOf([gone])).toBe(0);
    expect(await tagRowsOf([kept, other])).toBe(4);
  });

  it('a DELETE of 2,000 events in one statement leaves no tag row without its event', async () => {
    await reset();
    const removed = Array.from({ length: 2000 }, () => tagged(A));
    const kept = Array.from({ length: 10 }, () => tagged(B));
    await store(db.pool, [...removed, ...kept]);
    const deleted = await db.pool.query('DELETE FROM events WHERE pubkey = $1', [Buffer.from(A, 'hex')]);
    expect(deleted.rowCount).toBe(2000);
    expect(await orphanTagRows()).toBe(0);
    expect(await count('SELECT count(*)::int AS n FROM event_tags')).toBe(2 * kept.length);
  });

  it('TRUNCATE events empties event_tags', async () => {
    await reset();
    await store(db.pool, [tagged(A), tagged(B)]);
    await db.pool.query('TRUNCATE events');
    expect(await count('SELECT count(*)::int AS n FROM event_tags')).toBe(0);
  });

  it('TRUNCATE events, event_tags in one statement empties both', async () => {
    await reset();
    await store(db.pool, [tagged(A), tagged(B)]);
    await db.pool.query('TRUNCATE events, event_tags');
    expect(await count('SELECT (SELECT count(*) FROM events)::int + (SELECT count(*) FROM event_tags)::int AS n')).toBe(0);
  });

  it('a DELETE still records the removed ids in event_removals', async () => {
    await reset();
    const [gone, kept] = [tagged(A), tagged(A)];
    await store(db.pool, [gone, kept]);
    await db.pool.query('DELETE FROM events WHERE id = $1', [id(gone)]);
    const { rows } = await db.pool.query<{ id: string }>("SELECT encode(id, 'hex') AS id FROM event_removals");
    expect(rows).toEqual([{ id: gone.id }]);
  });

  it('a DELETE that waited for a lock on its event also removes the tag rows committed while it waited', async () => {
    await reset();
    const event = tagged(A);
    await store(db.pool, [event]);
    // As backfill-tags adds rows: the event locked FOR KEY SHARE, then its rows inserted.
    const adding = await db.pool.connect();
    try {
      await adding.query('BEGIN');
      await adding.query('SELECT 1 FROM events WHERE id = $1 FOR KEY SHARE', [id(event)]);
      await adding.query("INSERT INTO event_tags (event_id, name, value, kind, created_at) VALUES ($1, 'r', 'added meanwhile', 1, 0)", [id(event)]);
      const deleting = db.pool.query('DELETE FROM events WHERE id = $1', [id(event)]);
      await until(
        async () => (await count("SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM events%'")) > 0,
        'the DELETE waits for the lock',
      );
      await adding.query('COMMIT');
      expect((await deleting).rowCount).toBe(1);
    } finally {
      await adding.query('ROLLBACK').catch(() => undefined);
      adding.release();
    }
    expect(await count('SELECT count(*)::int AS n FROM event_tags')).toBe(0);
  });

  it('a DELETE of one event after a DELETE of many, on the same connection, reads event_tags through its primary key', async () => {
    await reset();
    await store(db.pool, Array.from({ length: 2000 }, () => tagged(A)));
    const single = tagged(B);
    await store(db.pool, [single, ...Array.from({ length: 2000 }, () => tagged(B))]);
    await db.pool.query('ANALYZE events, event_tags');
    // A connection of its own: PL/pgSQL plans the trigger's statements at their first run in a session.
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const scans = async () =>
        (await client.query<{ n: number }>("SELECT seq_scan::int AS n FROM pg_stat_xact_user_tables WHERE relname = 'event_tags'")).rows[0].n;
      await client.query('BEGIN');
      await client.query('DELETE FROM events WHERE pubkey = $1', [Buffer.from(A, 'hex')]);
      const afterMany = await scans();
      await client.query('DELETE FROM events WHERE id = $1', [id(single)]);
      expect(await scans()).toBe(afterMany);
      await client.query('COMMIT');
    } finally {
      await client.end();
    }
    expect(await orphanTagRows()).toBe(0);
  });

  it('event_tags has no foreign key', async () => {
    const { rows } = await db.pool.query("SELECT conname FROM pg_constraint WHERE conrelid = 'event_tags'::regclass AND contype = 'f'");
    expect(rows).toEqual([]);
  });

  it('undoing the migration removes tag rows without an event, then puts the foreign key back', async () => {
    const undone = await openTestStore();
    try {
      const event = tagged(A);
      await store(undone.pool, [event]);
      await undone.pool.query("INSERT INTO event_tags (event_id, name, value, kind, created_at) VALUES ($1, 't', 'orphan', 1, 0)", [Buffer.alloc(32, 7)]);
      await migrations[MIGRATION].down(await undone.knex());
      const { rows: left } = await undone.pool.query<{ id: string; n: number }>("SELECT encode(event_id, 'hex') AS id, count(*)::int AS n FROM event_tags GROUP BY 1");
      expect(left).toEqual([{ id: event.id, n: 2 }]);
      const { rows } = await undone.pool.query<{ definition: string }>(
        "SELECT pg_get_constraintdef(oid) AS definition FROM pg_constraint WHERE conrelid = 'event_tags'::regclass AND contype = 'f'",
      );
      expect(rows).toEqual([{ definition: 'FOREIGN KEY (event_id) REFERENCES events(id) ON DELETE CASCADE' }]);
    } finally {
      await undone.close();
    }
  });
});
