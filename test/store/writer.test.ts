import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import { createKnex } from '../../src/store/database.js';
import { migrateLatest } from '../../src/store/migrate.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatch } from '../../src/store/write.js';
import { EventWriter, WriterBusyError } from '../../src/store/writer.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now } from '../support/keys.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { until } from '../support/wait.js';

let pool: pg.Pool;
const log = createLogger('silent');
beforeAll(async () => {
  const url = await createTestDatabase();
  const knex = await createKnex(url);
  await migrateLatest(knex);
  await knex.destroy();
  pool = new pg.Pool({ connectionString: url, max: 4 });
});
afterAll(async () => {
  await pool.end();
});

const storedIds = async (pubkey: string) =>
  (await pool.query(`SELECT encode(id, 'hex') AS id FROM events WHERE pubkey = $1`, [Buffer.from(pubkey, 'hex')])).rows.map((r) => r.id);

describe('writeBatch', () => {
  it('leaves only the winner of two versions of a replaceable event written in one batch, tags included', async () => {
    const alice = newSigner();
    const older = prepareEvent(alice.sign({ kind: 3, created_at: now() - 10, tags: [['p', 'a'.repeat(64)]] }));
    const newer = prepareEvent(alice.sign({ kind: 3, created_at: now() - 5, tags: [['p', 'b'.repeat(64)]] }));
    const results = await writeBatch(pool, [older, newer]);
    expect(results).toEqual([{ status: 'stored' }, { status: 'stored' }]);
    expect(await storedIds(alice.pubkey)).toEqual([newer.event.id]);
    const tags = await pool.query(`SELECT value FROM event_tags WHERE event_id = ANY($1::bytea[])`, [[older, newer].map((p) => Buffer.from(p.event.id, 'hex'))]);
    expect(tags.rows.map((r) => r.value)).toEqual(['b'.repeat(64)]);
  });

  it('replaces a stored version and refuses an older one in the next batch', async () => {
    const bob = newSigner();
    const [v1, v2, v0] = [10, 20, 5].map((age) => prepareEvent(bob.sign({ kind: 30023, created_at: now() - 100 + age, tags: [['d', 'post']] })));
    await writeBatch(pool, [v1]);
    const results = await writeBatch(pool, [v2, v0]);
    expect(results[0]).toEqual({ status: 'stored' });
    expect(results[1]).toMatchObject({ status: 'rejected', reason: expect.stringMatching(/^blocked: /) });
    expect(await storedIds(bob.pubkey)).toEqual([v2.event.id]);
  });

  it('applies a deletion request and the events it names in one batch in arrival order', async () => {
    const carol = newSigner();
    const note = prepareEvent(carol.sign({ content: 'to delete' }));
    const keep = prepareEvent(carol.sign({ content: 'to keep' }));
    const deletion = prepareEvent(carol.sign({ kind: 5, tags: [['e', note.event.id]] }));
    expect((await writeBatch(pool, [note, keep, deletion])).map((r) => r.status)).toEqual(['stored', 'stored', 'stored']);
    expect((await storedIds(carol.pubkey)).sort()).toEqual([keep.event.id, deletion.event.id].sort());
    expect(await writeBatch(pool, [note])).toEqual([{ status: 'rejected', reason: 'blocked: this event was deleted by its author' }]);
  });

  it('decides a batch of plain events in one statement exactly as planBatch would: duplicates, deleted, vanished, stored, tags and all', async () => {
    const dave = newSigner();
    const erin = newSigner();
    const stored = prepareEvent(dave.sign({ content: 'stored before' }));
    const deleted = prepareEvent(dave.sign({ content: 'deleted before it came' }));
    const byOther = prepareEvent(erin.sign({ content: 'named by a deletion of someone else' }));
    const old = prepareEvent(erin.sign({ content: 'before the vanish', created_at: now() - 100 }));
    await writeBatch(pool, [stored]);
    await writeBatch(pool, [prepareEvent(dave.sign({ kind: 5, tags: [['e', deleted.event.id], ['e', byOther.event.id]] }))]);
    await writeBatch(pool, [prepareEvent(erin.sign({ kind: 62, created_at: now() - 50, tags: [['relay', 'ALL_RELAYS']] }))]);
    const fresh = prepareEvent(dave.sign({ content: 'new', tags: [['t', 'plain'], ['p', erin.pubkey]] }));
    const late = prepareEvent(erin.sign({ content: 'after the vanish' }));
    const results = await writeBatch(pool, [fresh, stored, deleted, fresh, byOther, old, late]);
    expect(results).toEqual([
      { status: 'stored' },
      { status: 'duplicate' },
      { status: 'rejected', reason: 'blocked: this event was deleted by its author' },
      { status: 'duplicate' },
      { status: 'stored' }, // a kind 5 deletes only its own author's events
      { status: 'rejected', reason: expect.stringMatching(/^blocked: .*NIP-62/) },
      { status: 'stored' },
    ]);
    const daves = await storedIds(dave.pubkey); // and the kind 5
    expect(daves).toHaveLength(3);
    expect(daves).toEqual(expect.arrayContaining([stored.event.id, fresh.event.id]));
    const tags = await pool.query(`SELECT name, value FROM event_tags WHERE event_id = $1 ORDER BY name`, [Buffer.from(fresh.event.id, 'hex')]);
    expect(tags.rows).toEqual([{ name: 'p', value: erin.pubkey }, { name: 't', value: 'plain' }]);
  });

  it('lets another version take the key of a stored version that a deletion earlier in the batch named by id', async () => {
    const erin = newSigner();
    const stored = prepareEvent(erin.sign({ kind: 10002, created_at: now() - 50, tags: [['r', 'wss://a']] }));
    await writeBatch(pool, [stored]);
    const deletion = prepareEvent(erin.sign({ kind: 5, tags: [['e', stored.event.id]] }));
    const older = prepareEvent(erin.sign({ kind: 10002, created_at: now() - 60, tags: [['r', 'wss://b']] }));
    expect(await writeBatch(pool, [deletion, older])).toEqual([{ status: 'stored' }, { status: 'stored' }]);
    expect((await storedIds(erin.pubkey)).sort()).toEqual([deletion.event.id, older.event.id].sort());
  });
});

describe('EventWriter', () => {
  it('groups concurrent submissions into few transactions and settles each only after its commit', async () => {
    const writer = new EventWriter(pool, log, { maxBatch: 500, maxQueue: 10_000 });
    const dave = newSigner();
    const events = Array.from({ length: 300 }, (_, i) => prepareEvent(dave.sign({ created_at: now() - i, content: `n${i}` })));
    const results = await Promise.all(
      events.map(async (p) => {
        const result = await writer.submit(p);
        // Committed by the time the promise settles: visible to a different connection.
        const { rowCount } = await pool.query('SELECT 1 FROM events WHERE id = $1', [Buffer.from(p.event.id, 'hex')]);
        return [result.status, rowCount];
      }),
    );
    expect(results.every(([status, rows]) => status === 'stored' && rows === 1)).toBe(true);
    expect(writer.stats.events).toBe(300);
    expect(writer.stats.batches).toBeLessThan(10);
  });

  it('refuses with WriterBusyError past its queue cap instead of growing without bound', async () => {
    const writer = new EventWriter(pool, log, { maxBatch: 10, maxQueue: 5 });
    const erin = newSigner();
    const submissions = Array.from({ length: 8 }, (_, i) => writer.submit(prepareEvent(erin.sign({ content: `q${i}` }))));
    const settled = await Promise.allSettled(submissions);
    expect(settled.filter((s) => s.status === 'fulfilled')).toHaveLength(5);
    expect(settled.filter((s) => s.status === 'rejected').every((s) => (s as PromiseRejectedResult).reason instanceof WriterBusyError)).toBe(true);
  });

  it('isolates an event the database refuses, so the rest of its batch is stored', async () => {
    const writer = new EventWriter(pool, log, { maxBatch: 500, maxQueue: 1000 });
    const frank = newSigner();
    const good = Array.from({ length: 9 }, (_, i) => prepareEvent(frank.sign({ content: `ok${i}` })));
    // TEXT cannot hold U+0000: a raw JSON with a literal NUL makes PostgreSQL refuse the row.
    const bad = { ...prepareEvent(frank.sign({ content: 'bad' })), raw: '{"broken":"\u0000"}' };
    const all = [...good.slice(0, 4), bad, ...good.slice(4)];
    const settled = await Promise.allSettled(all.map((p) => writer.submit(p)));
    expect(settled[4].status).toBe('rejected');
    expect(settled.filter((s, i) => i !== 4).every((s) => s.status === 'fulfilled' && s.value.status === 'stored')).toBe(true);
    expect((await storedIds(frank.pubkey)).length).toBe(9);
  });
});

describe('EventWriter while the database is unavailable', () => {
  let url: string;
  beforeAll(async () => {
    url = (pool as unknown as { options: { connectionString: string } }).options.connectionString;
  });

  const throughProxy = (port: string) => {
    const u = new URL(url);
    u.port = port;
    return new pg.Pool({ connectionString: u.toString(), max: 2 });
  };

  it('retries a batch until the database answers again, and settles each event only after its commit', async () => {
    const proxy = await startTcpProxy(url);
    const proxied = throughProxy(new URL(proxy.url).port);
    proxied.on('error', () => undefined);
    const writer = new EventWriter(proxied, log, { retryMs: 60_000 });
    const alice = newSigner();
    try {
      proxy.cut();
      let settled = 0;
      const pending = Array.from({ length: 5 }, (_, i) =>
        writer.submit(prepareEvent(alice.sign({ kind: 1, created_at: now(), content: `retry ${i}` }))).finally(() => settled++),
      );
      await until(() => writer.stats.retries >= 2, 'two retries while refused');
      expect(settled).toBe(0);
      expect(await storedIds(alice.pubkey)).toEqual([]);
      proxy.restore();
      expect(await Promise.all(pending)).toEqual(Array(5).fill({ status: 'stored' }));
      expect((await storedIds(alice.pubkey)).length).toBe(5);
    } finally {
      await proxied.end();
      await proxy.close();
    }
  });

  it('answers with the error once an event has waited WRITE_TIMEOUT_MS (or at once with 0), and never stores what it refused', async () => {
    const proxy = await startTcpProxy(url);
    const proxied = throughProxy(new URL(proxy.url).port);
    proxied.on('error', () => undefined);
    const alice = newSigner();
    try {
      proxy.cut();
      await expect(new EventWriter(proxied, log, { retryMs: 0 }).submit(prepareEvent(alice.sign({ kind: 1, created_at: now(), content: 'no retry' })))).rejects.toThrow();
      const writer = new EventWriter(proxied, log, { retryMs: 600 });
      await expect(writer.submit(prepareEvent(alice.sign({ kind: 1, created_at: now(), content: 'short retry' })))).rejects.toThrow();
      expect(writer.stats.retries).toBeGreaterThan(0);
      proxy.restore();
      expect(await storedIds(alice.pubkey)).toEqual([]);
    } finally {
      await proxied.end();
      await proxy.close();
    }
  });
});
