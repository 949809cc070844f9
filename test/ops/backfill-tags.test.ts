import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { backfillTags, BACKFILL_CHECKPOINT } from '../../src/ops/backfill-tags.js';
import { readCheckpoint } from '../../src/ops/checkpoint.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { indexedTags } from '../../src/nostr/tags.js';
import type { Database } from '../../src/store/database.js';
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
    const result = await backfillTags(db.pool, { batchSize: 2 });
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
    await backfillTags(db.pool, { batchSize: 7 });
    expect(await tagRows(db.pool)).toEqual(written);
  });

  it('keeps existing rows and adds nothing on a second run', async () => {
    const events = Array.from({ length: 20 }, (_, i) => unsignedEvent({ content: `again ${i}`, tags: [['t', `v${i}`]] }));
    await reset(events);
    const first = await backfillTags(db.pool, { batchSize: 6 });
    const second = await backfillTags(db.pool, { batchSize: 6 });
    expect(first.tagRows).toBe(20);
    expect(second).toMatchObject({ complete: true, events: 20, tagRows: 0 });
    expect(await tagRows(db.pool)).toEqual(expectedRows(events));
  });

  it('interrupted midway and resumed, yields exactly the rows of an uninterrupted run', async () => {
    const events = Array.from({ length: 300 }, (_, i) =>
      unsignedEvent({ kind: [1, 7, 6][i % 3], created_at: 1_700_000_000 + i, content: `e${i}`, tags: [['t', `h${i % 11}`], ['p', `p${i % 13}`], ['e', `e${i}`]] }),
    );
    await reset(events);
    const whole = await backfillTags(db.pool, { batchSize: 25 });
    expect(whole.complete).toBe(true);
    const uninterrupted = await tagRows(db.pool);
    expect(uninterrupted).toEqual(expectedRows(events));

    await db.pool.query('TRUNCATE event_tags');
    const part = await backfillTags(db.pool, { batchSize: 25, concurrency: 2, maxBatches: 5 });
    expect(part.complete).toBe(false);
    const saved = await readCheckpoint<{ events: number }>(db.pool, BACKFILL_CHECKPOINT);
    expect(saved?.counts.events).toBe(125);
    const partial = await tagRows(db.pool);
    expect(partial.length).toBeGreaterThan(0);
    expect(partial.length).toBeLessThan(uninterrupted.length);

    const rest = await backfillTags(db.pool, { batchSize: 25, concurrency: 2 });
    expect(rest).toMatchObject({ complete: true, resumedAfter: saved!.position, events: 300, eventsThisRun: 175 });
    expect(rest.tagRows).toBe(uninterrupted.length);
    expect(await tagRows(db.pool)).toEqual(uninterrupted);
    expect(await readCheckpoint(db.pool, BACKFILL_CHECKPOINT)).toBeUndefined();
  });

  it('stops after the batches in flight when its signal is aborted, and resumes', async () => {
    const events = Array.from({ length: 120 }, (_, i) => unsignedEvent({ content: `s${i}`, tags: [['t', `s${i}`]] }));
    await reset(events);
    const controller = new AbortController();
    let updates = 0;
    const progress = { setTotal() {}, stop() {}, update() { if (++updates === 2) controller.abort(); } };
    const part = await backfillTags(db.pool, { batchSize: 10, concurrency: 1, signal: controller.signal, progress });
    expect(part.complete).toBe(false);
    expect(part.events).toBeLessThan(120);
    const rest = await backfillTags(db.pool, { batchSize: 10 });
    expect(rest).toMatchObject({ complete: true, events: 120, tagRows: 120 });
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

  it('gives the same rows as a role that may not skip the foreign-key check', async () => {
    const events = [unsignedEvent({ tags: trickyTags, content: 'checked' }), ...Array.from({ length: 30 }, (_, i) => unsignedEvent({ content: `o${i}`, tags: [['t', `o${i % 4}`], ['p', String(i)]] }))];
    await reset(events);
    const ordinary = await ordinaryRolePool(db);
    if (!ordinary) return; // the test server does not let us create a role: nothing to compare
    try {
      const result = await backfillTags(ordinary.pool, { batchSize: 7 });
      expect(result).toMatchObject({ complete: true, events: events.length });
      expect(await tagRows(db.pool)).toEqual(expectedRows(events));
    } finally {
      await ordinary.close();
    }
  });

  it('restart ignores a saved checkpoint', async () => {
    const events = Array.from({ length: 30 }, (_, i) => unsignedEvent({ content: `r${i}`, tags: [['t', `r${i}`]] }));
    await reset(events);
    await backfillTags(db.pool, { batchSize: 10, concurrency: 1, maxBatches: 2 });
    await db.pool.query('TRUNCATE event_tags');
    const result = await backfillTags(db.pool, { batchSize: 10, restart: true });
    expect(result.resumedAfter).toBeUndefined();
    expect(await tagRows(db.pool)).toEqual(expectedRows(events));
  });
});
