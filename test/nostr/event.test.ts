// NIP-01 events: canonical serialisation, id, signature, shape; NIP-13 difficulty (protocol.md 1.1-1.3, 4).
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { getEventHash, verifyEvent } from 'nostr-tools/pure';
import * as secp from 'tiny-secp256k1';
import { describe, expect, it } from 'vitest';
import {
  canonicalEventJson, checkIdAndSignature, computeEventId, eventJsons, HEX64, isHex64, parseEvent, powDifficulty, serializeForId,
  verifySignature, type NostrEvent,
} from '../../src/nostr/event.js';
import { newSigner } from '../support/keys.js';

// The x coordinate of the secp256k1 generator (the public key of secret key 1).
const PK = '79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798';

type Unsigned = Omit<NostrEvent, 'id' | 'sig'>;
const unsigned = (over: Partial<Unsigned>): Unsigned => ({ pubkey: PK, created_at: 1700000000, kind: 1, tags: [], content: '', ...over });

/**
 * Serialisations written out by hand from the spec, and their sha256 computed outside JavaScript
 * (Python hashlib over the hand-built bytes), so neither depends on JSON.stringify.
 */
const FIXTURES: Array<{ name: string; event: Unsigned; serialized: string; id: string }> = [
  {
    name: 'quote, backslash, LF, CR, TAB, BS and FF take their short escapes',
    event: unsigned({ content: 'say "hi" \\ a\nb\rc\td\be\ff' }),
    serialized: String.raw`[0,"${PK}",1700000000,1,[],"say \"hi\" \\ a\nb\rc\td\be\ff"]`,
    id: '75fd8d6fb9881e2ba374e78cffc9805005636e2cef9429428bb578a0016f6e80',
  },
  {
    name: 'other C0 controls become lowercase \\u00xx and DEL stays verbatim',
    event: unsigned({ content: '\u0000\u0001\u001f\u001b\u007f' }),
    serialized: String.raw`[0,"${PK}",1700000000,1,[],"\u0000\u0001\u001f\u001b` + '\u007f"]',
    id: '1816ee93c2f7e164343dde611783aa2cefb4fa9bc80900aa4704ad76210d48fa',
  },
  {
    name: 'non-ASCII, emoji and U+2028/U+2029 stay verbatim and the slash is not escaped',
    event: unsigned({ content: 'café 😀 日本 \u2028\u2029 </script>' }),
    serialized: `[0,"${PK}",1700000000,1,[],"café 😀 日本 \u2028\u2029 </script>"]`,
    id: 'd62c86bb6af7aeb0867f56aceb4fe61c32d3dfec45af8ccbbb56df544bd7b285',
  },
  {
    name: 'tag strings are escaped like content',
    event: unsigned({ kind: 30023, tags: [['d', 'a"b'], ['t', 'x\\y\n'], ['alt', 'é\u0007/']] }),
    serialized: String.raw`[0,"${PK}",1700000000,30023,[["d","a\"b"],["t","x\\y\n"],["alt","é\u0007/"]],""]`,
    id: 'bcd7f2bb7dec17c268406b3d048882890c006d2685353317b88f4097146a1eba',
  },
];

describe('serializeForId', () => {
  it('is [0,pubkey,created_at,kind,tags,content] with no whitespace outside strings', () => {
    const e = unsigned({ kind: 7, tags: [['e', 'x'], ['p', 'y', 'wss://r']], content: '+' });
    expect(serializeForId(e)).toBe(`[0,"${PK}",1700000000,7,[["e","x"],["p","y","wss://r"]],"+"]`);
  });

  it.each(FIXTURES)('$name', ({ event, serialized }) => {
    expect(serializeForId(event)).toBe(serialized);
  });
});

describe('computeEventId', () => {
  it.each(FIXTURES)('matches the independently computed id when $name', ({ event, id }) => {
    expect(computeEventId(event)).toBe(id);
  });

  it.each(FIXTURES)('agrees with nostr-tools getEventHash when $name', ({ event, id }) => {
    expect(getEventHash(event)).toBe(id);
  });

  it("the tests' signer makes the events nostr-tools makes: same id, and nostr-tools verifies them", () => {
    const signer = newSigner();
    const template = { kind: 1, created_at: 1_700_000_000, tags: [['t', 'ü'], ['p', 'a'.repeat(64)]], content: 'a "quoted"\nline 🎉' };
    const fast = signer.sign(template);
    expect(fast.id).toBe(signer.signIndependent(template).id);
    expect(verifyEvent({ ...fast })).toBe(true);
  });

  it('agrees with nostr-tools on arbitrary well-formed unicode content and tags', () => {
    const text = fc.string({ unit: 'grapheme', maxLength: 40 });
    fc.assert(
      fc.property(text, fc.array(fc.array(text, { minLength: 1, maxLength: 3 }), { maxLength: 4 }), (content, tags) => {
        const e = unsigned({ content, tags });
        expect(computeEventId(e)).toBe(getEventHash(e));
      }),
      { numRuns: 300 },
    );
  });
});

describe('eventJsons', () => {
  it('makes exactly serializeForId and canonicalEventJson, for arbitrary content, tags, kinds and times', () => {
    const text = fc.string({ unit: 'grapheme', maxLength: 40 });
    const hex = (n: number) => fc.stringMatching(new RegExp(`^[0-9a-f]{${n}}$`));
    fc.assert(
      fc.property(
        hex(64), hex(64), hex(128), fc.oneof(fc.nat(), fc.constantFrom(0, 2 ** 31, Number.MAX_SAFE_INTEGER)), fc.integer({ min: 0, max: 65535 }),
        text, fc.array(fc.array(text, { minLength: 1, maxLength: 3 }), { maxLength: 4 }),
        (id, pubkey, sig, created_at, kind, content, tags) => {
          const e = { id, pubkey, created_at, kind, tags, content, sig };
          expect(eventJsons(e)).toEqual({ forId: serializeForId(e), raw: canonicalEventJson(e) });
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('checkIdAndSignature', () => {
  const alice = newSigner();
  const bob = newSigner();
  const flipFirstNibble = (hex: string) => (hex[0] === '0' ? '1' : '0') + hex.slice(1);

  it('accepts an event signed by its pubkey', () => {
    const e = alice.sign({ content: 'hello' });
    expect(verifyEvent({ ...e })).toBe(true);
    expect(checkIdAndSignature(e)).toBeUndefined();
  });

  it('rejects an event whose content was changed after signing, as an id mismatch', () => {
    const e = { ...alice.sign({ content: 'hello' }), content: 'hellO' };
    expect(checkIdAndSignature(e)).toMatch(/^invalid: event id/);
  });

  it('rejects an event whose tags were changed after signing, as an id mismatch', () => {
    const e = alice.sign({ tags: [['t', 'a']] });
    expect(checkIdAndSignature({ ...e, tags: [['t', 'b']] })).toMatch(/^invalid: event id/);
  });

  it('rejects a tampered signature', () => {
    const e = alice.sign({ content: 'hello' });
    expect(checkIdAndSignature({ ...e, sig: flipFirstNibble(e.sig) })).toBe('invalid: bad signature');
  });

  it('rejects a correct id signed by a key other than the pubkey', () => {
    const template = unsigned({ pubkey: bob.pubkey, content: 'not bob' });
    const id = computeEventId(template);
    const sig = Buffer.from(secp.signSchnorr(Buffer.from(id, 'hex'), alice.secretKey)).toString('hex');
    expect(checkIdAndSignature({ ...template, id, sig })).toBe('invalid: bad signature');
  });

  it('rejects a signature over sha256(id) instead of the 32 raw id bytes', () => {
    const template = unsigned({ pubkey: alice.pubkey, content: 'rehashed' });
    const id = computeEventId(template);
    const rehashed = createHash('sha256').update(Buffer.from(id, 'hex')).digest();
    const sig = Buffer.from(secp.signSchnorr(rehashed, alice.secretKey)).toString('hex');
    expect(checkIdAndSignature({ ...template, id, sig })).toBe('invalid: bad signature');
  });
});

describe('verifySignature', () => {
  const e = newSigner().sign({ content: 'x' });

  it.each([
    ['x = 0, not on the curve', '0'.repeat(64)],
    ['x = 5, not on the curve', '0'.repeat(63) + '5'],
    ['x >= the field prime', 'f'.repeat(64)],
  ])('returns false without throwing for a pubkey that is not a valid x coordinate (%s)', (_, pubkey) => {
    expect(() => verifySignature({ ...e, pubkey })).not.toThrow();
    expect(verifySignature({ ...e, pubkey })).toBe(false);
  });

  it('returns false without throwing for a signature whose r and s are out of range', () => {
    expect(verifySignature({ ...e, sig: 'f'.repeat(128) })).toBe(false);
  });

  it('returns false for an all-zero signature', () => {
    expect(verifySignature({ ...e, sig: '0'.repeat(128) })).toBe(false);
  });
});

describe('parseEvent', () => {
  const valid: NostrEvent = newSigner().sign({ kind: 1, tags: [['e', 'a'.repeat(64), 'wss://r'], ['t', '']], content: 'hi' });
  const reason = (input: unknown) => {
    const r = parseEvent(input);
    return r.ok ? undefined : r.reason;
  };

  it('accepts a well-formed event unchanged', () => {
    expect(parseEvent(valid)).toEqual({ ok: true, value: valid });
  });

  it('drops fields beyond the seven NIP-01 fields', () => {
    const r = parseEvent({ ...valid, seenOn: ['wss://x'], relays: 1 });
    expect(r.ok && Object.keys(r.value).sort()).toEqual(['content', 'created_at', 'id', 'kind', 'pubkey', 'sig', 'tags']);
  });

  it.each(['id', 'pubkey', 'sig'] as const)('rejects uppercase hex in %s', (field) => {
    expect(reason({ ...valid, [field]: valid[field].toUpperCase().replace(/^[0-9]/, 'A') })).toMatch(/^invalid: /);
  });

  it.each(['id', 'pubkey', 'sig'] as const)('rejects %s one hex character short', (field) => {
    expect(reason({ ...valid, [field]: valid[field].slice(1) })).toMatch(/^invalid: /);
  });

  it.each(['id', 'pubkey', 'sig'] as const)('rejects %s one hex character long', (field) => {
    expect(reason({ ...valid, [field]: valid[field] + '0' })).toMatch(/^invalid: /);
  });

  it.each([
    ['a float', 1700000000.5],
    ['a negative number', -1],
    ['2^53, an unsafe integer', 2 ** 53],
    ['a numeric string', '1700000000'],
    ['null', null],
  ])('rejects created_at that is %s', (_, created_at) => {
    expect(reason({ ...valid, created_at })).toMatch(/^invalid: created_at/);
  });

  it('accepts created_at 0 and 2^53 - 1', () => {
    expect(parseEvent({ ...valid, created_at: 0 }).ok).toBe(true);
    expect(parseEvent({ ...valid, created_at: 2 ** 53 - 1 }).ok).toBe(true);
  });

  it.each([
    ['65536, above the kind range', 65536],
    ['negative', -1],
    ['a float', 1.5],
    ['a string', '1'],
  ])('rejects kind that is %s', (_, kind) => {
    expect(reason({ ...valid, kind })).toMatch(/^invalid: kind/);
  });

  it('accepts kind 65535', () => {
    expect(parseEvent({ ...valid, kind: 65535 }).ok).toBe(true);
  });

  it.each([
    ['null', ['e', null]],
    ['a number', ['e', 1]],
    ['an object', ['e', {}]],
    ['a nested array', ['e', ['x']]],
  ])('rejects a tag element that is %s', (_, tag) => {
    expect(reason({ ...valid, tags: [tag] })).toMatch(/^invalid: tags\.0\.1/);
  });

  it('rejects an empty tag []', () => {
    expect(reason({ ...valid, tags: [['t', 'x'], []] })).toMatch(/^invalid: tags\.1/);
  });

  it('accepts a tag holding one empty string', () => {
    expect(parseEvent({ ...valid, tags: [['']] }).ok).toBe(true);
  });

  it('rejects tags that are not an array of arrays', () => {
    expect(reason({ ...valid, tags: {} })).toMatch(/^invalid: tags/);
    expect(reason({ ...valid, tags: ['e'] })).toMatch(/^invalid: tags/);
  });

  it('rejects content that is not a string', () => {
    expect(reason({ ...valid, content: 1 })).toMatch(/^invalid: content/);
  });

  it.each(['id', 'pubkey', 'created_at', 'kind', 'tags', 'content', 'sig'] as const)('rejects an event without %s', (field) => {
    const input: Record<string, unknown> = { ...valid };
    delete input[field];
    expect(reason(input)).toMatch(new RegExp(`^invalid: ${field}`));
  });

  it.each([
    ['a lone high surrogate in content', { content: 'a\ud800b' }],
    ['a lone low surrogate in content', { content: '\udc00' }],
    ['a lone surrogate in a tag', { tags: [['t', '\ud83d']] }],
  ])('rejects %s', (_, over) => {
    expect(reason({ ...valid, ...over })).toMatch(/^invalid: .*surrogate/);
  });

  it('accepts a surrogate pair (an emoji) in content and tags', () => {
    expect(parseEvent({ ...valid, content: '😀', tags: [['t', '😀']] }).ok).toBe(true);
  });

  it.each([
    ['null', null],
    ['undefined', undefined],
    ['a string', 'event'],
    ['a number', 42],
    ['an array', [valid]],
  ])('rejects %s as an event without throwing', (_, input) => {
    expect(reason(input)).toMatch(/^invalid: /);
  });
});

describe('canonicalEventJson', () => {
  it('writes exactly the seven fields in NIP-01 order, whatever the input order', () => {
    const e = newSigner().sign({ content: 'x' });
    const shuffled = { sig: e.sig, content: e.content, tags: e.tags, kind: e.kind, created_at: e.created_at, pubkey: e.pubkey, id: e.id };
    expect(Object.keys(JSON.parse(canonicalEventJson(shuffled)))).toEqual(['id', 'pubkey', 'created_at', 'kind', 'tags', 'content', 'sig']);
    expect(JSON.parse(canonicalEventJson(shuffled))).toEqual(e);
  });
});

describe('powDifficulty (NIP-13)', () => {
  const id = (prefix: string) => prefix + 'f'.repeat(64 - prefix.length);

  it.each([
    ['000000000e9d', 36],
    ['002f', 10],
    ['f', 0],
    ['8', 0],
    ['7', 1],
    ['4', 1],
    ['3', 2],
    ['2', 2],
    ['1', 3],
    ['0', 4],
    ['01', 7],
  ])('counts leading zero bits of an id starting %s as %i', (prefix, bits) => {
    expect(powDifficulty(id(prefix))).toBe(bits);
  });

  it('is 256 for an all-zero id', () => {
    expect(powDifficulty('0'.repeat(64))).toBe(256);
  });
});

describe('isHex64', () => {
  it('agrees with /^[0-9a-f]{64}$/ on any string, near-hex ones included', () => {
    const hexChar = fc.constantFrom(...'0123456789abcdefABCDEFgz/:`@G\u00e9\u0100\u{1f389}'.split(''));
    const nearHex = fc.array(hexChar, { minLength: 62, maxLength: 66 }).map((cs) => cs.join(''));
    fc.assert(fc.property(fc.oneof(nearHex, fc.string({ maxLength: 70 }), fc.string({ unit: 'binary', minLength: 64, maxLength: 64 })), (x) => isHex64(x) === HEX64.test(x)), { numRuns: 3000 });
    expect(isHex64('0123456789abcdef'.repeat(4))).toBe(true);
    expect(isHex64('0123456789abcdef'.repeat(4).slice(0, 63) + 'A')).toBe(false);
  });
});
