import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseDuration, parseKinds, pruneEvents, startRetention } from '../../src/store/retention.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import type { Database } from '../../src/store/database.js';
import { TestClient } from '../support/client.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay } from '../support/relay.js';
import { openTestStore, silentLog, storedIds, store, testConfig, unsignedEvent } from '../ops/helpers.js';

const NOW = 1_800_000_000;
const DAY = 86_400;
let db: Database;

const old = (kind: number, extra: Partial<NostrEvent> = {}) => unsignedEvent({ kind, created_at: NOW - 40 * DAY, content: `old ${kind} ${Math.random()}`, ...extra });
const recent = (kind: number) => unsignedEvent({ kind, created_at: NOW - DAY, content: `recent ${kind} ${Math.random()}` });

let oldNotes: NostrEvent[];
let oldReactions: NostrEvent[];
let oldProfile: NostrEvent;
let oldArticle: NostrEvent;
let oldDeletion: NostrEvent;
let fresh: NostrEvent[];

beforeAll(async () => {
  db = await openTestStore();
});
afterAll(async () => {
  await db?.close();
});
beforeEach(async () => {
  await db.pool.query('TRUNCATE events, event_tags');
  oldNotes = Array.from({ length: 7 }, (_, i) => old(1, { created_at: NOW - 40 * DAY + i, tags: [['t', 'old']] }));
  oldReactions = Array.from({ length: 3 }, () => old(7));
  oldProfile = old(0, { pubkey: 'b'.repeat(64) }); // another author than the recent profile's
  oldArticle = old(30023, { tags: [['d', 'a']] });
  oldDeletion = old(5, { tags: [['e', 'f'.repeat(64)]] });
  fresh = [recent(1), recent(7), recent(0)];
  await store(db.pool, [...oldNotes, ...oldReactions, oldProfile, oldArticle, oldDeletion, ...fresh]);
});

const ids = (events: NostrEvent[]) => new Set(events.map((e) => e.id));

describe('prune', () => {
  it('removes regular events older than the age, in batches, and reports them by kind', async () => {
    const result = await pruneEvents(db.pool, { olderThanSeconds: 30 * DAY, now: NOW, batchSize: 2 });
    expect(result).toMatchObject({ removed: 10, byKind: { 1: 7, 7: 3 }, cutoff: NOW - 30 * DAY, complete: true });
    expect(await storedIds(db.pool)).toEqual(ids([oldProfile, oldArticle, oldDeletion, ...fresh]));
    const tags = await db.pool.query("SELECT count(*)::int AS n FROM event_tags WHERE value = 'old'");
    expect(tags.rows[0].n).toBe(0);
  });

  it('keeps replaceable and addressable current versions and deletion requests unless asked', async () => {
    const result = await pruneEvents(db.pool, { olderThanSeconds: 30 * DAY, now: NOW, includeReplaceable: true, kinds: [0, 1, 5, 7, 30023] });
    expect(result).toMatchObject({ removed: 13, byKind: { 0: 1, 1: 7, 5: 1, 7: 3, 30023: 1 } });
    expect(await storedIds(db.pool)).toEqual(ids(fresh));
  });

  it('limits itself to the listed kinds', async () => {
    const result = await pruneEvents(db.pool, { olderThanSeconds: 30 * DAY, now: NOW, kinds: [7], batchSize: 1 });
    expect(result).toMatchObject({ removed: 3, byKind: { 7: 3 } });
    expect(await storedIds(db.pool)).toEqual(ids([...oldNotes, oldProfile, oldArticle, oldDeletion, ...fresh]));
  });

  it('by kind alone removes that kind at any age', async () => {
    const result = await pruneEvents(db.pool, { kinds: [7] });
    expect(result.byKind).toEqual({ 7: 4 });
  });

  it('in a dry run counts by kind and removes nothing', async () => {
    const result = await pruneEvents(db.pool, { olderThanSeconds: 30 * DAY, now: NOW, dryRun: true });
    expect(result).toMatchObject({ removed: 10, byKind: { 1: 7, 7: 3 } });
    expect((await storedIds(db.pool)).size).toBe(16);
  });

  it('refuses to run with neither an age nor kinds', async () => {
    await expect(pruneEvents(db.pool, {})).rejects.toThrow(/never removes everything/);
  });

  it('parses ages and kind lists', () => {
    expect([parseDuration('30d'), parseDuration('12h'), parseDuration('90m'), parseDuration('45s'), parseDuration('2w')]).toEqual([2_592_000, 43_200, 5_400, 45, 1_209_600]);
    expect(() => parseDuration('30 days')).toThrow(/not a duration/);
    expect(parseKinds('1, 7,7,30023')).toEqual([1, 7, 30023]);
    expect(() => parseKinds('1,x')).toThrow(/not a comma-separated list/);
  });
});

describe('retention inside the relay', () => {
  it('runs at start when RETENTION_OLDER_THAN is set, with the configured kinds', async () => {
    const agedReaction = unsignedEvent({ kind: 7, created_at: Math.floor(Date.now() / 1000) - 3 * DAY, content: 'aged' });
    const agedNote = unsignedEvent({ kind: 1, created_at: Math.floor(Date.now() / 1000) - 3 * DAY, content: 'aged note' });
    await store(db.pool, [agedReaction, agedNote]);
    const stop = startRetention(db.pool, testConfig({ RETENTION_OLDER_THAN: '2d', RETENTION_KINDS: '7' }), silentLog);
    try {
      for (let i = 0; i < 100 && (await storedIds(db.pool)).has(agedReaction.id); i++) await new Promise((r) => setTimeout(r, 20));
      const left = await storedIds(db.pool);
      expect(left.has(agedReaction.id)).toBe(false);
      expect(left.has(agedNote.id)).toBe(true);
      expect(left.has(fresh[1].id)).toBe(true); // a kind 7 of yesterday
    } finally {
      stop();
    }
  });

  it('runs periodically in a relay started with RETENTION_* and stops with it', async () => {
    const relay = await startTestRelay({ RETENTION_OLDER_THAN: '1d', RETENTION_INTERVAL_SECONDS: '1' });
    const client = await TestClient.connect(relay.url);
    try {
      const signer = newSigner();
      const aged = signer.sign({ kind: 1, created_at: Math.floor(Date.now() / 1000) - 2 * 86_400, content: 'two days old' });
      const today = signer.sign({ kind: 1, content: 'today' });
      expect(await client.publish(aged)).toEqual([true, '']);
      expect(await client.publish(today)).toEqual([true, '']);
      let left = await storedIds(relay.db.pool);
      for (let i = 0; i < 60 && left.has(aged.id); i++) {
        await new Promise((r) => setTimeout(r, 50));
        left = await storedIds(relay.db.pool);
      }
      expect(left).toEqual(new Set([today.id]));
    } finally {
      client.close();
      await relay.close();
    }
  });

  it('is off without RETENTION_OLDER_THAN', async () => {
    const stop = startRetention(db.pool, testConfig({ RETENTION_KINDS: '1' }), silentLog);
    await new Promise((r) => setTimeout(r, 100));
    stop();
    expect((await storedIds(db.pool)).size).toBe(16);
  });

  it('refuses a malformed RETENTION_OLDER_THAN or RETENTION_KINDS at start-up', () => {
    expect(() => testConfig({ RETENTION_OLDER_THAN: 'a month' })).toThrow(/RETENTION_OLDER_THAN/);
    expect(() => testConfig({ RETENTION_OLDER_THAN: '30d', RETENTION_KINDS: '1,70000' })).toThrow(/RETENTION_KINDS/);
  });
});
