import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backfillTags, BACKFILL_CHECKPOINT } from '../../src/ops/backfill-tags.js';
import { readCheckpoint, saveCheckpoint } from '../../src/ops/checkpoint.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { indexedTags } from '../../src/nostr/tags.js';
import type { Database } from '../../src/store/database.js';
import { until } from '../support/wait.js';
import { openTestStore, ordinaryRolePool, store, tagRows, unsignedEvent } from './helpers.js';

let db: Database;

/** Tags at every edge of the indexing rule (src/nostr/tags.ts). */
const trickyTags: string[][] = [
  ['e', 'a'.repeat(64)],
  ['E', 'upper-case name'],
  ['t', 'dup'],
  ['t', 'dup', 'same name and value again'],
  ['t', 'second t value'],
  ['tt', 'two-letter name: not indexed'],
  ['é', 'non-ASCII letter: not indexed'],
  ['1', 'digit: not indexed'],
  ['p'],
  ['d', ''],
  ['x', 'quote " backslash \\ newline \n tab \t cr \r'],
  ['y', 'control \u0001\u001f and U+2028 \u2028 and emoji 🎉 and ünï'],
  ['z', 'é'.repeat(512)], // 1024 UTF-8 bytes: indexed
  ['z', 'é'.repeat(512) + 'a'], // 1025 bytes: not indexed
  ['r', 'x'.repeat(1025)],
  ['q', 'second element', 'third', 'fourth'],
];

function expectedRows(events: NostrEvent[]): string[] {
  return events
    .flatMap((e) => indexedTags(e.tags).map(([name, value]) => `${e.id} ${name} ${e.kind} ${e.created_at} ${value}`))
    .sort();
}

beforeAll(async () => {
  db = await openTestStore();
});
afterAll(async () => {
  await db?.close();
});

async function reset(events: NostrEvent[]): Promise<void> {
  await db.pool.query('TRUNCATE events, event_tags, ops_checkpoints');
  await store(db.pool, events);
  await db.pool.query('TRUNCATE event_tags');
}

/** The heap block of every stored event, by id (hex). */
async function blockOf(): Promise<Map<string, number>> {
  const { rows } = await db.pool.query<{ id: string; block: number }>("SELECT encode(id, 'hex') AS id, (ctid::text::point)[0]::int AS block FROM events");
  return new Map(rows.map((r) => [r.id, r.block]));
}

async function heapBlocks(): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>("SELECT (pg_relation_size('events') / current_setting('block_size')::int)::int AS n");
  return rows[0].n;
}

/** Events of a few hundred bytes each: about a dozen fill a heap block. */
const manyEvents = (n: number, label: string) =>
  Array.from({ length: n }, (_, i) =>
    unsignedEvent({ kind: [1, 7, 6][i % 3], created_at: 1_700_000_000 + i, content: `${label}${i} ${'x'.repeat(200)}`, tags: [['t', `h${i % 11}`], ['p', `p${i % 13}`], ['e', `${label}${i}`]] }),
  );

/** Whether a connection running a statement LIKE `query` waits for a lock. */
async function waitingForALock(query: string): Promise<boolean> {
  const { rows } = await db.pool.query(
    "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1",
    [query],
  );
  return rows.length > 0;
}

/** A logger whose lines the test can read. */
function capturedLog() {
  const lines: Array<{ level: number; msg: string }> = [];
  const log = pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { log, lines };
}

describe('backfill-tags', () => {
  it('derives exactly the rows of the tag rule, at every edge of it', async () => {
    const events = [
      unsignedEvent({ tags: trickyTags, content: 'plain' }),
      // Parsed in JS (an escaped backslash before "u0000" looks like a NUL escape to the SQL path).
      unsignedEvent({ tags: [...trickyTags, ['u', 'looks like an escape: \\u0000']], content: 'by hand' }),
      // A NUL in the content or in a tag value: raw holds "\u0000", which jsonb refuses.
      unsignedEvent({ tags: [['t', 'beside a NUL'], ['n', 'has \u0000 NUL']], content: 'nul \u0000 in content' }),
      unsignedEvent({ kind: 30023, tags: [['d', 'article'], ['t', 'x']], created_at: 1_600_000_000 }),
      unsignedEvent({ tags: [] }),
    ];
    await reset(events);
    const result = await backfillTags(db.pool, { batchBlocks: 1 });
    expect(result).toMatchObject({ complete: true, events: events.length });
    const rows = await tagRows(db.pool);
    expect(rows).toEqual(expectedRows(events));
    expect(result.tagRows).toBe(rows.length);
    expect(rows.some((r) => r.includes('beside a NUL'))).toBe(true);
  });

  it('gives the same rows as the relay writes for new events', async () => {
    const events = Array.from({ length: 40 }, (_, i) => unsignedEvent({ kind: [1, 2, 7][i % 3], content: `n${i}`, tags: [['t', `tag${i % 7}`], ['p', String(i)], ['e', 'dup'], ['e', 'dup']] }));
    await db.pool.query('TRUNCATE events, event_tags, ops_checkpoints');
    await store(db.pool, events);
    const written = await tagRows(db.pool);
    await db.pool.query('TRUNCATE event_tags');
    await backfillTags(db.pool, { batchBlocks: 1 });
    expect(await tagRows(db.pool)).toEqual(written);
  });

  it('keeps existing rows, and a second run adds nothing and locks nothing', async () => {
    const events = manyEvents(150, 'again');
    await reset(events);
    const first = await backfillTags(db.pool, { batchBlocks: 1 });
    expect(first.tagRows).toBe(expectedRows(events).length);
    // A row lock writes the locker into the event's xmax: a second run must leave every one as it is.
    const lockers = async () => (await db.pool.query<{ r: string }>('SELECT ctid::text || xmax::text AS r FROM events ORDER BY ctid')).rows.map((x) => x.r);
    const before = await lockers();
    const second = await backfillTags(db.pool, { batchBlocks: 1 });
    expect(second).toMatchObject({ complete: true, events: 150, tagRows: 0 });
    expect(second.batches).toBeGreaterThan(2);
    expect(await lockers()).toEqual(before);
    expect(await tagRows(db.pool)).toEqual(expectedRows(events));
  });

  it('takes the events in batches of consecutive heap blocks', async () => {
    const events = manyEvents(300, 'b');
    await reset(events);
    const blocks = await heapBlocks();
    expect(blocks).toBeGreaterThan(6);
    const part = await backfillTags(db.pool, { batchBlocks: 2, concurrency: 1, maxBatches: 3 });
    expect(part).toMatchObject({ complete: false, batches: 3, blocks });
    // Exactly the events of blocks 0-5 have their rows, whatever their ids.
    const block = await blockOf();
    const done = events.filter((e) => block.get(e.id)! < 6);
    expect(done.length).toBeGreaterThan(0);
    expect(done.length).toBeLessThan(events.length);
    expect(part.events).toBe(done.length);
    expect(await tagRows(db.pool)).toEqual(expectedRows(done));
    expect((await readCheckpoint(db.pool, BACKFILL_CHECKPOINT))?.position).toMatch(/^block 6 of relfilenode \d+$/);
  });

  it('turns batchSize (events) into heap blocks by the events per block', async () => {
    const events = manyEvents(300, 'size');
    await reset(events);
    await db.pool.query('ANALYZE events');
    const blocks = await heapBlocks();
    const result = await backfillTags(db.pool, { batchSize: Math.ceil((2 * events.length) / blocks) });
    expect(result.complete).toBe(true);
    expect(result.batches).toBeGreaterThanOrEqual(Math.floor(blocks / 2) - 1);
    expect(result.batches).toBeLessThanOrEqual(Math.ceil(blocks / 2) + 1);
    expect(await tagRows(db.pool)).toEqual(expectedRows(events));
  });

  it('interrupted midway and resumed at the saved block, yields exactly the rows of an uninterrupted run', async () => {
    const events = manyEvents(300, 'e');
    await reset(events);
    const whole = await backfillTags(db.pool, { batchBlocks: 1 });
    expect(whole).toMatchObject({ complete: true, batches: await heapBlocks() });
    const uninterrupted = await tagRows(db.pool);
    expect(uninterrupted).toEqual(expectedRows(events));

    await db.pool.query('TRUNCATE event_tags');
    const part = await backfillTags(db.pool, { batchBlocks: 1, concurrency: 2, maxBatches: 5 });
    expect(part.complete).toBe(false);
    const saved = await readCheckpoint<{ events: number }>(db.pool, BACKFILL_CHECKPOINT);
    expect(saved?.position).toMatch(/^block 5 of relfilenode \d+$/);
    const block = await blockOf();
    const inFirstFive = events.filter((e) => block.get(e.id)! < 5).length;
    expect(saved?.counts.events).toBe(inFirstFive);
    const partial = await tagRows(db.pool);
    expect(partial.length).toBeGreaterThan(0);
    expect(partial.length).toBeLessThan(uninterrupted.length);

    const rest = await backfillTags(db.pool, { batchBlocks: 1, concurrency: 2 });
    expect(rest).toMatchObject({ complete: true, resumedAtBlock: 5, events: 300, eventsThisRun: 300 - inFirstFive });
    expect(rest.tagRows).toBe(uninterrupted.length);
    expect(await tagRows(db.pool)).toEqual(uninterrupted);
    expect(await readCheckpoint(db.pool, BACKFILL_CHECKPOINT)).toBeUndefined();
  });

  it('ignores a checkpoint of the id-based version, says so, and does the whole table', async () => {
    const events = manyEvents(60, 'old');
    await reset(events);
    // What the earlier version saved: the last id of the ranges it had done, in hex.
    const ids = events.map((e) => e.id).sort();
    await saveCheckpoint(db.pool, BACKFILL_CHECKPOINT, ids[29], { events: 30, tagRows: 90 });
    const { log, lines } = capturedLog();
    const result = await backfillTags(db.pool, { batchBlocks: 1, log });
    expect(result).toMatchObject({ complete: true, resumedAtBlock: undefined, events: 60, eventsThisRun: 60 });
    expect(result.tagRows).toBe(expectedRows(events).length);
    expect(await tagRows(db.pool)).toEqual(expectedRows(events));
    expect(lines.some((l) => l.level === 40 && /earlier version/.test(l.msg))).toBe(true);
  });

  it('starts over when events was rewritten since the checkpoint (block numbers changed)', async () => {
    const events = manyEvents(300, 'vf');
    await reset(events);
    await backfillTags(db.pool, { batchBlocks: 1, concurrency: 1, maxBatches: 3 });
    await db.pool.query('TRUNCATE event_tags');
    await db.pool.query('VACUUM FULL events');
    const { log, lines } = capturedLog();
    const result = await backfillTags(db.pool, { batchBlocks: 1, log });
    expect(result).toMatchObject({ complete: true, resumedAtBlock: undefined, events: 300 });
    expect(await tagRows(db.pool)).toEqual(expectedRows(events));
    expect(lines.some((l) => l.level === 40 && /rewritten/.test(l.msg))).toBe(true);
  });

  it('events the relay stores meanwhile, also into free space of earlier blocks, keep exactly their rows', async () => {
    const first = manyEvents(300, 'live');
    await reset(first);
    // Free space in the first blocks, recorded by VACUUM, where new events then go.
    const block = await blockOf();
    const removed = first.filter((e, i) => block.get(e.id)! < 8 && i % 2 === 0);
    await db.pool.query('DELETE FROM events WHERE id = ANY ($1)', [removed.map((e) => Buffer.from(e.id, 'hex'))]);
    await db.pool.query('VACUUM events');
    const blocks = await heapBlocks();
    const later: NostrEvent[] = [];
    const writes: Array<Promise<void>> = [];
    const progress = {
      setTotal() {},
      stop() {},
      update() {
        // Between batches, while the next ones run.
        const events = manyEvents(4, `meanwhile${writes.length}-`);
        later.push(...events);
        writes.push(store(db.pool, events));
      },
    };
    const result = await backfillTags(db.pool, { batchBlocks: 1, concurrency: 2, progress });
    await Promise.all(writes);
    expect(result.complete).toBe(true);
    const after = await blockOf();
    const stored = later.filter((e) => after.has(e.id));
    expect(stored.length).toBe(later.length);
    expect(stored.some((e) => after.get(e.id)! < blocks)).toBe(true);
    const kept = first.filter((e) => !removed.includes(e));
    expect(await tagRows(db.pool)).toEqual(expectedRows([...kept, ...later]));
  });

  it('an event deleted while its rows are derived in JS keeps no row', async () => {
    // A NUL in the content: jsonb refuses the raw text, so the event's rows are derived in JS.
    const event = unsignedEvent({ content: 'nul \u0000', tags: [['t', 'held'], ['t', 'free']] });
    await reset([event]);
    const id = Buffer.from(event.id, 'hex');
    // Another transaction's uncommitted copy of one of its rows holds the JS path's INSERT.
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query("INSERT INTO event_tags (event_id, name, value, kind, created_at) VALUES ($1, 't', 'held', 1, $2)", [id, event.created_at]);
      const backfill = backfillTags(db.pool, { batchBlocks: 1, concurrency: 1 });
      await until(() => waitingForALock('%unnest%'), 'the JS path waits for the held row');
      let deleted = false;
      const deleting = db.pool.query('DELETE FROM events WHERE id = $1', [id]).finally(() => (deleted = true));
      await until(async () => deleted || (await waitingForALock('DELETE FROM events%')), 'the DELETE is done or waits');
      await holder.query('ROLLBACK');
      expect((await backfill).complete).toBe(true);
      expect((await deleting).rowCount).toBe(1);
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      holder.release();
    }
    expect(await tagRows(db.pool)).toEqual([]);
  });

  it('reports events as progress, with a total extrapolated from the blocks done that ends exact', async () => {
    const events = manyEvents(300, 'pr');
    await reset(events);
    // Statistics that overstate the table: the first total is an estimate of 300. (Too few rows
    // deleted for autovacuum to analyse it again meanwhile.)
    await db.pool.query('ANALYZE events');
    await db.pool.query("DELETE FROM events WHERE (ctid::text::point)[1]::int % 5 = 0");
    const left = (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0].n;
    const seen: Array<{ done: number; total: number }> = [];
    let total = 0;
    const progress = { setTotal(t: number) { total = t; }, stop() {}, update(done: number) { seen.push({ done, total }); } };
    await backfillTags(db.pool, { batchBlocks: 2, progress });
    expect(seen.length).toBeGreaterThan(3);
    expect(seen[0]).toEqual({ done: 0, total: 300 });
    expect(seen.at(-1)).toEqual({ done: left, total: left });
    // From the first batch on, the total follows the events per block actually met.
    for (const s of seen.slice(1)) expect(Math.abs(s.total - left)).toBeLessThan(left * 0.1);
    for (const s of seen) expect(s.done).toBeLessThanOrEqual(s.total);
  });

  it('stops after the batches in flight when its signal is aborted, and resumes', async () => {
    const events = manyEvents(120, 's');
    await reset(events);
    const controller = new AbortController();
    let updates = 0;
    const progress = { setTotal() {}, stop() {}, update() { if (++updates === 2) controller.abort(); } };
    const part = await backfillTags(db.pool, { batchBlocks: 1, concurrency: 1, signal: controller.signal, progress });
    expect(part).toMatchObject({ complete: false, batches: 1 });
    expect(part.events).toBeLessThan(120);
    const rest = await backfillTags(db.pool, { batchBlocks: 1 });
    expect(rest).toMatchObject({ complete: true, resumedAtBlock: 1, events: 120, tagRows: expectedRows(events).length });
    expect(await tagRows(db.pool)).toEqual(expectedRows(events));
  });

  it('with onlyMissing, fills events without any row and leaves the others as they are', async () => {
    const bare = unsignedEvent({ content: 'bare', tags: [['t', 'one'], ['t', 'two']] });
    const partial = unsignedEvent({ content: 'partial', tags: [['t', 'three'], ['t', 'four']] });
    await reset([bare, partial]);
    await db.pool.query(
      "INSERT INTO event_tags (event_id, name, value, kind, created_at) VALUES ($1, 't', 'three', 1, $2)",
      [Buffer.from(partial.id, 'hex'), partial.created_at],
    );
    const result = await backfillTags(db.pool, { onlyMissing: true });
    expect(result.tagRows).toBe(2);
    const rows = await tagRows(db.pool);
    expect(rows.filter((r) => r.startsWith(bare.id))).toHaveLength(2);
    expect(rows.filter((r) => r.startsWith(partial.id))).toHaveLength(1);
  });

  it('gives the same rows for a role that is not a superuser', async () => {
    const events = [unsignedEvent({ tags: trickyTags, content: 'checked' }), ...Array.from({ length: 30 }, (_, i) => unsignedEvent({ content: `o${i}`, tags: [['t', `o${i % 4}`], ['p', String(i)]] }))];
    await reset(events);
    const ordinary = await ordinaryRolePool(db);
    if (!ordinary) return; // the test server does not let us create a role: nothing to compare
    try {
      const result = await backfillTags(ordinary.pool, { batchBlocks: 1 });
      expect(result).toMatchObject({ complete: true, events: events.length });
      expect(await tagRows(db.pool)).toEqual(expectedRows(events));
    } finally {
      await ordinary.close();
    }
  });

  it('restart ignores a saved checkpoint', async () => {
    const events = manyEvents(100, 'r');
    await reset(events);
    await backfillTags(db.pool, { batchBlocks: 1, concurrency: 1, maxBatches: 2 });
    await db.pool.query('TRUNCATE event_tags');
    const result = await backfillTags(db.pool, { batchBlocks: 1, restart: true });
    expect(result).toMatchObject({ resumedAtBlock: undefined, events: 100 });
    expect(await tagRows(db.pool)).toEqual(expectedRows(events));
  });
});
