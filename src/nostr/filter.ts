// NIP-01 filters: parsing with the relay's limits, and in-memory matching for live events.
import { hexBits, isHex64, type Checked, type NostrEvent } from './event.js';
import * as reason from './reason.js';
import { compileSearch, MAX_SEARCH_LENGTH, parseSearch, searchDocument, type CompiledSearch, type ParsedSearch, type SearchDocument } from './search.js';
import { indexedTags, isIndexableTagName, isIndexableTagValue } from './tags.js';

export interface TagCondition {
  name: string; // a single letter, case-sensitive
  values: string[];
}

export interface Filter {
  ids?: string[];
  authors?: string[];
  kinds?: number[];
  tags: TagCondition[]; // AND across letters, OR within one letter's values
  since?: number;
  until?: number;
  limit: number; // already defaulted and clamped; 0 means "no stored events, live only"
  /**
   * Set by the read rules that hide kinds (policy/private-kinds.ts hideKinds), never by a client:
   * events of these kinds match only when their author, or a pubkey in one of their `p` tags, is one
   * of `readers`. `readers` is the connection's live set of authenticated pubkeys, so a later AUTH
   * widens live delivery.
   */
  privateKinds?: PrivateKinds;
  /** The first value of the filter's first `#tag` key, as sent: the NIP-45 HLL offset (nostr/hll.ts). */
  firstTagValue?: string;
  /** NIP-50 (nostr/search.ts): results ordered by relevance. */
  search?: SearchFilter;
}

/**
 * A filter's `search`. `compiled` is set when the filter is parsed, except for a `language:xx`
 * search, whose words a stemmer in PostgreSQL must see first (store/search.ts prepareSearch);
 * null means no positive word is left, so the filter matches nothing.
 */
export interface SearchFilter {
  parsed: ParsedSearch;
  compiled?: CompiledSearch | null;
}

export interface PrivateKinds {
  kinds: ReadonlySet<number>;
  readers: ReadonlySet<string>;
}

export interface FilterLimits {
  maxValuesPerArray: number;
  defaultLimit: number;
  maxLimit: number;
}

const TIMESTAMP_MAX = Number.MAX_SAFE_INTEGER;
const HEX_TAGS = new Set(['e', 'p']); // NIP-01: #e and #p hold exact 64-char lowercase hex

function isNonNegativeInteger(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && v <= TIMESTAMP_MAX;
}

function hexList(key: string, v: unknown, limits: FilterLimits): Checked<string[]> {
  if (!Array.isArray(v)) return { ok: false, reason: reason.invalid(`"${key}" must be an array`) };
  if (v.length > limits.maxValuesPerArray)
    return { ok: false, reason: reason.invalid(`"${key}" has more than ${limits.maxValuesPerArray} values`) };
  for (const x of v) {
    if (typeof x !== 'string' || !isHex64(x))
      return { ok: false, reason: reason.invalid(`"${key}" values must be 64 lowercase hex characters`) };
  }
  return { ok: true, value: v as string[] };
}

/** The list without repeats, in first-seen order: the list itself when it has none (most have none). */
function distinct<T>(list: T[]): T[] {
  const seen = new Set(list);
  return seen.size === list.length ? list : [...seen];
}

/**
 * distinct() for 64-hex values (hexList's), without a Set: a Set hashes all 64 characters of each
 * value (a 300-author feed: 19,200), where the first seven hex digits spread them as well. An
 * open-addressing table of positions, keyed by those digits; values that share them are compared.
 */
function distinctHex(list: string[]): string[] {
  const n = list.length;
  if (n < 2) return list;
  let size = 4;
  while (size < 2 * n) size *= 2;
  const mask = size - 1;
  const slots = new Int32Array(size); // position + 1, 0 for empty
  let kept: string[] | undefined;
  for (let j = 0; j < n; j++) {
    const value = list[j]!;
    let i = Math.imul(hexBits(value, 0, 7), 0x9e3779b1) & mask;
    let repeat = false;
    for (; slots[i] !== 0; i = (i + 1) & mask) {
      if (list[slots[i]! - 1] === value) {
        repeat = true;
        break;
      }
    }
    if (repeat) {
      kept ??= list.slice(0, j);
      continue;
    }
    slots[i] = j + 1;
    kept?.push(value);
  }
  return kept ?? list;
}

/** Parses one filter object. Unknown keys are refused: ignoring them would widen the results. */
export function parseFilter(input: unknown, limits: FilterLimits): Checked<Filter> {
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    return { ok: false, reason: reason.invalid('a filter must be a JSON object') };
  const filter: Filter = { tags: [], limit: limits.defaultLimit };
  for (const [key, v] of Object.entries(input)) {
    if (key === 'ids' || key === 'authors') {
      const list = hexList(key, v, limits);
      if (!list.ok) return list;
      filter[key] = distinctHex(list.value);
    } else if (key === 'kinds') {
      if (!Array.isArray(v)) return { ok: false, reason: reason.invalid('"kinds" must be an array') };
      if (v.length > limits.maxValuesPerArray)
        return { ok: false, reason: reason.invalid(`"kinds" has more than ${limits.maxValuesPerArray} values`) };
      if (!v.every((k) => Number.isInteger(k) && k >= 0 && k <= 65535))
        return { ok: false, reason: reason.invalid('"kinds" values must be integers from 0 to 65535') };
      filter.kinds = distinct(v as number[]);
    } else if (key === 'since' || key === 'until') {
      if (!isNonNegativeInteger(v)) return { ok: false, reason: reason.invalid(`"${key}" must be a non-negative integer`) };
      filter[key] = v;
    } else if (key === 'limit') {
      if (!isNonNegativeInteger(v)) return { ok: false, reason: reason.invalid('"limit" must be a non-negative integer') };
      filter.limit = Math.min(v, limits.maxLimit);
    } else if (key === 'search') {
      if (typeof v !== 'string') return { ok: false, reason: reason.invalid('"search" must be a string') };
      if (v.length > MAX_SEARCH_LENGTH) return { ok: false, reason: reason.invalid(`"search" is longer than ${MAX_SEARCH_LENGTH} characters`) };
      const parsed = parseSearch(v.isWellFormed() ? v : v.toWellFormed());
      filter.search = { parsed, compiled: parsed.config === 'simple' ? compileSearch(parsed) : undefined };
    } else if (key.startsWith('#') && isIndexableTagName(key.slice(1))) {
      const name = key.slice(1);
      if (filter.tags.length === 0 && Array.isArray(v) && typeof v[0] === 'string') filter.firstTagValue = v[0];
      if (HEX_TAGS.has(name)) {
        const list = hexList(key, v, limits);
        if (!list.ok) return list;
      } else {
        if (!Array.isArray(v) || !v.every((x) => typeof x === 'string'))
          return { ok: false, reason: reason.invalid(`"${key}" must be an array of strings`) };
        if (v.length > limits.maxValuesPerArray)
          return { ok: false, reason: reason.invalid(`"${key}" has more than ${limits.maxValuesPerArray} values`) };
      }
      // A value no event is indexed under can never match, so it is dropped (a list left empty then
      // matches nothing). This also keeps it out of the SQL: PostgreSQL TEXT refuses NUL (the REQ
      // failed), and a lone surrogate is sent as U+FFFD, which matched events tagged U+FFFD.
      const values = (v as string[]).filter((x) => x.isWellFormed() && isIndexableTagValue(x));
      filter.tags.push({ name, values: HEX_TAGS.has(name) ? distinctHex(values) : distinct(values) });
    } else {
      return { ok: false, reason: reason.unsupported(`filter key "${key}"`) };
    }
  }
  return { ok: true, value: filter };
}

/** An empty list, or since > until, can match no event (NIP-01: lists hold one or more values). */
export function matchesNothing(f: Filter): boolean {
  return (
    f.ids?.length === 0 ||
    f.authors?.length === 0 ||
    f.kinds?.length === 0 ||
    f.tags.some((t) => t.values.length === 0) ||
    f.search?.compiled === null ||
    (f.since !== undefined && f.until !== undefined && f.since > f.until)
  );
}

/** An event's indexed tags as name + value strings (the name is one character): a Set of them, or the hot tier's held event. */
export interface TagKeys extends Iterable<string> {
  has(key: string): boolean;
}

/** The facts of an event that live matching needs, computed once per event. */
export interface MatchableEvent {
  event: NostrEvent;
  tagKeys: TagKeys;
  /** Its search words, worked out the first time a search filter asks (null: none). */
  searchDocument?: SearchDocument | null;
}

function searchDocumentOf(m: MatchableEvent): SearchDocument | undefined {
  if (m.searchDocument === undefined) m.searchDocument = searchDocument(m.event) ?? null;
  return m.searchDocument ?? undefined;
}

/** `tags`: the event's indexed tags when the caller already has them (the write path does). */
export function toMatchable(event: NostrEvent, tags: Array<[string, string]> = indexedTags(event.tags)): MatchableEvent {
  return { event, tagKeys: new Set(tags.map(([name, value]) => name + value)) };
}

export type Matcher = (m: MatchableEvent) => boolean;

const conditionKeysCache = new WeakMap<TagCondition, readonly string[]>();

/**
 * name + value for each of the condition's values (the MatchableEvent tagKeys form), built once per
 * condition and flat (a joined string, not a cons cell): the live index, the matcher and the hot
 * tier all look them up, and a flat string keeps the hash V8 computes for it.
 */
export function conditionKeys(t: TagCondition): readonly string[] {
  let keys = conditionKeysCache.get(t);
  if (!keys) conditionKeysCache.set(t, (keys = t.values.map((v) => [t.name, v].join(''))));
  return keys;
}

/** True when no event can match; throws for a language search not yet prepared (nothing could match it right). */
function matchesNothingCompiled(f: Filter): boolean {
  if (matchesNothing(f)) return true;
  if (f.search && f.search.compiled === undefined) throw new Error('a language search must be prepared (store/search.ts) before it is matched');
  return false;
}

/** Builds a matcher with sets for the lists, so large author or tag lists stay cheap per event. */
export function compileFilter(f: Filter): Matcher {
  if (matchesNothingCompiled(f)) return () => false;
  const ids = f.ids && new Set(f.ids);
  const authors = f.authors && new Set(f.authors);
  const kinds = f.kinds && new Set(f.kinds);
  const tagKeys = f.tags.map(conditionKeys);
  const { since, until, privateKinds } = f;
  const search = f.search?.compiled ?? undefined;
  return (m) =>
    (ids === undefined || ids.has(m.event.id)) &&
    (authors === undefined || authors.has(m.event.pubkey)) &&
    (kinds === undefined || kinds.has(m.event.kind)) &&
    (since === undefined || m.event.created_at >= since) &&
    (until === undefined || m.event.created_at <= until) &&
    tagKeys.every((keys) => keys.some((k) => m.tagKeys.has(k))) &&
    (privateKinds === undefined || mayRead(privateKinds, m)) &&
    (search === undefined || search.matches(searchDocumentOf(m)));
}

/** The privateKinds condition: open kinds pass; a private one needs its author or a `p` tag among the readers. */
export function mayRead({ kinds, readers }: PrivateKinds, m: MatchableEvent): boolean {
  if (!kinds.has(m.event.kind)) return true;
  if (readers.has(m.event.pubkey)) return true;
  for (const reader of readers) if (m.tagKeys.has('p' + reader)) return true;
  return false;
}

/**
 * compileFilter's matcher, built on the first event it is asked about (the checks compileFilter
 * makes at once are made here at once too): a live subscription with 500 authors would otherwise
 * build a 500-entry Set, and most REQs are closed before any new event matches their keys.
 */
export function compileFilterLazily(f: Filter): Matcher {
  if (matchesNothingCompiled(f)) return () => false;
  let compiled: Matcher | undefined;
  return (m) => (compiled ??= compileFilter(f))(m);
}

export function matchFilter(f: Filter, event: NostrEvent): boolean {
  return compileFilter(f)(toMatchable(event));
}
