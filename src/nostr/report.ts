// NIP-56 reports (kind 1984): what a report names and why. A report of a note carries `e` tags (the
// notes) beside the author's `p` tag; a report of a profile carries `p` tags only. The report type is
// the tag's third element.
import { isHex64 } from './event.js';
import type { Tag } from './tags.js';

/** NIP-56's report types; any other word (or none) counts as `other`. */
export const REPORT_TYPES = ['nudity', 'malware', 'profanity', 'illegal', 'spam', 'impersonation', 'other'] as const;
export type ReportType = (typeof REPORT_TYPES)[number];

const KNOWN = new Set<string>(REPORT_TYPES);

export interface ReportTarget {
  target: 'event' | 'pubkey';
  /** The event id or the pubkey, 64 lowercase hex characters. */
  id: string;
  type: ReportType;
}

const typeOf = (tag: Tag | undefined): ReportType | undefined => {
  const word = tag?.[2]?.trim().toLowerCase();
  if (!word) return undefined;
  return KNOWN.has(word) ? (word as ReportType) : 'other';
};

/**
 * The events a report names (its `e` tags), or, when it names none, the pubkeys (its `p` tags), each
 * once per type. An `e` tag without a type takes the type of the report's `x` or `p` tag (NIP-56
 * blob reports put it on the `x` tag), else `other`.
 */
export function reportTargets(tags: readonly Tag[]): ReportTarget[] {
  const valid = (name: string) => tags.filter((t) => t[0] === name && typeof t[1] === 'string' && isHex64(t[1]));
  const events = valid('e');
  const pubkeys = valid('p');
  const fallback = typeOf(tags.find((t) => t[0] === 'x' && typeOf(t))) ?? typeOf(pubkeys.find((t) => typeOf(t)));
  const named: ReportTarget[] =
    events.length > 0
      ? events.map((t) => ({ target: 'event', id: t[1], type: typeOf(t) ?? fallback ?? 'other' }))
      : pubkeys.map((t) => ({ target: 'pubkey', id: t[1], type: typeOf(t) ?? 'other' }));
  const seen = new Set<string>();
  return named.filter((t) => {
    const key = `${t.id}:${t.type}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}
