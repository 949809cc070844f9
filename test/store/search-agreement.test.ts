// The live matcher and PostgreSQL must find the same events (nostr/search.ts): for random documents
// and queries, the in-memory match equals `tsvector @@ tsquery` in PostgreSQL, and the documents we
// write (tsvector text for INSERT, binary for COPY) are exactly what PostgreSQL makes of them.
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { compileSearch, parseSearch, searchDocument, tsvectorBinary, tsvectorLiteral, wordsToStem } from '../../src/nostr/search.js';
import { createTestDatabase } from '../support/database.js';

let pool: pg.Pool;
beforeAll(async () => {
  pool = new pg.Pool({ connectionString: await createTestDatabase(), max: 2 });
});
afterAll(async () => {
  await pool?.end();
});

const VOCABULARY = ['nostr', 'relay', 'relays', 'happy', 'happiness', 'happen', 'run', 'running', 'runs', 'a', 'b', 'the', 'of', 'fox', 'Fox', 'example.com', 'x.y.z', 'café', '東京', '東京タワー', 'タワー', '京', '北京烤鸭', '3.14', 'don\'t', 'ünïcode', '#tag', 'https://example.com/p'];
const word = fc.constantFrom(...VOCABULARY);
const text = fc.array(word, { minLength: 0, maxLength: 25 }).map((ws) => ws.join(' '));
const queryItem = fc.tuple(fc.constantFrom('', '-'), fc.oneof(word, fc.array(word, { minLength: 1, maxLength: 3 }).map((ws) => `"${ws.join(' ')}"`)));
const query = fc
  .tuple(fc.array(fc.tuple(queryItem, fc.boolean()), { minLength: 1, maxLength: 5 }), fc.constantFrom('', ' language:en'))
  .map(([items, lang]) => items.map(([[neg, w], or], i) => (i > 0 && or ? 'OR ' : '') + neg + w).join(' ') + lang);

const note = (content: string): NostrEvent => ({ id: '0'.repeat(64), pubkey: '1'.repeat(64), sig: '', created_at: 1, kind: 1, tags: [], content });

/**
 * A stand-in stemmer for the property: the word's first four characters, a final y made i (a stem
 * that does not begin its word, as English's "happi" for "happy"), and `the`/`of` as stop words.
 */
const stem = (w: string) => (w === 'the' || w === 'of' ? null : w.endsWith('y') ? `${w.slice(0, -1)}i` : w.slice(0, 4));

describe('search: memory and PostgreSQL agree', () => {
  it('on random documents and queries', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(text, { minLength: 20, maxLength: 20 }), fc.array(query, { minLength: 10, maxLength: 10 }), async (texts, queries) => {
        const docs = texts.map((t) => searchDocument(note(t)));
        const compiled = queries.map((q) => {
          const parsed = parseSearch(q);
          return compileSearch(parsed, new Map(wordsToStem(parsed).map((w) => [w, stem(w)])));
        });
        const pairs: Array<[number, number]> = [];
        docs.forEach((d, i) => compiled.forEach((c, j) => d && c && pairs.push([i, j])));
        if (pairs.length === 0) return;
        const { rows } = await pool.query<{ m: boolean }>('SELECT d::tsvector @@ q::tsquery AS m FROM unnest($1::text[], $2::text[]) WITH ORDINALITY t(d, q, o) ORDER BY o', [
          pairs.map(([i]) => tsvectorLiteral(docs[i]!)),
          pairs.map(([, j]) => compiled[j]!.tsquery),
        ]);
        pairs.forEach(([i, j], k) => expect(compiled[j]!.matches(docs[i]), `${texts[i]} ⟂ ${queries[j]}`).toBe(rows[k].m));
      }),
      { numRuns: 60 },
    );
  });

  it('writes documents PostgreSQL reads back unchanged, as text and in binary', async () => {
    const samples = ['Hello hello world', '東京タワーに行きました nostr', 'see example.com/x and it\'s fine', 'a '.repeat(300) + 'b', 'ünïcode Ünïcode 3.14'];
    for (const s of samples) {
      const doc = searchDocument(note(s))!;
      // The binary form goes in the document's order; PostgreSQL orders its lexemes as it reads it.
      const { rows } = await pool.query<{ text: string; binary: string; same: boolean; same_bytes: boolean }>(
        'SELECT $1::tsvector::text AS text, $2::tsvector::text AS binary, $1::tsvector = $2::tsvector AS same, tsvectorsend($1::tsvector) = tsvectorsend($2::tsvector) AS same_bytes',
        [tsvectorLiteral(doc), tsvectorBinary(doc)],
      );
      expect(rows[0].binary, s).toBe(rows[0].text);
      expect(rows[0], s).toMatchObject({ same: true, same_bytes: true });
      const back = new Map([...rows[0].text.matchAll(/'((?:[^']|'')*)':([\d,]+)/g)].map((m) => [m[1].replace(/''/g, "'"), m[2].split(',').map(Number)]));
      expect(back).toEqual(doc);
    }
  });
});
