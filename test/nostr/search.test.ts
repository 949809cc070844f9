// NIP-50 words and queries (src/nostr/search.ts), without a database: what becomes a word, how a
// query string is read, and the tsquery text it compiles to.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { compileSearch, parseSearch, searchBinary, searchDocument, searchText, tsvectorBinary, tsvectorLiteral, wordsToStem } from '../../src/nostr/search.js';

const event = (kind: number, content: string, tags: string[][] = []): NostrEvent =>
  ({ id: '0'.repeat(64), pubkey: '1'.repeat(64), sig: '2'.repeat(128), created_at: 1, kind, tags, content }) as NostrEvent;
const doc = (content: string, kind = 1, tags: string[][] = []) => Object.fromEntries(searchDocument(event(kind, content, tags)) ?? []);
const tsquery = (s: string) => compileSearch(parseSearch(s))?.tsquery;

describe('search documents', () => {
  it('lowercases words and records their positions', () => {
    expect(doc('Hello hello, World_1 café')).toEqual({ hello: [1, 2], world_1: [3], café: [4] });
  });

  it('cuts scripts written without spaces into overlapping pairs, the last character alone', () => {
    expect(doc('東京タワー')).toEqual({ 東京: [1], 京タ: [2], タワ: [3], ワー: [4], ー: [5] });
    expect(doc('nostr中文')).toEqual({ nostr: [1], 中文: [2], 文: [3] });
  });

  it('keeps a host name whole as well as its parts, at the same position', () => {
    expect(doc('see example.com/page now')).toEqual({ see: [1], 'example.com': [2], example: [2], com: [3], page: [4], now: [5] });
    expect(doc('version 3.14')).toEqual({ version: [1], '3': [2], '14': [3] });
  });

  it('reads titles, summaries and hashtags, and a profile’s names and about', () => {
    expect(doc('body', 30023, [['title', 'My Title'], ['t', 'Nostr'], ['d', 'x']])).toEqual({ my: [1], title: [2], body: [3], nostr: [4] });
    const profile = JSON.stringify({ name: 'Alice', display_name: 'Al', about: 'builds relays', picture: 'https://a.b/c.png', website: 'w.x' });
    expect(doc(profile, 0)).toEqual({ alice: [1], al: [2], builds: [3], relays: [4] });
  });

  it('has no document for kinds that carry no text, or text with no words', () => {
    expect(searchText(event(7, '+'))).toBeUndefined();
    expect(searchDocument(event(4, 'secret'))).toBeUndefined();
    expect(searchDocument(event(1, '!!! ...'))).toBeUndefined();
  });

  it('skips overlong tokens and stops within PostgreSQL’s position limit', () => {
    expect(doc(`a ${'x'.repeat(200)} b`)).toEqual({ a: [1], b: [3] });
    const many = searchDocument(event(1, Array.from({ length: 20000 }, (_, i) => `w${i % 300}`).join(' ')))!;
    expect(Math.max(...[...many.values()].flat())).toBeLessThanOrEqual(16383);
    expect(Math.max(...[...many.values()].map((p) => p.length))).toBeLessThanOrEqual(256);
  });

  it('makes the binary tsvector events.search gets exactly as the document would, on its ASCII shortcut and off it', () => {
    const binaryOf = (e: NostrEvent) => {
      const d = searchDocument(e);
      return d ? tsvectorBinary(d) : null;
    };
    const samples = ['Hello hello, World_1', 'see example.com now', "it's a\\b", 'café au lait', '東京タワー', '!!! ...', `a ${'x'.repeat(200)} b`, 'version 3.14'];
    for (const content of samples) expect(searchBinary(event(1, content)), content).toEqual(binaryOf(event(1, content)));
    expect(searchBinary(event(7, '+'))).toBeNull();
    const many = event(1, Array.from({ length: 20000 }, (_, i) => `w${i % 300}`).join(' '));
    expect(searchBinary(many)).toEqual(binaryOf(many));
    const ascii = fc.string({ unit: fc.constantFrom(...'abcXYZ019_ .,\'"-:#\n'.split('')), maxLength: 80 });
    fc.assert(
      fc.property(ascii, fc.array(fc.tuple(fc.constantFrom('t', 'title', 'p'), ascii), { maxLength: 3 }), (content, tags) => {
        const e = event(1, content, tags);
        expect(searchBinary(e)).toEqual(binaryOf(e));
      }),
      { numRuns: 500 },
    );
  });

  it('reads plain ASCII in one pass within the document’s limits, as the tokens would', () => {
    const binaryOf = (e: NostrEvent) => {
      const d = searchDocument(e);
      return d ? tsvectorBinary(d) : null;
    };
    const repeated = event(1, `${Array(300).fill('Same').join(' ')} other SAME`);
    const distinct = event(1, Array.from({ length: 12000 }, (_, i) => `W${i}`.padEnd(24, 'q')).join(' '));
    const positions = event(1, Array.from({ length: 17000 }, (_, i) => `x${i % 40}`).join('\n'));
    const late = Array.from({ length: 3000 }, (_, i) => `word${i}`).join(' ');
    for (const e of [repeated, distinct, positions, event(1, `${late} é`), event(1, `${late} a.b`), event(1, `${late} 3.14`)])
      expect(searchBinary(e)).toEqual(binaryOf(e));
    const words = fc.array(fc.string({ unit: fc.constantFrom(...'aAbBzZ09_'.split('')), minLength: 1, maxLength: 40 }), { maxLength: 400 });
    const separators = fc.array(fc.constantFrom(' ', '  ', ', ', '\n', '-', '.', ' .'), { minLength: 400, maxLength: 400 });
    fc.assert(
      fc.property(words, separators, (ws, seps) => {
        const e = event(1, ws.map((w, i) => w + seps[i]).join(''));
        expect(searchBinary(e)).toEqual(binaryOf(e));
      }),
      { numRuns: 300 },
    );
  });

  it('writes tsvector text with quotes doubled', () => {
    expect(tsvectorLiteral(new Map([["it's", [1, 3]], ['a\\b', [2]]]))).toBe("'it''s':1,3 'a\\\\b':2");
  });
});

describe('search queries', () => {
  it('ANDs words, joins OR alternatives, excludes -words and keeps quoted phrases', () => {
    expect(tsquery('nostr relay')).toBe("'nostr' & 'relay'");
    expect(tsquery('cats OR dogs pets')).toBe("('cats' | 'dogs') & 'pets'");
    expect(tsquery('nostr -spam')).toBe("'nostr' & !'spam'");
    expect(tsquery('"quick brown fox" -"lazy dog"')).toBe("('quick' <1> 'brown' <1> 'fox') & !('lazy' <1> 'dog')");
    expect(tsquery('#Nostr')).toBe("'nostr'");
    expect(tsquery("don't")).toBe("('don' <1> 't')");
  });

  it('turns spaceless scripts into phrases of pairs, and one character into a prefix', () => {
    expect(tsquery('東京タワー')).toBe("('東京' <1> '京タ' <1> 'タワ' <1> 'ワー')");
    expect(tsquery('東京')).toBe("'東京'");
    expect(tsquery('東')).toBe("'東':*");
  });

  it('keeps host names and nostr: URIs as words, and ignores other key:value extensions', () => {
    expect(tsquery('example.com')).toBe("'example.com'");
    expect(tsquery('nostr:npub1abc')).toBe("('nostr' <1> 'npub1abc')");
    expect(tsquery('include:spam nsfw:false domain:x.com sentiment:positive relay')).toBe("'relay'");
    expect(tsquery('https://example.com/x')).toBe("('https' <1> 'example.com' <1> 'x')");
  });

  it('matches nothing without a positive word', () => {
    expect(compileSearch(parseSearch(''))).toBeNull();
    expect(compileSearch(parseSearch('-spam'))).toBeNull();
    expect(compileSearch(parseSearch('include:spam'))).toBeNull();
  });

  it('picks the stemmer from language:xx and stems words as prefixes, dropping stop words', () => {
    const parsed = parseSearch('the Running shoes language:EN');
    expect(parsed.config).toBe('english');
    expect(wordsToStem(parsed)).toEqual(['the', 'running', 'shoes']);
    const compiled = compileSearch(parsed, new Map([['the', null], ['running', 'run'], ['shoes', 'shoe']]))!;
    expect(compiled.tsquery).toBe("'run':* & 'shoe':*");
    expect(compiled.matches(searchDocument(event(1, 'she runs in her shoes')))).toBe(true);
    expect(parseSearch('word language:xx').config).toBe('simple');
  });

  it('matches a word whose stem does not begin it, as well as the words its stem begins', () => {
    // English stems "happy" as "happi": 'happi':* alone would miss "happy" itself.
    const compiled = compileSearch(parseSearch('happy days language:en'), new Map([['happy', 'happi'], ['days', 'day']]))!;
    expect(compiled.tsquery).toBe("('happi':* | 'happy':*) & 'day':*");
    expect(compiled.matches(searchDocument(event(1, 'happy days')))).toBe(true);
    expect(compiled.matches(searchDocument(event(1, 'happiness lasts days')))).toBe(true);
    expect(compiled.matches(searchDocument(event(1, 'happen some days')))).toBe(false);
    const phrase = compileSearch(parseSearch('"happy days" language:en'), new Map([['happy', 'happi'], ['days', 'day']]))!;
    expect(phrase.tsquery).toBe("(('happi':* | 'happy':*) <1> 'day':*)");
    expect(phrase.matches(searchDocument(event(1, 'oh happy days')))).toBe(true);
    expect(phrase.matches(searchDocument(event(1, 'days happy')))).toBe(false);
    const excluded = compileSearch(parseSearch('days -happy language:en'), new Map([['happy', 'happi'], ['days', 'day']]))!;
    expect(excluded.tsquery).toBe("'day':* & !('happi':* | 'happy':*)");
    expect(excluded.matches(searchDocument(event(1, 'happy days')))).toBe(false);
    expect(excluded.matches(searchDocument(event(1, 'sad days')))).toBe(true);
  });

  it('keeps the distance of a stop word dropped inside a phrase', () => {
    const compiled = compileSearch(parseSearch('"state of art" language:en'), new Map([['state', 'state'], ['of', null], ['art', 'art']]))!;
    expect(compiled.tsquery).toBe("('state':* <2> 'art':*)");
    expect(compiled.matches(searchDocument(event(1, 'the state of the art')))).toBe(false);
    expect(compiled.matches(searchDocument(event(1, 'state of art')))).toBe(true);
  });

  it('matches in memory as the tsquery reads', () => {
    const m = (q: string, content: string) => compileSearch(parseSearch(q))!.matches(searchDocument(event(1, content)));
    expect(m('quick fox', 'The quick brown fox')).toBe(true);
    expect(m('"quick fox"', 'The quick brown fox')).toBe(false);
    expect(m('fox -brown', 'The quick brown fox')).toBe(false);
    expect(m('cat OR fox', 'The quick brown fox')).toBe(true);
    expect(m('東京', '東京タワーに行きました')).toBe(true);
    expect(m('京', '東京')).toBe(true);
  });
});
