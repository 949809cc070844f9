// Turning NIP-01 filters into SQL that an index serves in result order (created_at DESC, id ASC).
//
// A list of authors, kinds or tag values becomes one UNION ALL branch per value, each an index range
// already in result order: PostgreSQL merges them with a Merge Append and stops after `limit` rows
// (../shared/perf-notes.md: 7 ms against 108 ms for `= ANY(...)` on the 150-#p query). Every value
// is a bind parameter; no input is ever spliced into the SQL text.
import type { Filter, TagCondition } from '../nostr/filter.js';
import { matchesNothing } from '../nostr/filter.js';
import { isAddressable, isReplaceable } from '../nostr/kinds.js';

export interface SqlQuery {
  text: string;
  values: unknown[];
}

/** Collects bind parameters and hands back their placeholders. */
function parameters() {
  const values: unknown[] = [];
  const add = (value: unknown, cast = ''): string => {
    values.push(value);
    return `$${values.length}${cast}`;
  };
  return { values, add };
}
type Add = ReturnType<typeof parameters>['add'];

const hex = (s: string) => Buffer.from(s, 'hex');

/** Conditions on the events row `alias` that every filter shape shares. */
function eventConditions(f: Filter, add: Add, alias: string, now: number, skip: { authors?: boolean; kinds?: boolean; tag?: TagCondition } = {}): string[] {
  const c = [`(${alias}.expires_at IS NULL OR ${alias}.expires_at > ${add(now)})`];
  if (f.ids) c.push(`${alias}.id = ANY(${add(f.ids.map(hex), '::bytea[]')})`);
  if (f.authors && !skip.authors) c.push(`${alias}.pubkey = ANY(${add(f.authors.map(hex), '::bytea[]')})`);
  if (f.kinds && !skip.kinds) c.push(`${alias}.kind = ANY(${add(f.kinds, '::int[]')})`);
  if (f.since !== undefined) c.push(`${alias}.created_at >= ${add(f.since)}`);
  if (f.until !== undefined) c.push(`${alias}.created_at <= ${add(f.until)}`);
  for (const t of f.tags) {
    if (t === skip.tag) continue;
    c.push(
      `EXISTS (SELECT 1 FROM event_tags x WHERE x.event_id = ${alias}.id AND x.name = ${add(t.name)} AND x.value = ANY(${add(t.values, '::text[]')}))`,
    );
  }
  return c;
}

/** The tag condition to drive a tag-led query: `e`/`p`-like exact ids first, then the fewest values. */
function drivingTag(tags: TagCondition[]): TagCondition {
  const rank = (t: TagCondition) => (t.name === 'e' || t.name === 'a' ? 0 : t.name === 'd' ? 1 : 2);
  return [...tags].sort((a, b) => rank(a) - rank(b) || a.values.length - b.values.length)[0];
}

/**
 * Tag-led: one event_tags index range per value, each already in (created_at, event_id) order and cut
 * at `limit`; PostgreSQL merges them (Merge Append) and stops after `limit` rows. Every condition sits
 * inside the branch, before its LIMIT, so nothing filtered out later can take a result slot. Expired
 * events not yet swept are excluded by id (`expired`: see expiredIdsSql), which keeps each branch an
 * index-only scan and costs nothing to plan. An event carrying several of the values appears in
 * several branches, adjacent in merge order: DISTINCT ON removes the copies before the outer limit.
 */
function tagLedQuery(f: Filter, add: Add, now: number, expired: string): string {
  const tag = drivingTag(f.tags);
  const limit = add(f.limit);
  const name = add(tag.name);
  const conditions = [`t.event_id <> ALL(${expired})`];
  if (f.kinds) conditions.push(`t.kind = ANY(${add(f.kinds, '::int[]')})`);
  if (f.since !== undefined) conditions.push(`t.created_at >= ${add(f.since)}`);
  if (f.until !== undefined) conditions.push(`t.created_at <= ${add(f.until)}`);
  for (const other of f.tags) {
    if (other === tag) continue;
    conditions.push(
      `EXISTS (SELECT 1 FROM event_tags x WHERE x.event_id = t.event_id AND x.name = ${add(other.name)} AND x.value = ANY(${add(other.values, '::text[]')}))`,
    );
  }
  // Authors live on events: only then does a branch join it.
  const from = f.authors ? `event_tags t JOIN events a ON a.id = t.event_id AND a.pubkey = ANY(${add(f.authors.map(hex), '::bytea[]')})` : 'event_tags t';
  const where = conditions.join(' AND ');
  const branches = tag.values.map(
    (v) => `(SELECT t.created_at, t.event_id FROM ${from} WHERE t.name = ${name} AND t.value = ${add(v)} AND ${where} ORDER BY t.created_at DESC, t.event_id LIMIT ${limit})`,
  );
  // The expiry check on the join is a safety net for an event that expired after the list was read.
  return `SELECT DISTINCT ON (t.created_at, t.event_id) e.id, t.created_at, e.raw
    FROM (${branches.join(' UNION ALL ')}) t JOIN events e ON e.id = t.event_id
    WHERE e.expires_at IS NULL OR e.expires_at > ${add(now)}
    ORDER BY t.created_at DESC, t.event_id LIMIT ${limit}`;
}

/** Branches over events, each cut at the filter's limit, merged in result order. */
function mergedBranches(branches: string[], limit: string): string {
  const cut = branches.map((b) => `(${b} ORDER BY created_at DESC, id LIMIT ${limit})`);
  return `SELECT id, created_at, raw FROM (${cut.join(' UNION ALL ')}) b ORDER BY created_at DESC, id LIMIT ${limit}`;
}

/**
 * Author-led: one branch per author on events_pubkey_time (kinds checked in the index). When every
 * kind is replaceable or addressable, one branch per (author, kind) on the replacement key instead:
 * a profile lookup then reads one row per author rather than walking the author's whole history.
 */
function authorLedQuery(f: Filter, add: Add, now: number): string {
  const limit = add(f.limit);
  const perKind = f.kinds !== undefined && f.kinds.every((k) => isReplaceable(k) || isAddressable(k));
  const shared = eventConditions(f, add, 'events', now, { authors: true, kinds: perKind }).join(' AND ');
  const branches: string[] = [];
  for (const author of f.authors!) {
    const a = add(hex(author));
    // `d_tag IS NOT NULL` (true for these kinds) lets the planner use the partial unique index.
    if (perKind)
      for (const kind of f.kinds!)
        branches.push(`SELECT id, created_at, raw FROM events WHERE pubkey = ${a} AND kind = ${add(kind)} AND d_tag IS NOT NULL AND ${shared}`);
    else branches.push(`SELECT id, created_at, raw FROM events WHERE pubkey = ${a} AND ${shared}`);
  }
  return mergedBranches(branches, limit);
}

/** Kind-led: one branch per kind on events_kind_time. */
function kindLedQuery(f: Filter, add: Add, now: number): string {
  const limit = add(f.limit);
  const shared = eventConditions(f, add, 'events', now, { kinds: true }).join(' AND ');
  return mergedBranches(f.kinds!.map((k) => `SELECT id, created_at, raw FROM events WHERE kind = ${add(k)} AND ${shared}`), limit);
}

/** ids, or nothing selective: a plain scan of the primary key or of events_time. */
function plainQuery(f: Filter, add: Add, now: number): string {
  const where = eventConditions(f, add, 'events', now);
  return `SELECT id, created_at, raw FROM events WHERE ${where.join(' AND ')} ORDER BY created_at DESC, id LIMIT ${add(f.limit)}`;
}

const isTagLed = (f: Filter) => !f.ids && f.tags.length > 0;

function filterQuery(f: Filter, add: Add, now: number, expired: string): string {
  if (f.ids) return plainQuery(f, add, now);
  if (isTagLed(f)) return tagLedQuery(f, add, now, expired);
  if (f.authors) return authorLedQuery(f, add, now);
  if (f.kinds) return kindLedQuery(f, add, now);
  return plainQuery(f, add, now);
}

/**
 * The expired events still stored: the sweep deletes them every EXPIRY_SWEEP_SECONDS, so this list is
 * short (usually empty). Read it first (`$1` = now) and pass it to reqToSql when needsExpiredIds.
 */
export const expiredIdsSql = 'SELECT id FROM events WHERE expires_at IS NOT NULL AND expires_at <= $1';

/** The filters that need a stored query: limit 0 means live only, and some filters can match nothing. */
export function storedQueryFilters(filters: Filter[]): Filter[] {
  return filters.filter((f) => f.limit > 0 && !matchesNothing(f));
}

export function needsExpiredIds(filters: Filter[]): boolean {
  return storedQueryFilters(filters).some(isTagLed);
}

/**
 * One SQL statement for a whole REQ: each filter with its own limit, the union deduplicated and
 * ordered newest first, ties by lowest id. Returns undefined when no filter can match anything.
 * Rows: id (bytea), raw (text).
 */
export function reqToSql(filters: Filter[], now: number, expiredIds: Buffer[] = []): SqlQuery | undefined {
  const wanted = storedQueryFilters(filters);
  if (wanted.length === 0) return undefined;
  const { values, add } = parameters();
  const expired = wanted.some(isTagLed) ? add(expiredIds, '::bytea[]') : '';
  if (wanted.length === 1) return { text: filterQuery(wanted[0], add, now, expired), values };
  const parts = wanted.map((f) => `(${filterQuery(f, add, now, expired)})`);
  return {
    text: `SELECT DISTINCT ON (created_at, id) id, created_at, raw FROM (${parts.join(' UNION ALL ')}) u ORDER BY created_at DESC, id`,
    values,
  };
}

/** NIP-45: one count over the union of the filters (limit ignored), each event counted once. */
export function countToSql(filters: Filter[], now: number): SqlQuery | undefined {
  const matching = filters.filter((f) => !matchesNothing(f));
  if (matching.length === 0) return undefined;
  const { values, add } = parameters();
  const parts = matching.map((f) => `SELECT e.id FROM events e WHERE ${eventConditions(f, add, 'e', now).join(' AND ')}`);
  return { text: `SELECT count(*)::bigint AS count FROM (${parts.join(' UNION ')}) u`, values };
}
