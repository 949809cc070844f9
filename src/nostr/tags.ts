// The tag-indexing rule (NIP-01 "Tags"), defined once: which tags a filter can match and which rows
// go into event_tags. Live matching uses the same rule, so a stored query and a live subscription
// always agree.

export type Tag = string[];

/**
 * PostgreSQL btree entries must stay under ~2.7 kB and TEXT cannot hold U+0000, so longer values or
 * values with NUL are not indexed (and so never match a `#x` filter). Real tag values (ids, pubkeys,
 * addresses, hashtags, URLs) are far shorter.
 */
export const MAX_INDEXED_TAG_VALUE_BYTES = 1024;

const SINGLE_LETTER = /^[a-zA-Z]$/;

export function isIndexableTagName(name: string): boolean {
  return SINGLE_LETTER.test(name);
}

export function isIndexableTagValue(value: string): boolean {
  // A UTF-16 code unit is at most 3 bytes of UTF-8: a short value needs no count.
  return (value.length * 3 <= MAX_INDEXED_TAG_VALUE_BYTES || Buffer.byteLength(value, 'utf8') <= MAX_INDEXED_TAG_VALUE_BYTES) && !value.includes('\u0000');
}

/** Tags up to this many are deduplicated by comparing pairs; more, by a Set of keys. */
const DEDUPE_BY_SCAN = 16;

/** Distinct (name, value) pairs of single-letter tags: only the first value (element 1) counts. */
export function indexedTags(tags: readonly Tag[]): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  // Most events have a few tags: comparing them pairwise builds no key string per tag (the hot
  // tier's fill prepares a million events this way).
  const seen = tags.length > DEDUPE_BY_SCAN ? new Set<string>() : undefined;
  for (const tag of tags) {
    if (tag.length < 2) continue;
    const [name, value] = tag;
    if (!isIndexableTagName(name) || !isIndexableTagValue(value)) continue;
    if (seen) {
      const key = name + '\u0000' + value;
      if (seen.has(key)) continue;
      seen.add(key);
    } else if (out.some((pair) => pair[0] === name && pair[1] === value)) continue;
    out.push([name, value]);
  }
  return out;
}

/** The first value of the first tag with this name, if any. */
export function firstTagValue(tags: readonly Tag[], name: string): string | undefined {
  for (const tag of tags) if (tag[0] === name) return tag[1];
  return undefined;
}

/** NIP-01 addressable identifier: the first `d` tag's value; a missing or bare `["d"]` means "". */
export function dTagOf(tags: readonly Tag[]): string {
  return firstTagValue(tags, 'd') ?? '';
}

/** NIP-40 expiration timestamp, or undefined when absent or not a plain integer. */
export function expirationOf(tags: readonly Tag[]): number | undefined {
  const value = firstTagValue(tags, 'expiration');
  if (value === undefined || !/^\d{1,15}$/.test(value)) return undefined;
  return Number(value);
}

/** NIP-70: the bare `["-"]` tag marks an event that only its author may publish. */
export function isProtected(tags: readonly Tag[]): boolean {
  return tags.some((tag) => tag.length === 1 && tag[0] === '-');
}
