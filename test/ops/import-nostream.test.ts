// import-nostream against a real nostream-shaped table (the columns of nostream's `events`) filled
// with really signed events, checked event by event.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readCheckpoint } from '../../src/ops/checkpoint.js';
import { importNostream, nostreamCheckpointName } from '../../src/ops/nostream/import-nostream.js';
import { canonicalEventJson, ID_MISMATCH, type NostrEvent } from '../../src/nostr/event.js';
import { indexedTags } from '../../src/nostr/tags.js';
import { policyFrom } from '../../src/policy/policy.js';
import { SignatureVerifier } from '../../src/nostr/verifier.js';
import type { Database } from '../../src/store/database.js';
import { streamEvents } from '../../src/store/read.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now } from '../support/keys.js';
import { nostreamEventsTable } from '../../bench/lib/nostream-schema.js';
import { insertNostreamRows, openTestStore, storedRaw, store, tagRows, testConfig } from './helpers.js';

const NOSTREAM_SCHEMA = nostreamEventsTable('events');

interface Row {
  event: NostrEvent;
  deleted?: boolean;
  expiresAt?: number;
  /** Store this content instead of the signed one (a corrupted row). */
  content?: string;
  /** Store event_tags as NULL (nostream's column is nullable), whatever the signed tags. */
  nullTags?: boolean;
}

let source: pg.Pool;
let sourceUrl: string;
const policy = policyFrom(testConfig());
const alice = newSigner();
const bob = newSigner();
const carol = newSigner();
const t = now() - 1000;

// The source data, and what the import must make of it.
const note = alice.sign({ kind: 1, created_at: t, content: 'hello', tags: [['t', 'nostr'], ['p', bob.pubkey]] });
const escapes = alice.sign({
  kind: 1,
  created_at: t + 1,
  content: 'quotes " and \\ and\nnewlines\tand 🎉',
  tags: [['t', 'quote " back \\ slash'], ['r', 'line\nbreak\ttab\r'], ['x', 'ctl \u0001 \u001f \u2028 é'], ['e', 'a'.repeat(64), '', 'root'], ['alt', 'multi', 'values']],
});
const deletedByKind5 = alice.sign({ kind: 1, created_at: t + 2, content: 'deleted later' });
const kind5 = alice.sign({ kind: 5, created_at: t + 3, tags: [['e', deletedByKind5.id], ['k', '1']] });
const softDeletedOnly = bob.sign({ kind: 1, created_at: t + 4, content: 'soft-deleted, no kind 5 in the source' });
const expiredByColumn = bob.sign({ kind: 1, created_at: t + 5, content: 'expired', tags: [['expiration', String(t + 10)]] });
const expiredByTag = bob.sign({ kind: 1, created_at: t + 6, content: 'expired, tag only', tags: [['expiration', String(t + 10)]] });
const notYetExpired = bob.sign({ kind: 1, created_at: t + 7, content: 'expires later', tags: [['expiration', String(now() + 86_400)]] });
const profiles = [0, 1, 2].map((i) => alice.sign({ kind: 0, created_at: t + 10 + i, content: JSON.stringify({ name: `alice v${i}` }) }));
const articleOld = bob.sign({ kind: 30023, created_at: t + 20, tags: [['d', 'post']], content: 'v1' });
const articleNew = bob.sign({ kind: 30023, created_at: t + 21, tags: [['d', 'post']], content: 'v2' });
const otherArticle = bob.sign({ kind: 30023, created_at: t + 22, tags: [['d', 'other'], ['t', 'x']], content: 'other' });
const tampered = bob.sign({ kind: 1, created_at: t + 30, content: 'the original' });
const ephemeral = bob.sign({ kind: 20001, created_at: t + 31, content: 'ephemeral' });
const alreadyHere = bob.sign({ kind: 1, created_at: t + 32, content: 'already in the target' });
const softDeletedHere = bob.sign({ kind: 1, created_at: t + 33, content: 'soft-deleted, but the target has it' });
// Rows with event_tags NULL: an event with no tags (for every kind class), and one whose tags were lost.
const untagged = carol.sign({ kind: 1, created_at: t + 60, content: 'no tags' });
const untaggedContacts = carol.sign({ kind: 3, created_at: t + 61 });
const untaggedArticle = carol.sign({ kind: 30023, created_at: t + 62, content: 'no d tag' });
const tagsLost = carol.sign({ kind: 1, created_at: t + 63, content: 'its tags were lost', tags: [['t', 'lost']] });
const manyNotes = Array.from({ length: 12 }, (_, i) => bob.sign({ kind: 1, created_at: t + 40 + i, content: `note ${i}`, tags: [['t', `n${i % 3}`]] }));

const rows: Row[] = [
  { event: note },
  { event: escapes },
  { event: deletedByKind5, deleted: true },
  { event: kind5 },
  { event: softDeletedOnly, deleted: true },
  { event: expiredByColumn, expiresAt: t + 10 },
  { event: expiredByTag },
  { event: notYetExpired, expiresAt: now() + 86_400 },
  ...profiles.map((event) => ({ event })),
  { event: articleOld },
  { event: articleNew },
  { event: otherArticle },
  { event: tampered, content: 'tampered with' },
  { event: ephemeral },
  { event: alreadyHere },
  { event: softDeletedHere, deleted: true },
  ...[untagged, untaggedContacts, untaggedArticle, tagsLost].map((event) => ({ event, nullTags: true })),
  ...manyNotes.map((event) => ({ event })),
];

const expectedStored = [note, escapes, kind5, notYetExpired, profiles[2], articleNew, otherArticle, alreadyHere, untagged, untaggedContacts, untaggedArticle, ...manyNotes];

/** What writing each group's versions in event_id order gives: accepted, replacing, refused as older. */
function replay(groups: NostrEvent[][]): { accepted: number; replaced: number; refused: number } {
  const out = { accepted: 0, replaced: 0, refused: 0 };
  for (const group of groups) {
    let current: number | undefined;
    for (const e of [...group].sort((a, b) => (a.id < b.id ? -1 : 1))) {
      if (current !== undefined && e.created_at < current) out.refused++;
      else {
        out.accepted++;
        if (current !== undefined) out.replaced++;
        current = e.created_at;
      }
    }
  }
  return out;
}

/** What a REQ for `author`'s events gets: their raw JSON, sorted. */
async function served(pool: pg.Pool, author: string): Promise<string[]> {
  const raw: string[] = [];
  await streamEvents(pool, [{ authors: [author], tags: [], limit: 100 }], now(), (rows) => (raw.push(...rows.map((r) => r.raw)), true));
  return raw.sort();
}

async function freshTarget(): Promise<Database> {
  const db = await openTestStore();
  await store(db.pool, [alreadyHere, softDeletedHere]);
  return db;
}

beforeAll(async () => {
  sourceUrl = await createTestDatabase({ empty: true }) // a nostream database: its own tables;
  source = new pg.Pool({ connectionString: sourceUrl, max: 2 });
  await source.query(NOSTREAM_SCHEMA);
  await insertNostreamRows(source, rows);
  const nullTags = rows.filter((r) => r.nullTags).map((r) => Buffer.from(r.event.id, 'hex'));
  await source.query('UPDATE events SET event_tags = NULL WHERE event_id = ANY($1::bytea[])', [nullTags]);
});

afterAll(async () => {
  await source?.end();
});

describe('import-nostream', () => {
  it('imports every live event exactly, and leaves out deleted, expired and invalid rows', async () => {
    const target = await freshTarget();
    try {
      const refused: Array<[string, string]> = [];
      const result = await importNostream(source, target.pool, nostreamCheckpointName(sourceUrl), {
        policy,
        batchSize: 5,
        onRefused: (id, reason) => refused.push([id, reason]),
      });

      // Event by event: exactly the expected events, each byte for byte as signed.
      expect(await storedRaw(target.pool)).toEqual(expectedStored.map(canonicalEventJson).sort());
      // Their tag rows are those of the tag rule.
      const expectedTags = expectedStored
        .flatMap((e) => indexedTags(e.tags).map(([n, v]) => `${e.id} ${n} ${e.kind} ${e.created_at} ${v}`))
        .sort();
      expect(await tagRows(target.pool)).toEqual(expectedTags);

      // Versions of one address arrive in event_id order: a newer one replaces, an older one is refused.
      const versions = replay([profiles, [articleOld, articleNew]]);
      expect(result).toMatchObject({
        complete: true,
        read: rows.length,
        softDeleted: 3,
        removed: 1, // softDeletedHere was in the target
        expired: 2,
        accepted: 20 + versions.accepted,
        replaced: versions.replaced,
        duplicate: 1, // alreadyHere
        invalid: 2, // tampered, tagsLost
        rejected: 1 + versions.refused, // ephemeral, older versions
      });
      expect(refused).toEqual(
        expect.arrayContaining([
          [tampered.id, 'invalid: event id does not match the sha256 of its serialization'],
          [tagsLost.id, ID_MISMATCH],
          [ephemeral.id, expect.stringMatching(/^ephemeral:/)],
        ]),
      );
      expect(refused).toHaveLength(3 + versions.refused);
    } finally {
      await target.close();
    }
  });

  it('reads a NULL event_tags as no tags: imports and serves the event if its id verifies with tags [], refuses it otherwise', async () => {
    const target = await freshTarget();
    try {
      const refused: Array<[string, string]> = [];
      await importNostream(source, target.pool, nostreamCheckpointName(sourceUrl), { policy, onRefused: (id, reason) => refused.push([id, reason]) });
      const expected = [untagged, untaggedContacts, untaggedArticle].map(canonicalEventJson).sort();
      expect(expected.every((raw) => raw.includes('"tags":[]'))).toBe(true);
      expect(await served(target.pool, carol.pubkey)).toEqual(expected);
      // Replaceable and addressable alike: no d tag, so the address's d is ''.
      const { rows: keys } = await target.pool.query("SELECT kind, d_tag FROM events WHERE pubkey = $1 AND d_tag IS NOT NULL ORDER BY kind", [Buffer.from(carol.pubkey, 'hex')]);
      expect(keys).toEqual([{ kind: 3, d_tag: '' }, { kind: 30023, d_tag: '' }]);
      expect(refused.filter(([id]) => id === tagsLost.id)).toEqual([[tagsLost.id, ID_MISMATCH]]);
    } finally {
      await target.close();
    }
  });

  it('keeps soft-deleted events out for good: the imported kind 5 blocks a republication', async () => {
    const target = await freshTarget();
    try {
      await importNostream(source, target.pool, nostreamCheckpointName(sourceUrl), { policy });
      const { writeBatch } = await import('../../src/store/write.js');
      const { prepareEvent } = await import('../../src/store/prepared-event.js');
      const [again] = await writeBatch(target.pool, [prepareEvent(deletedByKind5)]);
      expect(again).toEqual({ status: 'rejected', reason: expect.stringMatching(/^blocked: .*deleted/) });
    } finally {
      await target.close();
    }
  });

  it('interrupted and resumed, ends with the same events and the same totals', async () => {
    const whole = await freshTarget();
    const resumed = await freshTarget();
    const name = nostreamCheckpointName(sourceUrl);
    try {
      const full = await importNostream(source, whole.pool, name, { policy, batchSize: 4 });
      const part = await importNostream(source, resumed.pool, name, { policy, batchSize: 4, maxBatches: 2 });
      expect(part).toMatchObject({ complete: false, read: 8 });
      expect(await readCheckpoint(resumed.pool, name)).toMatchObject({ counts: { read: 8 } });
      const rest = await importNostream(source, resumed.pool, name, { policy, batchSize: 4 });
      expect(rest).toMatchObject({ complete: true, readThisRun: rows.length - 8 });
      expect(await storedRaw(resumed.pool)).toEqual(await storedRaw(whole.pool));
      expect(await tagRows(resumed.pool)).toEqual(await tagRows(whole.pool));
      const totals = ({ seconds, readThisRun, resumedAfter, ...counts }: typeof full) => counts;
      expect(totals(rest)).toEqual(totals(full));
      expect(await readCheckpoint(resumed.pool, name)).toBeUndefined();
    } finally {
      await whole.close();
      await resumed.close();
    }
  });

  it('with a verifier, refuses a row whose signature does not match', async () => {
    const forged = { ...bob.sign({ kind: 1, created_at: t + 60, content: 'forged' }) };
    forged.sig = alice.sign({ kind: 1, created_at: t + 60, content: 'other' }).sig;
    const url = await createTestDatabase({ empty: true });
    const small = new pg.Pool({ connectionString: url, max: 2 });
    const target = await openTestStore();
    const verifier = new SignatureVerifier(0);
    try {
      await small.query(NOSTREAM_SCHEMA.replace(/,\s*event_delegator\s+bytea/, '')); // a newer nostream
      for (const e of [forged, note]) {
        await small.query(
          'INSERT INTO events (event_id, event_pubkey, event_kind, event_created_at, event_content, event_tags, event_signature) VALUES ($1, $2, $3, $4, $5, $6, $7)',
          [Buffer.from(e.id, 'hex'), Buffer.from(e.pubkey, 'hex'), e.kind, e.created_at, e.content, JSON.stringify(e.tags), Buffer.from(e.sig, 'hex')],
        );
      }
      const result = await importNostream(small, target.pool, nostreamCheckpointName(url), { policy, verifier });
      expect(result).toMatchObject({ accepted: 1, invalid: 1, reasons: { 'invalid: bad signature': 1 } });
      expect(await storedRaw(target.pool)).toEqual([canonicalEventJson(note)]);
    } finally {
      await verifier.close();
      await small.end();
      await target.close();
    }
  });

  it('refuses a source without nostream columns', async () => {
    const url = await createTestDatabase({ empty: true });
    const other = new pg.Pool({ connectionString: url, max: 1 });
    const target = await openTestStore();
    try {
      await other.query('CREATE TABLE events (id bytea PRIMARY KEY, raw text)');
      await expect(importNostream(other, target.pool, 'x', { policy })).rejects.toThrow(/no nostream events table.*event_id/);
    } finally {
      await other.end();
      await target.close();
    }
  });
});
