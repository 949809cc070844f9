import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKFILL_SEARCH_CHECKPOINT, backfillSearch } from '../../src/ops/backfill-search.js';
import { readCheckpoint } from '../../src/ops/checkpoint.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { searchDocument, tsvectorLiteral } from '../../src/nostr/search.js';
import type { Database } from '../../src/store/database.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { runCli } from '../support/cli.js';
import { openTestStore, store, unsignedEvent } from './helpers.js';

let db: Database;

beforeAll(async () => {
  db = await openTestStore();
});
afterAll(async () => {
  await db?.close();
});

/** Inserts events as raw SQL does: no event_tags rows, and no search document. */
async function insertRaw(events: NostrEvent[]): Promise<void> {
  const prepared = events.map(prepareEvent);
  await db.pool.query(
    `INSERT INTO events (id, pubkey, kind, created_at, d_tag, expires_at, raw)
     SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::int[], $4::bigint[], $5::text[], $6::bigint[], $7::text[])`,
    [
      prepared.map((p) => Buffer.from(p.event.id, 'hex')),
      prepared.map((p) => Buffer.from(p.event.pubkey, 'hex')),
      prepared.map((p) => p.event.kind),
      prepared.map((p) => p.event.created_at),
      prepared.map((p) => p.dTag),
      prepared.map((p) => p.expiresAt),
      prepared.map((p) => p.raw),
    ],
  );
}

async function reset(events: NostrEvent[]): Promise<void> {
  await db.pool.query('TRUNCATE events, event_tags, ops_checkpoints');
  await insertRaw(events);
}

/** Every event's search document as text (null when it has none), by id (hex). */
async function searchColumn(): Promise<Map<string, string | null>> {
  const { rows } = await db.pool.query<{ id: string; search: string | null }>("SELECT encode(id, 'hex') AS id, search::text AS search FROM events");
  return new Map(rows.map((r) => [r.id, r.search]));
}

/** Whether the event's stored document is exactly the one the relay computes for it (compared in SQL). */
async function hasRelayDocument(event: NostrEvent): Promise<boolean> {
  const { rows } = await db.pool.query<{ same: boolean }>('SELECT search = $2::tsvector AS same FROM events WHERE id = $1', [
    Buffer.from(event.id, 'hex'),
    tsvectorLiteral(searchDocument(event)!),
  ]);
  return rows[0]?.same === true;
}

/** The ids (hex) of the events a tsquery finds. */
async function found(tsquery: string): Promise<string[]> {
  const { rows } = await db.pool.query<{ id: string }>("SELECT encode(id, 'hex') AS id FROM events WHERE search @@ $1::tsquery", [tsquery]);
  return rows.map((r) => r.id).sort();
}

async function heapBlocks(): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>("SELECT (pg_relation_size('events') / current_setting('block_size')::int)::int AS n");
  return rows[0].n;
}

const sentences = ['the quick brown fox jumps over the lazy dog', 'zaps are flowing on nostr.band today', 'GM to everyone building relays', '日本語のテキストも検索できる'];

/** Notes of a few hundred bytes each: about a dozen fill a heap block. Every third one is a reaction. */
const manyEvents = (n: number, label: string) =>
  Array.from({ length: n }, (_, i) =>
    unsignedEvent({
      kind: i % 3 === 2 ? 7 : 1,
      created_at: 1_700_000_000 + i,
      content: i % 3 === 2 ? '+' : `${label}${i} ${sentences[i % sentences.length]} ${'words '.repeat(30)}`,
      tags: [['t', `topic${i % 5}`]],
    }),
  );

/** A logger whose lines the test can read. */
function capturedLog() {
  const lines: Array<{ level: number; msg: string }> = [];
  const log = pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { log, lines };
}

describe('backfill-search', () => {
  const note = unsignedEvent({ kind: 1, content: 'Hello Nostr! Searching the relay for "zaps" and c:\\paths, it\'s fine. #grownostr', tags: [['t', 'Bitcoin']] });
  const profile = unsignedEvent({ kind: 0, content: JSON.stringify({ name: 'alice', display_name: 'Alice Liddell', about: 'down the rabbit hole', nip05: 'alice@example.com' }) });
  const reaction = unsignedEvent({ kind: 7, content: 'wonderful words', tags: [['t', 'reaction']] });
  const empty = unsignedEvent({ kind: 1, content: '', created_at: 1_700_000_001 });
  const punctuation = unsignedEvent({ kind: 1, content: '!!! ... ???', created_at: 1_700_000_002 });
  const article = unsignedEvent({ kind: 30023, content: 'Long form body about gardens', tags: [['d', 'garden'], ['title', 'Rabbit gardens'], ['t', 'garden']] });
  const cjk = unsignedEvent({ kind: 1, content: '東京タワーに行きました', created_at: 1_700_000_003 });
  const nul = unsignedEvent({ kind: 1, content: 'nul \u0000 inside rabbit', created_at: 1_700_000_004 });
  const searchable = [note, profile, article, cjk, nul];
  const withoutDocument = [reaction, empty, punctuation];

  it('fills exactly the relay\'s document of every searchable event, and leaves the others NULL', async () => {
    await reset([...searchable, ...withoutDocument]);
    const result = await backfillSearch(db.pool, { batchBlocks: 1 });
    expect(result).toMatchObject({ complete: true, events: 7, updated: 5, withoutWords: 2, unreadable: 0, updatedThisRun: 5 });
    for (const e of searchable) expect(await hasRelayDocument(e), e.content).toBe(true);
    const column = await searchColumn();
    for (const e of withoutDocument) expect(column.get(e.id)).toBeNull();
    expect(await found("'rabbit'")).toEqual([profile.id, article.id, nul.id].sort());
    expect(await found("'zaps' & 'bitcoin'")).toEqual([note.id]);
    expect(await found("'東京'")).toEqual([cjk.id]);
    expect(await found("'wonderful'")).toEqual([]);
    expect(await readCheckpoint(db.pool, BACKFILL_SEARCH_CHECKPOINT)).toBeUndefined();
  });

  it('writes the same documents as the relay writes for new events', async () => {
    const events = [...searchable, ...withoutDocument, ...manyEvents(30, 'same')];
    await db.pool.query('TRUNCATE events, event_tags, ops_checkpoints');
    await store(db.pool, events);
    const written = await searchColumn();
    await db.pool.query('UPDATE events SET search = NULL');
    await db.pool.query('VACUUM events');
    await backfillSearch(db.pool, { batchBlocks: 1 });
    expect(await searchColumn()).toEqual(written);
  });

  it('a second run changes nothing', async () => {
    await reset(manyEvents(60, 'again'));
    const first = await backfillSearch(db.pool, { batchBlocks: 1 });
    expect(first).toMatchObject({ complete: true, events: 40, updated: 40 });
    const versions = async () => (await db.pool.query<{ r: string }>('SELECT ctid::text || xmin::text AS r FROM events ORDER BY ctid')).rows.map((x) => x.r);
    const before = await versions();
    const second = await backfillSearch(db.pool, { batchBlocks: 1 });
    expect(second).toMatchObject({ complete: true, events: 0, updated: 0 });
    expect(await versions()).toEqual(before);
  });

  it('stopped after a batch, keeps a checkpoint, and resumes there to the same totals', async () => {
    const events = manyEvents(300, 'resume');
    await reset(events);
    const notes = events.filter((e) => e.kind === 1);
    const blocks = await heapBlocks();
    expect(blocks).toBeGreaterThan(4);

    const part = await backfillSearch(db.pool, { batchBlocks: 2, maxBatches: 1 });
    expect(part).toMatchObject({ complete: false, batches: 1, blocks });
    expect(part.updated).toBeGreaterThan(0);
    expect(part.updated).toBeLessThan(notes.length);
    const saved = await readCheckpoint<{ events: number; updated: number }>(db.pool, BACKFILL_SEARCH_CHECKPOINT);
    expect(saved?.position).toMatch(/^block 2 of relfilenode \d+$/);
    expect(saved?.counts.updated).toBe(part.updated);
    const done = [...(await searchColumn()).values()].filter((s) => s !== null).length;
    expect(done).toBe(part.updated);

    const rest = await backfillSearch(db.pool, { batchBlocks: 2 });
    expect(rest).toMatchObject({ complete: true, resumedAtBlock: 2, events: notes.length, updated: notes.length, withoutWords: 0 });
    // The first run's new row versions went past the old end: read again, with nothing to do there.
    expect(rest.blocks).toBeGreaterThan(blocks);
    expect(rest.updatedThisRun).toBe(notes.length - part.updated);
    expect(await readCheckpoint(db.pool, BACKFILL_SEARCH_CHECKPOINT)).toBeUndefined();
    for (const e of notes) expect(await hasRelayDocument(e)).toBe(true);
    const column = await searchColumn();
    for (const e of events.filter((x) => x.kind === 7)) expect(column.get(e.id)).toBeNull();
  });

  it('turns batchSize (events) into heap blocks by the events per block', async () => {
    const events = manyEvents(300, 'size');
    await reset(events);
    await db.pool.query('ANALYZE events');
    const blocks = await heapBlocks();
    const result = await backfillSearch(db.pool, { batchSize: Math.ceil((2 * events.length) / blocks) });
    expect(result.complete).toBe(true);
    expect(result.batches).toBeGreaterThanOrEqual(Math.floor(blocks / 2) - 1);
    expect(result.batches).toBeLessThanOrEqual(Math.ceil(blocks / 2) + 1);
    expect(result.updated).toBe(200);
  });

  it('stops after the batch in flight when its signal is aborted, and resumes', async () => {
    const events = manyEvents(150, 'signal');
    await reset(events);
    const controller = new AbortController();
    let updates = 0;
    const progress = { setTotal() {}, stop() {}, update() { if (++updates === 2) controller.abort(); } };
    const part = await backfillSearch(db.pool, { batchBlocks: 1, signal: controller.signal, progress });
    expect(part).toMatchObject({ complete: false, batches: 1 });
    expect((await readCheckpoint(db.pool, BACKFILL_SEARCH_CHECKPOINT))?.position).toMatch(/^block 1 of /);
    const rest = await backfillSearch(db.pool, { batchBlocks: 1 });
    expect(rest).toMatchObject({ complete: true, resumedAtBlock: 1, updated: 100 });
  });

  it('restart ignores a saved checkpoint', async () => {
    await reset(manyEvents(150, 'restart'));
    await backfillSearch(db.pool, { batchBlocks: 1, maxBatches: 2 });
    await db.pool.query('UPDATE events SET search = NULL');
    const result = await backfillSearch(db.pool, { batchBlocks: 1, restart: true });
    expect(result).toMatchObject({ complete: true, resumedAtBlock: undefined, updated: 100 });
  });

  it('starts over when events was rewritten since the checkpoint (block numbers changed)', async () => {
    await reset(manyEvents(150, 'rewritten'));
    await backfillSearch(db.pool, { batchBlocks: 1, maxBatches: 2 });
    await db.pool.query('UPDATE events SET search = NULL');
    await db.pool.query('VACUUM FULL events');
    const { log, lines } = capturedLog();
    const result = await backfillSearch(db.pool, { batchBlocks: 1, log });
    expect(result).toMatchObject({ complete: true, resumedAtBlock: undefined, updated: 100 });
    expect(lines.some((l) => l.level === 40 && /rewritten/.test(l.msg))).toBe(true);
  });

  it('leaves a row that got its document meanwhile as it is', async () => {
    const events = manyEvents(90, 'race');
    await reset(events);
    // Already set before the run (as the relay writes it): not even read.
    const before = events[0];
    await db.pool.query("UPDATE events SET search = 'set before'::tsvector WHERE id = $1", [Buffer.from(before.id, 'hex')]);
    // Set between the batch's read and its UPDATE, as a concurrent writer could.
    const racing = new pg.Pool({ connectionString: db.url, max: 4 });
    const meanwhile: string[] = [];
    const query = racing.query.bind(racing) as (sql: string, values?: unknown[]) => Promise<pg.QueryResult>;
    racing.query = (async (sql: string, values?: unknown[]) => {
      const result = await query(sql, values);
      if (/^SELECT id, raw FROM events/.test(sql) && result.rows.length > 0) {
        const id = result.rows[0].id as Buffer;
        meanwhile.push(id.toString('hex'));
        await db.pool.query("UPDATE events SET search = 'set meanwhile'::tsvector WHERE id = $1", [id]);
      }
      return result;
    }) as unknown as typeof racing.query;
    try {
      const result = await backfillSearch(racing, { batchBlocks: 1 });
      expect(meanwhile.length).toBeGreaterThan(1);
      expect(result).toMatchObject({ complete: true, events: 60 - 1, updated: 60 - 1 - meanwhile.length, withoutWords: 0 });
    } finally {
      await racing.end();
    }
    const column = await searchColumn();
    expect(column.get(before.id)).toBe("'before' 'set'");
    for (const id of meanwhile) expect(column.get(id)).toBe("'meanwhile' 'set'");
    for (const e of events.filter((x) => x.kind === 1 && x !== before && !meanwhile.includes(x.id))) expect(await hasRelayDocument(e)).toBe(true);
  });

  it('on a failed UPDATE, keeps the checkpoint at the last batch written, and none after it is written', async () => {
    const events = manyEvents(150, 'fail');
    await reset(events);
    const { rows } = await db.pool.query<{ id: string; block: number }>("SELECT encode(id, 'hex') AS id, (ctid::text::point)[0]::int AS block FROM events WHERE kind = 1");
    const block = new Map(rows.map((r) => [r.id, r.block]));
    const failing = rows.find((r) => r.block >= 3)!;
    await db.pool.query(`CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.id = '\\x${failing.id}' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$`);
    await db.pool.query('CREATE TRIGGER test_refuse BEFORE UPDATE ON events FOR EACH ROW EXECUTE FUNCTION test_refuse()');
    try {
      await expect(backfillSearch(db.pool, { batchBlocks: 1 })).rejects.toThrow(/refused by the test/);
    } finally {
      await db.pool.query('DROP TRIGGER test_refuse ON events; DROP FUNCTION test_refuse()');
    }
    expect((await readCheckpoint(db.pool, BACKFILL_SEARCH_CHECKPOINT))?.position).toMatch(new RegExp(`^block ${failing.block} of `));
    const column = await searchColumn();
    for (const [id, b] of block) expect(column.get(id) !== null, `block ${b}`).toBe(b < failing.block);
    const rest = await backfillSearch(db.pool, { batchBlocks: 1 });
    expect(rest).toMatchObject({ complete: true, resumedAtBlock: failing.block, updated: 100 });
  });

  it('logs and skips a row whose stored JSON is not an event', async () => {
    await reset([note]);
    await db.pool.query("INSERT INTO events (id, pubkey, kind, created_at, raw) VALUES ('\\x01', '\\x02', 1, 1700000000, '{broken')");
    const { log, lines } = capturedLog();
    const result = await backfillSearch(db.pool, { log });
    expect(result).toMatchObject({ complete: true, events: 2, updated: 1, unreadable: 1 });
    expect(lines.some((l) => l.level === 40 && /not a readable event/.test(l.msg))).toBe(true);
    expect(await hasRelayDocument(note)).toBe(true);
  });

  it('runs as a CLI command, resumable, and prints a summary', async () => {
    const events = manyEvents(150, 'cli');
    await reset(events);
    const env = { DATABASE_URL: db.url, LOG_LEVEL: 'warn' };
    const part = await runCli(['backfill-search', '--batch', '1', '--max-batches', '1'], env);
    expect(part.code).toBe(0);
    expect(part.stdout).toMatch(/^stopped early: run again to resume \(checkpoint "backfill-search"\)$/m);
    expect(part.stdout).toMatch(/VACUUM \(ANALYZE\) events once the backfill is complete/);
    const rest = await runCli(['backfill-search'], env);
    expect(rest.code, rest.stderr).toBe(0);
    expect(rest.stdout).toMatch(/^resumed at heap block 1 of \d+$/m);
    expect(rest.stdout).toMatch(/^this run: [\d,]+ events updated in [\d.]+ s \([\d,]+\/s\)$/m);
    expect(rest.stdout).toMatch(/^updated: +100 events \(with the earlier runs\)$/m);
    expect(rest.stdout).toMatch(/^complete$/m);
    expect(rest.stdout).toMatch(/run VACUUM \(ANALYZE\) events now/);
    expect(await readCheckpoint(db.pool, BACKFILL_SEARCH_CHECKPOINT)).toBeUndefined();

    const help = await runCli(['backfill-search', '--help'], env);
    expect(help.stdout).toMatch(/^usage: npm run cli -- backfill-search/);
    const bad = await runCli(['backfill-search', '--batch', 'lots'], env);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/run with --help/);
  });
});
