// The cross-process feed (src/store/feed.ts) on a real database: whatever another writer commits is
// announced once, also when transactions commit out of their txid order, also across pages; a
// transaction that rolls back is never announced, nor one the local writer claimed.
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { ChangeStream, type Change } from '../../src/store/changes.js';
import { createPool, type Database } from '../../src/store/database.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { ChangeFeed } from '../../src/store/feed.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatchStored } from '../../src/store/write.js';
import { openTestStore, silentLog, unsignedEvent } from '../ops/helpers.js';
import { until as untilWithin } from '../support/wait.js';

let db: Database;
let feed: ChangeFeed | undefined;
beforeAll(async () => {
  db = await openTestStore();
});
afterEach(async () => {
  await feed?.stop();
  feed = undefined;
});
afterAll(() => db?.close());

let n = 0;
const event = () => unsignedEvent({ content: `feed ${++n}`, created_at: 1_700_000_000 + n });

/** A feed that polls rarely: each read in these tests is caused by a NOTIFY or by the test. */
async function startFeed(pageRows?: number, options: { removals?: boolean; pool?: pg.Pool; spacingMs?: number } = {}) {
  const changes = new ChangeStream();
  const announced: Change[] = [];
  changes.subscribe((c) => announced.push(c));
  const reads = { unchanged: 0, full: 0 };
  feed = await new ChangeFeed(db.url, options.pool ?? db.pool, changes, silentLog, {
    pollMs: 60_000,
    pageRows,
    removals: options.removals,
    spacingMs: options.spacingMs,
    onRead: (result) => reads[result]++,
  }).start();
  // A feed starts from the cluster's oldest transaction in flight (it must not step past one), so a
  // transaction of another test file, on another database of the same server, can make it announce an
  // earlier test's commit once more: what it says before its first settled read is not this test's.
  await settle();
  announced.length = 0;
  const ids = () => announced.flatMap((c) => (c.type === 'stored' ? c.events.map((p) => p.event.id) : []));
  const removedIds = () => announced.flatMap((c) => (c.type === 'removed' ? c.ids : []));
  return { changes, announced, ids, removedIds, reads };
}

/** A removal recorded as a DELETE's trigger records it, but without its NOTIFY: only a read finds it. */
async function removalWithoutNotify(): Promise<string> {
  const id = randomBytes(32);
  await db.pool.query('INSERT INTO event_removals (id) VALUES ($1)', [id]);
  return id.toString('hex');
}

const until = (check: () => boolean, what: string) => untilWithin(check, what, 5000);

/** Reads until the feed has no more to say (two reads in a row, each started after the last ended). */
async function settle(): Promise<void> {
  for (let i = 0; i < 2; i++) {
    await new Promise<void>((resolve) => {
      feed!.afterNextRead(resolve);
      feed!.requestRead();
    });
  }
  await new Promise((r) => setImmediate(r));
}

async function insert(client: pg.PoolClient, e = event()): Promise<string> {
  await client.query(`INSERT INTO events (id, pubkey, kind, created_at, raw) VALUES ($1, $2, $3, $4, $5)`, [
    Buffer.from(e.id, 'hex'),
    Buffer.from(e.pubkey, 'hex'),
    e.kind,
    e.created_at,
    JSON.stringify(e),
  ]);
  return e.id;
}

describe('ChangeFeed', () => {
  it('announces another writer\'s commit after its NOTIFY, exactly as stored, marked remote', async () => {
    const { announced, ids } = await startFeed();
    const client = await db.pool.connect();
    try {
      const e = event();
      await insert(client, e);
      await until(() => ids().length === 1, 'the insert is announced');
      expect(ids()).toEqual([e.id]);
      const change = announced[0];
      expect(change).toMatchObject({ type: 'stored', source: 'remote' });
      expect(change.type === 'stored' && change.events[0].raw).toBe(JSON.stringify(e));
    } finally {
      client.release();
    }
  });

  it('does not step past a transaction still in flight: a lower txid committed later is announced too', async () => {
    const { ids } = await startFeed();
    const [early, late] = [await db.pool.connect(), await db.pool.connect()];
    try {
      await early.query('BEGIN');
      const first = await insert(early); // takes the lower txid
      await late.query('BEGIN');
      const second = await insert(late);
      await late.query('COMMIT');
      await until(() => ids().includes(second), 'the later txid, committed first');
      await settle(); // the horizon must not pass the open transaction
      await early.query('COMMIT');
      await until(() => ids().includes(first), 'the earlier txid, committed second');
      await settle();
      expect(ids()).toEqual([second, first]);
    } finally {
      early.release();
      late.release();
    }
  });

  it('never announces a rolled-back transaction, and each committed one once however often it reads', async () => {
    const { ids } = await startFeed();
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await insert(client);
      await client.query('ROLLBACK');
      const kept = await insert(client);
      await until(() => ids().length > 0, 'the committed insert');
      for (let i = 0; i < 3; i++) await settle();
      expect(ids()).toEqual([kept]);
    } finally {
      client.release();
    }
  });

  it('reads a large transaction in pages, in its insert order, each row once', async () => {
    const { ids } = await startFeed(3);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const inserted: string[] = [];
      for (let i = 0; i < 10; i++) inserted.push(await insert(client));
      await client.query('COMMIT');
      await until(() => ids().length >= 10, 'all ten rows');
      await settle();
      expect(ids()).toEqual(inserted);
    } finally {
      client.release();
    }
  });

  /**
   * An insert in `client`'s own transaction, claimed as the local writer claims its own, committed,
   * then released (the writer does not know whether the commit went through): the feed announces
   * it only once it is released.
   */
  async function claimCommitRelease(client: pg.PoolClient, ids: () => string[]): Promise<void> {
    await client.query('BEGIN');
    const id = await insert(client);
    const { rows } = await client.query<{ txid: string }>('SELECT pg_current_xact_id()::text AS txid');
    feed!.claim(rows[0].txid);
    await client.query('COMMIT');
    await settle();
    expect(ids()).toEqual([]);
    feed!.release(rows[0].txid);
    await until(() => ids().length === 1, 'the released transaction');
    expect(ids()).toEqual([id]);
  }

  it('leaves to the local writer what it claimed, and announces it if the commit fails', async () => {
    const { ids } = await startFeed();
    const e = event();
    const written = await writeBatchStored(db.pool, [prepareEvent(e)], { own: feed });
    expect(written.stored.map((p) => p.event.id)).toEqual([e.id]);
    expect(written.lsn).toBeGreaterThan(0n);
    await settle();
    expect(ids()).toEqual([]);

    // A claim released (the commit failed as far as the writer knows): the database decides.
    const client = await db.pool.connect();
    try {
      await claimCommitRelease(client, ids);
    } finally {
      client.release();
    }
  });


  it('settles a transaction whose txid came with its commit: the writer announces it unless a read did first, and a lost answer is read', async () => {
    const { ids, reads } = await startFeed();
    const client = await db.pool.connect();
    const pid = (client as unknown as { processID: number }).processID;
    const commit = async () => {
      feed!.expect(pid);
      await client.query('BEGIN');
      const id = await insert(client);
      const { rows } = await client.query<{ txid: string }>('SELECT pg_current_xact_id()::text AS txid');
      await client.query('COMMIT');
      return { id, txid: rows[0].txid };
    };
    try {
      // Settled before any read: the writer announces it; its NOTIFY, from the expected backend, asked
      // for no read, and the reads that follow leave it out.
      const before = reads.full + reads.unchanged;
      const first = await commit();
      await new Promise((r) => setTimeout(r, 100));
      expect(reads.full + reads.unchanged).toBe(before);
      expect(feed!.settle(pid, first.txid)).toBe(true);
      await settle();
      expect(ids()).toEqual([]);

      // A read that got there first announced it: the writer must not.
      const second = await commit();
      await settle();
      expect(ids()).toEqual([second.id]);
      expect(feed!.settle(pid, second.txid)).toBe(false);

      // The answer lost (undefined): whatever was committed is read and announced.
      const third = await commit();
      expect(feed!.settle(pid, undefined)).toBe(false);
      await until(() => ids().length === 2, 'the transaction whose answer was lost');
      expect(ids()).toEqual([second.id, third.id]);
      expect(feed!.settle(pid, null)).toBe(false); // nothing stored: nothing to announce
    } finally {
      client.release();
    }
  });

  it('readSince(mark) turns true once a read begun after the mark has delivered what it read, not for a read under way at the mark', async () => {
    const { changes } = await startFeed();
    const mark = feed!.readMark();
    expect(feed!.readSince(mark)).toBe(false);
    const e = event();
    let sinceWhenDelivered: boolean | undefined;
    changes.subscribe((c) => {
      if (c.type === 'stored' && c.events.some((p) => p.event.id === e.id)) sinceWhenDelivered = feed!.readSince(mark);
    });
    const client = await db.pool.connect();
    try {
      await insert(client, e);
    } finally {
      client.release();
    }
    await until(() => feed!.readSince(mark), 'a read begun after the mark');
    // Its event reached the listeners before the read counted: a subscription that keeps the ids
    // it sent as stored until readSince cannot be sent that event again as live.
    expect(sinceWhenDelivered).toBe(false);

    // A read under way when the mark is taken does not count; the next one does.
    feed!.requestRead(true);
    const during = feed!.readMark();
    await until(() => feed!.readSince(during - 1), 'the read under way');
    await new Promise((r) => setTimeout(r, 50));
    expect(feed!.readSince(during)).toBe(false);
    feed!.requestRead(true);
    await until(() => feed!.readSince(during), 'a read begun after the second mark');
  });
  it('announces a released transaction that a read has not passed, though nothing ended since the last snapshot', async () => {
    const { ids } = await startFeed();
    // An older transaction left open holds the horizon below the claimed one.
    const holder = await db.pool.connect();
    const client = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT pg_current_xact_id()');
      await claimCommitRelease(client, ids);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
      client.release();
    }
  });

  it('asks only for the snapshot while no transaction has ended, and reads in full once one has, NOTIFY or not', async () => {
    const { removedIds, reads } = await startFeed(undefined, { removals: true });
    await settle();
    // Other test files commit on the same server: wait for a quiet moment rather than assume one.
    for (const quiet = Date.now() + 15_000; reads.unchanged === 0 && Date.now() < quiet; ) await settle();
    expect(reads.unchanged).toBeGreaterThan(0);
    const full = reads.full;
    const removed = await removalWithoutNotify();
    await settle();
    expect(reads.full).toBeGreaterThan(full);
    expect(removedIds()).toEqual([removed]);
  });

  it('compares with the snapshot of its last read\'s first statement: what ended between that read\'s statements is read next', async () => {
    // The removals statement comes first; a removal committed after it and before the rows statement
    // is missing from that read, and visible in the rows statement's snapshot. Comparing with that
    // later snapshot would find nothing changed and never read the removal.
    let between: (() => Promise<string>) | undefined;
    let committedBetween: string | undefined;
    const pool = Object.create(db.pool) as pg.Pool;
    pool.query = (async (...args: Parameters<pg.Pool['query']>) => {
      const result = await (db.pool.query as (...a: unknown[]) => Promise<unknown>)(...args);
      if (between && String(args[0]).includes('FROM event_removals')) {
        const commit = between;
        between = undefined;
        committedBetween = await commit();
      }
      return result;
    }) as pg.Pool['query'];
    const { removedIds } = await startFeed(undefined, { removals: true, pool });
    await settle();
    between = removalWithoutNotify;
    const first = await removalWithoutNotify(); // a change, so the next read runs its statements
    await settle();
    expect(committedBetween).toBeDefined();
    await settle();
    expect(removedIds()).toEqual([first, committedBetween]);
  });

  it('spaces its reads: whatever asks within spacingMs of the last read\'s start shares the next read, which still sees every commit', async () => {
    const spacingMs = 150;
    const { ids, reads } = await startFeed(undefined, { spacingMs });
    const before = reads.unchanged + reads.full;
    const started = performance.now();
    // A REQ-heavy load: something asks for a read on every turn of the event loop.
    let asking = true;
    const ask = () => {
      if (!asking) return;
      feed!.requestRead();
      setImmediate(ask);
    };
    ask();
    const e = prepareEvent(event());
    await writeBatchStored(db.pool, [e]);
    await until(() => ids().includes(e.event.id), 'the commit announced');
    await new Promise((r) => setTimeout(r, 3 * spacingMs));
    asking = false;
    const elapsed = performance.now() - started;
    const count = reads.unchanged + reads.full - before;
    // Timers never fire early: however slow the machine, no more than one read per spacingMs began.
    expect(count).toBeGreaterThanOrEqual(2);
    expect(count).toBeLessThanOrEqual(Math.ceil(elapsed / spacingMs) + 1);
    expect(ids()).toEqual([e.event.id]);
  });

  it('passes ephemeral events between feeds, small ones in the payload and large ones through the table', async () => {
    const { changes } = await startFeed();
    const other = new ChangeStream();
    const received: string[] = [];
    other.subscribe((c) => c.type === 'ephemeral' && received.push(c.event.raw));
    const otherFeed = await new ChangeFeed(db.url, db.pool, other, silentLog, { pollMs: 60_000 }).start();
    try {
      const small = Array.from({ length: 30 }, (_, i) => prepareEvent(unsignedEvent({ kind: 20001, content: `small ${i} ${'s'.repeat(500)}` })));
      const large = prepareEvent(unsignedEvent({ kind: 20002, content: 'L'.repeat(20_000) }));
      const sent = [...small.slice(0, 15), large, ...small.slice(15)];
      for (const p of sent) changes.publish({ type: 'ephemeral', event: p, source: 'local' });
      await until(() => received.length === sent.length, 'every ephemeral event at the other feed');
      expect(received).toEqual(sent.map((p) => p.raw));
      // Its own come back to the sender on the channel, and are skipped there.
      expect(feed!.stats.ephemeralReceived).toBe(0);
    } finally {
      await otherFeed.stop();
    }
  });
});

describe('the feed tells when the database cannot be read', () => {
  it('reachable turns false when reads fail (connections refused) or hang (a frozen server), and true once a read succeeds', async () => {
    const proxy = await startTcpProxy(db.url);
    const url = new URL(db.url);
    url.host = new URL(proxy.url).host;
    const pool = createPool(url.toString(), { DB_POOL_SIZE: 4, QUERY_TIMEOUT_MS: 60_000 }, silentLog);
    try {
      await startFeed(undefined, { pool });
      expect(feed!.reachable).toBe(true);
      // Refused: the read fails.
      proxy.cut();
      feed!.requestRead();
      await until(() => !feed!.reachable, 'unreachable after a failed read');
      proxy.restore();
      feed!.requestRead();
      await until(() => feed!.reachable, 'reachable after a read succeeded');
      // Frozen: the read neither ends nor fails.
      proxy.freeze();
      await new Promise((r) => setTimeout(r, 50));
      feed!.requestRead();
      await untilWithin(() => !feed!.reachable, 'unreachable while a read hangs', 10_000);
      proxy.thaw();
      await until(() => feed!.reachable, 'reachable once the hung read finished');
    } finally {
      await feed?.stop();
      feed = undefined;
      await pool.end();
      await proxy.close();
    }
  });
});
