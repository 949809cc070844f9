// An in-memory reference for the NIP-01 query rules, written from the spec (protocol.md 1.4, 1.5, 1.9,
// 5, 7) without the relay's code, and the fast-check generators the query property tests share.
// Events here are not signed: the store layer never checks signatures.
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import type pg from 'pg';
import type { NostrEvent } from '../../src/nostr/event.js';
import { parseFilter, type Filter, type FilterLimits } from '../../src/nostr/filter.js';
import { countEvents, streamEvents } from '../../src/store/read.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeEvent } from '../../src/store/write.js';

/** A filter as a client sends it. */
export type RawFilter = {
  ids?: string[];
  authors?: string[];
  kinds?: number[];
  since?: number;
  until?: number;
  limit?: number;
} & { [tag: `#${string}`]: string[] };

// ---------------------------------------------------------------------------------------------------
// The reference

/** Newest first; on equal created_at the lowest id first (NIP-01 "limit"). */
export function resultOrder(a: NostrEvent, b: NostrEvent): number {
  return b.created_at - a.created_at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/** The relay indexes tag values of at most 1024 UTF-8 bytes without NUL; others can never match. */
const indexable = (value: string) => Buffer.byteLength(value, 'utf8') <= 1024 && !value.includes('\u0000');

/** NIP-40: expired once the first expiration tag's time has come. */
export function isExpired(e: NostrEvent, now: number): boolean {
  const tag = e.tags.find((t) => t[0] === 'expiration');
  return tag !== undefined && /^\d+$/.test(tag[1] ?? '') && Number(tag[1]) <= now;
}

export function referenceMatch(f: RawFilter, e: NostrEvent): boolean {
  for (const [key, value] of Object.entries(f)) {
    if (key === 'ids' && !(value as string[]).includes(e.id)) return false;
    if (key === 'authors' && !(value as string[]).includes(e.pubkey)) return false;
    if (key === 'kinds' && !(value as number[]).includes(e.kind)) return false;
    if (key === 'since' && e.created_at < (value as number)) return false;
    if (key === 'until' && e.created_at > (value as number)) return false;
    if (key.startsWith('#')) {
      // element 1 of a tag named exactly by the letter, case-sensitive on both
      const letter = key.slice(1);
      const values = value as string[];
      if (!e.tags.some((t) => t[0] === letter && t.length >= 2 && indexable(t[1]) && values.includes(t[1]))) return false;
    }
  }
  return true;
}

const referenceLimit = (f: RawFilter, limits: FilterLimits) => Math.min(f.limit ?? limits.defaultLimit, limits.maxLimit);

/**
 * Private kinds (NIP-04 DMs, NIP-59 gift wraps, protocol.md 6): an event of one of `kinds` is visible
 * only to a reader who wrote it or whom one of its `p` tags names.
 */
export interface Privacy {
  kinds: number[];
  readers: string[];
}

export function referenceVisible(e: NostrEvent, privacy: Privacy | undefined): boolean {
  if (!privacy || !privacy.kinds.includes(e.kind)) return true;
  return privacy.readers.includes(e.pubkey) || e.tags.some((t) => t[0] === 'p' && t.length >= 2 && privacy.readers.includes(t[1]));
}

/** REQ: per filter the newest `limit` live matches; the union, each event once, in result order. */
export function referenceReq(filters: RawFilter[], stored: NostrEvent[], now: number, limits: FilterLimits, privacy?: Privacy): NostrEvent[] {
  const live = stored.filter((e) => !isExpired(e, now) && referenceVisible(e, privacy));
  const union = new Map<string, NostrEvent>();
  for (const f of filters) {
    const newest = live.filter((e) => referenceMatch(f, e)).sort(resultOrder).slice(0, referenceLimit(f, limits));
    for (const e of newest) union.set(e.id, e);
  }
  return [...union.values()].sort(resultOrder);
}

/** NIP-45 COUNT: live events matching any filter, each once; limit ignored. */
export function referenceCount(filters: RawFilter[], stored: NostrEvent[], now: number, privacy?: Privacy): number {
  return stored.filter((e) => !isExpired(e, now) && referenceVisible(e, privacy) && filters.some((f) => referenceMatch(f, e))).length;
}

/**
 * What the store holds after all events were written: every regular event, and for replaceable
 * (0, 3, 10000-19999) and addressable (30000-39999) kinds the one version with the highest
 * created_at, ties to the lowest id, per (pubkey, kind) or (pubkey, kind, first d or "").
 */
export function referenceStored(events: NostrEvent[]): NostrEvent[] {
  const keyOf = (e: NostrEvent): string | undefined => {
    if (e.kind === 0 || e.kind === 3 || (e.kind >= 10000 && e.kind < 20000)) return `${e.pubkey}:${e.kind}`;
    if (e.kind >= 30000 && e.kind < 40000) return `${e.pubkey}:${e.kind}:${e.tags.find((t) => t[0] === 'd')?.[1] ?? ''}`;
    return undefined;
  };
  const latest = new Map<string, NostrEvent>();
  const regular: NostrEvent[] = [];
  for (const e of events) {
    const key = keyOf(e);
    if (key === undefined) regular.push(e);
    else if (!latest.has(key) || resultOrder(e, latest.get(key)!) < 0) latest.set(key, e);
  }
  return [...regular, ...latest.values()];
}

// ---------------------------------------------------------------------------------------------------
// Running the store

/** Parses client filters; with `privacy`, narrowed as the private-kinds read rule narrows them. */
export function parseAll(filters: RawFilter[], limits: FilterLimits, privacy?: Privacy): Filter[] {
  return filters.map((f) => {
    const parsed = parseFilter(f, limits);
    if (!parsed.ok) throw new Error(`generated filter refused: ${parsed.reason} ${JSON.stringify(f)}`);
    if (!privacy) return parsed.value;
    return { ...parsed.value, privateKinds: { kinds: new Set(privacy.kinds), readers: new Set(privacy.readers) } };
  });
}

/** The REQ answer from SQL, as full events parsed back from the stored raw JSON. */
export async function storeReq(pool: pg.Pool, filters: RawFilter[], now: number, limits: FilterLimits, privacy?: Privacy): Promise<NostrEvent[]> {
  const out: NostrEvent[] = [];
  await streamEvents(pool, parseAll(filters, limits, privacy), now, (rows) => {
    for (const row of rows) {
      const event = JSON.parse(row.raw) as NostrEvent;
      if (event.id !== row.id) throw new Error(`row id ${row.id} does not match its raw event ${event.id}`);
      out.push(event);
    }
    return true;
  });
  return out;
}

export function storeCount(pool: pg.Pool, filters: RawFilter[], now: number, limits: FilterLimits, privacy?: Privacy): Promise<number> {
  return countEvents(pool, parseAll(filters, limits, privacy), now);
}

/** Writes events the way the relay does, `concurrency` at a time. */
export async function insertAll(pool: pg.Pool, events: NostrEvent[], concurrency = 1): Promise<void> {
  for (let i = 0; i < events.length; i += concurrency) {
    await Promise.all(events.slice(i, i + concurrency).map((e) => writeEvent(pool, prepareEvent(e))));
  }
}

// ---------------------------------------------------------------------------------------------------
// Generators: small pools so that filters hit and created_at ties are frequent

const hexOf = (seed: string) => createHash('sha256').update(seed).digest('hex');

export const BASE_TIME = 1_700_000_000;
export const TIME_SPAN = 40; // created_at in [BASE_TIME, BASE_TIME + TIME_SPAN]
export const PUBKEYS = Array.from({ length: 5 }, (_, i) => hexOf(`pubkey ${i}`));
export const E_VALUES = Array.from({ length: 6 }, (_, i) => hexOf(`referenced event ${i}`));
/**
 * Case differs between two values; one is empty; two cannot be indexed (too long, NUL); U+FFFD is
 * what a lone surrogate turns into when it is encoded as UTF-8.
 */
export const T_VALUES = ['nostr', 'Nostr', 'art', '', 'x'.repeat(1100), 'a\u0000b', '\ufffd'];
/** Events with a lone surrogate are refused, but a filter may still ask for one. */
const T_FILTER_VALUES = [...T_VALUES, '\ud800'];
export const D_VALUES = ['', 'a', 'b'];
export const REGULAR_KINDS = [1, 6, 7, 1111, 9735];
export const REPLACEABLE_KINDS = [0, 3, 10002, 30023]; // replaceable, and one addressable
export const ABSENT_ID = hexOf('no such event');
export const ABSENT_KIND = 42;

const tagArb: fc.Arbitrary<string[]> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...E_VALUES).map((v) => ['e', v]) },
  // relay hint and author: later elements that must never match
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom(...E_VALUES), fc.constantFrom(...E_VALUES)).map(([v, w]) => ['e', v, 'wss://r', w]) },
  { weight: 3, arbitrary: fc.constantFrom(...PUBKEYS).map((v) => ['p', v]) },
  { weight: 4, arbitrary: fc.constantFrom(...T_VALUES).map((v) => ['t', v]) },
  { weight: 2, arbitrary: fc.constantFrom(...E_VALUES).map((v) => ['E', v]) },
  { weight: 2, arbitrary: fc.constantFrom(...D_VALUES).map((v) => ['d', v]) },
  { weight: 1, arbitrary: fc.constantFrom<string[]>(['d'], ['t'], ['alt', 'nostr'], ['tt', 'nostr']) },
);

/** Expiration times on both sides of `now`: exactly `now` is already expired (NIP-40). */
export const expirationsAround = (now: number) => [now - 30, now - 1, now, now + 1, now + 100000];

/** Events of a small pool of authors; a fifth of the regular ones carry an expiration tag. */
export function eventArb(expirations: number[]): fc.Arbitrary<NostrEvent> {
  const kind = fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...REGULAR_KINDS) }, { weight: 1, arbitrary: fc.constantFrom(...REPLACEABLE_KINDS) });
  const expiration = fc.constantFrom(...expirations.map(String), 'soon').map((t) => ['expiration', t]);
  return fc
    .record({
      id: fc.uint8Array({ minLength: 32, maxLength: 32 }).map((b) => Buffer.from(b).toString('hex')),
      pubkey: fc.constantFrom(...PUBKEYS),
      created_at: fc.integer({ min: BASE_TIME, max: BASE_TIME + TIME_SPAN }),
      kind,
      tags: fc.array(tagArb, { maxLength: 4 }),
      expiration: fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: expiration }),
    })
    .map(({ expiration, ...e }) => ({
      ...e,
      // expiry only on regular kinds, so the replacement rule above need not weigh it
      tags: expiration && REGULAR_KINDS.includes(e.kind) ? [...e.tags, expiration] : e.tags,
      content: '',
      sig: '0'.repeat(128),
    }));
}

export const eventsArb = (expirations: number[], maxLength: number, minLength = 0) =>
  fc.uniqueArray(eventArb(expirations), { selector: (e) => e.id, minLength, maxLength });

/** One value list: usually one to three pool values, sometimes empty (which matches nothing). */
const listOf = <T>(pool: T[]) =>
  fc.oneof({ weight: 12, arbitrary: fc.subarray(pool, { minLength: 1, maxLength: Math.min(3, pool.length) }) }, { weight: 1, arbitrary: fc.constant([] as T[]) });

const FILTER_KEYS = ['ids', 'authors', 'kinds', '#e', '#p', '#t', '#E', '#d', 'since', 'until', 'limit'] as const;

/** A filter with a few of the keys; `ids` are drawn from `idPool` (stored ids plus an absent one). */
export function filterArb(idPool: string[]): fc.Arbitrary<RawFilter> {
  const time = fc.integer({ min: BASE_TIME - 1, max: BASE_TIME + TIME_SPAN + 1 });
  const all = fc.record({
    ids: listOf([...idPool, ABSENT_ID]),
    authors: listOf([...PUBKEYS, ABSENT_ID]),
    kinds: listOf([...REGULAR_KINDS, ...REPLACEABLE_KINDS, ABSENT_KIND]),
    '#e': listOf(E_VALUES),
    '#p': listOf(PUBKEYS),
    '#t': listOf(T_FILTER_VALUES),
    '#E': listOf(E_VALUES),
    '#d': listOf(D_VALUES),
    since: time,
    until: time,
    limit: fc.oneof(fc.integer({ min: 0, max: 4 }), fc.integer({ min: 0, max: 40 }), fc.constant(100000)),
  });
  return fc
    .tuple(all, fc.subarray([...FILTER_KEYS], { maxLength: 4 }))
    .map(([values, keys]) => Object.fromEntries(keys.map((k) => [k, values[k]])) as RawFilter);
}

export const filtersArb = (idPool: string[]) => fc.array(filterArb(idPool), { minLength: 1, maxLength: 3 });

/** Which kinds are private (one or two of the regular ones) and who is authenticated (often nobody). */
export const privacyArb: fc.Arbitrary<Privacy> = fc.record({
  kinds: fc.subarray(REGULAR_KINDS, { minLength: 1, maxLength: 2 }),
  readers: fc.oneof({ weight: 1, arbitrary: fc.constant([] as string[]) }, { weight: 3, arbitrary: fc.subarray(PUBKEYS, { minLength: 1, maxLength: 2 }) }),
});

/**
 * The same filters with every non-empty list (but ids) grown to `n` ≥ PLAN_REUSE_MIN_VALUES entries by
 * values nothing stored has, so the store answers them with padded, named, generically planned SQL.
 */
export const longListFiltersArb = (idPool: string[]) =>
  fc.tuple(filtersArb(idPool), fc.integer({ min: 16, max: 40 })).map(([filters, n]) => filters.map((f) => lengthen(f, n)));

function lengthen(f: RawFilter, n: number): RawFilter {
  const out: Record<string, unknown> = { ...f };
  for (const [key, list] of Object.entries(f)) {
    if (!Array.isArray(list) || list.length === 0 || key === 'ids') continue;
    // Absent kinds of the same class, so a replaceable-only kinds list stays replaceable-only.
    const replaceableOnly = key === 'kinds' && (list as number[]).every((k) => REPLACEABLE_KINDS.includes(k));
    const fill = Array.from({ length: n - list.length }, (_, i) => (key !== 'kinds' ? hexOf(`absent ${i}`) : replaceableOnly ? 10100 + i : 40000 + i));
    out[key] = [...list, ...fill];
  }
  return out as RawFilter;
}
