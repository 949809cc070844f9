// NIP-01 filters: parsing with the relay's limits and in-memory matching (protocol.md 1.9).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { compileFilter, compileFilterLazily, conditionKeys, matchesNothing, matchFilter, parseFilter, toMatchable, type Filter, type FilterLimits } from '../../src/nostr/filter.js';

const LIMITS: FilterLimits = { maxValuesPerArray: 3, defaultLimit: 100, maxLimit: 500 };
const hex = (c: string) => c.repeat(64);
const A = hex('a');
const B = hex('b');
const C = hex('c');

function parsed(input: unknown): Filter {
  const r = parseFilter(input, LIMITS);
  if (!r.ok) throw new Error(r.reason);
  return r.value;
}

function refusal(input: unknown): string {
  const r = parseFilter(input, LIMITS);
  return r.ok ? 'accepted' : r.reason;
}

describe('parseFilter', () => {
  it('turns {} into a filter with no conditions and the default limit', () => {
    expect(parsed({})).toEqual({ tags: [], limit: 100 });
  });

  it('reads ids, authors and kinds', () => {
    expect(parsed({ ids: [A], authors: [B, C], kinds: [0, 65535] })).toEqual({ ids: [A], authors: [B, C], kinds: [0, 65535], tags: [], limit: 100 });
  });

  it('reads since and until', () => {
    expect(parsed({ since: 0, until: 1700000000 })).toMatchObject({ since: 0, until: 1700000000 });
  });

  it('reads a #letter key as a tag condition, keeping the letter case', () => {
    expect(parsed({ '#t': ['Nostr'], '#E': [A] }).tags).toEqual([{ name: 't', values: ['Nostr'] }, { name: 'E', values: [A] }]);
  });

  it('removes duplicate values from lists', () => {
    expect(parsed({ ids: [A, A], kinds: [1, 1], '#t': ['x', 'x'] })).toMatchObject({ ids: [A], kinds: [1], tags: [{ name: 't', values: ['x'] }] });
  });

  it('removes duplicate hex values in first-seen order, among many that share their first digits', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.constantFrom('0000000', 'abcdef0', 'ffffffe'), fc.integer({ min: 0, max: 40 })), { maxLength: 300 }), (picks) => {
        const values = picks.map(([head, n]) => head + n.toString(16).padStart(57, '0'));
        const expected = [...new Set(values)];
        const f = parseFilter({ ids: values, authors: values, '#p': values, '#e': values }, { ...LIMITS, maxValuesPerArray: 1000 });
        if (!f.ok) throw new Error(f.reason);
        expect(f.value.ids).toEqual(expected);
        expect(f.value.authors).toEqual(expected);
        expect(f.value.tags.map((t) => t.values)).toEqual([expected, expected]);
      }),
      { numRuns: 300 },
    );
  });

  it('keeps an explicit limit', () => {
    expect(parsed({ limit: 7 }).limit).toBe(7);
  });

  it('keeps limit 0', () => {
    expect(parsed({ limit: 0 }).limit).toBe(0);
  });

  it('clamps a limit above max_limit', () => {
    expect(parsed({ limit: 100000 }).limit).toBe(500);
  });

  it.each([
    ['containing NUL', 'a\u0000b'],
    ['longer than an indexed value', 'x'.repeat(1025)],
    ['with a lone surrogate', '\ud800'],
  ])('drops a tag value %s, which no event is indexed under', (_, value) => {
    expect(parsed({ '#t': ['ok', value] }).tags).toEqual([{ name: 't', values: ['ok'] }]);
  });

  it('leaves an empty list, which matches nothing, when every tag value is dropped', () => {
    expect(matchesNothing(parsed({ '#t': ['a\u0000b'] }))).toBe(true);
  });

  it('accepts empty lists (they match nothing)', () => {
    expect(parsed({ ids: [], '#t': [] })).toMatchObject({ ids: [], tags: [{ name: 't', values: [] }] });
  });

  it.each([
    ['an unknown key', { fulltext: 'x' }],
    ['a multi-letter #tag', { '#tt': ['x'] }],
    ['a bare #', { '#': ['x'] }],
    ['a #digit', { '#1': ['x'] }],
    ['a letter without #', { e: [A] }],
    ['an upper-case known key', { IDS: [A] }],
  ])('refuses %s as unsupported', (_, input) => {
    expect(refusal(input)).toMatch(/^unsupported: /);
  });

  it.each([
    ['uppercase hex in ids', { ids: [A.toUpperCase()] }],
    ['a 63-char prefix in ids', { ids: [A.slice(1)] }],
    ['a 4-char prefix in authors', { authors: ['abcd'] }],
    ['uppercase hex in #e', { '#e': [B.toUpperCase()] }],
    ['a prefix in #p', { '#p': ['ab'] }],
    ['a non-string in ids', { ids: [1] }],
  ])('refuses %s as invalid', (_, input) => {
    expect(refusal(input)).toMatch(/^invalid: /);
  });

  it.each([
    ['ids that is not an array', { ids: A }],
    ['kinds that is not an array', { kinds: 1 }],
    ['#t that is not an array', { '#t': 'x' }],
    ['#t with a non-string', { '#t': ['x', null] }],
    ['a kind above 65535', { kinds: [65536] }],
    ['a negative kind', { kinds: [-1] }],
    ['a float kind', { kinds: [1.5] }],
    ['a string kind', { kinds: ['1'] }],
    ['a negative since', { since: -1 }],
    ['a float until', { until: 1.5 }],
    ['a string since', { since: '1' }],
    ['an unsafe-integer until', { until: 2 ** 53 }],
    ['a null limit', { limit: null }],
    ['a negative limit', { limit: -1 }],
    ['a float limit', { limit: 1.5 }],
  ])('refuses %s as invalid', (_, input) => {
    expect(refusal(input)).toMatch(/^invalid: /);
  });

  it.each(['ids', 'authors', 'kinds', '#e', '#p', '#t'])('refuses more than max values in %s', (key) => {
    const values = key === 'kinds' ? [1, 2, 3, 4] : [A, B, C, hex('d')];
    expect(refusal({ [key]: values })).toMatch(/^invalid: .*more than 3 values/);
  });

  it.each(['ids', 'authors', 'kinds', '#e', '#t'])('accepts exactly max values in %s', (key) => {
    const values = key === 'kinds' ? [1, 2, 3] : [A, B, C];
    expect(refusal({ [key]: values })).toBe('accepted');
  });

  it.each([
    ['null', null],
    ['an array', [{}]],
    ['a string', '{}'],
    ['a number', 1],
  ])('refuses %s as a filter', (_, input) => {
    expect(refusal(input)).toMatch(/^invalid: /);
  });
});

describe('matchesNothing', () => {
  it.each([
    ['an empty ids list', { ids: [] }],
    ['an empty authors list', { authors: [] }],
    ['an empty kinds list', { kinds: [] }],
    ['an empty #t list', { '#t': [] }],
    ['since after until', { since: 11, until: 10 }],
  ])('is true for %s', (_, input) => {
    expect(matchesNothing(parsed(input))).toBe(true);
  });

  it('is false when since equals until', () => {
    expect(matchesNothing(parsed({ since: 10, until: 10 }))).toBe(false);
  });

  it('is false for {}', () => {
    expect(matchesNothing(parsed({}))).toBe(false);
  });
});

describe('matchFilter', () => {
  const event: NostrEvent = {
    id: A,
    pubkey: B,
    created_at: 1000,
    kind: 1,
    tags: [['e', C, 'wss://relay', hex('f')], ['t', 'nostr'], ['t', 'art'], ['alt', 'note']],
    content: '',
    sig: '0'.repeat(128),
  };
  const matches = (input: unknown) => matchFilter(parsed(input), event);

  it('matches every event with {}', () => {
    expect(matches({})).toBe(true);
  });

  it.each([
    ['ids', { ids: [A] }, { ids: [C] }],
    ['authors', { authors: [B] }, { authors: [A] }],
    ['kinds', { kinds: [1] }, { kinds: [7] }],
    ['#e', { '#e': [C] }, { '#e': [A] }],
    ['#t', { '#t': ['art'] }, { '#t': ['music'] }],
  ])('matches on %s exactly', (_, hit, miss) => {
    expect([matches(hit), matches(miss)]).toEqual([true, false]);
  });

  it('needs any one value of a list (OR within a list)', () => {
    expect(matches({ kinds: [7, 1, 6] })).toBe(true);
  });

  it('needs every condition of a filter (AND within a filter)', () => {
    expect(matches({ kinds: [1], authors: [A] })).toBe(false);
  });

  it('needs both of two tag letters', () => {
    expect(matches({ '#e': [C], '#t': ['nostr'] })).toBe(true);
    expect(matches({ '#e': [C], '#t': ['music'] })).toBe(false);
  });

  it('matches a letter against every tag of that letter', () => {
    expect(matches({ '#t': ['art'] })).toBe(true);
  });

  it('matches element 1 only, not the relay or later elements', () => {
    expect(matches({ '#e': [hex('f')] })).toBe(false);
  });

  it('compares tag names case-sensitively', () => {
    expect(matches({ '#E': [C] })).toBe(false);
  });

  it('compares tag values case-sensitively', () => {
    expect(matches({ '#t': ['Nostr'] })).toBe(false);
  });

  it('treats since as inclusive', () => {
    expect([matches({ since: 1000 }), matches({ since: 1001 })]).toEqual([true, false]);
  });

  it('treats until as inclusive', () => {
    expect([matches({ until: 1000 }), matches({ until: 999 })]).toEqual([true, false]);
  });

  it('matches when since equals until equals created_at', () => {
    expect(matches({ since: 1000, until: 1000 })).toBe(true);
  });

  it.each(['ids', 'authors', 'kinds', '#t'])('matches nothing with an empty %s list', (key) => {
    expect(matches({ [key]: [] })).toBe(false);
  });

  it('never matches a tag value too long to be indexed, as the store cannot find it', () => {
    const long = 'x'.repeat(2000);
    const withLong = { ...event, tags: [['t', long]] };
    expect(matchFilter(parsed({ '#t': [long] }), withLong)).toBe(false);
  });
});

describe('compileFilterLazily and conditionKeys', () => {
  const events: NostrEvent[] = [A, B, C].flatMap((pubkey, i) =>
    [1, 7].map((kind) => ({ id: hex(String(i + kind)), pubkey, created_at: 1000 + i, kind, tags: [['t', `t${i}`], ['p', C]], content: '', sig: '0'.repeat(128) })),
  );
  const filters = [{}, { authors: [A, B] }, { kinds: [7], '#t': ['t1', 't2'] }, { '#p': [C], since: 1001 }, { ids: [hex('1')] }, { authors: [] }];

  it('matches as compileFilter does, event after event', () => {
    for (const input of filters) {
      const f = parsed(input);
      const lazy = compileFilterLazily(f);
      const eager = compileFilter(f);
      for (const e of events) expect(lazy(toMatchable(e)), JSON.stringify(input)).toBe(eager(toMatchable(e)));
    }
  });

  it('refuses an unprepared language search at once, as compileFilter does', () => {
    const f = { ...parsed({}), search: { parsed: { config: 'english' } as never, compiled: undefined } };
    expect(() => compileFilterLazily(f)).toThrow(/must be prepared/);
  });

  it('gives each condition its name + value keys, the same array every time', () => {
    const f = parsed({ '#t': ['art', 'nostr'] });
    expect(conditionKeys(f.tags[0]!)).toEqual(['tart', 'tnostr']);
    expect(conditionKeys(f.tags[0]!)).toBe(conditionKeys(f.tags[0]!));
  });
});
