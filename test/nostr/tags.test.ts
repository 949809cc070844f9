// The tag-indexing rule (NIP-01 "Tags"), the d tag (NIP-01 addressable), NIP-40 expiration, NIP-70.
import { describe, expect, it } from 'vitest';
import {
  dTagOf, expirationOf, firstTagValue, indexedTags, isIndexableTagName, isIndexableTagValue, isProtected,
  MAX_INDEXED_TAG_VALUE_BYTES,
} from '../../src/nostr/tags.js';

describe('isIndexableTagName', () => {
  it.each(['a', 'z', 'A', 'Z', 'e', 'E'])('indexes the single letter %s', (name) => {
    expect(isIndexableTagName(name)).toBe(true);
  });

  it.each(['', 'ee', 'alt', 'expiration', '-', '1', 'é', ' e'])('does not index the name %j', (name) => {
    expect(isIndexableTagName(name)).toBe(false);
  });
});

describe('isIndexableTagValue', () => {
  it('indexes a value of exactly the byte limit', () => {
    expect(isIndexableTagValue('x'.repeat(MAX_INDEXED_TAG_VALUE_BYTES))).toBe(true);
  });

  it('does not index a value one byte over the limit', () => {
    expect(isIndexableTagValue('x'.repeat(MAX_INDEXED_TAG_VALUE_BYTES + 1))).toBe(false);
  });

  it('measures the limit in UTF-8 bytes, not characters', () => {
    const twoByteChars = 'é'.repeat(MAX_INDEXED_TAG_VALUE_BYTES / 2 + 1); // fewer characters than the limit
    expect(isIndexableTagValue(twoByteChars)).toBe(false);
  });

  it('does not index a value containing NUL', () => {
    expect(isIndexableTagValue('a\u0000b')).toBe(false);
  });
});

describe('indexedTags', () => {
  it('returns the (name, value) of each single-letter tag, lower and upper case', () => {
    expect(indexedTags([['e', '1'], ['E', '2'], ['t', 'x']])).toEqual([['e', '1'], ['E', '2'], ['t', 'x']]);
  });

  it('skips tags whose name is not a single letter', () => {
    expect(indexedTags([['alt', 'x'], ['expiration', '1'], ['-'], ['1', 'x'], ['p', 'y']])).toEqual([['p', 'y']]);
  });

  it('indexes only element 1, never the later elements', () => {
    expect(indexedTags([['e', 'id', 'wss://relay', 'author']])).toEqual([['e', 'id']]);
  });

  it('skips a tag with a name but no value', () => {
    expect(indexedTags([['t'], ['d']])).toEqual([]);
  });

  it('collapses duplicate (name, value) pairs', () => {
    expect(indexedTags([['t', 'x'], ['t', 'x', 'extra'], ['t', 'y'], ['t', 'x']])).toEqual([['t', 'x'], ['t', 'y']]);
  });

  it('keeps the same value under two letters as two entries', () => {
    expect(indexedTags([['e', 'v'], ['E', 'v']])).toEqual([['e', 'v'], ['E', 'v']]);
  });

  it('skips values too long to index', () => {
    expect(indexedTags([['t', 'x'.repeat(MAX_INDEXED_TAG_VALUE_BYTES + 1)], ['t', 'ok']])).toEqual([['t', 'ok']]);
  });

  it('skips values containing NUL', () => {
    expect(indexedTags([['t', 'a\u0000'], ['t', 'ok']])).toEqual([['t', 'ok']]);
  });
});

describe('firstTagValue', () => {
  it('is element 1 of the first tag with the name', () => {
    expect(firstTagValue([['x', '1'], ['t', 'a'], ['t', 'b']], 't')).toBe('a');
  });

  it('is undefined when no tag has the name', () => {
    expect(firstTagValue([['x', '1']], 't')).toBeUndefined();
  });
});

describe('dTagOf', () => {
  it('is the value of the d tag', () => {
    expect(dTagOf([['d', 'slug']])).toBe('slug');
  });

  it('is "" when there is no d tag', () => {
    expect(dTagOf([['t', 'x']])).toBe('');
  });

  it('is "" for a bare ["d"]', () => {
    expect(dTagOf([['d']])).toBe('');
  });

  it('takes the first d tag when there are several', () => {
    expect(dTagOf([['d', 'first'], ['d', 'second']])).toBe('first');
  });

  it('is "" when the first d tag is bare, even if a later one has a value', () => {
    expect(dTagOf([['d'], ['d', 'second']])).toBe('');
  });
});

describe('expirationOf (NIP-40)', () => {
  it('is undefined without an expiration tag', () => {
    expect(expirationOf([['t', 'x']])).toBeUndefined();
  });

  it('parses unix seconds', () => {
    expect(expirationOf([['expiration', '1700000000']])).toBe(1700000000);
  });

  it('uses the first expiration tag', () => {
    expect(expirationOf([['expiration', '100'], ['expiration', '200']])).toBe(100);
  });

  it.each(['', 'soon', '1.5', '-1', '+1', ' 1', '1e9', '0x10', '1234567890123456'])('ignores the value %j, which is not a plain integer', (value) => {
    expect(expirationOf([['expiration', value]])).toBeUndefined();
  });

  it('ignores a bare expiration tag', () => {
    expect(expirationOf([['expiration']])).toBeUndefined();
  });
});

describe('isProtected (NIP-70)', () => {
  it('is true with a bare ["-"] tag', () => {
    expect(isProtected([['t', 'x'], ['-']])).toBe(true);
  });

  it('is false without one', () => {
    expect(isProtected([['t', '-']])).toBe(false);
  });
});
