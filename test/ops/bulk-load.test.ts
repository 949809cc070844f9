// The importers' bulk write path against the relay's own: the same input written through writeBatch
// (batch by batch, as the importers did before) and through the bulk path must leave the same rows,
// and give every event the same outcome; and the bulk path must stay correct beside a live relay.
import { Readable } from 'node:stream';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BulkWriter, copyRows, EventRows } from '../../src/ops/bulk-load.js';
import { importJsonl } from '../../src/ops/import-jsonl.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { policyFrom } from '../../src/policy/policy.js';
import type { Database } from '../../src/store/database.js';
import { addressOf } from '../../src/store/plan-batch.js';
import { prepareEvent, type PreparedEvent, type WriteResult } from '../../src/store/prepared-event.js';
import { writeBatch } from '../../src/store/write.js';
import { openTestStore, ordinaryRolePool, tagRows, testConfig, unsignedEvent } from './helpers.js';

const policy = policyFrom(testConfig());
const T0 = 1_700_000_000;

/** A small deterministic PRNG (mulberry32), so a failure can be replayed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const AUTHORS = ['a', 'b', 'c'].map((c) => c.repeat(64));

interface Workload {
  /** Written before the import, the same way in both databases. */
  stored: NostrEvent[];
  /** The import's input, in order. */
  input: NostrEvent[];
}

/**
 * Notes and reactions with repeated tags, versions of replaceable (0, 3, 10002) and addressable
 * (30023, three d values) events with close created_at (ties included) in random order, duplicates,
 * and kind 5s by e and by a, by the author or by someone else, before and after their targets.
 */
function workload(seed: number, size: number, { vanish = false } = {}): Workload {
  const rnd = random(seed);
  const pick = <T>(list: T[]) => list[Math.floor(rnd() * list.length)];
  const candidates: NostrEvent[] = [];
  for (let i = 0; candidates.length < size; i++) {
    const pubkey = pick(AUTHORS);
    const created_at = T0 + Math.floor(rnd() * 30);
    const r = rnd();
    if (r < 0.5) {
      const tags = [['t', pick(['nostr', 'Nostr', 'art'])], ['p', pick(AUTHORS)], ['t', 'nostr']];
      if (candidates.length && rnd() < 0.5) tags.push(['e', pick(candidates).id, 'wss://relay', 'reply']);
      candidates.push(unsignedEvent({ pubkey, created_at, kind: pick([1, 7]), tags, content: `note ${i}` }));
    } else if (r < 0.75) {
      candidates.push(unsignedEvent({ pubkey, created_at, kind: pick([0, 3, 10002]), tags: [['p', pick(AUTHORS)]], content: `version ${i}` }));
    } else {
      const d = pick(['a', 'b', '']);
      candidates.push(unsignedEvent({ pubkey, created_at, kind: 30023, tags: d === '' ? [['t', 'long']] : [['d', d], ['t', 'long']], content: `article ${i}` }));
    }
  }
  const deletion = (targets: NostrEvent[]): NostrEvent => {
    const author = rnd() < 0.8 ? targets[0].pubkey : pick(AUTHORS);
    const tags = targets.map((t) => {
      const p = prepareEvent(t);
      return p.dTag !== null && rnd() < 0.5 ? ['a', `${t.kind}:${t.pubkey}:${p.dTag}`] : ['e', t.id];
    });
    return unsignedEvent({ pubkey: author, created_at: T0 + Math.floor(rnd() * 30), kind: 5, tags, content: 'delete' });
  };
  // Shuffle, then sprinkle deletions (naming events anywhere in the input: before or after them) and duplicates.
  const shuffled = [...candidates].sort(() => rnd() - 0.5);
  const input: NostrEvent[] = [];
  for (const e of shuffled) {
    input.push(e);
    if (rnd() < 0.12) input.push(deletion([pick(candidates), ...(rnd() < 0.5 ? [pick(candidates)] : [])]));
    if (rnd() < 0.1) input.push(pick(input));
    // NIP-62: everything of the author's up to its created_at goes, and what comes later of it is refused.
    if (vanish && rnd() < 0.03) input.push(unsignedEvent({ pubkey: pick(AUTHORS), created_at: T0 + Math.floor(rnd() * 30), kind: 62, tags: [['relay', 'ALL_RELAYS']] }));
  }
  const stored = [...shuffled.slice(0, 10), deletion([shuffled[10]]), deletion([shuffled[20]])];
  return { stored, input };
}

interface Outcomes {
  accepted: number;
  duplicate: number;
  replaced: number;
  rejected: number;
}

/**
 * The importers' write step before the bulk path: writeBatch batch by batch, a batch PostgreSQL
 * refuses halved until the event it refuses is isolated; outcomes counted the same way.
 */
async function writeThroughWriteBatch(pool: pg.Pool, events: NostrEvent[], batchSize: number): Promise<Outcomes> {
  const counts: Outcomes = { accepted: 0, duplicate: 0, replaced: 0, rejected: 0 };
  const writeSplitting = async (batch: PreparedEvent[]): Promise<WriteResult[]> => {
    try {
      return await writeBatch(pool, batch);
    } catch (err) {
      if (!/^2[23]/.test((err as { code?: string }).code ?? '') || batch.length === 1) throw err;
      const half = Math.ceil(batch.length / 2);
      return [...(await writeSplitting(batch.slice(0, half))), ...(await writeSplitting(batch.slice(half)))];
    }
  };
  for (let i = 0; i < events.length; i += batchSize) {
    const batch = events.slice(i, i + batchSize).map(prepareEvent);
    const had = await storedAddresses(pool, batch);
    const results = await writeSplitting(batch);
    results.forEach((r, j) => {
      if (r.status === 'stored') {
        counts.accepted++;
        const address = addressOf(batch[j]);
        if (address !== undefined) {
          if (had.has(address)) counts.replaced++;
          had.add(address);
        }
      } else counts[r.status === 'duplicate' ? 'duplicate' : 'rejected']++;
    });
  }
  return counts;
}

async function storedAddresses(pool: pg.Pool, batch: PreparedEvent[]): Promise<Set<string>> {
  const { rows } = await pool.query<{ address: string }>(
    `SELECT kind || ':' || encode(pubkey, 'hex') || ':' || d_tag AS address FROM events WHERE d_tag IS NOT NULL`,
  );
  const wanted = new Set(batch.map(addressOf));
  return new Set(rows.map((r) => r.address).filter((a) => wanted.has(a)));
}

/** Every events row, every column but received_at, in id order. */
async function eventRows(pool: pg.Pool): Promise<string[]> {
  const { rows } = await pool.query<{ row: string }>(
    `SELECT concat_ws(' ', encode(id, 'hex'), encode(pubkey, 'hex'), kind, created_at, coalesce(d_tag, '(null)'), coalesce(expires_at::text, '(null)'), raw) AS row
       FROM events ORDER BY id`,
  );
  return rows.map((r) => r.row);
}

/** Resolves once some connection waits for an advisory lock, or as `settled` does; says which. */
async function untilALockIsAwaited(pool: pg.Pool, settled: Promise<unknown>): Promise<'waiting' | 'settled'> {
  let done = false;
  const finished = settled.then(
    () => (done = true),
    () => (done = true),
  );
  for (;;) {
    const { rows } = await pool.query("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted");
    if (rows.length > 0) return 'waiting';
    if (done) return 'settled';
    await Promise.race([finished, new Promise((r) => setTimeout(r, 10))]);
  }
}

/** A transaction that stands for another import's chunk in flight: it holds an author's NIP-62 key shared, as a chunk of that author's events does. */
async function chunkInFlight(pool: pg.Pool, author: string) {
  const client = await pool.connect();
  await client.query('BEGIN');
  await client.query('SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))', [`vanish:${author}`]);
  return client;
}

const jsonl = (events: NostrEvent[]) => Readable.from([events.map((e) => JSON.stringify(e)).join('\n') + '\n']);

let relayPath: Database;
let bulkPath: Database;

beforeAll(async () => {
  [relayPath, bulkPath] = await Promise.all([openTestStore(), openTestStore()]);
});
afterAll(async () => {
  await relayPath?.close();
  await bulkPath?.close();
});

async function reset(): Promise<void> {
  for (const db of [relayPath, bulkPath]) await db.pool.query('TRUNCATE events, event_tags, vanished');
}

describe('bulk write path', () => {
  // Seed 112 has a batch writeBatch refuses (a kind 5 that deletes the stored current version of an
  // address by id, then a later version of it in the same batch: a unique violation), which both
  // paths then write halved until the event is isolated.
  for (const [seed, batchSize] of [[1, 7], [112, 25], [3, 1000]]) {
    it(`leaves exactly the rows writeBatch leaves, with the same outcomes (seed ${seed}, batches of ${batchSize})`, async () => {
      await reset();
      const { stored, input } = workload(seed, 400);
      for (const db of [relayPath, bulkPath]) await writeBatch(db.pool, stored.map(prepareEvent));

      const expected = await writeThroughWriteBatch(relayPath.pool, input, batchSize);
      const result = await importJsonl(bulkPath.pool, jsonl(input), { policy, batchSize });

      expect(await eventRows(bulkPath.pool)).toEqual(await eventRows(relayPath.pool));
      expect(await tagRows(bulkPath.pool)).toEqual(await tagRows(relayPath.pool));
      expect(result).toMatchObject({ ...expected, invalid: 0 });
      // The workload does exercise every rule.
      expect(expected.duplicate).toBeGreaterThan(0);
      expect(expected.replaced).toBeGreaterThan(0);
      expect(expected.rejected).toBeGreaterThan(0);
    });
  }

  for (const [seed, batchSize] of [[5, 7], [6, 40]]) {
    it(`with requests to vanish among the events, leaves exactly the rows writeBatch leaves (seed ${seed}, batches of ${batchSize})`, async () => {
      await reset();
      const { input } = workload(seed, 400, { vanish: true });
      const expected = await writeThroughWriteBatch(relayPath.pool, input, batchSize);
      const result = await importJsonl(bulkPath.pool, jsonl(input), { policy, batchSize });

      expect(await eventRows(bulkPath.pool)).toEqual(await eventRows(relayPath.pool));
      expect(await tagRows(bulkPath.pool)).toEqual(await tagRows(relayPath.pool));
      expect(result).toMatchObject({ ...expected, invalid: 0 });
      const vanished = await relayPath.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM vanished');
      expect(vanished.rows[0].n).toBeGreaterThan(0);
    });
  }

  it("writes a chunk of an author's events without waiting for another chunk of that author's events to commit", async () => {
    await reset();
    const author = AUTHORS[0];
    const notes = [1, 2, 3].map((i) => unsignedEvent({ pubkey: author, kind: 1, created_at: T0 + i, content: `note ${i}` }));
    const other = await chunkInFlight(bulkPath.pool, author);
    try {
      const writer = new BulkWriter(bulkPath.pool);
      const written = writer.write(notes.map(prepareEvent));
      expect(await untilALockIsAwaited(bulkPath.pool, written)).toBe('settled');
      expect((await written).results).toEqual(notes.map(() => ({ status: 'stored' })));
    } finally {
      await other.query('ROLLBACK');
      other.release();
    }
  });

  it("waits with a request to vanish until another chunk of its author's events has committed, then deletes them", async () => {
    await reset();
    const author = AUTHORS[1];
    const note = unsignedEvent({ pubkey: author, kind: 1, created_at: T0, content: 'written by the other chunk' });
    const request = unsignedEvent({ pubkey: author, kind: 62, created_at: T0 + 10, tags: [['relay', 'ALL_RELAYS']] });
    const other = await chunkInFlight(bulkPath.pool, author);
    try {
      const rows = new EventRows();
      rows.add(prepareEvent(note));
      await copyRows(other, rows.finish());
      const writer = new BulkWriter(bulkPath.pool);
      const written = writer.write([prepareEvent(request)]);
      expect(await untilALockIsAwaited(bulkPath.pool, written)).toBe('waiting');
      await other.query('COMMIT');
      expect((await written).results).toEqual([{ status: 'stored' }]);
    } finally {
      await other.query('ROLLBACK').catch(() => undefined);
      other.release();
    }
    const { rows } = await bulkPath.pool.query<{ kind: number }>('SELECT kind FROM events WHERE pubkey = $1', [Buffer.from(author, 'hex')]);
    expect(rows).toEqual([{ kind: 62 }]);
  });

  it('writes the same rows for a role that is not a superuser', async () => {
    await reset();
    const { input } = workload(4, 150);
    const expected = await writeThroughWriteBatch(relayPath.pool, input, 30);
    const ordinary = await ordinaryRolePool(bulkPath);
    if (!ordinary) return; // the test server does not let us create a role: nothing to compare
    try {
      const result = await importJsonl(ordinary.pool, jsonl(input), { policy, batchSize: 30 });
      expect(result).toMatchObject(expected);
    } finally {
      await ordinary.close();
    }
    expect(await eventRows(bulkPath.pool)).toEqual(await eventRows(relayPath.pool));
    expect(await tagRows(bulkPath.pool)).toEqual(await tagRows(relayPath.pool));
  });

  it('isolates an event PostgreSQL refuses, even with the next chunk in flight, and keeps the input order', async () => {
    await reset();
    const author = AUTHORS[0];
    const first = unsignedEvent({ pubkey: author, kind: 0, created_at: T0, content: 'first' });
    const second = unsignedEvent({ pubkey: author, kind: 0, created_at: T0 + 1, content: 'second' });
    const note = unsignedEvent({ pubkey: author, kind: 1, content: 'a note' });
    // A d value with NUL cannot be stored (the relay's policy refuses such events before this point).
    const refused = { ...prepareEvent(unsignedEvent({ pubkey: author, kind: 30023, tags: [['d', 'nul \u0000']] })) };
    const writer = new BulkWriter(bulkPath.pool);
    const [a, b] = await Promise.all([writer.write([prepareEvent(first), refused, prepareEvent(note)]), writer.write([prepareEvent(second)])]);
    expect(a.results).toEqual([{ status: 'stored' }, { status: 'rejected', reason: expect.stringMatching(/^error: the database refused this event/) }, { status: 'stored' }]);
    expect(b.results).toEqual([{ status: 'stored' }]);
    expect(b.hadVersion).toEqual(new Set([`0:${author}:`]));
    const { rows } = await bulkPath.pool.query<{ content: string }>("SELECT raw::jsonb->>'content' AS content FROM events ORDER BY created_at");
    expect(rows.map((r) => r.content)).toEqual(['a note', 'second']);
  });

  it('beside a relay writing the same replaceable key, ends with the newest version only', async () => {
    await reset();
    const author = AUTHORS[1];
    const version = (i: number, who: string) => unsignedEvent({ pubkey: author, kind: 10002, created_at: T0 + i, content: `${who} ${i}` });
    // The import's versions and the relay's interleave in time; neither side's order is monotonic.
    const imported = Array.from({ length: 300 }, (_, i) => version((i * 7919) % 600, 'import'));
    const published = Array.from({ length: 60 }, (_, i) => version((i * 104729) % 600 + 1, 'relay'));
    const importing = importJsonl(bulkPath.pool, jsonl(imported), { policy, batchSize: 20 });
    const publishing = (async () => {
      for (const e of published) await writeBatch(bulkPath.pool, [prepareEvent(e)]);
    })();
    await Promise.all([importing, publishing]);
    const newest = [...imported, ...published].sort((x, y) => y.created_at - x.created_at || (x.id < y.id ? -1 : 1))[0];
    const { rows } = await bulkPath.pool.query<{ id: string }>("SELECT encode(id, 'hex') AS id FROM events WHERE kind = 10002");
    expect(rows).toEqual([{ id: newest.id }]);
  });

  it('beside a relay publishing the targets of its kind 5s, leaves none of them stored', async () => {
    await reset();
    const author = AUTHORS[2];
    const targets = Array.from({ length: 200 }, (_, i) => unsignedEvent({ pubkey: author, kind: 1, created_at: T0 + i, content: `target ${i}` }));
    const deletions = targets.map((t, i) => unsignedEvent({ pubkey: author, kind: 5, created_at: T0 + 1000 + i, tags: [['e', t.id]] }));
    const importing = importJsonl(bulkPath.pool, jsonl(deletions), { policy, batchSize: 25 });
    const publishing = (async () => {
      for (const e of targets) await writeBatch(bulkPath.pool, [prepareEvent(e)]);
    })();
    await Promise.all([importing, publishing]);
    const { rows } = await bulkPath.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events WHERE kind = 1');
    expect(rows[0].n).toBe(0);
  });
});
