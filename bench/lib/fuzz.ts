// A structure-aware fuzzer for the relay, shared by `npm run fuzz` and test/relay/fuzz.test.ts.
//
// 1. Arbitraries (fast-check) that build near-valid messages of every verb the relay speaks: really
//    signed events, then mutated (ids, signatures, pubkeys, tags, kinds, created_at, odd and huge
//    Unicode content); REQ/COUNT with every filter field mistyped, empty, huge or negative; CLOSE, AUTH,
//    NEG-OPEN/NEG-MSG/NEG-CLOSE with well-formed and broken negentropy messages; wrong arity, unknown
//    verbs, garbage, deep nesting, frames over the size limit and over twice the limit.
// 2. `expectedReply`: what NIP-01 (and our protocol.md, 1.7) says the relay owes each frame, worked out
//    from the frame's bytes alone, never from the relay's code.
// 3. `runFuzz`: several connections send the messages in segments of `batch`, each closed by a barrier
//    (a REQ that needs the database), and check every reply against the expectations; meanwhile a
//    well-behaved client publishes and reads back once a second and times both. The checks that decide
//    pass or fail (FuzzReport.failures): the relay alive and nothing at level error in its log; every
//    reply owed received, well-formed and prefixed; every event delivered intact (its id recomputes)
//    and matching its subscription's filters, and none after the subscription's CLOSE or CLOSED; the
//    well-behaved client answered right (and, in `npm run fuzz`, within a second); and once every client has gone, no connection,
//    subscription or negentropy record left, and the heap back near baseline.
import { isUtf8 } from 'node:buffer';
import { createHash } from 'node:crypto';
import { createServer, type AddressInfo } from 'node:net';
import fc from 'fast-check';
import * as secp from 'tiny-secp256k1';
import WebSocket from 'ws';
import { computeEventId, type NostrEvent } from '../../src/nostr/event.js';
import { matchFilter, parseFilter, type Filter } from '../../src/nostr/filter.js';
import { parsePrometheusText, total } from './soak-metrics.js';

// ---------------------------------------------------------------------------------------------
// Keys and signing
// ---------------------------------------------------------------------------------------------

export interface Key {
  secret: Buffer;
  pubkey: string;
}

function keyFrom(label: string): Key {
  const secret = createHash('sha256').update(label).digest();
  return { secret, pubkey: Buffer.from(secp.xOnlyPointFromScalar(secret)).toString('hex') };
}

/** The fuzzer's authors: a handful, so replaceable kinds, deletions and vanish requests collide. */
export const FUZZ_KEYS: readonly Key[] = Array.from({ length: 6 }, (_, i) => keyFrom(`pgrelay-fuzz-key-${i}`));
/** The well-behaved client's author: no fuzzed message is ever signed by it (so no vanish request hits it). */
const WELL_BEHAVED_KEY = keyFrom('pgrelay-fuzz-well-behaved');
/** A pubkey that is not an x coordinate on secp256k1 (every signature check with it fails). */
const OFF_CURVE_PUBKEY = 'f'.repeat(64);
const AUX = Buffer.alloc(32);

/** Any fields (mistyped ones included): the id is the sha256 of the NIP-01 serialisation, the signature real. */
function sign(template: Record<string, unknown>, key: Key): Record<string, unknown> {
  const unsigned = { pubkey: key.pubkey, ...template } as Parameters<typeof computeEventId>[0];
  const id = computeEventId(unsigned);
  const sig = Buffer.from(secp.signSchnorr(Buffer.from(id, 'hex'), key.secret, AUX)).toString('hex');
  return { id, ...unsigned, sig };
}

const nowSeconds = () => Math.floor(Date.now() / 1000);

// ---------------------------------------------------------------------------------------------
// Frames: JSON with holes for text JSON.stringify cannot produce
// ---------------------------------------------------------------------------------------------

/** JSON text spliced verbatim into a frame: deep nesting, duplicate keys, 1e400, -0, malformed parts. */
export class Raw {
  constructor(readonly text: string) {}
}

export interface Frame {
  data: string | Buffer;
  /** A binary WebSocket frame (the relay reads it as UTF-8 like a text one). */
  binary?: boolean;
  /**
   * Not a frame: the client closes the connection here without waiting for any answer ('close': the
   * closing handshake; 'drop': the socket destroyed at once), and reconnects.
   */
  hangup?: 'close' | 'drop';
}

/** JSON.stringify, with every Raw value replaced by its text. */
export function toJson(value: unknown): string {
  const raws: string[] = [];
  const text = JSON.stringify(value, (_key, v: unknown) => {
    if (v instanceof Raw) {
      raws.push(v.text);
      return `\u0001raw${raws.length - 1}\u0001`;
    }
    return v;
  });
  if (raws.length === 0) return text;
  return text.replace(/"\\u0001raw(\d+)\\u0001"/g, (_, i: string) => raws[Number(i)]);
}

const nestedArrays = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
const nestedObjects = (depth: number) => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);

// ---------------------------------------------------------------------------------------------
// What a message needs when it is sent: the connection's challenge, a fresh namespace for sub ids
// ---------------------------------------------------------------------------------------------

export interface BuildContext {
  /** Unique per connection and segment: sub ids built from it never collide with an earlier segment's. */
  tag: string;
  segment: number;
  /** The NIP-42 challenge the relay sent on this connection. */
  challenge: string;
  /** The URL this connection was opened with (what an AUTH event's relay tag names). */
  relayUrl: string;
  /** Recent EVENT frames of this connection, to send again (duplicates). */
  recentEvents: string[];
  /** Recent events the relay accepted from this connection (OK true): filters aim at their values. */
  accepted: NostrEvent[];
}

/** One message, or a few sent back to back (races: a REQ and its CLOSE in the same packet). */
export interface FuzzMessage {
  build(ctx: BuildContext): Frame | Frame[];
}

const message = (build: (ctx: BuildContext) => Frame | Frame[]): FuzzMessage => ({ build });
const json = (value: unknown): Frame => ({ data: toJson(value) });

/**
 * A subscription (or NEG) id: one of a small pool (so REQ, COUNT and CLOSE meet the same ids and
 * replace each other), an exact length around the 64-character limit, odd Unicode, or not a string.
 * Built in the segment's namespace, so a late reply can never be taken for a later segment's.
 */
type IdSpec = { pool: number } | { length: number } | { odd: string } | { raw: unknown };

function idOf(spec: IdSpec, ctx: BuildContext): unknown {
  if ('pool' in spec) return `${spec.pool}.${ctx.tag}`;
  if ('length' in spec) {
    // One character: a different CJK ideograph per segment.
    if (spec.length === 1) return String.fromCharCode(0x4e00 + (ctx.segment % 20_000));
    return `${ctx.tag}:`.padEnd(spec.length, 'x').slice(0, Math.max(spec.length, ctx.tag.length + 1));
  }
  if ('odd' in spec) return `${ctx.tag}:${spec.odd}`;
  return spec.raw;
}

// ---------------------------------------------------------------------------------------------
// Arbitraries: values
// ---------------------------------------------------------------------------------------------

const hexOf = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');
const hexBytes = (n: number) => fc.uint8Array({ minLength: n, maxLength: n }).map(hexOf);
const hex64 = hexBytes(32);
const fuzzPubkey = fc.constantFrom(...FUZZ_KEYS.map((k) => k.pubkey));

/** Text that breaks naive code: controls, NUL, lone surrogates, RTL, combining marks, emoji, escapes. */
const ODD_STRINGS = [
  '', ' ', '\u0000', 'a\u0000b', '\ud800', 'x\udfffy', '\udbff\udfff', '\ud83d', '\u2028\u2029', '\u202eevil', '\ufeff',
  '\\', '"', '\\u0000', '\\"', '</script>', 'ｆｕｌｌ', 'Z̴̢͖a̵l̶g̷o̸', '🏳️‍🌈👨‍👩‍👧‍👦', '\x7f', '\b\f\n\r\t', '\u0001\u001f',
  'نص عربي', '日本語のテキスト', 'ﷺ', '\u0301', 'e\u0301', 'İ', 'ß', '%s%n', '${x}', "'; DROP TABLE events; --", 'null', '[]',
];
const utf16Unit = fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c));
export const oddText: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 24 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 12 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 12 }) },
  { weight: 2, arbitrary: fc.string({ unit: utf16Unit, maxLength: 12 }) }, // lone surrogates included
  { weight: 4, arbitrary: fc.constantFrom(...ODD_STRINGS) },
  {
    weight: 1,
    arbitrary: fc.tuple(fc.constantFrom('a', 'é', '😀', '\u0000', '日本', 'ab\n', '\ud800'), fc.integer({ min: 100, max: 3000 })).map(([u, n]) => u.repeat(n)),
  },
);

/** Content: mostly short, sometimes odd, now and then near or past MAX_CONTENT_LENGTH (102,400) and the frame limit. */
const content = fc.oneof(
  { weight: 24, arbitrary: oddText },
  { weight: 10, arbitrary: fc.lorem({ maxCount: 30 }) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(fc.constantFrom('a', 'é', '😀', '日', '\n', '\u0000'), fc.constantFrom(20_000, 60_000, 102_400, 102_401, 140_000))
      .map(([unit, chars]) => unit.repeat(Math.ceil(chars / unit.length)).slice(0, chars)),
  },
  // A repost carrying a protected event (NIP-70 says refuse it).
  { weight: 1, arbitrary: hex64.map((id) => JSON.stringify({ id, pubkey: FUZZ_KEYS[0].pubkey, kind: 1, tags: [['-']], content: 'x', created_at: 1, sig: '0'.repeat(128) })) },
);

const KINDS = [0, 1, 1, 1, 1, 3, 4, 5, 6, 7, 16, 40, 62, 1059, 1111, 9735, 10002, 20000, 22242, 25000, 29999, 30023, 30078, 39999, 40000, 65535];
const kind = fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...KINDS) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 65535 }) });

/** created_at relative to now (the relay refuses more than 900 s ahead), or absolute extremes. */
const createdAt = fc.oneof(
  { weight: 8, arbitrary: fc.integer({ min: -3600, max: 0 }).map((d) => () => nowSeconds() + d) },
  { weight: 1, arbitrary: fc.constantFrom(600, 899, 1000, 86_400).map((d) => () => nowSeconds() + d) },
  { weight: 1, arbitrary: fc.constantFrom(0, 1, 2 ** 31 - 1, 2 ** 32, Number.MAX_SAFE_INTEGER, 946_684_800).map((t) => () => t) },
);

const letter = fc.constantFrom(...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ');

const tag: fc.Arbitrary<string[]> = fc.oneof(
  fc.tuple(fc.constant('e'), hex64),
  fc.tuple(fc.constant('p'), fc.oneof(hex64, fuzzPubkey)),
  fc.tuple(fc.constant('t'), oddText),
  fc.tuple(fc.constant('d'), oddText),
  fc.tuple(kind, fuzzPubkey, oddText).map(([k, p, d]) => ['a', `${k}:${p}:${d}`]),
  fc.integer({ min: -100, max: 100 }).map((d) => ['expiration', String(nowSeconds() + d)]),
  fc.constantFrom<string[]>(['-'], ['expiration', 'soon'], ['expiration', '1e99'], ['relay', 'ALL_RELAYS'], ['relay', 'wss://elsewhere.example'], ['d'], ['e'], ['e', 'not hex'], ['p', 'A'.repeat(64)]),
  fc.tuple(fc.constant('k'), fc.integer({ min: 0, max: 65535 }).map(String)),
  fc.tuple(fc.constant('nonce'), fc.nat().map(String), fc.integer({ min: 0, max: 64 }).map(String)),
  fc.tuple(letter, oddText),
  fc.tuple(letter, fc.constantFrom(1023, 1024, 1025, 5000).map((n) => 'v'.repeat(n))), // MAX_INDEXED_TAG_VALUE_BYTES
  fc.array(oddText, { minLength: 1, maxLength: 5 }),
);

const tags = fc.oneof(
  { weight: 12, arbitrary: fc.array(tag, { maxLength: 6 }) },
  // Around MAX_EVENT_TAGS (2000).
  { weight: 1, arbitrary: fc.tuple(tag, fc.constantFrom(500, 1999, 2000, 2001)).map(([t, n]) => Array.from({ length: n }, (_, i) => [t[0].slice(0, 8), `${(t[1] ?? '').slice(0, 8)}${i}`])) },
);

/** Values of the wrong type for any field. */
const wrongType = fc.oneof(
  fc.constantFrom<unknown>(null, true, false, 0, -1, 1.5, 1e308, '', '1', [], {}, [null], [[]], ['a'], { a: 1 }),
  fc.constantFrom(new Raw('1e400'), new Raw('-0'), new Raw('1.0'), new Raw('1E3'), new Raw('-1e-400')),
  fc.string({ maxLength: 8 }),
);

/** Nesting depth: mostly shallow, now and then deep enough to pass the frame limits. */
const depth = fc.oneof({ weight: 6, arbitrary: fc.integer({ min: 2, max: 1000 }) }, { weight: 3, arbitrary: fc.integer({ min: 1000, max: 30_000 }) }, { weight: 1, arbitrary: fc.integer({ min: 30_000, max: 70_000 }) });

// ---------------------------------------------------------------------------------------------
// Arbitraries: events
// ---------------------------------------------------------------------------------------------

/** A change made before signing: the id and signature are right for a value the relay must refuse. */
const preSign = fc.oneof(
  { weight: 20, arbitrary: fc.constant<[string, unknown] | undefined>(undefined) },
  { weight: 1, arbitrary: fc.constantFrom<unknown>(-1, 1.5, 65536, 2 ** 53, '1', null).map((v) => ['kind', v] as [string, unknown]) },
  { weight: 1, arbitrary: fc.constantFrom<unknown>(-1, 1.5, 2 ** 53, 1e21, '1700000000', null).map((v) => ['created_at', v] as [string, unknown]) },
  { weight: 1, arbitrary: fc.constantFrom<unknown>([[]], [['t', null]], [['t', 5]], [['t', {}]], [null], ['t'], {}, null, [['t', '\ud800']]).map((v) => ['tags', v] as [string, unknown]) },
  { weight: 1, arbitrary: fc.constantFrom<unknown>(5, null, ['x'], { a: 1 }, '\ud800', 'a\udc00b').map((v) => ['content', v] as [string, unknown]) },
);

/** What happens to a signed event before it is sent. */
const POST_SIGN = [
  ...Array.from({ length: 24 }, () => 'none' as const),
  'id-flip', 'id-upper', 'id-short', 'id-long', 'id-empty', 'id-wrong-type', 'id-missing', 'id-other',
  'sig-flip', 'sig-upper', 'sig-short', 'sig-zero', 'sig-wrong-type', 'sig-missing', 'sig-other',
  'pubkey-other', 'pubkey-upper', 'pubkey-off-curve', 'pubkey-short',
  'kind-wrong-type', 'created_at-wrong-type', 'tags-wrong-type', 'content-wrong-type', 'content-changed',
  'extra-field', 'reordered', 'field-missing', 'duplicate-key', 'tags-deep', 'not-an-object',
] as const;
type PostSign = (typeof POST_SIGN)[number];

function flipHex(s: string, at: number): string {
  const i = at % s.length;
  return s.slice(0, i) + (s[i] === '0' ? '1' : '0') + s.slice(i + 1);
}

function mutate(e: Record<string, unknown>, how: PostSign, n: number, junk: unknown): unknown {
  const id = e.id as string;
  const sig = e.sig as string;
  const pubkey = e.pubkey as string;
  switch (how) {
    case 'none': return e;
    case 'id-flip': return { ...e, id: flipHex(id, n) };
    case 'id-upper': return { ...e, id: id.toUpperCase() };
    case 'id-short': return { ...e, id: id.slice(0, n % 64) };
    case 'id-long': return { ...e, id: id + '0' };
    case 'id-empty': return { ...e, id: '' };
    case 'id-wrong-type': return { ...e, id: junk };
    case 'id-missing': { const { id: _, ...rest } = e; return rest; }
    case 'id-other': return { ...e, id: sign({ kind: 1, created_at: 1, tags: [], content: String(n) }, FUZZ_KEYS[0]).id };
    case 'sig-flip': return { ...e, sig: flipHex(sig, n) };
    case 'sig-upper': return { ...e, sig: sig.toUpperCase() };
    case 'sig-short': return { ...e, sig: sig.slice(0, n % 128) };
    case 'sig-zero': return { ...e, sig: '0'.repeat(128) };
    case 'sig-wrong-type': return { ...e, sig: junk };
    case 'sig-missing': { const { sig: _, ...rest } = e; return rest; }
    case 'sig-other': return { ...e, sig: sign({ kind: 1, created_at: 1, tags: [], content: String(n) }, FUZZ_KEYS[1]).sig };
    // A pubkey changed with the id recomputed: the shape and the id are right, the signature is not.
    case 'pubkey-other': return withId({ ...e, pubkey: FUZZ_KEYS[(n % 5) + 1].pubkey === pubkey ? FUZZ_KEYS[0].pubkey : FUZZ_KEYS[(n % 5) + 1].pubkey });
    case 'pubkey-upper': return { ...e, pubkey: pubkey.toUpperCase() };
    case 'pubkey-off-curve': return withId({ ...e, pubkey: OFF_CURVE_PUBKEY });
    case 'pubkey-short': return { ...e, pubkey: pubkey.slice(0, 62) };
    case 'kind-wrong-type': return { ...e, kind: junk };
    case 'created_at-wrong-type': return { ...e, created_at: junk };
    case 'tags-wrong-type': return { ...e, tags: junk };
    case 'content-wrong-type': return { ...e, content: junk };
    case 'content-changed': return { ...e, content: `${String(e.content)}!` };
    case 'extra-field': return { ...e, extra: junk, seen_on: ['wss://x'] };
    case 'reordered': return Object.fromEntries(Object.entries(e).reverse());
    case 'field-missing': { const keys = Object.keys(e); const { [keys[n % keys.length]]: _, ...rest } = e; return rest; }
    // JSON.parse keeps the last of duplicate keys: a valid id last, or a wrong one.
    case 'duplicate-key': return new Raw(`{"id":"${'0'.repeat(64)}",${toJson(e).slice(1, -1)}${n % 2 ? `,"id":"${flipHex(id, n)}"` : ''}}`);
    case 'tags-deep': return { ...e, tags: new Raw(nestedArrays(2 + (n % (n % 7 ? 1000 : 40_000)))) };
    case 'not-an-object': return junk;
  }
}

function withId(e: Record<string, unknown>): Record<string, unknown> {
  return { ...e, id: computeEventId(e as Parameters<typeof computeEventId>[0]) };
}

/** A really signed event, maybe mutated: built when the message is sampled, so created_at is fresh. */
export const event: fc.Arbitrary<unknown> = fc
  .record({ key: fc.nat(FUZZ_KEYS.length - 1), kind, createdAt, tags, content, preSign, postSign: fc.constantFrom(...POST_SIGN), n: fc.nat(), junk: wrongType })
  .map(({ key, kind, createdAt, tags, content, preSign, postSign, n, junk }) => {
    const template: Record<string, unknown> = { created_at: createdAt(), kind, tags, content };
    if (preSign) template[preSign[0]] = preSign[1];
    return mutate(sign(template, FUZZ_KEYS[key]), postSign, n, junk);
  });

// ---------------------------------------------------------------------------------------------
// Arbitraries: filters
// ---------------------------------------------------------------------------------------------

/** n distinct hex values around a random one (for lists at MAX_FILTER_VALUES, 1000). */
const manyHex = (h: string, n: number) => Array.from({ length: n }, (_, i) => h.slice(0, 58) + i.toString(16).padStart(6, '0'));

/** A value, or a function giving it when the message is built. */
type Built = (ctx: BuildContext) => unknown;
/** A filter field: a key and a value (a function of the build context for times relative to now, or values of accepted events). */
type Field = [string, unknown] | ((ctx: BuildContext) => [string, unknown]);
const field = (key: string) => (v: unknown): Field => [key, v];

/** Valid values: hex of no event or of the fuzzer's authors. */
const hexList = fc.oneof({ weight: 2, arbitrary: fc.array(hex64, { minLength: 1, maxLength: 3 }) }, { weight: 1, arbitrary: fc.array(fuzzPubkey, { minLength: 1, maxLength: 3 }) });
/** Hex lists that are empty, huge (MAX_FILTER_VALUES is 1000), upper case, a prefix, too long, or not lists of strings. */
const badHexList = fc.oneof(
  fc.constant([]),
  hex64.map((h) => [h.toUpperCase()]),
  hex64.map((h) => [h.slice(0, 8)]), // a prefix: matching by prefix was dropped in 2023
  hex64.map((h) => [h + '0']),
  wrongType,
  fc.tuple(hex64, fc.constantFrom(999, 1000, 1001, 1500)).map(([h, n]) => manyHex(h, n)),
);

/** Filter fields a relay should accept (some matching nothing). */
const validField: fc.Arbitrary<Field> = fc.oneof(
  hexList.map(field('ids')),
  hexList.map(field('authors')),
  fc.array(kind, { minLength: 1, maxLength: 4 }).map(field('kinds')),
  fc.tuple(fc.constantFrom('#e', '#p'), hexList),
  fc.tuple(letter.map((l) => `#${l}`), fc.array(oddText, { minLength: 1, maxLength: 3 })),
  fc.integer({ min: -86_400 * 30, max: 3600 }).map((d) => field('since')(() => nowSeconds() + d)),
  fc.integer({ min: -86_400 * 30, max: 3600 }).map((d) => field('until')(() => nowSeconds() + d)),
  fc.oneof(fc.nat(50), fc.constantFrom(0, 500, 5000, 10_000)).map(field('limit')),
  fc
    .oneof(
      fc.lorem({ maxCount: 4 }),
      fc.constantFrom('language:en running dogs', 'language:de Häuser', 'include:spam nostr', 'domain:example.com', 'nsfw:false', '"a phrase"', '-not', '#hashtag', '日本語', "o'reilly", 'sentiment:positive language:fr'),
    )
    .map(field('search')),
);

/** Filter fields mistyped, empty, huge, negative, unknown. */
const badField: fc.Arbitrary<Field> = fc.oneof(
  fc.tuple(fc.constantFrom('ids', 'authors', '#e', '#p'), badHexList),
  fc.oneof(
    fc.constant([]),
    fc.constantFrom<unknown>([-1], [1.5], [65536], ['1'], [null], [1e300], [[1]], 1, '1', null, {}),
    fc.constantFrom(999, 1000, 1001).map((n) => Array.from({ length: n }, (_, i) => i)),
  ).map(field('kinds')),
  fc.tuple(
    letter.map((l) => `#${l}`),
    fc.oneof(
      fc.constant([]),
      fc.constantFrom(['\u0000'], ['\ud800'], ['v'.repeat(1025)], ['x', null], [5]),
      wrongType,
      fc.constantFrom(1000, 1001).map((n) => Array.from({ length: n }, (_, i) => `v${i}`)),
    ),
  ),
  fc.tuple(fc.constantFrom('since', 'until', 'limit'), fc.oneof(fc.constantFrom<unknown>(0, -1, 1.5, 2 ** 31, 2 ** 53, 2 ** 53 - 1, 1e300, '1', null, true), wrongType)),
  fc
    .oneof(
      fc.constantFrom('language:xx foo', 'language:', '***', '', ' ', 'a&b|c!d', '\\', ':', 'x'.repeat(512), 'x'.repeat(513), '\u0000', 'a\u0000b', '\ud800', 'language:en \u0000'),
      oddText,
      wrongType,
    )
    .map(field('search')),
  fc.tuple(fc.constantFrom('#', '#ab', '#1', '#é', 'foo', 'IDS', 'ids ', '__proto__', 'constructor', 'e', '#e#'), fc.oneof(fc.constant(['x']), wrongType)),
);

/**
 * Values of an event this connection published and the relay accepted: its id, author, kind, a tag,
 * or its created_at as since/until (±1 s), so REQ and COUNT meet stored events at their boundaries.
 */
const knownField: fc.Arbitrary<Field> = fc.tuple(fc.nat(), fc.constantFrom('ids', 'authors', 'kinds', 'since', 'until', 'tag'), fc.constantFrom(-1, 0, 0, 1)).map(
  ([pick, what, offset]) =>
    (ctx: BuildContext): [string, unknown] => {
      const e = ctx.accepted[pick % Math.max(1, ctx.accepted.length)];
      if (!e) return ['kinds', [1]];
      switch (what) {
        case 'ids': return ['ids', [e.id]];
        case 'authors': return ['authors', [e.pubkey]];
        case 'kinds': return ['kinds', [e.kind]];
        case 'since': return ['since', e.created_at + offset];
        case 'until': return ['until', e.created_at + offset];
        default: {
          const t = e.tags.find((t) => t.length > 1 && /^[a-zA-Z]$/.test(t[0]));
          return t ? [`#${t[0]}`, [t[1]]] : ['authors', [e.pubkey]];
        }
      }
    },
);

const filterOf = (fields: Field[]): Built => (ctx) =>
  Object.fromEntries(
    fields.map((f) => {
      const [k, v] = typeof f === 'function' ? f(ctx) : f;
      return [k, typeof v === 'function' ? (v as Built)(ctx) : v];
    }),
  );

/** A filter: valid fields, with one bad one or several, or not an object at all, or deeply nested. */
export const filter: fc.Arbitrary<Built> = fc.oneof(
  { weight: 5, arbitrary: fc.array(validField, { maxLength: 4 }).map(filterOf) },
  { weight: 5, arbitrary: fc.tuple(fc.array(knownField, { minLength: 1, maxLength: 3 }), fc.array(validField, { maxLength: 1 })).map(([known, more]) => filterOf([...known, ...more])) },
  { weight: 4, arbitrary: fc.tuple(fc.array(validField, { maxLength: 3 }), badField, fc.nat()).map(([fields, bad, at]) => filterOf(fields.toSpliced(at % (fields.length + 1), 0, bad))) },
  { weight: 2, arbitrary: fc.array(fc.oneof(validField, badField), { minLength: 1, maxLength: 6 }).map(filterOf) },
  { weight: 1, arbitrary: fc.constantFrom<unknown>(null, 1, 'x', [], true, [{}]).map((v) => () => v) },
  { weight: 1, arbitrary: depth.map((d) => () => new Raw(d % 2 ? nestedArrays(d) : nestedObjects(d))) },
  { weight: 1, arbitrary: depth.map((d) => () => ({ '#t': new Raw(nestedArrays(d)) })) },
);

const filters: fc.Arbitrary<Built[]> = fc.oneof(
  { weight: 12, arbitrary: fc.array(filter, { minLength: 1, maxLength: 3 }) },
  { weight: 1, arbitrary: fc.constant<Built[]>([]) },
  { weight: 1, arbitrary: fc.constantFrom(10, 11, 50).map((n) => Array.from({ length: n }, (_, i) => () => ({ kinds: [i] }))) }, // MAX_FILTERS (10)
);

// ---------------------------------------------------------------------------------------------
// Arbitraries: negentropy messages (NIP-77)
// ---------------------------------------------------------------------------------------------

function varint(n: number): string {
  const digits = [n % 128];
  for (n = Math.floor(n / 128); n > 0; n = Math.floor(n / 128)) digits.unshift((n % 128) | 0x80);
  return Buffer.from(digits).toString('hex');
}

/** Well-formed V1 ranges with random bounds, modes and payloads (valid or not for the relay's set). */
const negRanges = fc
  .array(
    fc.record({
      delta: fc.oneof(fc.nat(1000), fc.constant(nowSeconds()), fc.constant(2 ** 40)),
      prefix: fc.uint8Array({ maxLength: 33 }),
      mode: fc.constantFrom(0, 1, 2, 2, 3),
      payload: fc.uint8Array({ minLength: 16, maxLength: 16 }),
      ids: fc.array(hex64, { maxLength: 40 }),
    }),
    { maxLength: 6 },
  )
  .chain((ranges) =>
    fc.boolean().map((infinite) => {
      let out = '61';
      ranges.forEach((r, i) => {
        const last = i === ranges.length - 1 && infinite;
        out += (last ? '00' : varint(1 + r.delta)) + varint(r.prefix.length) + hexOf(r.prefix) + varint(r.mode);
        if (r.mode === 1) out += hexOf(r.payload);
        if (r.mode === 2) out += varint(r.ids.length) + r.ids.join('');
      });
      return out;
    }),
  );

export const negentropyHex = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('6100000200', '61', '62', '60', '6f', '6100000100', '610000', '61000003', '6100ff', '61ffffffffffffffffff01') },
  { weight: 3, arbitrary: hexBytes(16).map((fp) => `61000001${fp}`) }, // one fingerprint to infinity: the relay splits it
  { weight: 4, arbitrary: negRanges },
  { weight: 2, arbitrary: fc.uint8Array({ maxLength: 120 }).map((b) => '61' + hexOf(b)) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map(hexOf) },
  { weight: 1, arbitrary: fc.constantFrom('', 'zz', '6', '610', '61 00', '0x61', '６１', '6100000200'.toUpperCase()) },
  { weight: 1, arbitrary: oddText },
  { weight: 1, arbitrary: fc.constantFrom(1000, 2000, 3000).chain((n) => hex64.map((h) => `61000002${varint(n)}${manyHex(h, n).join('')}`)) },
);

const idSpec = (pool: number): fc.Arbitrary<IdSpec> => fc.oneof(
  { weight: 12, arbitrary: fc.nat(pool - 1).map((pool) => ({ pool })) },
  { weight: 2, arbitrary: fc.constantFrom(1, 63, 64, 65, 200).map((length) => ({ length })) },
  { weight: 2, arbitrary: oddText.map((odd) => ({ odd })) },
  { weight: 2, arbitrary: fc.oneof(fc.constant<unknown>(''), wrongType).map((raw) => ({ raw })) },
);

/** REQ, COUNT and CLOSE ids: a pool of 6 per segment. */
const subId = idSpec(6);
/** NEG ids: a pool of 3, so NEG-MSG often reaches a session a NEG-OPEN opened. */
const negId = idSpec(3);

// ---------------------------------------------------------------------------------------------
// Arbitraries: messages
// ---------------------------------------------------------------------------------------------

/** A trailing argument list for wrong arity: nothing, or one or more extra values. */
const extras = fc.array(fc.oneof(wrongType, fc.jsonValue({ maxDepth: 2 })), { maxLength: 3 });

const eventMessage = fc.oneof(
  { weight: 20, arbitrary: event.map((e) => message(() => json(['EVENT', e]))) },
  { weight: 1, arbitrary: fc.tuple(event, extras).map(([e, more]) => message(() => json(['EVENT', ...(more.length ? [e, ...more] : [])]))) },
  // An event sent before on this connection: duplicate:, or the same refusal again.
  { weight: 2, arbitrary: fc.nat().map((k) => message((ctx) => ({ data: ctx.recentEvents.length ? ctx.recentEvents[k % ctx.recentEvents.length] : '["EVENT"]' }))) },
);

const reqMessage = (verb: 'REQ' | 'COUNT') =>
  fc.oneof(
    { weight: 12, arbitrary: fc.tuple(subId, filters).map(([id, fs]) => message((ctx) => json([verb, idOf(id, ctx), ...fs.map((f) => f(ctx))]))) },
    { weight: 1, arbitrary: extras.map((more) => message(() => json([verb, ...more]))) },
  );

const closeMessage = fc.oneof(
  { weight: 6, arbitrary: subId.map((id) => message((ctx) => json(['CLOSE', idOf(id, ctx)]))) },
  { weight: 1, arbitrary: fc.tuple(subId, extras).map(([id, more]) => message((ctx) => json(['CLOSE', ...(more.length % 2 ? [idOf(id, ctx), ...more] : more)]))) },
);

const AUTH_VARIANTS = ['good', 'good', 'good', 'wrong-challenge', 'wrong-relay', 'no-relay', 'old', 'future', 'wrong-kind', 'bad-sig', 'id-flip', 'no-id', 'not-an-object', 'arity-0', 'arity-2'] as const;
const authMessage = fc.record({ key: fc.nat(FUZZ_KEYS.length - 1), variant: fc.constantFrom(...AUTH_VARIANTS), junk: wrongType }).map(({ key, variant, junk }) =>
  message((ctx) => {
    const now = nowSeconds();
    const tagsFor = (challenge: string, relay?: string) => (relay === undefined ? [['challenge', challenge]] : [['relay', relay], ['challenge', challenge]]);
    const template = { kind: 22242, created_at: now, content: '', tags: tagsFor(ctx.challenge, ctx.relayUrl) };
    const signed = (changes: Record<string, unknown>) => sign({ ...template, ...changes }, FUZZ_KEYS[key]);
    switch (variant) {
      case 'good': return json(['AUTH', signed({})]);
      case 'wrong-challenge': return json(['AUTH', signed({ tags: tagsFor('not-the-challenge', ctx.relayUrl) })]);
      case 'wrong-relay': return json(['AUTH', signed({ tags: tagsFor(ctx.challenge, 'wss://another.relay.example') })]);
      case 'no-relay': return json(['AUTH', signed({ tags: tagsFor(ctx.challenge) })]);
      case 'old': return json(['AUTH', signed({ created_at: now - 3600 })]);
      case 'future': return json(['AUTH', signed({ created_at: now + 3600 })]);
      case 'wrong-kind': return json(['AUTH', signed({ kind: 1 })]);
      case 'bad-sig': { const e = signed({}); return json(['AUTH', { ...e, sig: flipHex(e.sig as string, 7) }]); }
      case 'id-flip': { const e = signed({}); return json(['AUTH', { ...e, id: flipHex(e.id as string, 3) }]); }
      case 'no-id': { const { id: _, ...e } = signed({}); return json(['AUTH', e]); }
      case 'not-an-object': return json(['AUTH', junk]);
      case 'arity-0': return json(['AUTH']);
      case 'arity-2': return json(['AUTH', signed({}), ctx.challenge]);
    }
  }),
);

const negFilter = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom<unknown>({}, { kinds: [1] }, { authors: [FUZZ_KEYS[0].pubkey] }, { kinds: [4] }, { limit: 10 }).map((f): Built => () => f) },
  { weight: 3, arbitrary: filter },
);

const negOpenMessage = fc.oneof(
  { weight: 10, arbitrary: fc.tuple(negId, negFilter, negentropyHex).map(([id, f, hex]) => message((ctx) => json(['NEG-OPEN', idOf(id, ctx), f(ctx), hex]))) },
  { weight: 1, arbitrary: fc.tuple(negId, negFilter, extras).map(([id, f, more]) => message((ctx) => json(['NEG-OPEN', idOf(id, ctx), f(ctx), ...more]))) },
);
const negMsgMessage = fc.oneof(
  { weight: 10, arbitrary: fc.tuple(negId, negentropyHex).map(([id, hex]) => message((ctx) => json(['NEG-MSG', idOf(id, ctx), hex]))) },
  { weight: 1, arbitrary: fc.tuple(negId, extras).map(([id, more]) => message((ctx) => json(['NEG-MSG', idOf(id, ctx), ...more]))) },
);
const negCloseMessage = fc.oneof(
  { weight: 6, arbitrary: negId.map((id) => message((ctx) => json(['NEG-CLOSE', idOf(id, ctx)]))) },
  { weight: 1, arbitrary: extras.map((more) => message(() => json(['NEG-CLOSE', ...more]))) },
);

/** Frames that are not a relay message: not JSON, not an array, an unknown verb, binary, invalid UTF-8. */
const garbage = fc.oneof(
  { weight: 12, arbitrary: fc.string({ maxLength: 40 }).map((s) => message(() => ({ data: s }))) },
  {
    weight: 12,
    arbitrary: fc
      .constantFrom(
        '', ' ', 'null', '[]', '{}', '[null]', '[1,2]', '[["REQ"]]', '"EVENT"', '42', 'true', '[{}]', '["EVENT",', '["REQ","x",{"kinds":[1]}',
        '\ufeff["REQ","x",{}]', '["REQ","x",{}],', "['REQ','x',{}]", '["REQ","x",{},]', '[NaN]', '["EVENT",{}] // hi', '["event",{}]',
        '["req","x",{}]', '["PING"]', '[""]', '["EVENT "]', '["NEG-OPENX","x",{},"61"]', '["Close","x"]', '[true]', '[["EVENT"]]',
      )
      .map((s) => message(() => ({ data: s }))),
  },
  { weight: 4, arbitrary: fc.tuple(fc.string({ maxLength: 12 }), extras).map(([verb, more]) => message(() => json([verb, ...more]))) },
  { weight: 8, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => message(() => json(v))) },
  { weight: 8, arbitrary: fc.uint8Array({ maxLength: 200 }).map((b) => message(() => ({ data: Buffer.from(b), binary: true }))) },
  // Text frames that are not UTF-8: the WebSocket layer closes the connection (1007).
  { weight: 1, arbitrary: fc.constantFrom(Buffer.from([0x5b, 0xff, 0x5d]), Buffer.from([0xc3, 0x28]), Buffer.from('["REQ","\xed\xa0\x80",{}]', 'latin1')).map((b) => message(() => ({ data: b, binary: false }))) },
  // A truncated fuzzed message.
  { weight: 8, arbitrary: fc.tuple(event, fc.nat()).map(([e, cut]) => message(() => { const t = toJson(['EVENT', e]); return { data: t.slice(0, cut % t.length) }; })) },
);

const deep = fc.tuple(depth, fc.constantFrom('arrays', 'objects', 'event', 'req-filter', 'in-array')).map(([d, where]) =>
  message(() => {
    switch (where) {
      case 'arrays': return { data: nestedArrays(d) };
      case 'objects': return { data: nestedObjects(d) };
      case 'event': return { data: `["EVENT",${nestedArrays(d)}]` };
      case 'req-filter': return { data: `["REQ","deep",${nestedObjects(d)}]` };
      case 'in-array': return { data: `["REQ",${nestedArrays(d)},{}]` };
    }
  }),
);

/**
 * A NIP-50 search that PostgreSQL must stem first (store/search.ts): the REQ waits for a round trip.
 * New words each time, or the relay's cache of stems answers without one.
 */
const stemmedSearch = fc
  .tuple(fc.constantFrom('en', 'de', 'fr', 'es', 'ru'), fc.string({ unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyzäéñ'), minLength: 5, maxLength: 12 }), fc.constantFrom('', ' running', ' \u0000'))
  .map(([language, word, more]): Built => () => ({ search: `language:${language} ${word}${more}` }));

/**
 * Messages on one id sent back to back, before any answer: a REQ closed, replaced or counted while
 * its query (or its search's stemming) runs; a NEG-OPEN closed or messaged while its snapshot is
 * read; or the client hanging up in the middle of them.
 */
const race = fc
  .tuple(
    subId,
    fc.constantFrom(
      'REQ CLOSE', 'REQ REQ', 'REQ COUNT CLOSE', 'COUNT CLOSE', 'REQ REQ CLOSE', 'NEG-OPEN NEG-CLOSE', 'NEG-OPEN NEG-MSG', 'NEG-OPEN NEG-OPEN',
      'NEG-OPEN NEG-MSG NEG-CLOSE', 'REQ close', 'REQ drop', 'COUNT drop', 'NEG-OPEN close', 'NEG-OPEN drop', 'REQ NEG-OPEN COUNT drop',
    ),
    fc.oneof(stemmedSearch, filter),
    fc.oneof(stemmedSearch, filter),
    negentropyHex,
  )
  .map(([id, sequence, first, second, hex]) =>
    message((ctx) => {
      const sid = idOf(id, ctx);
      let query = 0;
      return sequence.split(' ').map((verb) => {
        const f = (query++ === 0 ? first : second)(ctx);
        switch (verb) {
          case 'REQ': case 'COUNT': return json([verb, sid, f]);
          case 'NEG-OPEN': return json([verb, sid, f, hex]);
          case 'NEG-MSG': return json([verb, sid, hex]);
          case 'close': case 'drop': return { data: '', hangup: verb };
          default: return json([verb, sid]);
        }
      });
    }),
  );

/**
 * Frames over MAX_MESSAGE_BYTES (the relay answers, prefixed) and over twice it (the WebSocket layer
 * closes the connection, 1009), padded to `times` the limit.
 */
const oversized = (limit: number) =>
  fc.tuple(fc.constantFrom(1.05, 1.5, 1.99, 2.5), fc.constantFrom('EVENT', 'REQ', 'COUNT', 'NEG-OPEN', 'NEG-MSG', 'AUTH', 'CLOSE', 'garbage'), subId, fc.nat()).map(([times, verb, id, n]) =>
    message((ctx) => {
      const pad = 'x'.repeat(Math.ceil(limit * times));
      const e = sign({ kind: verb === 'AUTH' ? 22242 : 1, created_at: nowSeconds(), tags: [['alt', pad]], content: '' }, FUZZ_KEYS[n % FUZZ_KEYS.length]);
      switch (verb) {
        case 'EVENT': case 'AUTH': return json([verb, e]);
        case 'REQ': case 'COUNT': return json([verb, idOf(id, ctx), { '#t': [pad] }]);
        case 'NEG-OPEN': return json([verb, idOf(id, ctx), {}, '61' + '0'.repeat(pad.length & ~1)]);
        case 'NEG-MSG': return json([verb, idOf(id, ctx), '61' + '0'.repeat(pad.length & ~1)]);
        case 'CLOSE': return json([verb, `${idOf(id, ctx)}${pad}`]);
        default: return { data: pad };
      }
    }),
  );

/** Every message kind, weighted roughly as a hostile client might mix them. */
export function messageArbitrary(maxMessageBytes: number): fc.Arbitrary<FuzzMessage> {
  return fc.oneof(
    { weight: 30, arbitrary: eventMessage },
    { weight: 16, arbitrary: reqMessage('REQ') },
    { weight: 8, arbitrary: reqMessage('COUNT') },
    { weight: 6, arbitrary: closeMessage },
    { weight: 5, arbitrary: authMessage },
    { weight: 7, arbitrary: negOpenMessage },
    { weight: 6, arbitrary: negMsgMessage },
    { weight: 3, arbitrary: negCloseMessage },
    { weight: 8, arbitrary: garbage },
    { weight: 2, arbitrary: deep },
    { weight: 4, arbitrary: race },
    { weight: 1, arbitrary: oversized(maxMessageBytes) },
  );
}

/** `count` messages for batch `index` of a run with `seed`: the same arguments always give the same messages. */
export function sampleBatch(seed: number, index: number, count: number, maxMessageBytes: number): FuzzMessage[] {
  const batchSeed = createHash('sha256').update(`${seed}:${index}`).digest().readInt32LE(0);
  return fc.sample(messageArbitrary(maxMessageBytes), { seed: batchSeed, numRuns: count });
}

// ---------------------------------------------------------------------------------------------
// What each frame is owed (NIP-01 and protocol.md 1.7, from the frame's bytes alone)
// ---------------------------------------------------------------------------------------------

export const VERBS = ['EVENT', 'REQ', 'COUNT', 'CLOSE', 'AUTH', 'NEG-OPEN', 'NEG-MSG', 'NEG-CLOSE'] as const;

export type Expectation =
  /** ["OK", id, bool, msg] for this id (EVENT, AUTH: an event whose id is a string). */
  | { reply: 'ok'; id: string }
  /** A NOTICE: not JSON, not an array starting with a string, unknown verb, wrong arity, no id to answer to. */
  | { reply: 'notice' }
  /** REQ/COUNT answer with EOSE, COUNT or CLOSED; CLOSE ends the id, no reply. */
  | { reply: 'sub'; id: string; op: 'REQ' | 'COUNT' | 'CLOSE' }
  /**
   * NEG-OPEN and NEG-MSG answer with NEG-MSG or NEG-ERR; NEG-CLOSE ends the id, no reply. `ends`: a
   * NEG-MSG the relay cannot read (oversized) is refused with NEG-ERR, which ends the session
   * (NIP-77), so a NEG-OPEN still being read for it is owed nothing more.
   */
  | { reply: 'neg'; id: string; op: 'NEG-OPEN' | 'NEG-MSG' | 'NEG-CLOSE'; ends?: boolean }
  /** The WebSocket layer closes the connection: 1009 beyond twice MAX_MESSAGE_BYTES, 1007 a text frame not UTF-8. */
  | { reply: 'disconnect'; code: 1007 | 1009 };

export interface Classified {
  /** The verb, for the per-verb counts: one of VERBS, or "other" (garbage, unknown verb, not JSON). */
  verb: string;
  oversized: boolean;
  expect: Expectation;
  /** The frame as JSON.parse reads it (undefined when it is not JSON). */
  data: unknown;
}

/** Strings go as text frames, Buffers as binary ones unless `binary: false` says otherwise. */
export const isTextFrame = (frame: Frame) => frame.binary === false || (frame.binary === undefined && typeof frame.data === 'string');

function parseFrame(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * What the relay owes a frame. Over MAX_MESSAGE_BYTES it cannot be handled, but whatever the frame
 * names is still answered (OK for an event id, CLOSED for a REQ/COUNT id, NEG-ERR for a NEG-OPEN or
 * NEG-MSG id); an oversized CLOSE or NEG-CLOSE, which ends nothing, gets a NOTICE.
 */
export function expectedReply(frame: Frame, maxMessageBytes: number): Classified {
  const bytes = typeof frame.data === 'string' ? Buffer.from(frame.data, 'utf8') : frame.data;
  const data = parseFrame(bytes.toString('utf8'));
  const verb = Array.isArray(data) && (VERBS as readonly unknown[]).includes(data[0]) ? (data[0] as string) : 'other';
  const oversized = bytes.length > maxMessageBytes;
  const result = (expect: Expectation): Classified => ({ verb, oversized, expect, data });
  if (isTextFrame(frame) && !isUtf8(bytes)) return result({ reply: 'disconnect', code: 1007 });
  if (bytes.length > 2 * maxMessageBytes) return result({ reply: 'disconnect', code: 1009 });
  if (!Array.isArray(data)) return result({ reply: 'notice' });
  const [, a, b, c] = data as unknown[];
  const arity = data.length - 1;
  const claimedId = (e: unknown) => {
    const id = e !== null && typeof e === 'object' && !Array.isArray(e) ? (e as { id?: unknown }).id : undefined;
    return typeof id === 'string' ? id : undefined;
  };
  switch (verb) {
    case 'EVENT':
    case 'AUTH': {
      const id = arity === 1 ? claimedId(a) : undefined;
      return result(id === undefined ? { reply: 'notice' } : { reply: 'ok', id });
    }
    case 'REQ':
    case 'COUNT':
    case 'CLOSE':
      if (typeof a !== 'string') return result({ reply: 'notice' });
      // An oversized CLOSE is not read: it ends nothing and is answered with a NOTICE.
      if (verb === 'CLOSE' && oversized) return result({ reply: 'notice' });
      return result({ reply: 'sub', id: a, op: verb });
    case 'NEG-OPEN':
      return result(typeof a === 'string' && typeof c === 'string' && arity === 3 ? { reply: 'neg', id: a, op: verb } : { reply: 'notice' });
    case 'NEG-MSG':
      return result(typeof a === 'string' && typeof b === 'string' && arity === 2 ? { reply: 'neg', id: a, op: verb, ends: oversized } : { reply: 'notice' });
    case 'NEG-CLOSE':
      if (oversized) return result({ reply: 'notice' });
      return result(typeof a === 'string' ? { reply: 'neg', id: a, op: verb } : { reply: 'notice' });
    default:
      return result({ reply: 'notice' });
  }
}

// ---------------------------------------------------------------------------------------------
// Replies: their shape and prefixes
// ---------------------------------------------------------------------------------------------

/** NIP-01's machine-readable prefixes and NIP-42's auth-required: what an OK false may say. */
const OK_PREFIXES = ['duplicate', 'pow', 'blocked', 'rate-limited', 'invalid', 'restricted', 'mute', 'error', 'auth-required'];
/** CLOSED: the same, and `unsupported:` (NIP-01's example). */
const CLOSED_PREFIXES = [...OK_PREFIXES, 'unsupported'];
/** NEG-ERR: the same, and NIP-77's `closed:` (an idle session). */
const NEG_ERR_PREFIXES = [...CLOSED_PREFIXES, 'closed'];

/** The `<prefix>: ` a reply starts with, when it is one of `allowed`. */
export function prefixOf(text: unknown, allowed: readonly string[] = NEG_ERR_PREFIXES): string | undefined {
  if (typeof text !== 'string') return undefined;
  const m = /^([a-z-]+): \S/.exec(text);
  return m && allowed.includes(m[1]) ? m[1] : undefined;
}

// ---------------------------------------------------------------------------------------------
// The ledger of one segment: what is owed, what came
// ---------------------------------------------------------------------------------------------

interface SubEntry { queries: number; lastIsQuery: boolean; got: number }
interface NegEntry { opens: number; msgs: number; lastIsOpen: boolean; got: number }

/**
 * Owed replies, counted per id. OK: exactly one per EVENT/AUTH. REQ/COUNT: a later REQ, COUNT or
 * CLOSE with the same id may supersede one still running (NIP-01: a REQ replaces the open one), so
 * at least one reply when the id's last message was a REQ/COUNT, and never more than were sent.
 * NEG-MSG: exactly one each; NEG-OPEN: one, unless superseded by a later NEG-OPEN, NEG-CLOSE or
 * refused NEG-MSG.
 */
class Ledger {
  readonly ok = new Map<string, { sent: number; got: number }>();
  readonly sub = new Map<string, SubEntry>();
  readonly neg = new Map<string, NegEntry>();
  noticesOwed = 0;
  noticesGot = 0;
  /** The frames sent per id (cut short), to show with a problem. */
  private readonly frames = new Map<string, string[]>();

  /** The NOTICEs received and the frames owed one (cut short), to show when their counts differ. */
  readonly notices: string[] = [];
  private readonly noticeFrames: string[] = [];

  owe(e: Expectation, frame: Frame): void {
    const text = typeof frame.data === 'string' ? frame.data : frame.data.toString('utf8');
    const short = text.length > 240 ? `${text.slice(0, 240)}… (${text.length} characters)` : text;
    if ('id' in e) {
      const list = this.frames.get(e.id) ?? [];
      list.push(short);
      this.frames.set(e.id, list);
    }
    if (e.reply === 'notice') this.noticeFrames.push(short);
    if (e.reply === 'ok') {
      const entry = this.ok.get(e.id) ?? { sent: 0, got: 0 };
      entry.sent++;
      this.ok.set(e.id, entry);
    } else if (e.reply === 'notice') this.noticesOwed++;
    else if (e.reply === 'sub') {
      const entry = this.sub.get(e.id) ?? { queries: 0, lastIsQuery: false, got: 0 };
      if (e.op !== 'CLOSE') entry.queries++;
      entry.lastIsQuery = e.op !== 'CLOSE';
      this.sub.set(e.id, entry);
    } else if (e.reply === 'neg') {
      const entry = this.neg.get(e.id) ?? { opens: 0, msgs: 0, lastIsOpen: false, got: 0 };
      if (e.op === 'NEG-MSG') {
        entry.msgs++;
        if (e.ends) entry.lastIsOpen = false;
      } else {
        if (e.op === 'NEG-OPEN') entry.opens++;
        entry.lastIsOpen = e.op === 'NEG-OPEN';
      }
      this.neg.set(e.id, entry);
    }
  }

  /** Everything owed has come (NOTICEs are checked once the barrier has answered: they carry no id). */
  get settled(): boolean {
    for (const e of this.ok.values()) if (e.got < e.sent) return false;
    for (const e of this.sub.values()) if (e.lastIsQuery && e.got < 1) return false;
    for (const e of this.neg.values()) if (e.got < e.msgs + (e.lastIsOpen ? 1 : 0)) return false;
    return true;
  }

  /** Replies not (or not yet) received, and replies beyond what was sent. */
  problems(): string[] {
    const out: string[] = [];
    const show = (id: string) => `${JSON.stringify(id.length > 80 ? id.slice(0, 80) + '…' : id)} (sent: ${this.frames.get(id)?.join(' ') ?? ''})`;
    for (const [id, e] of this.ok) if (e.got !== e.sent) out.push(`OK for ${show(id)}: ${e.got} replies to ${e.sent} messages`);
    for (const [id, e] of this.sub) {
      if (e.lastIsQuery && e.got < 1) out.push(`no EOSE/COUNT/CLOSED for subscription ${show(id)}`);
      if (e.got > e.queries) out.push(`${e.got} EOSE/COUNT/CLOSED for ${e.queries} REQ/COUNT with id ${show(id)}`);
    }
    for (const [id, e] of this.neg) {
      if (e.got < e.msgs + (e.lastIsOpen ? 1 : 0)) out.push(`no NEG-MSG/NEG-ERR for negentropy id ${show(id)} (${e.got} for ${e.opens} NEG-OPEN, ${e.msgs} NEG-MSG)`);
      if (e.got > e.msgs + e.opens) out.push(`${e.got} NEG-MSG/NEG-ERR for ${e.opens} NEG-OPEN and ${e.msgs} NEG-MSG with id ${show(id)}`);
    }
    if (this.noticesGot !== this.noticesOwed)
      out.push(`${this.noticesGot} NOTICEs for ${this.noticesOwed} messages owed one (got: ${JSON.stringify(this.notices)}; owed by: ${this.noticeFrames.join(' ')})`);
    return out;
  }
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

export interface RelayUnderTest {
  /** ws://host:port */
  url: string;
  /** False once the relay process has exited. */
  alive(): boolean;
  /** Its JSON log lines so far (pino: level 50 is error, 60 fatal). */
  logs: ReadonlyArray<Record<string, unknown>>;
  /**
   * A full garbage collection in the relay (collectGarbage, through its inspector): the heap is then
   * compared live against live. Without it the fuzzer waits for V8 to shrink the heap on its own,
   * which a relay that still serves the well-behaved client may not do for minutes.
   */
  collectGarbage?(): Promise<void>;
}

export interface FuzzSettings {
  relay: RelayUnderTest;
  messages: number;
  seed: number;
  /** Fuzzing connections at once (default 4). */
  connections?: number;
  /** Messages per segment (default 50). */
  batch?: number;
  /** The relay's MAX_MESSAGE_BYTES (default: as its NIP-11 document announces it). */
  maxMessageBytes?: number;
  /** Error log lines (level ≥ 50) that are expected, by `msg`, each with the reason it is. */
  expectedErrors?: Record<string, string>;
  /** Longest wait for memory to come back near baseline (default 30 s). */
  settleMs?: number;
  /**
   * A well-behaved round slower than this is a failure (`npm run fuzz` uses 1,000 ms). Unset, the
   * rounds are timed and reported but only their answers are judged: the test suite runs on
   * machines too busy to promise a latency, and measured speed belongs to benchmarks.
   */
  wellBehavedBoundMs?: number;
  progress?: (line: string) => void;
}

export interface MemorySample {
  rss: number;
  heapUsed: number;
  /** What the relay keeps in memory on purpose, by its own estimate (the hot tier's events, when it has one). */
  cached: number;
}

/** The heap judged against the baseline: what the relay does not mean to keep. */
const unintended = (m: MemorySample) => m.heapUsed - m.cached;
const highest = (a: MemorySample, b: MemorySample): MemorySample => ({ rss: Math.max(a.rss, b.rss), heapUsed: Math.max(a.heapUsed, b.heapUsed), cached: Math.max(a.cached, b.cached) });

/** What the relay holds for its clients (its gauges): all zero once every client has gone. */
export interface HeldSample {
  connections: number;
  subscriptions: number;
  negentropyRecords: number;
}

export interface FuzzReport {
  seed: number;
  /** Messages sampled and sent; `frames` counts a race's messages one by one. */
  messages: number;
  frames: number;
  durationMs: number;
  connections: number;
  byVerb: Record<string, number>;
  oversized: number;
  owed: Record<Expectation['reply'], number>;
  replies: Record<string, number>;
  prefixes: Record<string, number>;
  /** The refusals' texts (digits folded), for a view of which checks the messages reached. */
  reasons: Record<string, number>;
  /** Replies that came after their segment was checked (a superseded REQ answered late, for instance). */
  lateReplies: number;
  disconnects: Record<string, number>;
  wellBehaved: { rounds: number; maxPublishMs: number; maxReadMs: number; over1s: number };
  /** The bound a well-behaved round was held to, if any (FuzzSettings.wellBehavedBoundMs). */
  wellBehavedBoundMs?: number;
  /** Baseline after the warm-up, peak while fuzzing, and after the run; `collected`: both measured right after a full GC. */
  memory: { baseline?: MemorySample; peak?: MemorySample; after?: MemorySample; settledInMs?: number; collected?: boolean };
  /** Connections, subscriptions and negentropy records the relay still held after every client had gone. */
  heldAfter?: HeldSample;
  errorLogs: Array<Record<string, unknown>>;
  warnings: Record<string, number>;
  failures: string[];
}

const MB = 1024 * 1024;
const SEGMENT_TIMEOUT_MS = 15_000;
const MAX_FAILURES_KEPT = 40;

class Failures {
  readonly list: string[] = [];
  total = 0;
  add(text: string): void {
    this.total++;
    if (this.list.length < MAX_FAILURES_KEPT) this.list.push(text);
  }
}

/** GET /metrics of the relay. */
async function metricsText(relayUrl: string): Promise<string> {
  const url = relayUrl.replace(/^ws/, 'http').replace(/\/?$/, '/metrics');
  return (await fetch(url, { signal: AbortSignal.timeout(10_000) })).text();
}

/** A metric's value; `fallback` when the relay does not have it (else an error). */
function metricValue(text: string, name: string, fallback?: number): number {
  const value = total(parsePrometheusText(text), name);
  if (value !== null) return value;
  if (fallback === undefined) throw new Error(`${name} is not in /metrics`);
  return fallback;
}

/** The relay's memory, from GET /metrics (prom-client's default process and heap metrics). */
export async function sampleMemory(relayUrl: string): Promise<MemorySample> {
  const text = await metricsText(relayUrl);
  return {
    rss: metricValue(text, 'process_resident_memory_bytes'),
    heapUsed: metricValue(text, 'nodejs_heap_size_used_bytes'),
    cached: metricValue(text, 'pgrelay_hot_tier_bytes', 0),
  };
}

/** The relay's gauges of what it holds for clients (relay/metrics.ts). */
export async function sampleHeld(relayUrl: string): Promise<HeldSample> {
  const text = await metricsText(relayUrl);
  return {
    connections: metricValue(text, 'nostr_connections'),
    subscriptions: metricValue(text, 'nostr_subscriptions'),
    negentropyRecords: metricValue(text, 'pgrelay_negentropy_records'),
  };
}

/** NIP-11 `limitation.max_message_length`: the frame size the relay answers past (its MAX_MESSAGE_BYTES). */
async function announcedMessageLimit(relayUrl: string): Promise<number> {
  const url = relayUrl.replace(/^ws/, 'http');
  const info = (await (await fetch(url, { headers: { Accept: 'application/nostr+json' }, signal: AbortSignal.timeout(10_000) })).json()) as { limitation?: { max_message_length?: number } };
  const limit = info.limitation?.max_message_length;
  if (!Number.isSafeInteger(limit)) throw new Error('the relay does not announce limitation.max_message_length (NIP-11)');
  return limit!;
}

/** A free TCP port on 127.0.0.1 (for the relay's inspector). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** NODE_OPTIONS for a relay process whose heap the fuzzer may collect (collectGarbageAt). */
export const inspectorOption = (port: number) => `--inspect=127.0.0.1:${port}`;

/** A full garbage collection in the Node process whose inspector listens on `port` (HeapProfiler.collectGarbage). */
export async function collectGarbageAt(port: number): Promise<void> {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`, { signal: AbortSignal.timeout(5000) })).json()) as Array<{ webSocketDebuggerUrl: string }>;
  const ws = new WebSocket(targets[0].webSocketDebuggerUrl);
  await new Promise<void>((resolve, reject) => (ws.once('open', () => resolve()), ws.once('error', reject)));
  try {
    // Twice: the first pass may leave what only weak references and finalizers free.
    for (const id of [1, 2]) {
      const done = new Promise<void>((resolve) => ws.on('message', (data: Buffer) => JSON.parse(data.toString()).id === id && resolve()));
      ws.send(JSON.stringify({ id, method: 'HeapProfiler.collectGarbage' }));
      await done;
    }
  } finally {
    ws.close();
  }
}

/**
 * Near baseline: the heap, less what the relay caches on purpose, within +20 MB or +25 %, whichever is
 * larger, plus a quarter of the cache, whose size is the relay's estimate (measured: the hot tier's
 * events take ~20 % more heap than it counts; without it, 100,000 messages leave +7 MB). RSS is
 * reported, not judged (allocators keep pages).
 */
export const heapAllowance = (baseline: MemorySample, after: MemorySample) => Math.max(20 * MB, unintended(baseline) * 0.25) + after.cached * 0.25;
const nearBaseline = (baseline: MemorySample, after: MemorySample) => unintended(after) <= unintended(baseline) + heapAllowance(baseline, after);

type RelayMessage = [string, ...unknown[]];

interface SubState {
  /** The filters of every REQ sent with this id; null when one cannot be checked here (search, refused). */
  filters: Filter[] | null;
  reqs: number;
  counts: number;
  closeSent: boolean;
  /** Why nothing more may come for this id. */
  silent: 'its CLOSE' | 'CLOSED' | undefined;
}

/** The relay's default filter limits (config.ts): filters it refuses have no events to check. */
const FILTER_LIMITS = { maxValuesPerArray: 1000, defaultLimit: 500, maxLimit: 5000 };

/** Filters as NIP-01 reads them, or null when they are refused or hold a search (ranked by PostgreSQL). */
function readableFilters(inputs: unknown[]): Filter[] | null {
  const out: Filter[] = [];
  for (const input of inputs) {
    const parsed = parseFilter(input, FILTER_LIMITS);
    if (!parsed.ok || parsed.value.search) return null;
    out.push(parsed.value);
  }
  return out;
}

/**
 * An event the relay delivers: a well-formed event whose id is the hash of its serialisation (what
 * PostgreSQL stored came back intact), matching one of its subscription's filters. Stored events come
 * from SQL (store/query.ts), live ones from the in-memory matcher: this holds both to nostr/filter.ts.
 */
function checkDelivered(input: unknown, filters: Filter[] | null): string | undefined {
  const e = input as NostrEvent;
  if (!e || typeof e !== 'object' || typeof e.id !== 'string' || typeof e.pubkey !== 'string' || !Number.isSafeInteger(e.created_at) || !Number.isSafeInteger(e.kind) || !Array.isArray(e.tags) || typeof e.content !== 'string' || typeof e.sig !== 'string')
    return 'EVENT with a malformed event';
  if (computeEventId(e) !== e.id) return 'EVENT whose id is not the hash of its serialisation';
  if (filters && !filters.some((f) => matchFilter(f, e))) return 'EVENT that matches none of its subscription\'s filters';
  return undefined;
}

/** One fuzzing connection; reconnects after the relay (or the WebSocket layer) closes it. */
class FuzzConnection {
  private ws: WebSocket | undefined;
  private challenge = '';
  private ledger = new Ledger();
  private barrier: string | undefined;
  private barrierDone = false;
  private wake: (() => void) | undefined;
  private closedWith: { code: number; reason: string } | undefined;
  private segment = 0;
  private hangingUp = false;
  /** REQ ids of this connection: an EVENT for any other, or after the id was closed, breaks NIP-01. */
  private subs = new Map<string, SubState>();
  /** Ids CLOSEd before the barrier was sent: silent for good once its EOSE has come. */
  private closedBeforeBarrier: string[] = [];
  private readonly recentEvents: string[] = [];
  private readonly accepted: NostrEvent[] = [];
  /** The events sent in this segment, by id: those the relay accepts join `accepted`. */
  private sentEvents = new Map<string, NostrEvent>();
  private readonly usedSubIds = new Set<string>();
  private readonly usedNegIds = new Set<string>();

  constructor(
    private readonly index: number,
    private readonly url: string,
    private readonly report: FuzzReport,
    private readonly failures: Failures,
    private readonly maxMessageBytes: number,
  ) {}

  private count(record: Record<string, number>, key: string): void {
    record[key] = (record[key] ?? 0) + 1;
  }

  async open(): Promise<void> {
    const ws = new WebSocket(this.url, { perMessageDeflate: false, maxPayload: 256 * MB });
    this.ws = ws;
    this.closedWith = undefined;
    this.challenge = '';
    this.subs = new Map();
    ws.on('message', (data: Buffer) => this.onReply(data.toString('utf8')));
    ws.on('close', (code, reason) => {
      if (this.ws === ws) this.closedWith = { code, reason: reason.toString() };
      this.wake?.();
    });
    ws.on('error', () => {}); // a send racing the relay's close: the close event tells the rest
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    // The relay's NIP-42 challenge comes first.
    const deadline = Date.now() + 10_000;
    while (!this.challenge && !this.closedWith && Date.now() < deadline) await this.sleepUntilWoken(deadline - Date.now());
    if (!this.challenge) throw new Error('no AUTH challenge from the relay');
  }

  close(): void {
    this.ws?.close();
  }

  private sleepUntilWoken(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => ((this.wake = undefined), resolve()), Math.max(0, ms));
      this.wake = () => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
    });
  }

  private onReply(text: string): void {
    let m: RelayMessage;
    try {
      m = JSON.parse(text);
    } catch {
      return this.failures.add(`reply is not JSON: ${text.slice(0, 120)}`);
    }
    if (!Array.isArray(m) || typeof m[0] !== 'string') return this.failures.add(`reply is not a relay message: ${text.slice(0, 120)}`);
    const [type, id] = m;
    if (this.hangingUp) return void this.report.lateReplies++;
    this.count(this.report.replies, type === 'OK' ? `OK ${m[2]}` : type);
    const bad = (why: string) => this.failures.add(`${why}: ${text.slice(0, 200)}`);
    switch (type) {
      case 'AUTH':
        this.challenge = String(id);
        break;
      case 'OK': {
        if (m.length !== 4 || typeof id !== 'string' || typeof m[2] !== 'boolean' || typeof m[3] !== 'string') bad('malformed OK');
        else if (m[2] === false && !prefixOf(m[3], OK_PREFIXES)) bad('OK false without a NIP-01 prefix');
        else if (m[2] === true && m[3] !== '' && prefixOf(m[3]) !== 'duplicate') bad('OK true with a message other than duplicate:');
        if (m[2] === false) this.count(this.report.prefixes, `OK ${prefixOf(m[3]) ?? '?'}`);
        if (m[2] === false || m[3]) this.reason('OK', m[3]);
        const entry = typeof id === 'string' ? this.ledger.ok.get(id) : undefined;
        const sent = m[2] === true && typeof id === 'string' ? this.sentEvents.get(id) : undefined;
        if (sent) {
          this.accepted.push(sent);
          if (this.accepted.length > 64) this.accepted.shift();
        }
        if (entry) entry.got++;
        else bad('OK for an id not sent in this segment');
        break;
      }
      case 'EOSE':
      case 'CLOSED':
      case 'COUNT': {
        if (type === 'CLOSED') {
          if (!prefixOf(m[2], CLOSED_PREFIXES)) bad('CLOSED without a NIP-01 prefix');
          this.count(this.report.prefixes, `CLOSED ${prefixOf(m[2]) ?? '?'}`);
          this.reason('CLOSED', m[2]);
        }
        if (type === 'COUNT') {
          const body = m[2] as { count?: unknown } | null;
          if (!body || typeof body !== 'object' || !Number.isSafeInteger(body.count) || (body.count as number) < 0) bad('malformed COUNT');
        }
        if (typeof id === 'string' && id === this.barrier) {
          this.barrierDone = true;
          // Every CLOSE sent before the barrier has been handled (the relay reads a connection's
          // messages in order): nothing more may come for those ids.
          for (const closed of this.closedBeforeBarrier) {
            const sub = this.subs.get(closed);
            if (sub?.closeSent) sub.silent = 'its CLOSE';
          }
        } else {
          this.answered(this.ledger.sub.get(String(id)));
          const sub = typeof id === 'string' ? this.subs.get(id) : undefined;
          if (type === 'EOSE' && sub?.silent) bad(`EOSE for a subscription after ${sub.silent}`);
        }
        // A REQ refused (or ended) with CLOSED, the only one sent with that id: nothing may follow.
        const sub = type === 'CLOSED' && typeof id === 'string' ? this.subs.get(id) : undefined;
        if (sub && sub.reqs === 1 && sub.counts === 0) sub.silent = 'CLOSED';
        break;
      }
      case 'NEG-MSG':
      case 'NEG-ERR':
        if (type === 'NEG-ERR') {
          if (!prefixOf(m[2], NEG_ERR_PREFIXES)) bad('NEG-ERR without a prefix');
          this.count(this.report.prefixes, `NEG-ERR ${prefixOf(m[2]) ?? '?'}`);
          this.reason('NEG-ERR', m[2]);
        } else if (typeof m[2] !== 'string' || !/^(?:[0-9a-f]{2})+$/.test(m[2])) bad('NEG-MSG without a hex message');
        this.answered(this.ledger.neg.get(String(id)));
        break;
      case 'NOTICE': {
        const prefix = prefixOf(m[1]) ?? '?';
        this.count(this.report.prefixes, `NOTICE ${prefix}`);
        this.reason('NOTICE', m[1]);
        // The relay's last resort when handling a message threw (relay/server.ts).
        if (prefix === 'error') bad('NOTICE error: (a message handler failed)');
        this.ledger.noticesGot++;
        this.ledger.notices.push(String(m[1]).slice(0, 120));
        break;
      }
      case 'EVENT': {
        const sub = typeof id === 'string' ? this.subs.get(id) : undefined;
        if (!sub) bad('EVENT for a subscription id this connection never opened');
        else if (sub.silent) bad(`EVENT for a subscription after ${sub.silent}`);
        else {
          const problem = checkDelivered(m[2], sub.filters);
          if (problem) bad(problem);
        }
        break;
      }
      default:
        bad('unknown reply type');
    }
    this.wake?.();
  }

  private reason(type: string, text: unknown): void {
    if (typeof text === 'string') this.count(this.report.reasons, `${type} ${text.replace(/\d+/g, 'N').slice(0, 70)}`);
  }

  /** Follows a REQ, COUNT or CLOSE this connection sends (`data`: the whole message). */
  private track(op: 'REQ' | 'COUNT' | 'CLOSE', id: string, data: unknown): void {
    const sub = this.subs.get(id) ?? { filters: [], reqs: 0, counts: 0, closeSent: false, silent: undefined };
    this.subs.set(id, sub);
    if (op === 'CLOSE') sub.closeSent = true;
    else if (op === 'COUNT') sub.counts++;
    else {
      sub.reqs++;
      sub.closeSent = false;
      sub.silent = undefined;
      // Events of any REQ sent with this id may still come: they must match one of their filters.
      const filters = Array.isArray(data) ? readableFilters(data.slice(2)) : null;
      sub.filters = sub.filters && filters ? [...sub.filters, ...filters] : null;
    }
  }

  private answered(entry: { got: number } | undefined): void {
    if (entry) entry.got++;
    else this.report.lateReplies++;
  }

  /** Sends one segment of messages and checks every reply; returns the frames sent (a race is several). */
  async runSegment(messages: FuzzMessage[]): Promise<number> {
    let sent = 0;
    let pending: Array<{ frame: Frame; classified: Classified }> = [];
    const ctx = () => ({ tag: `${this.index}.${this.segment}`, segment: this.segment, challenge: this.challenge, relayUrl: this.url, recentEvents: this.recentEvents, accepted: this.accepted });
    for (const m of messages) {
      if (!this.ws || this.closedWith) await this.reopen();
      const built = m.build(ctx());
      if (Array.isArray(built) && built.some((f) => f.hangup)) {
        // What came before is checked first; then these frames, and the client hangs up on them.
        sent += await this.sendAndCheck(pending);
        pending = [];
        sent += await this.hangUp(built.filter((f) => !f.hangup), built.find((f) => f.hangup)!.hangup!);
        continue;
      }
      for (const frame of Array.isArray(built) ? built : [built]) {
        const classified = expectedReply(frame, this.maxMessageBytes);
        if (classified.expect.reply === 'disconnect') {
          // Whatever came before is checked first; then this frame alone, and a new connection.
          sent += await this.sendAndCheck(pending);
          pending = [];
          sent += await this.sendDisconnecting(frame, classified);
          continue;
        }
        pending.push({ frame, classified });
      }
    }
    sent += await this.sendAndCheck(pending);
    return sent;
  }

  private async reopen(): Promise<void> {
    this.hangingUp = false;
    this.ws?.removeAllListeners('message');
    this.ws?.terminate();
    this.ws = undefined;
    this.report.disconnects.reconnects = (this.report.disconnects.reconnects ?? 0) + 1;
    await this.open();
  }

  private tally(c: Classified): void {
    this.count(this.report.byVerb, c.verb);
    this.report.owed[c.expect.reply]++;
    if (c.oversized) this.report.oversized++;
  }

  /** Sends `frames` and closes the connection at once: nothing is owed to a client that has gone. */
  private async hangUp(frames: Frame[], how: 'close' | 'drop'): Promise<number> {
    if (!this.ws || this.closedWith) await this.reopen();
    const ws = this.ws!;
    for (const frame of frames) {
      this.count(this.report.byVerb, expectedReply(frame, this.maxMessageBytes).verb);
      ws.send(frame.data, { binary: !isTextFrame(frame) });
    }
    this.count(this.report.disconnects, `hung up (${how})`);
    this.hangingUp = true; // replies still on their way are late
    if (how === 'close') ws.close();
    else ws.terminate();
    const deadline = Date.now() + 10_000;
    while (!this.closedWith && Date.now() < deadline) await this.sleepUntilWoken(deadline - Date.now());
    this.segment++;
    await this.reopen();
    return frames.length;
  }

  private async sendDisconnecting(frame: Frame, c: Classified): Promise<number> {
    if (!this.ws || this.closedWith) await this.reopen();
    this.tally(c);
    this.ws!.send(frame.data, { binary: !isTextFrame(frame) });
    const deadline = Date.now() + 10_000;
    while (!this.closedWith && Date.now() < deadline) await this.sleepUntilWoken(deadline - Date.now());
    const expected = c.expect.reply === 'disconnect' ? c.expect.code : 0;
    if (!this.closedWith) this.failures.add(`the relay did not close the connection (${expected} expected) after a frame of ${Buffer.byteLength(frame.data)} bytes`);
    else {
      this.report.disconnects[String(this.closedWith.code)] = (this.report.disconnects[String(this.closedWith.code)] ?? 0) + 1;
      if (this.closedWith.code !== expected) this.failures.add(`connection closed with ${this.closedWith.code} "${this.closedWith.reason}", ${expected} expected`);
    }
    this.segment++;
    return 1;
  }

  private async sendAndCheck(frames: Array<{ frame: Frame; classified: Classified }>): Promise<number> {
    if (frames.length === 0) return 0;
    if (!this.ws || this.closedWith) await this.reopen();
    const ws = this.ws!;
    this.ledger = new Ledger();
    this.sentEvents = new Map();
    this.segment++;
    for (const { frame, classified: c } of frames) {
      this.tally(c);
      this.ledger.owe(c.expect, frame);
      if (c.expect.reply === 'sub') {
        this.usedSubIds.add(c.expect.id);
        this.track(c.expect.op, c.expect.id, c.data);
      }
      if (c.expect.reply === 'neg') this.usedNegIds.add(c.expect.id);
      const sentEvent = c.verb === 'EVENT' && Array.isArray(c.data) ? (c.data[1] as NostrEvent) : undefined;
      if (sentEvent && typeof sentEvent === 'object' && typeof sentEvent.id === 'string') this.sentEvents.set(sentEvent.id, sentEvent);
      if (c.verb === 'EVENT' && typeof frame.data === 'string' && !c.oversized) {
        this.recentEvents.push(frame.data);
        if (this.recentEvents.length > 16) this.recentEvents.shift();
      }
      ws.send(frame.data, { binary: !isTextFrame(frame) });
    }
    // The barrier needs the database: by its EOSE every NOTICE owed (all sent without I/O) is out.
    this.barrier = `barrier:${this.index}.${this.segment}`;
    this.barrierDone = false;
    this.closedBeforeBarrier = [...this.subs].filter(([, sub]) => sub.closeSent && !sub.silent).map(([id]) => id);
    const barrier = ['REQ', this.barrier, { ids: ['0'.repeat(63) + '1'] }];
    this.track('REQ', this.barrier, barrier);
    ws.send(JSON.stringify(barrier));
    const deadline = Date.now() + SEGMENT_TIMEOUT_MS;
    while (!(this.barrierDone && this.ledger.settled) && !this.closedWith && Date.now() < deadline) await this.sleepUntilWoken(deadline - Date.now());
    if (this.closedWith) {
      this.failures.add(`the relay closed a connection: ${this.closedWith.code} "${this.closedWith.reason}"`);
      this.report.disconnects[String(this.closedWith.code)] = (this.report.disconnects[String(this.closedWith.code)] ?? 0) + 1;
    } else {
      if (!this.barrierDone) this.failures.add(`no EOSE for the barrier REQ within ${SEGMENT_TIMEOUT_MS / 1000} s`);
      for (const p of this.ledger.problems()) this.failures.add(p);
    }
    // Leave nothing open for the next segment (no replies owed to these). An id over 64 characters
    // (MAX_SUBID_LENGTH's most) was never opened, and its CLOSE might not even fit in a frame.
    for (const id of [...this.usedSubIds, this.barrier]) {
      if (id.length > 64) continue;
      this.track('CLOSE', id, undefined);
      ws.send(JSON.stringify(['CLOSE', id]));
    }
    for (const id of this.usedNegIds) if (id.length <= 64) ws.send(JSON.stringify(['NEG-CLOSE', id]));
    this.usedSubIds.clear();
    this.usedNegIds.clear();
    this.barrier = undefined;
    return frames.length;
  }
}

/**
 * The well-behaved client: once a second it publishes a fresh note and reads it back by id, timing
 * publish → OK and REQ → EOSE. Every answer must be right, and arrive within a second.
 */
class WellBehavedClient {
  private ws: WebSocket | undefined;
  private readonly waiters = new Map<string, (m: RelayMessage) => void>();
  private stopped = false;
  private loop: Promise<void> | undefined;
  rounds = 0;
  maxPublishMs = 0;
  maxReadMs = 0;
  over1s = 0;

  constructor(
    private readonly url: string,
    private readonly failures: Failures,
    private readonly boundMs: number | undefined,
  ) {}

  async start(): Promise<void> {
    const ws = new WebSocket(this.url, { perMessageDeflate: false });
    this.ws = ws;
    ws.on('message', (data: Buffer) => {
      const m = JSON.parse(data.toString()) as RelayMessage;
      if (m[0] === 'EVENT') return this.waiters.get(`EVENT ${m[1]}`)?.(m);
      this.waiters.get(`${m[0] === 'CLOSED' ? 'EOSE' : m[0]} ${m[1]}`)?.(m);
    });
    ws.on('close', () => {
      if (!this.stopped) this.failures.add('the relay closed the well-behaved client\'s connection');
    });
    ws.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    this.loop = this.run();
  }

  private wait(key: string, timeoutMs = 10_000): Promise<RelayMessage | undefined> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => (this.waiters.delete(key), resolve(undefined)), timeoutMs);
      this.waiters.set(key, (m) => {
        clearTimeout(timer);
        this.waiters.delete(key);
        resolve(m);
      });
    });
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      const started = performance.now();
      await this.round();
      const left = 1000 - (performance.now() - started);
      if (left > 0 && !this.stopped) await new Promise((r) => setTimeout(r, left));
    }
  }

  private async round(): Promise<void> {
    const ws = this.ws!;
    const n = ++this.rounds;
    const e = sign({ kind: 1, created_at: nowSeconds(), tags: [['t', 'pgrelay-fuzz']], content: `well-behaved ${n} ${Date.now()}` }, WELL_BEHAVED_KEY);
    const id = e.id as string;
    let t = performance.now();
    const ok = this.wait(`OK ${id}`);
    ws.send(JSON.stringify(['EVENT', e]));
    const okReply = await ok;
    const publishMs = performance.now() - t;
    if (!okReply) return this.failures.add(`well-behaved round ${n}: no OK within 10 s`);
    if (okReply[2] !== true) this.failures.add(`well-behaved round ${n}: OK ${okReply[2]} "${okReply[3]}"`);
    const sub = `wb-${n}`;
    let got = false;
    this.waiters.set(`EVENT ${sub}`, (m) => (got = (m[2] as { id?: string }).id === id));
    t = performance.now();
    const eose = this.wait(`EOSE ${sub}`);
    ws.send(JSON.stringify(['REQ', sub, { ids: [id] }]));
    const end = await eose;
    const readMs = performance.now() - t;
    this.waiters.delete(`EVENT ${sub}`);
    ws.send(JSON.stringify(['CLOSE', sub]));
    if (!end) return this.failures.add(`well-behaved round ${n}: no EOSE within 10 s`);
    if (end[0] === 'CLOSED') this.failures.add(`well-behaved round ${n}: REQ refused: ${end[2]}`);
    else if (!got) this.failures.add(`well-behaved round ${n}: the note it published was not served back`);
    this.maxPublishMs = Math.max(this.maxPublishMs, publishMs);
    this.maxReadMs = Math.max(this.maxReadMs, readMs);
    if (publishMs > 1000 || readMs > 1000) this.over1s++;
    if (this.boundMs !== undefined && (publishMs > this.boundMs || readMs > this.boundMs))
      this.failures.add(`well-behaved round ${n}: publish → OK ${publishMs.toFixed(0)} ms, REQ → EOSE ${readMs.toFixed(0)} ms (over ${this.boundMs} ms)`);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
    this.ws?.close();
  }
}

/** Fuzzes a running relay; `report.failures` empty means it passed every check. */
export async function runFuzz(settings: FuzzSettings): Promise<FuzzReport> {
  const { relay, messages, seed } = settings;
  const connections = settings.connections ?? 4;
  const batch = settings.batch ?? 50;
  const maxMessageBytes = settings.maxMessageBytes ?? (await announcedMessageLimit(relay.url));
  const settleMs = settings.settleMs ?? 30_000;
  const say = settings.progress ?? (() => {});
  const failures = new Failures();
  const report: FuzzReport = {
    seed, messages: 0, frames: 0, durationMs: 0, connections, byVerb: {}, oversized: 0,
    owed: { ok: 0, notice: 0, sub: 0, neg: 0, disconnect: 0 }, replies: {}, prefixes: {}, reasons: {}, lateReplies: 0, disconnects: {},
    wellBehaved: { rounds: 0, maxPublishMs: 0, maxReadMs: 0, over1s: 0 }, wellBehavedBoundMs: settings.wellBehavedBoundMs, memory: {}, errorLogs: [], warnings: {}, failures: [],
  };
  const started = performance.now();
  const wellBehaved = new WellBehavedClient(relay.url, failures, settings.wellBehavedBoundMs);
  await wellBehaved.start();

  // Warm-up (5 %, at most 2,000 messages): the verifier threads, pool connections and compiled code
  // are in place before the baseline is taken. These messages count towards `messages`.
  const warmUp = Math.min(2000, Math.ceil(messages * 0.05));
  let nextBatch = 0;
  let handedOut = 0;
  const sockets = Array.from({ length: connections }, (_, i) => new FuzzConnection(i, relay.url, report, failures, maxMessageBytes));
  await Promise.all(sockets.map((s) => s.open()));
  let lastProgress = performance.now();
  const fuzzUpTo = async (total: number) => {
    await Promise.all(
      sockets.map(async (socket, i) => {
        while (handedOut < total && relay.alive()) {
          const count = Math.min(batch, total - handedOut);
          handedOut += count;
          const index = nextBatch++;
          let sent: number;
          try {
            sent = await socket.runSegment(sampleBatch(seed, index, count, maxMessageBytes));
          } catch (err) {
            // The relay refused or dropped the connection in a way no message explains (it died?).
            failures.add(`fuzzing connection ${i} stopped: ${(err as Error).message}`);
            return;
          }
          report.messages += count;
          report.frames += sent;
          if (performance.now() - lastProgress > 5000) {
            lastProgress = performance.now();
            say(`  ${report.messages.toLocaleString('en-US')} / ${messages.toLocaleString('en-US')} messages, ${failures.total} failures, well-behaved max ${Math.max(wellBehaved.maxPublishMs, wellBehaved.maxReadMs).toFixed(0)} ms`);
          }
        }
      }),
    );
  };
  await fuzzUpTo(warmUp);
  await new Promise((r) => setTimeout(r, 2000));
  const samples: MemorySample[] = [];
  try {
    await relay.collectGarbage?.();
    for (let i = 0; i < 3; i++) {
      samples.push(await sampleMemory(relay.url));
      await new Promise((r) => setTimeout(r, 500));
    }
  } catch (err) {
    failures.add(`could not read the relay's memory after the warm-up: ${(err as Error).message}`);
    samples.push({ rss: 0, heapUsed: 0, cached: 0 });
  }
  const baseline = samples.reduce((a, b) => (unintended(b) < unintended(a) ? b : a));
  report.memory.baseline = baseline;
  report.memory.collected = relay.collectGarbage !== undefined;
  say(`  baseline after ${warmUp} warm-up messages: heap ${(baseline.heapUsed / MB).toFixed(1)} MB (${(baseline.cached / MB).toFixed(1)} MB of it cached on purpose), RSS ${(baseline.rss / MB).toFixed(1)} MB`);

  let peak = baseline;
  const sampler = setInterval(() => {
    sampleMemory(relay.url)
      .then((s) => (peak = highest(peak, s)))
      .catch(() => {});
  }, 2000);
  try {
    await fuzzUpTo(messages);
  } finally {
    clearInterval(sampler);
  }
  const end = await sampleMemory(relay.url).catch(() => undefined);
  if (end) peak = highest(peak, end);
  sockets.forEach((s) => s.close());
  report.durationMs = performance.now() - started;
  await wellBehaved.stop();
  report.wellBehaved = { rounds: wellBehaved.rounds, maxPublishMs: wellBehaved.maxPublishMs, maxReadMs: wellBehaved.maxReadMs, over1s: wellBehaved.over1s };

  // Every client gone: nothing held for them, and memory back near baseline (collected at once when
  // the relay's inspector is at hand; otherwise V8 shrinks an idle heap on its own, its memory
  // reducer, and the fuzzer waits for that).
  const settleStarted = performance.now();
  let after: MemorySample | undefined;
  let held: HeldSample | undefined;
  const nothingHeld = (h: HeldSample | undefined) => h !== undefined && h.connections === 0 && h.subscriptions === 0 && h.negentropyRecords === 0;
  await new Promise((r) => setTimeout(r, 1000)); // the sockets' closing handshakes
  while (relay.alive()) {
    await relay.collectGarbage?.().catch((err: Error) => failures.add(`could not collect the relay's garbage: ${err.message}`));
    after = await sampleMemory(relay.url).catch(() => after);
    held = await sampleHeld(relay.url).catch(() => held);
    if (after && nearBaseline(baseline, after) && nothingHeld(held)) break;
    if (performance.now() - settleStarted > settleMs) break;
    await new Promise((r) => setTimeout(r, 1000));
  }
  report.heldAfter = held;
  if (held && !nothingHeld(held))
    failures.add(`with every client gone the relay still holds ${held.connections} connections, ${held.subscriptions} subscriptions, ${held.negentropyRecords} negentropy records`);
  report.memory.after = after;
  if (after) peak = highest(peak, after);
  report.memory.peak = peak;
  report.memory.settledInMs = performance.now() - settleStarted;

  // The checks.
  if (!relay.alive()) failures.add('the relay process exited');
  if (report.messages < messages) failures.add(`only ${report.messages} of ${messages} messages were sent`);
  const expected = settings.expectedErrors ?? {};
  for (const line of relay.logs) {
    const level = Number(line.level);
    if (level >= 50) {
      report.errorLogs.push(line);
      if (!(String(line.msg) in expected)) failures.add(`error in the relay's log: ${JSON.stringify(line).slice(0, 300)}`);
    } else if (level === 40) report.warnings[String(line.msg)] = (report.warnings[String(line.msg)] ?? 0) + 1;
  }
  if (!after) failures.add('could not read the relay\'s memory after the run');
  else if (!nearBaseline(baseline, after))
    failures.add(
      `heap ${(unintended(after) / MB).toFixed(1)} MB besides what the relay caches on purpose ${((report.memory.settledInMs ?? 0) / 1000).toFixed(0)} s after the run, ` +
        `baseline ${(unintended(baseline) / MB).toFixed(1)} MB (allowed +${(heapAllowance(baseline, after) / MB).toFixed(1)} MB)`,
    );
  report.failures = failures.total > failures.list.length ? [...failures.list, `… and ${failures.total - failures.list.length} more`] : failures.list;
  return report;
}

// ---------------------------------------------------------------------------------------------
// The summary
// ---------------------------------------------------------------------------------------------

const n = (x: number) => x.toLocaleString('en-US');
const mb = (x: number | undefined) => (x === undefined ? '–' : `${(x / MB).toFixed(1)} MB`);
const list = (r: Record<string, number>) =>
  Object.entries(r)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ${n(v)}`)
    .join(', ');

export function formatReport(r: FuzzReport): string {
  const m = r.memory;
  return [
    `seed ${r.seed}: ${n(r.messages)} messages (${n(r.frames)} frames) over ${r.connections} connections in ${(r.durationMs / 1000).toFixed(1)} s (${n(Math.round(r.frames / (r.durationMs / 1000)))} frames/s)`,
    `  by verb: ${list(r.byVerb)}; over MAX_MESSAGE_BYTES: ${n(r.oversized)}`,
    `  owed: OK ${n(r.owed.ok)}, NOTICE ${n(r.owed.notice)}, REQ/COUNT/CLOSE ${n(r.owed.sub)}, NEG-* ${n(r.owed.neg)}, connection closed ${n(r.owed.disconnect)}`,
    `  replies: ${list(r.replies)}`,
    `  prefixes: ${list(r.prefixes)}`,
    `  most frequent refusals: ${Object.entries(r.reasons).sort((a, b) => b[1] - a[1]).slice(0, 15).map(([k, v]) => `${JSON.stringify(k)} ${n(v)}`).join(', ')}`,
    `  late replies (to superseded or closed requests): ${n(r.lateReplies)}; disconnects by code: ${list(r.disconnects) || 'none'}`,
    `  well-behaved client: ${n(r.wellBehaved.rounds)} rounds, max publish → OK ${r.wellBehaved.maxPublishMs.toFixed(0)} ms, max REQ → EOSE ${r.wellBehaved.maxReadMs.toFixed(0)} ms, ${r.wellBehaved.over1s} over 1 s`,
    `  memory: heap ${mb(m.baseline?.heapUsed)} baseline → ${mb(m.peak?.heapUsed)} peak → ${mb(m.after?.heapUsed)} after (${((m.settledInMs ?? 0) / 1000).toFixed(0)} s later${m.collected ? ', both after a full GC' : ''}); ` +
      `of which cached on purpose (hot tier) ${mb(m.baseline?.cached)} → ${mb(m.after?.cached)}; RSS ${mb(m.baseline?.rss)} → ${mb(m.peak?.rss)} → ${mb(m.after?.rss)}`,
    `  held after every client had gone: ${r.heldAfter ? `${r.heldAfter.connections} connections, ${r.heldAfter.subscriptions} subscriptions, ${r.heldAfter.negentropyRecords} negentropy records` : '–'}`,
    `  relay log: ${r.errorLogs.length} error lines${r.errorLogs.length ? ` (${[...new Set(r.errorLogs.map((l) => String(l.msg)))].join('; ')})` : ''}; warnings: ${list(r.warnings) || 'none'}`,
    r.failures.length ? `FAILED (${r.failures.length}):\n${r.failures.map((f) => `  - ${f}`).join('\n')}` : `PASSED: relay alive, no error logged, every owed reply received and prefixed, every event delivered valid and matching, every well-behaved round answered right${r.wellBehavedBoundMs === undefined ? '' : ` within ${r.wellBehavedBoundMs} ms`}, nothing held and heap back near baseline`,
  ].join('\n');
}
