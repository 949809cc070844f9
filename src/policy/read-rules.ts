// The operator's read rules (docs/moderation.md, "Read rules"): refuse filters that would read every
// stored event (READ_REFUSE_BROAD), cap `limit` per filter shape (READ_LIMIT_CAPS), and serve some
// kinds to NIP-42-authenticated readers only (READ_AUTH_KINDS). Each looks at the filters once per
// REQ, COUNT or NEG-OPEN, never at events: what reaches the hot tier, PostgreSQL and live fan-out is
// the narrowed filter, so none of them pays for a rule per event.
import type { Filter } from '../nostr/filter.js';
import * as reason from '../nostr/reason.js';
import { hideKinds } from './private-kinds.js';
import type { ReadRule } from './session.js';

/**
 * The shapes READ_LIMIT_CAPS names. A filter's shape is the first of these it has: `ids`, a NIP-50
 * `search` (it ranks the newest matches whatever else the filter says), `authors`, a `#x` tag, `kinds`;
 * `time` is a filter with none of them (only since, until). `default` caps every shape not named.
 */
export const LIMIT_SHAPES = ['ids', 'search', 'authors', 'tags', 'kinds', 'time', 'default'] as const;
export type LimitShape = (typeof LIMIT_SHAPES)[number];
export type LimitCaps = Partial<Record<LimitShape, number>>;

const isLimitShape = (name: string): name is LimitShape => (LIMIT_SHAPES as readonly string[]).includes(name);

export function limitShapeOf(f: Filter): Exclude<LimitShape, 'default'> {
  if (f.ids) return 'ids';
  if (f.search) return 'search';
  if (f.authors) return 'authors';
  if (f.tags.length > 0) return 'tags';
  if (f.kinds) return 'kinds';
  return 'time';
}

/**
 * READ_LIMIT_CAPS as written ("search:100,time:50,default:1000"): the caps, or what is wrong with it.
 * Each shape at most once, each cap a whole number of events from 1.
 */
export function parseLimitCaps(text: string): { ok: true; caps: LimitCaps } | { ok: false; problem: string } {
  const caps: LimitCaps = {};
  for (const entry of text.split(',')) {
    const match = /^\s*([a-z]+)\s*:\s*(\d{1,9})\s*$/.exec(entry);
    if (!match) return { ok: false, problem: `"${entry.trim()}" is not shape:events` };
    const [, shape, events] = match as unknown as [string, string, string];
    if (!isLimitShape(shape)) return { ok: false, problem: `"${shape}" is not a shape (${LIMIT_SHAPES.join(', ')})` };
    if (caps[shape] !== undefined) return { ok: false, problem: `"${shape}" is given twice` };
    if (Number(events) < 1) return { ok: false, problem: `the cap of "${shape}" must be 1 or more` };
    caps[shape] = Number(events);
  }
  return { ok: true, caps };
}

/** No list, no search and no `since`: the filter reads the newest events of every kind by everyone. */
export function isBroad(f: Filter): boolean {
  return f.ids === undefined && f.authors === undefined && f.kinds === undefined && f.tags.length === 0 && f.search === undefined && f.since === undefined;
}

/**
 * READ_REFUSE_BROAD: a REQ, COUNT or NEG-OPEN with a broad filter is refused whole (`blocked:`), even
 * with `limit: 0`, whose live part would still be matched against every new event.
 */
export function broadFilterRule(refuse: boolean): ReadRule | undefined {
  if (!refuse) return undefined;
  return {
    name: 'broadFilter',
    refuse: (filters) =>
      filters.some(isBroad) ? reason.blocked('a filter must name ids, authors, kinds, tags or a search, or give since: this relay does not read every event') : undefined,
  };
}

/**
 * READ_LIMIT_CAPS: a REQ filter asking more than its shape's cap gets the cap (as a limit over
 * MAX_LIMIT gets MAX_LIMIT): shortened, not refused. COUNT ignores limit, and NIP-77 reconciles every
 * matching event (NEGENTROPY_MAX_RECORDS bounds it), so neither is capped.
 */
export function limitCapsRule(caps: LimitCaps | undefined): ReadRule | undefined {
  if (caps === undefined || Object.keys(caps).length === 0) return undefined;
  const capOf = Object.fromEntries(LIMIT_SHAPES.map((shape) => [shape, caps[shape] ?? caps.default ?? Infinity])) as Record<LimitShape, number>;
  return {
    name: 'limitCaps',
    reqOnly: true,
    narrow(filter) {
      const cap = capOf[limitShapeOf(filter)];
      return filter.limit > cap ? { ...filter, limit: cap } : filter;
    },
  };
}

/**
 * READ_AUTH_KINDS: kinds served to connections with an authenticated pubkey (NIP-42), any pubkey.
 * From nobody, a REQ, COUNT or NEG-OPEN whose filters name one of them is answered
 * `auth-required:`, so the client knows to authenticate; a filter without `kinds` is narrowed to
 * leave them out (hideKinds: the same condition as the private kinds, in SQL, the hot tier and live
 * fan-out). The condition's readers are the connection's live set, so after a later AUTH its live
 * delivery may bring those kinds from or to the new key: less than an authenticated reader may see.
 */
export function authKindsRule(kinds: readonly number[]): ReadRule | undefined {
  if (kinds.length === 0) return undefined;
  const authOnly = new Set(kinds);
  return {
    name: 'authKinds',
    refuse(filters, session) {
      if (session.pubkeys.size > 0) return undefined;
      for (const f of filters) {
        const named = f.kinds?.find((k) => authOnly.has(k));
        if (named !== undefined) return reason.authRequired(`kind ${named} is served to authenticated users only: authenticate (NIP-42) and ask again`);
      }
      return undefined;
    },
    narrow(filter, session) {
      // A filter with kinds got here naming none of these (refuse), or from an authenticated reader.
      if (session.pubkeys.size > 0 || filter.kinds !== undefined) return filter;
      return hideKinds(filter, authOnly, session.pubkeys);
    },
  };
}
