// import-nostream --empty-target against the normal mode: the same nostream source (really signed
// events) imported both ways must leave the same rows, column by column, in `events` and
// `event_tags`, with every index and constraint of a migrated database; the mode must refuse a store
// that holds events; and an interrupted phase 1 must leave the store empty for a run that completes.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readCheckpoint } from '../../src/ops/checkpoint.js';
import { TargetNotEmptyError } from '../../src/ops/nostream/empty-target-load.js';
import { emptyTargetCheckpointName, importNostream, nostreamCheckpointName, type ImportNostreamOptions } from '../../src/ops/nostream/import-nostream.js';
import { canonicalEventJson, ID_MISMATCH, type NostrEvent } from '../../src/nostr/event.js';
import { policyFrom } from '../../src/policy/policy.js';
import { SignatureVerifier } from '../../src/nostr/verifier.js';
import { openDatabase, withDatabaseName, type Database } from '../../src/store/database.js';
import { streamEvents } from '../../src/store/read.js';
import { nostreamEventsTable } from '../../bench/lib/nostream-schema.js';
import { runCli } from '../support/cli.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now, type Signer } from '../support/keys.js';
import { insertNostreamRows, openTestStore, type NostreamRow, silentLog, store, storedIds, tagRows, testConfig } from './helpers.js';

const policy = policyFrom(testConfig());
const t = now() - 10_000;
const alice = newSigner();
const bob = newSigner();
const carol = newSigner();
const wrapper = newSigner(); // NIP-59: gift wraps are signed by throwaway keys
const dave = newSigner(); // the rows with event_tags NULL

/** Signs `template` again (with a nonce tag) until its id passes `test`. */
function signWhere(signer: Signer, template: Partial<NostrEvent>, test: (id: string) => boolean): NostrEvent {
  for (let nonce = 0; ; nonce++) {
    const e = signer.sign({ ...template, tags: [...(template.tags ?? []), ['nonce', String(nonce)]] });
    if (test(e.id)) return e;
  }
}

/** Signs `template` so that its id sorts before or after `other`'s: it comes first or later in the source. */
const signOrdered = (signer: Signer, template: Partial<NostrEvent>, order: 'before' | 'after', other: NostrEvent) =>
  signWhere(signer, template, (id) => (order === 'before' ? id < other.id : id > other.id));

type Row = NostreamRow & {
  /** Store event_tags as NULL (nostream's column is nullable), whatever the signed tags. */
  nullTags?: boolean;
};

// Regular events, and kind 5s naming them by e, before and after them in event_id order.
const notes = Array.from({ length: 9 }, (_, i) =>
  (i % 2 ? alice : bob).sign({ kind: 1, created_at: t + i, content: `note ${i}`, tags: [['t', `n${i % 3}`], ['p', carol.pubkey]] }),
);
const escapes = alice.sign({
  kind: 1,
  created_at: t + 20,
  content: 'quotes " and \\ and\nnewlines\tand 🎉',
  tags: [['t', 'quote " back \\ slash'], ['r', 'line\nbreak\ttab\r'], ['x', 'ctl \u0001 \u001f \u2028 é'], ['alt', 'multi', 'values']],
});
const expiresLater = bob.sign({ kind: 1, created_at: t + 21, content: 'expires later', tags: [['expiration', String(now() + 86_400)]] });
const deletedBefore = alice.sign({ kind: 1, created_at: t + 30, content: 'deleted by a kind 5 that comes first' });
const deletionFirst = signOrdered(alice, { kind: 5, created_at: t + 31, tags: [['e', deletedBefore.id], ['k', '1']] }, 'before', deletedBefore);
const deletedAfter = alice.sign({ kind: 1, created_at: t + 32, content: 'deleted by a kind 5 that comes later' });
const deletionLater = signOrdered(alice, { kind: 5, created_at: t + 33, tags: [['e', deletedAfter.id]] }, 'after', deletedAfter);
const notBobs = alice.sign({ kind: 1, created_at: t + 34, content: 'bob may not delete this' });
const bobsDeletion = bob.sign({ kind: 5, created_at: t + 35, tags: [['e', notBobs.id]] });
const deletionOfDeletion = alice.sign({ kind: 5, created_at: t + 36, tags: [['e', deletionFirst.id]] });
// A kind 5 that nostream soft-deleted: not imported, so its target stays.
const spared = bob.sign({ kind: 1, created_at: t + 37, content: 'its deletion was soft-deleted' });
const softDeletedDeletion = bob.sign({ kind: 5, created_at: t + 38, tags: [['e', spared.id]] });

// Replaceable versions (several rows of one address: written in order), and a kind 5 by a.
const profiles = [0, 2, 4].map((i) => alice.sign({ kind: 0, created_at: t + 40 + i, content: JSON.stringify({ name: `alice v${i}` }) }));
const profileDeletion = alice.sign({ kind: 5, created_at: t + 43, tags: [['a', `0:${alice.pubkey}:`]] }); // takes v0 and v2, not v4
const contacts = [
  bob.sign({ kind: 3, created_at: t + 50, tags: [['p', alice.pubkey]] }),
  bob.sign({ kind: 3, created_at: t + 52, tags: [['p', alice.pubkey], ['p', carol.pubkey]] }),
  bob.sign({ kind: 3, created_at: t + 52, tags: [['p', carol.pubkey]] }), // a tie: the lowest id wins
  bob.sign({ kind: 3, created_at: t + 51, tags: [['p', carol.pubkey], ['t', 'older']] }),
];
const articleVersions = [carol.sign({ kind: 30023, created_at: t + 60, tags: [['d', 'x']], content: 'v1' }), carol.sign({ kind: 30023, created_at: t + 61, tags: [['d', 'x']], content: 'v2' })];
// Single versions (loaded in phase 1), deleted by a, before and after in event_id order, by e, or not at all.
const articleA = bob.sign({ kind: 30023, created_at: t + 70, tags: [['d', 'a'], ['t', 'long']], content: 'a' });
const articleADeletion = signOrdered(bob, { kind: 5, created_at: t + 71, tags: [['a', `30023:${bob.pubkey}:a`]] }, 'before', articleA);
const articleB = bob.sign({ kind: 30023, created_at: t + 72, tags: [['d', 'b']], content: 'b' });
const articleBDeletion = signOrdered(bob, { kind: 5, created_at: t + 73, tags: [['a', `30023:${bob.pubkey}:b`]] }, 'after', articleB);
const articleNewer = bob.sign({ kind: 30023, created_at: t + 75, tags: [['d', 'c']], content: 'newer than its deletion' });
const articleNewerDeletion = bob.sign({ kind: 5, created_at: t + 74, tags: [['a', `30023:${bob.pubkey}:c`]] });
const relayList = alice.sign({ kind: 10002, created_at: t + 76, tags: [['r', 'wss://relay.example']] });
const relayListDeletion = alice.sign({ kind: 5, created_at: t + 77, tags: [['e', relayList.id]] });
const otherList = carol.sign({ kind: 10000, created_at: t + 78, tags: [['p', bob.pubkey]] });

// Kind 62 (naming another relay, so it deletes nothing here): a kind 5 naming it has no effect, after it or before it.
const vanish = alice.sign({ kind: 62, created_at: t + 80, tags: [['relay', 'wss://another-relay.example']] });
const vanishDeletion = signOrdered(alice, { kind: 5, created_at: t + 81, tags: [['e', vanish.id]] }, 'after', vanish);
const vanishAfterDeletion = bob.sign({ kind: 62, created_at: t + 82, tags: [['relay', 'wss://another-relay.example']] });
const vanishEarlierDeletion = signOrdered(bob, { kind: 5, created_at: t + 83, tags: [['e', vanishAfterDeletion.id]] }, 'before', vanishAfterDeletion);
// Gift wraps deleted by their recipient's kind 5, in both orders: refused when the kind 5 came
// first, deleted when it came after. Each pair is far apart in event_id order, so the kind 5 and
// its wrap land in different batches (and phases).
const early = (id: string) => id < '4';
const late = (id: string) => id >= 'c';
const wrapRefused = signWhere(wrapper, { kind: 1059, created_at: t + 90, tags: [['p', carol.pubkey]], content: 'sealed 1' }, late);
const wrapRefusedDeletion = signWhere(carol, { kind: 5, created_at: t + 91, tags: [['e', wrapRefused.id]] }, early);
const wrapDeleted = signWhere(wrapper, { kind: 1059, created_at: t + 92, tags: [['p', carol.pubkey]], content: 'sealed 2' }, early);
const wrapDeletedDeletion = signWhere(carol, { kind: 5, created_at: t + 93, tags: [['e', wrapDeleted.id]] }, late);

// Rows with event_tags NULL, read as no tags: single versions of each kind class (phase 1), an
// address with two versions whose d is '' either way (the split must see them as one: phase 2), and
// a row whose tags were lost (its id verifies only with them: refused).
const untagged = dave.sign({ kind: 1, created_at: t + 110, content: 'no tags' });
const untaggedContacts = dave.sign({ kind: 3, created_at: t + 111 });
const untaggedArticle = dave.sign({ kind: 30023, created_at: t + 112, content: 'no d tag' });
const emptyDOlder = dave.sign({ kind: 30024, created_at: t + 113, tags: [['d', '']], content: 'older, d empty' });
const untaggedNewer = dave.sign({ kind: 30024, created_at: t + 114, content: 'newer, no tags' });
const tagsLost = dave.sign({ kind: 1, created_at: t + 115, content: 'its tags were lost', tags: [['t', 'lost']] });

// Rows the import leaves out or refuses.
const ephemeral = bob.sign({ kind: 20001, created_at: t + 100, content: 'ephemeral' });
const expiredByColumn = bob.sign({ kind: 1, created_at: t + 101, content: 'expired', tags: [['expiration', String(t + 200)]] });
const expiredByTag = bob.sign({ kind: 1, created_at: t + 102, content: 'expired, tag only', tags: [['expiration', String(t + 200)]] });
const softDeleted = alice.sign({ kind: 1, created_at: t + 103, content: 'soft-deleted' });
const softDeletedProfile = carol.sign({ kind: 0, created_at: t + 104, content: '{}' });
const tampered = bob.sign({ kind: 1, created_at: t + 105, content: 'the original' });
const tamperedList = carol.sign({ kind: 10002, created_at: t + 106, tags: [['r', 'wss://x']] });
const badKind = alice.signLoose({ kind: 70000, created_at: t + 107, tags: [], content: 'kind out of range' }) as Row['event'];

const rows: Row[] = [
  ...[...notes, escapes, expiresLater, deletedBefore, deletionFirst, deletedAfter, deletionLater, notBobs, bobsDeletion, deletionOfDeletion, spared].map((event) => ({ event })),
  { event: softDeletedDeletion, deleted: true },
  ...[...profiles, profileDeletion, ...contacts, ...articleVersions].map((event) => ({ event })),
  ...[articleA, articleADeletion, articleB, articleBDeletion, articleNewer, articleNewerDeletion, relayList, relayListDeletion, otherList].map((event) => ({ event })),
  ...[vanish, vanishDeletion, vanishAfterDeletion, vanishEarlierDeletion, wrapRefused, wrapRefusedDeletion, wrapDeleted, wrapDeletedDeletion, ephemeral, expiredByTag, badKind].map((event) => ({ event })),
  { event: expiredByColumn, expiresAt: t + 200 },
  { event: softDeleted, deleted: true },
  { event: softDeletedProfile, deleted: true },
  { event: tampered, content: 'tampered with' },
  { event: tamperedList, content: 'tampered with' },
  { event: emptyDOlder },
  ...[untagged, untaggedContacts, untaggedArticle, untaggedNewer, tagsLost].map((event) => ({ event, nullTags: true })),
];

let source: pg.Pool;
let sourceUrl: string;
let checkpointName: string;

async function fillSource(pool: pg.Pool, list: Row[]): Promise<void> {
  await pool.query(nostreamEventsTable('events'));
  await insertNostreamRows(pool, list);
  const nullTags = list.filter((r) => r.nullTags).map((r) => Buffer.from(r.event.id, 'hex'));
  await pool.query('UPDATE events SET event_tags = NULL WHERE event_id = ANY($1::bytea[])', [nullTags]);
}

beforeAll(async () => {
  sourceUrl = await createTestDatabase({ empty: true }) // a nostream database: its own tables;
  checkpointName = nostreamCheckpointName(sourceUrl);
  source = new pg.Pool({ connectionString: sourceUrl, max: 2 });
  await fillSource(source, rows);
});

afterAll(async () => {
  await source?.end();
});

/** Every column of every event but received_at, and every tag row, in a fixed order. */
async function snapshot(pool: pg.Pool): Promise<{ events: unknown[]; tags: string[] }> {
  const { rows: events } = await pool.query(
    `SELECT encode(id, 'hex') AS id, encode(pubkey, 'hex') AS pubkey, kind, created_at, d_tag, expires_at, raw FROM events ORDER BY id`,
  );
  return { events, tags: await tagRows(pool) };
}

/** The definitions of the two tables' indexes and constraints, and whether each is valid. */
async function schema(pool: pg.Pool): Promise<unknown> {
  const indexes = await pool.query(
    `SELECT indexname, indexdef, x.indisvalid, x.indisready
       FROM pg_indexes i JOIN pg_index x ON x.indexrelid = (quote_ident(i.schemaname) || '.' || quote_ident(i.indexname))::regclass
      WHERE i.tablename IN ('events', 'event_tags') ORDER BY indexname`,
  );
  const constraints = await pool.query(
    `SELECT conrelid::regclass::text AS "table", conname, contype, pg_get_constraintdef(oid) AS definition, convalidated
       FROM pg_constraint WHERE conrelid IN ('events'::regclass, 'event_tags'::regclass) ORDER BY conname`,
  );
  return { indexes: indexes.rows, constraints: constraints.rows };
}

const run = (db: Database, options: Partial<ImportNostreamOptions> = {}) => importNostream(source, db.pool, checkpointName, { policy, batchSize: 4, ...options });

/** The store the normal mode leaves, computed once. */
let normal: { events: unknown[]; tags: string[] } | undefined;
async function normalModeRows(): Promise<{ events: unknown[]; tags: string[] }> {
  if (!normal) {
    const db = await openTestStore();
    try {
      await run(db);
      normal = await snapshot(db.pool);
    } finally {
      await db.close();
    }
  }
  return normal;
}

describe('import-nostream --empty-target', () => {
  it('leaves the rows the normal mode leaves, column for column, with deletions, versions, gift wraps and refusals', async () => {
    const normalDb = await openTestStore();
    const db = await openTestStore();
    try {
      const before = await run(normalDb);
      const result = await run(db, { emptyTarget: true });
      expect(await snapshot(db.pool)).toEqual(await snapshot(normalDb.pool));

      // Not vacuous: the cases are there, as the relay's rules decide them.
      const stored = await storedIds(db.pool);
      for (const e of [...notes, escapes, expiresLater, notBobs, spared, profiles[2], contacts[2].id < contacts[1].id ? contacts[2] : contacts[1], articleVersions[1], articleNewer, otherList, vanish, vanishAfterDeletion, untagged, untaggedContacts, untaggedArticle, untaggedNewer]) {
        expect(stored.has(e.id), `${e.kind} ${e.content} stored`).toBe(true);
      }
      for (const e of [deletedBefore, deletedAfter, profiles[0], profiles[1], articleA, articleB, relayList, wrapRefused, wrapDeleted, contacts[0], contacts[3], softDeleted, tampered, emptyDOlder, tagsLost]) {
        expect(stored.has(e.id), `${e.kind} ${e.content} gone`).toBe(false);
      }
      expect((await db.pool.query('SELECT count(*)::int AS n FROM events WHERE kind = 5')).rows[0].n).toBe(13);

      // Phase 1 loaded the regular events and the single versions; phase 2 wrote the rest in order.
      expect(result).toMatchObject({ complete: true, emptyTargetLoad: { complete: true } });
      const inOrder = rows.filter((r) => [5, 62, 1059].includes(r.event.kind as number) || [...profiles, ...contacts, ...articleVersions, emptyDOlder, untaggedNewer].includes(r.event as NostrEvent));
      expect(result.emptyTargetLoad!.read).toBe(rows.length - inOrder.length);
      // Every row is counted once; only accepted/rejected can differ (a regular event named by a
      // kind 5 is loaded and then deleted, where the normal mode may refuse it).
      for (const r of [before, result]) expect(r.accepted + r.rejected + r.duplicate + r.invalid + r.softDeleted + r.expired).toBe(rows.length);
      const { read, softDeleted: soft, expired, invalid, duplicate } = before;
      expect(result).toMatchObject({ read, softDeleted: soft, expired, invalid, duplicate });
      expect(await readCheckpoint(db.pool, emptyTargetCheckpointName(checkpointName))).toBeUndefined();
    } finally {
      await normalDb.close();
      await db.close();
    }
  });

  it("reads a NULL event_tags as no tags in both phases (d = '' for the split and the store), and refuses a row whose id needs tags", async () => {
    const db = await openTestStore();
    try {
      const refused: Array<[string, string]> = [];
      const result = await run(db, { emptyTarget: true, onRefused: (id, reason) => refused.push([id, reason]) });
      expect(result.complete).toBe(true);
      // Served as signed, with "tags":[]; the older version of the two at 30024:dave: is replaced.
      const expected = [untagged, untaggedContacts, untaggedArticle, untaggedNewer].map(canonicalEventJson).sort();
      expect(expected.every((raw) => raw.includes('"tags":[]'))).toBe(true);
      const served: string[] = [];
      await streamEvents(db.pool, [{ authors: [dave.pubkey], tags: [], limit: 100 }], now(), (rows) => (served.push(...rows.map((r) => r.raw)), true));
      expect(served.sort()).toEqual(expected);
      const { rows: keys } = await db.pool.query('SELECT kind, d_tag FROM events WHERE pubkey = $1 AND d_tag IS NOT NULL ORDER BY kind', [Buffer.from(dave.pubkey, 'hex')]);
      expect(keys).toEqual([{ kind: 3, d_tag: '' }, { kind: 30023, d_tag: '' }, { kind: 30024, d_tag: '' }]);
      expect(refused.filter(([id]) => id === tagsLost.id)).toEqual([[tagsLost.id, ID_MISMATCH]]);
    } finally {
      await db.close();
    }
  });

  it('leaves every index and constraint of a migrated store, built and valid', async () => {
    const db = await openTestStore();
    try {
      const result = await run(db, { emptyTarget: true });
      expect(result.emptyTargetLoad?.complete).toBe(true);
      expect(await schema(db.pool)).toEqual(await schema((await normalStoreSchema()).pool));
    } finally {
      await db.close();
    }
  });

  it('refuses a store that already holds events, and leaves it as it was', async () => {
    const db = await openTestStore();
    try {
      await store(db.pool, [notes[0]]);
      const before = await snapshot(db.pool);
      await expect(run(db, { emptyTarget: true })).rejects.toThrow(TargetNotEmptyError);
      expect(await snapshot(db.pool)).toEqual(before);
      expect(await schema(db.pool)).toEqual(await schema((await normalStoreSchema()).pool));
    } finally {
      await db.close();
    }
  });

  it('stopped during phase 1, rolls back to an empty store; the next run completes', async () => {
    const db = await openTestStore();
    try {
      const stop = new AbortController();
      const stopped = await run(db, {
        emptyTarget: true,
        signal: stop.signal,
        progress: { setTotal() {}, update: (done) => done >= 12 && stop.abort(), stop() {} }, // Ctrl-C after a few batches
      });
      expect(stopped).toMatchObject({ complete: false, accepted: 0, emptyTargetLoad: { complete: false } });
      expect(stopped.emptyTargetLoad!.loaded).toBeGreaterThan(0); // it had loaded some before stopping
      expect(await snapshot(db.pool)).toEqual({ events: [], tags: [] });
      expect(await readCheckpoint(db.pool, emptyTargetCheckpointName(checkpointName))).toBeUndefined();

      const again = await run(db, { emptyTarget: true });
      expect(again.complete).toBe(true);
      expect(await snapshot(db.pool)).toEqual(await normalModeRows());
    } finally {
      await db.close();
    }
  });

  it('killed just before phase 1 commits (indexes rebuilt), leaves an empty store with its indexes; the next run completes', async () => {
    const db = await openTestStore();
    const admin = new pg.Client({ connectionString: db.url });
    const watcher = new pg.Client({ connectionString: db.url }); // outside a transaction, so pg_stat_activity is current
    await admin.connect();
    await watcher.connect();
    try {
      // Hold the checkpoint's key: phase 1 saves the checkpoint last, in its own transaction, and waits here.
      await admin.query('BEGIN');
      await admin.query(`INSERT INTO ops_checkpoints (name, position) VALUES ($1, 'held')`, [emptyTargetCheckpointName(checkpointName)]);
      const importing = run(db, { emptyTarget: true });
      importing.catch(() => undefined);
      for (;;) {
        const { rows: waiting } = await watcher.query(
          `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%ops_checkpoints%'`,
        );
        if (waiting.length) {
          await watcher.query('SELECT pg_terminate_backend($1)', [waiting[0].pid]);
          break;
        }
        await new Promise((r) => setTimeout(r, 20));
      }
      await expect(importing).rejects.toThrow();
      await admin.query('ROLLBACK');

      expect(await snapshot(db.pool)).toEqual({ events: [], tags: [] });
      expect(await schema(db.pool)).toEqual(await schema((await normalStoreSchema()).pool));
      const again = await run(db, { emptyTarget: true });
      expect(again.complete).toBe(true);
      expect(await snapshot(db.pool)).toEqual(await normalModeRows());
    } finally {
      await admin.end();
      await watcher.end();
      await db.close();
    }
  });

  it('resumes an interrupted phase 2 from its checkpoint, with the same rows and totals as one run', async () => {
    const whole = await openTestStore();
    const resumed = await openTestStore();
    try {
      const full = await run(whole, { emptyTarget: true });
      const part = await run(resumed, { emptyTarget: true, maxBatches: 1 });
      expect(part).toMatchObject({ complete: false, emptyTargetLoad: { complete: true } });
      const saved = await readCheckpoint<{ read: number }>(resumed.pool, emptyTargetCheckpointName(checkpointName));
      expect(saved?.position).toMatch(/^[0-9a-f]{64}$/);
      expect(saved!.counts.read).toBeLessThan(rows.length);

      const rest = await run(resumed, { emptyTarget: true });
      expect(rest.complete).toBe(true);
      expect(rest.emptyTargetLoad).toBeUndefined(); // phase 1 is not done twice
      expect(await snapshot(resumed.pool)).toEqual(await snapshot(whole.pool));
      const totals = ({ seconds, readThisRun, resumedAfter, emptyTargetLoad, ...counts }: typeof full) => counts;
      expect(totals(rest)).toEqual(totals(full));
    } finally {
      await whole.close();
      await resumed.close();
    }
  });

  it('with a verifier, refuses a row whose signature does not match, in either phase', async () => {
    const forgedNote = { ...bob.sign({ kind: 1, created_at: t + 300, content: 'forged' }), sig: alice.sign({ kind: 1, content: 'x' }).sig };
    const forgedDeletion = { ...bob.sign({ kind: 5, created_at: t + 301, tags: [['e', notes[0].id]] }), sig: forgedNote.sig };
    const url = await createTestDatabase({ empty: true });
    const small = new pg.Pool({ connectionString: url, max: 2 });
    const db = await openTestStore();
    const verifier = new SignatureVerifier(0);
    try {
      await fillSource(small, [forgedNote, forgedDeletion, notes[0], notes[1]].map((event) => ({ event })));
      const result = await importNostream(small, db.pool, nostreamCheckpointName(url), { policy, verifier, emptyTarget: true });
      expect(result).toMatchObject({ complete: true, accepted: 2, invalid: 2, reasons: { 'invalid: bad signature': 2 }, emptyTargetLoad: { read: 3 } });
      expect(await storedIds(db.pool)).toEqual(new Set([notes[0].id, notes[1].id]));
    } finally {
      await verifier.close();
      await small.end();
      await db.close();
    }
  });

  it('as a role that owns its database but is not a superuser, leaves the rows and schema of the normal mode', async (ctx) => {
    const adminUrl = await createTestDatabase(); // a database of the test server, as its superuser
    const role = `owner_${Math.random().toString(36).slice(2, 10)}`;
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    try {
      await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${role}' NOSUPERUSER`);
    } catch {
      await admin.end();
      ctx.skip(); // the test server does not let us create a role
      return;
    }
    const name = `${role}_db`;
    await admin.query(`CREATE DATABASE ${name} OWNER ${role}`);
    const url = new URL(withDatabaseName(adminUrl, name));
    url.username = role;
    url.password = role;
    const db = await openDatabase(testConfig({ DATABASE_URL: url.toString() }), silentLog);
    try {
      const result = await run(db, { emptyTarget: true });
      expect(result.complete).toBe(true);
      expect(await snapshot(db.pool)).toEqual(await normalModeRows());
      expect(await schema(db.pool)).toEqual(await schema((await normalStoreSchema()).pool));
    } finally {
      await db.close();
      await admin.query(`DROP DATABASE ${name}`);
      await admin.query(`DROP ROLE ${role}`);
      await admin.end();
    }
  });
});

/** A migrated store to compare schemas with (opened once). */
let migratedStore: Database | undefined;
async function normalStoreSchema(): Promise<Database> {
  migratedStore ??= await openTestStore();
  return migratedStore;
}
afterAll(async () => {
  await migratedStore?.close();
});

const cli = (args: string[], databaseUrl: string) => runCli(args, { DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn' });

describe('import-nostream --empty-target (CLI)', () => {
  it('loads an empty store and says what each phase did; refuses with exit code 1 once the store holds events', async () => {
    const db = await openTestStore();
    try {
      // Batches of 4, as normalModeRows: see the gift wraps above.
      const first = await cli(['import-nostream', '--empty-target', '--batch', '4', '--from', sourceUrl], db.url);
      expect(first.code).toBe(0);
      expect(first.stderr).toMatch(new RegExp(`^event ${tampered.id}: invalid: event id does not match`, 'm')); // refusals, one per line
      expect(first.stdout).toMatch(/^phase 1: +\d+ rows in [\d.]+ s .*, \d+ events loaded, indexes built in [\d.]+ s$/m);
      expect(first.stdout).toMatch(new RegExp(`^rows read: +${rows.length}$`, 'm'));
      expect(first.stdout).toMatch(/^complete$/m);
      expect(await snapshot(db.pool)).toEqual(await normalModeRows());

      const again = await cli(['import-nostream', '--empty-target', '--from', sourceUrl], db.url);
      expect(again.code).toBe(1);
      expect(again.stderr).toMatch(/already holds events/);
      expect(await snapshot(db.pool)).toEqual(await normalModeRows());
    } finally {
      await db.close();
    }
  });

  it('says in its help that the store must be empty and the relay stopped', async () => {
    const { code, stdout } = await cli(['import-nostream', '--help'], 'postgres://unused@127.0.0.1:1/none');
    expect(code).toBe(0);
    expect(stdout).toMatch(/--empty-target/);
    expect(stdout).toMatch(/store must be EMPTY and the relay\s+MUST NOT be running/);
  });
});

