import { Readable, Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exportEvents, parseExportFilters } from '../../src/ops/export.js';
import { importJsonl } from '../../src/ops/import-jsonl.js';
import { canonicalEventJson, type NostrEvent } from '../../src/nostr/event.js';
import { policyFrom } from '../../src/policy/policy.js';
import { SignatureVerifier } from '../../src/nostr/verifier.js';
import type { Database } from '../../src/store/database.js';
import { newSigner, now } from '../support/keys.js';
import { openTestStore, storedRaw, store, tagRows, testConfig, unsignedEvent } from './helpers.js';

const policy = policyFrom(testConfig());
const alice = newSigner();
const bob = newSigner();
const t = now() - 10_000;

/** Collects what is written, slowly (a tiny buffer), so the exporter has to wait for 'drain'. */
class SlowSink extends Writable {
  chunks: string[] = [];
  constructor() {
    super({ highWaterMark: 256 });
  }
  override _write(chunk: Buffer, _enc: BufferEncoding, done: () => void): void {
    this.chunks.push(chunk.toString());
    setImmediate(done);
  }
  get lines(): string[] {
    return this.chunks.join('').split('\n').filter(Boolean);
  }
}

const jsonl = (lines: Array<string | object>) => Readable.from([lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n') + '\n']);

let verifier: SignatureVerifier;
let source: Database;

// A varied store: tags with escapes, a NUL in content, replaceable and addressable events, a
// deletion request, and an expired event (never exported).
const corpus: NostrEvent[] = [
  alice.sign({ kind: 1, created_at: t, content: 'hello "world"\n\\ 🎉', tags: [['t', 'x " y'], ['p', bob.pubkey]] }),
  alice.sign({ kind: 1, created_at: t + 1, content: 'with a NUL \u0000 inside', tags: [['e', 'b'.repeat(64)]] }),
  alice.sign({ kind: 0, created_at: t + 2, content: '{"name":"alice"}' }),
  bob.sign({ kind: 3, created_at: t + 3, tags: [['p', alice.pubkey]] }),
  bob.sign({ kind: 30023, created_at: t + 4, tags: [['d', 'article'], ['t', 'long']], content: 'an article' }),
  bob.sign({ kind: 5, created_at: t + 5, tags: [['e', 'c'.repeat(64)]] }),
  ...Array.from({ length: 20 }, (_, i) => bob.sign({ kind: 7, created_at: t + 10 + i, content: '+', tags: [['e', 'd'.repeat(64)], ['k', '1']] })),
];

beforeAll(async () => {
  verifier = new SignatureVerifier(0);
  source = await openTestStore();
  await store(source.pool, corpus);
  // Expired since it was stored: still in the table until the sweep, but not served nor exported.
  const expired = unsignedEvent({ kind: 1, created_at: t, tags: [['expiration', String(t + 1)]] });
  await source.pool.query("INSERT INTO events (id, pubkey, kind, created_at, expires_at, raw) VALUES ($1, $2, 1, $3, $4, $5)", [
    Buffer.from(expired.id, 'hex'), Buffer.from(expired.pubkey, 'hex'), expired.created_at, t + 1, canonicalEventJson(expired),
  ]);
});

afterAll(async () => {
  await verifier?.close();
  await source?.close();
});

describe('export', () => {
  it('writes every stored, unexpired event once, exactly as stored, waiting for a slow reader', async () => {
    const sink = new SlowSink();
    const result = await exportEvents(source.pool, sink, { batchSize: 3 });
    expect(result).toMatchObject({ events: corpus.length, complete: true });
    expect([...sink.lines].sort()).toEqual(corpus.map(canonicalEventJson).sort());
  });

  it('applies a filter, without the relay default limit, newest first', async () => {
    const sink = new SlowSink();
    const filters = parseExportFilters('{"kinds":[7]}');
    await exportEvents(source.pool, sink, { filters });
    const reactions = corpus.filter((e) => e.kind === 7);
    expect(sink.lines).toEqual([...reactions].reverse().map(canonicalEventJson));

    const limited = new SlowSink();
    await exportEvents(source.pool, limited, { filters: parseExportFilters('[{"kinds":[7],"limit":3},{"#t":["long"]}]') });
    expect(limited.lines.map((l) => JSON.parse(l).created_at)).toEqual([t + 29, t + 28, t + 27, t + 4]);
  });

  it('is not capped at the relay default limit when the filter has no limit', async () => {
    const db = await openTestStore({ DEFAULT_LIMIT: '5', MAX_LIMIT: '10' });
    try {
      const many = Array.from({ length: 600 }, (_, i) => unsignedEvent({ kind: 1, created_at: t + i, content: `n${i}` }));
      await store(db.pool, many);
      const sink = new SlowSink();
      const result = await exportEvents(db.pool, sink, { filters: parseExportFilters('{"kinds":[1]}'), batchSize: 100 });
      expect(result.events).toBe(600);
      expect(new Set(sink.lines).size).toBe(600);
    } finally {
      await db.close();
    }
  });

  it('refuses a malformed filter', () => {
    expect(() => parseExportFilters('{"kinds":')).toThrow(/not valid JSON/);
    expect(() => parseExportFilters('{"colour":["red"]}')).toThrow(/unsupported: filter key "colour"/);
  });
});

describe('import', () => {
  it('export then import into an empty database yields the same set of events and tag rows', async () => {
    const sink = new SlowSink();
    await exportEvents(source.pool, sink);
    const target = await openTestStore();
    try {
      const result = await importJsonl(target.pool, Readable.from([sink.chunks.join('')]), { policy, verifier, batchSize: 7 });
      expect(result).toMatchObject({ lines: corpus.length, accepted: corpus.length, duplicate: 0, invalid: 0, rejected: 0, complete: true });
      expect(await storedRaw(target.pool)).toEqual(corpus.map(canonicalEventJson).sort());
      expect(await tagRows(target.pool)).toEqual(await tagRows(source.pool));
      // NIP-50 words: the import's binary COPY stores what the relay's INSERT stores.
      const words = async (db: Database) =>
        (await db.pool.query("SELECT encode(id, 'hex') AS id, search::text AS search FROM events WHERE expires_at IS NULL ORDER BY id")).rows;
      const stored = await words(target);
      expect(stored.filter((r) => r.search !== null).length).toBe(4); // two notes, the profile, the article
      expect(stored).toEqual(await words(source));
    } finally {
      await target.close();
    }
  });

  it('counts accepted, duplicate, replaced, invalid and rejected lines, reporting bad ones by line number', async () => {
    const target = await openTestStore();
    try {
      const note = alice.sign({ kind: 1, created_at: t, content: 'note' });
      const profileOld = alice.sign({ kind: 0, created_at: t + 1, content: 'old' });
      const profileNew = alice.sign({ kind: 0, created_at: t + 2, content: 'new' });
      const profileOlder = alice.sign({ kind: 0, created_at: t, content: 'older' });
      const doomed = alice.sign({ kind: 1, created_at: t + 3, content: 'deleted before it arrives' });
      const deletion = alice.sign({ kind: 5, created_at: t + 4, tags: [['e', doomed.id]] });
      const badSig = { ...alice.sign({ kind: 1, created_at: t + 5, content: 'a' }), sig: bob.sign({ kind: 1, content: 'b' }).sig };
      const badId = { ...alice.sign({ kind: 1, created_at: t + 6, content: 'c' }), content: 'changed' };
      const ephemeral = alice.sign({ kind: 20000, created_at: t + 7 });
      const refused: Array<[number, string]> = [];
      const result = await importJsonl(
        target.pool,
        jsonl([
          note, // 1
          note, // 2: duplicate within the file
          '{"not": "an event"', // 3: not JSON
          '', // 4: blank, skipped
          profileOld, // 5
          profileNew, // 6: replaces 5
          profileOlder, // 7: older than the stored version
          deletion, // 8
          doomed, // 9: deleted by 8
          badSig, // 10
          badId, // 11
          { ...note, kind: 'one' }, // 12: bad shape
          ephemeral, // 13
        ]),
        { policy, verifier, batchSize: 3, onRefused: (line, reason) => refused.push([line, reason]) },
      );
      expect(result).toMatchObject({ lines: 12, accepted: 4, duplicate: 1, replaced: 1, invalid: 4, rejected: 3 });
      // Invalid lines are reported as read, refusals by the write rules after their batch is written.
      expect(refused.sort((a, b) => a[0] - b[0])).toEqual([
        [3, 'invalid: not valid JSON'],
        [7, 'blocked: a newer version of this event is stored'],
        [9, 'blocked: this event was deleted by its author'],
        [10, 'invalid: bad signature'],
        [11, 'invalid: event id does not match the sha256 of its serialization'],
        [12, expect.stringMatching(/^invalid: kind/)],
        [13, expect.stringMatching(/^ephemeral:/)],
      ]);
      expect(await storedRaw(target.pool)).toEqual([note, profileNew, deletion].map(canonicalEventJson).sort());
    } finally {
      await target.close();
    }
  });

  it('reads lines cut anywhere between chunks (inside a character too), ending in \\n or \\r\\n or, for the last, in nothing', async () => {
    const target = await openTestStore();
    try {
      const events = corpus.slice(0, 4); // the first has a four-byte character and escapes in its content
      const text = `${JSON.stringify(events[0])}\r\n${JSON.stringify(events[1])}\n\r\nnot json\n${JSON.stringify(events[2])}\r\n${JSON.stringify(events[3])}`;
      const bytes = Buffer.from(text);
      // Cut inside the emoji, between the first \r and its \n, and just after it; the rest of the
      // text (several lines) comes as one chunk.
      const emoji = bytes.indexOf('🎉');
      const crlf = bytes.indexOf('\r\n');
      const cuts = [0, emoji + 2, crlf + 1, crlf + 2, bytes.length];
      const chunks = cuts.slice(1).map((end, i) => bytes.subarray(cuts[i], end));
      expect(emoji).toBeGreaterThan(0);
      expect(emoji + 2).toBeLessThan(crlf);
      const refused: Array<[number, string]> = [];
      const result = await importJsonl(target.pool, Readable.from(chunks), { policy, verifier, onRefused: (line, reason) => refused.push([line, reason]) });
      expect(result).toMatchObject({ lines: 5, accepted: 4, invalid: 1 });
      expect(refused).toEqual([[4, 'invalid: not valid JSON']]);
      expect(await storedRaw(target.pool)).toEqual(events.map(canonicalEventJson).sort());
    } finally {
      await target.close();
    }
  });

  it('without a verifier still refuses a wrong id, and trusts signatures', async () => {
    const target = await openTestStore();
    try {
      const good = alice.sign({ kind: 1, created_at: t, content: 'good' });
      const badSig = { ...alice.sign({ kind: 1, created_at: t + 1, content: 'a' }), sig: 'f'.repeat(128) };
      const badId = { ...alice.sign({ kind: 1, created_at: t + 2, content: 'c' }), content: 'changed' };
      const result = await importJsonl(target.pool, jsonl([good, badSig, badId]), { policy });
      expect(result).toMatchObject({ accepted: 2, invalid: 1 });
    } finally {
      await target.close();
    }
  });

  it('applies the relay policy: an expired event or one from too far in the future is refused', async () => {
    const target = await openTestStore();
    try {
      const expired = alice.sign({ kind: 1, created_at: t, tags: [['expiration', String(t + 1)]] });
      const future = alice.sign({ kind: 1, created_at: now() + 86_400 });
      const refused: string[] = [];
      const result = await importJsonl(target.pool, jsonl([expired, future]), { policy, verifier, onRefused: (_l, r) => refused.push(r) });
      expect(result).toMatchObject({ accepted: 0, invalid: 2 });
      expect(refused).toEqual(['invalid: event expired', expect.stringMatching(/^invalid: created_at is more than/)]);
    } finally {
      await target.close();
    }
  });
  it('runs the relay rules with a session that has no connection: AUTH-only rules do not apply to an import', async () => {
    const target = await openTestStore();
    try {
      // A protected event (NIP-70) that another relay accepted from its authenticated author, moved by
      // the operator; a relay that requires AUTH for writes still imports; kind 22242 is still refused.
      const strict = policyFrom(testConfig({ AUTH_REQUIRED: 'all' }));
      const protectedNote = alice.sign({ kind: 1, created_at: t, tags: [['-']], content: 'mine only' });
      const auth = alice.sign({ kind: 22242, created_at: t, tags: [['relay', 'wss://x'], ['challenge', 'c']] });
      const refused: string[] = [];
      const result = await importJsonl(target.pool, jsonl([protectedNote, auth]), { policy: strict, verifier, onRefused: (_l, r) => refused.push(r) });
      expect(result).toMatchObject({ accepted: 1, invalid: 1 });
      expect(refused).toEqual([expect.stringMatching(/^invalid: kind 22242/)]);
      expect(await storedRaw(target.pool)).toEqual([canonicalEventJson(protectedNote)]);
    } finally {
      await target.close();
    }
  });
});
