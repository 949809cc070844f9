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
  /**
   * Set by reqToSql when the statement has many branches (some list reached PLAN_REUSE_MIN_VALUES),
   * so planning it costs more than running it (a 150-branch plan: ~8 ms; a 500-branch one: ~25 ms).
   * Its lists are padded to a few bucket sizes so other REQs of the same shape share its text, and
   * store/read.ts runs it as a named statement with a generic plan, built once per connection.
   */
  reusePlan?: boolean;
}

/** Lists this long or longer become a reusable statement; shorter ones plan in well under a millisecond. */
export const PLAN_REUSE_MIN_VALUES = 16;

/**
 * The list length rounded up to one of four sizes per power of two (16, 20, 24, 28, 32, 40, …, 512,
 * 640, …): at most 25 % more branches, and a few dozen statement texts for every list length a
 * filter can have.
 */
export function paddedLength(n: number): number {
  if (n < PLAN_REUSE_MIN_VALUES) return n;
  const step = 2 ** (Math.floor(Math.log2(n)) - 2);
  return Math.ceil(n / step) * step;
}

/** Collects bind parameters and hands back their placeholders. */
function parameters() {
  const values: unknown[] = [];
  const state = { reusePlan: false };
  const add = (value: unknown, cast = ''): string => {
    values.push(value);
    return `$${values.length}${cast}`;
  };
  /**
   * The values a list expands into branches, padded with NULLs: `column = NULL` is never true, and
   * the index scan of such a branch ends before it starts.
   */
  const branchValues = <T>(list: T[]): (T | null)[] => {
    if (list.length < PLAN_REUSE_MIN_VALUES) return list;
    state.reusePlan = true;
    return [...list, ...Array<null>(paddedLength(list.length) - list.length).fill(null)];
  };
  return { values, add, branchValues, state };
}
type Params = ReturnType<typeof parameters>;
type Add = Params['add'];

const hex = (s: string) => Buffer.from(s, 'hex');
const hexOrNull = (s: string | null) => (s === null ? null : hex(s));

/** A filter as the SQL below takes it: no privateKinds (see sqlFilters), maybe kinds to leave out. */
interface SqlFilter extends Filter {
  excludeKinds?: number[];
}

const expansions = new WeakMap<Filter, SqlFilter[]>();

/**
 * A filter as plain filters whose union is exactly its matches, each served by an index like any
 * client filter. privateKinds (a read rule: policy/private-kinds.ts) becomes up to three: the open
 * kinds (the filter's kinds minus the private ones, or every kind but those); the private kinds
 * written by a reader; the private kinds whose `p` tag names a reader. So a DM inbox REQ
 * (`kinds:[4]`) reads the reader's own rows through the author and tag indexes and never scans other
 * people's DMs. Remembered per filter object, so the prelude and the query see the same objects.
 */
function sqlFilters(f: Filter): SqlFilter[] {
  let out = expansions.get(f);
  if (out) return out;
  const { privateKinds, ...plain } = f;
  out = [];
  if (!privateKinds) out.push(plain);
  else {
    const hidden = privateKinds.kinds;
    const readers = [...privateKinds.readers];
    const open = f.kinds?.filter((k) => !hidden.has(k));
    if (open === undefined) out.push({ ...plain, excludeKinds: [...hidden] });
    else if (open.length) out.push({ ...plain, kinds: open });
    const closed = f.kinds ? f.kinds.filter((k) => hidden.has(k)) : [...hidden];
    if (closed.length && readers.length) {
      const authors = f.authors ? f.authors.filter((a) => privateKinds.readers.has(a)) : readers;
      if (authors.length) out.push({ ...plain, kinds: closed, authors });
      out.push({ ...plain, kinds: closed, tags: [...plain.tags, { name: 'p', values: readers }] });
    }
  }
  expansions.set(f, out);
  return out;
}

/** Conditions on the events row `alias` that every filter shape shares. */
function eventConditions(f: SqlFilter, add: Add, alias: string, now: number, skip: { authors?: boolean; kinds?: boolean; tag?: TagCondition } = {}): string[] {
  const c = [`(${alias}.expires_at IS NULL OR ${alias}.expires_at > ${add(now)})`];
  if (f.ids) c.push(`${alias}.id = ANY(${add(f.ids.map(hex), '::bytea[]')})`);
  if (f.authors && !skip.authors) c.push(`${alias}.pubkey = ANY(${add(f.authors.map(hex), '::bytea[]')})`);
  if (f.kinds && !skip.kinds) c.push(`${alias}.kind = ANY(${add(f.kinds, '::int[]')})`);
  if (f.excludeKinds) c.push(`${alias}.kind <> ALL(${add(f.excludeKinds, '::int[]')})`);
  if (f.since !== undefined) c.push(`${alias}.created_at >= ${add(f.since)}`);
  if (f.until !== undefined) c.push(`${alias}.created_at <= ${add(f.until)}`);
  if (f.search?.compiled) c.push(`${alias}.search @@ ${add(f.search.compiled.tsquery)}::tsquery`);
  for (const t of f.tags) {
    if (t === skip.tag) continue;
    c.push(
      `EXISTS (SELECT 1 FROM event_tags x WHERE x.event_id = ${alias}.id AND x.name = ${add(t.name)} AND x.value = ANY(${add(t.values, '::text[]')}))`,
    );
  }
  return c;
}

/** Matching rows of a tag condition are counted up to this many: enough to tell a thread from a hashtag. */
export const TAG_COUNT_CAP = 5000;

/**
 * What a REQ's SQL depends on besides its filters, read in one round trip first (preludeSql): the
 * expired events not yet swept, and for filters with several tag letters how many rows each letter's
 * values match (capped at TAG_COUNT_CAP).
 */
export interface Prelude {
  expiredIds: Buffer[];
  tagCounts: Map<TagCondition, number>;
}
const noPrelude: Prelude = { expiredIds: [], tagCounts: new Map() };

/**
 * The tag condition to drive a tag-led query: the one matching the fewest rows when they were counted,
 * else `e`/`a` (event references are narrow), then `d`, then the fewest values.
 */
function drivingTag(tags: TagCondition[], counts: Map<TagCondition, number>): TagCondition {
  const rank = (t: TagCondition) => (t.name === 'e' || t.name === 'a' ? 0 : t.name === 'd' ? 1 : 2);
  const count = (t: TagCondition) => counts.get(t) ?? TAG_COUNT_CAP;
  return [...tags].sort((a, b) => count(a) - count(b) || rank(a) - rank(b) || a.values.length - b.values.length)[0];
}

/**
 * Tag-led: one event_tags index range per value, each already in (created_at, event_id) order and cut
 * at `limit`; PostgreSQL merges them (Merge Append) and stops after `limit` rows. Every condition sits
 * inside the branch, before its LIMIT, so nothing filtered out later can take a result slot. Expired
 * events not yet swept are excluded by id (`expired`: see preludeSql), which keeps each branch an
 * index-only scan and costs nothing to plan. An event carrying several of the values appears in
 * several branches, adjacent in merge order: DISTINCT ON removes the copies before the outer limit.
 */
function tagLedQuery(f: SqlFilter, { add, branchValues }: Params, now: number, expired: string, counts: Map<TagCondition, number>): string {
  const tag = drivingTag(f.tags, counts);
  // When the driving letter matches few rows, each of them is checked against the other letters by
  // one index probe. `OFFSET 0` keeps PostgreSQL from turning that check into a hash join, which
  // reads every row of the other letter's values once per branch (1.6 s for 20 popular #p values).
  const probe = (counts.get(tag) ?? TAG_COUNT_CAP) < TAG_COUNT_CAP ? ' OFFSET 0' : '';
  const limit = add(f.limit);
  const name = add(tag.name);
  const conditions = [`t.event_id <> ALL(${expired})`];
  if (f.kinds) conditions.push(`t.kind = ANY(${add(f.kinds, '::int[]')})`);
  if (f.excludeKinds) conditions.push(`t.kind <> ALL(${add(f.excludeKinds, '::int[]')})`);
  if (f.since !== undefined) conditions.push(`t.created_at >= ${add(f.since)}`);
  if (f.until !== undefined) conditions.push(`t.created_at <= ${add(f.until)}`);
  for (const other of f.tags) {
    if (other === tag) continue;
    conditions.push(
      `EXISTS (SELECT 1 FROM event_tags x WHERE x.event_id = t.event_id AND x.name = ${add(other.name)} AND x.value = ANY(${add(other.values, '::text[]')})${probe})`,
    );
  }
  if (f.search?.compiled) conditions.push(`EXISTS (SELECT 1 FROM events s WHERE s.id = t.event_id AND s.search @@ ${add(f.search.compiled.tsquery)}::tsquery)`);
  // Authors live on events: only then does a branch join it.
  const from = f.authors ? `event_tags t JOIN events a ON a.id = t.event_id AND a.pubkey = ANY(${add(f.authors.map(hex), '::bytea[]')})` : 'event_tags t';
  const where = conditions.join(' AND ');
  const branches = branchValues(tag.values).map(
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
 * When every kind is replaceable, each (author, kind) has at most one stored row, so a single scan
 * of the replacement key for all of them and a sort of that handful is cheaper still (300 profiles
 * at 10M events: 9 ms against 27 ms for 300 branches).
 */
function authorLedQuery(f: SqlFilter, { add, branchValues }: Params, now: number): string {
  if (f.kinds?.every(isReplaceable)) {
    const where = eventConditions(f, add, 'events', now).join(' AND ');
    return `SELECT id, created_at, raw FROM events WHERE d_tag = '' AND ${where} ORDER BY created_at DESC, id LIMIT ${add(f.limit)}`;
  }
  const limit = add(f.limit);
  const perKind = f.kinds !== undefined && f.kinds.every((k) => isReplaceable(k) || isAddressable(k));
  const shared = eventConditions(f, add, 'events', now, { authors: true, kinds: perKind }).join(' AND ');
  const branches: string[] = [];
  for (const author of branchValues(f.authors!)) {
    const a = add(hexOrNull(author));
    // `d_tag IS NOT NULL` (true for these kinds) lets the planner use the partial unique index.
    if (perKind)
      for (const kind of f.kinds!)
        branches.push(`SELECT id, created_at, raw FROM events WHERE pubkey = ${a} AND kind = ${add(kind)} AND d_tag IS NOT NULL AND ${shared}`);
    else branches.push(`SELECT id, created_at, raw FROM events WHERE pubkey = ${a} AND ${shared}`);
  }
  return mergedBranches(branches, limit);
}

/** Kind-led: one branch per kind on events_kind_time. */
function kindLedQuery(f: SqlFilter, { add, branchValues }: Params, now: number): string {
  const limit = add(f.limit);
  const shared = eventConditions(f, add, 'events', now, { kinds: true }).join(' AND ');
  return mergedBranches(branchValues(f.kinds!).map((k) => `SELECT id, created_at, raw FROM events WHERE kind = ${add(k)} AND ${shared}`), limit);
}

/** ids, or nothing selective: a plain scan of the primary key or of events_time. */
function plainQuery(f: SqlFilter, add: Add, now: number): string {
  const where = eventConditions(f, add, 'events', now);
  return `SELECT id, created_at, raw FROM events WHERE ${where.join(' AND ')} ORDER BY created_at DESC, id LIMIT ${add(f.limit)}`;
}

/**
 * NIP-50 ranks the newest this many matches of a search filter (or its limit, if larger). Ranking
 * every match before the limit reads every matching row: a word in a third of 10,000,000 events
 * took over 4 s and hit the statement timeout, against ~4 ms for its newest 2,000
 * (docs/benchmarks.md). So a search is "the most relevant of the newest 2,000 matches"; a word rarer
 * than that is ranked over all its matches.
 */
export const SEARCH_RANK_WINDOW = 2000;

/**
 * NIP-50: the newest SEARCH_RANK_WINDOW matches, found by the same routes as any filter (the search
 * condition in every branch; a selective word through the GIN index events_search), then ranked by
 * ts_rank, ties newest first, and cut at `limit` after ranking. Rows carry `rank`.
 */
function searchQuery(f: SqlFilter, params: Params, now: number, expired: string, counts: Map<TagCondition, number>): string {
  const candidates = filterQuery({ ...f, limit: Math.max(f.limit, SEARCH_RANK_WINDOW) }, params, now, expired, counts, false);
  const query = params.add(f.search!.compiled!.tsquery);
  return `SELECT c.id, c.created_at, c.raw, ts_rank(s.search, ${query}::tsquery) AS rank
    FROM (${candidates}) c JOIN events s ON s.id = c.id
    ORDER BY rank DESC, c.created_at DESC, c.id LIMIT ${params.add(f.limit)}`;
}

const isTagLed = (f: SqlFilter) => !f.ids && f.tags.length > 0;

/** Whether a REQ's rows are ordered by relevance: one of its filters searches (NIP-50). */
const isRanked = (filters: Filter[]) => filters.some((f) => f.search);

/** `ranked`: a search filter ranks its matches (searchQuery); false for the candidates themselves. */
function filterQuery(f: SqlFilter, params: Params, now: number, expired: string, counts: Map<TagCondition, number>, ranked = true): string {
  if (f.search && ranked) return searchQuery(f, params, now, expired, counts);
  if (f.ids) return plainQuery(f, params.add, now);
  if (isTagLed(f)) return tagLedQuery(f, params, now, expired, counts);
  if (f.authors) return authorLedQuery(f, params, now);
  if (f.kinds) return kindLedQuery(f, params, now);
  return plainQuery(f, params.add, now);
}

/** The filters that need a stored query: limit 0 means live only, and some filters can match nothing. */
export function storedQueryFilters(filters: Filter[]): Filter[] {
  return filters.filter((f) => f.limit > 0 && !matchesNothing(f) && sqlFilters(f).length > 0);
}

/**
 * One filter's rows: its plain filters (see sqlFilters), each cut at the filter's limit, merged and
 * cut again, so a filter narrowed by a read rule still returns at most `limit` events.
 */
function filterGroupQuery(f: Filter, params: Params, now: number, expired: string, counts: Map<TagCondition, number>, ranked: boolean): string {
  // In a ranked REQ every part carries `rank` (0 for a filter without search).
  const parts = sqlFilters(f).map((sf) => {
    const q = filterQuery(sf, params, now, expired, counts);
    return ranked && !sf.search ? `SELECT id, created_at, raw, 0::real AS rank FROM (${q}) p` : q;
  });
  if (parts.length === 1) return parts[0];
  if (ranked) return rankedUnion(parts, params.add(f.limit));
  return `SELECT DISTINCT ON (created_at, id) id, created_at, raw FROM (${parts.map((p) => `(${p})`).join(' UNION ALL ')}) g
    ORDER BY created_at DESC, id LIMIT ${params.add(f.limit)}`;
}

/** Ranked parts merged: each event once, with its best rank; by rank, then newest first. */
function rankedUnion(parts: string[], limit?: string): string {
  return `SELECT id, created_at, raw, rank FROM (
      SELECT DISTINCT ON (id) id, created_at, raw, rank FROM (${parts.map((p) => `(${p})`).join(' UNION ALL ')}) u ORDER BY id, rank DESC) d
    ORDER BY rank DESC, created_at DESC, id${limit ? ` LIMIT ${limit}` : ''}`;
}

/**
 * The prelude a REQ needs, or undefined when it has no tag-led filter. Expired events not yet swept
 * are few (the sweep deletes them every EXPIRY_SWEEP_SECONDS); tag-led branches exclude them by id,
 * which keeps each branch an index-only scan. Row: expired (bytea[]), counts (int[] in `counted` order).
 */
export function preludeSql(filters: Filter[], now: number): (SqlQuery & { counted: TagCondition[] }) | undefined {
  const tagLed = storedQueryFilters(filters).flatMap(sqlFilters).filter(isTagLed);
  if (tagLed.length === 0) return undefined;
  const { values, add } = parameters();
  const expired = `ARRAY(SELECT id FROM events WHERE expires_at IS NOT NULL AND expires_at <= ${add(now)})`;
  const counted = tagLed.flatMap((f) => (f.tags.length > 1 ? f.tags : []));
  const counts = counted.map(
    (t) => `(SELECT count(*) FROM (SELECT 1 FROM event_tags WHERE name = ${add(t.name)} AND value = ANY(${add(t.values, '::text[]')}) LIMIT ${TAG_COUNT_CAP}) c)`,
  );
  return { text: `SELECT ${expired} AS expired, ARRAY[${counts.join(', ')}]::int[] AS counts`, values, counted };
}

/** Reads the prelude (see preludeSql) through `query`. */
export async function readPrelude(
  filters: Filter[],
  now: number,
  query: (sql: SqlQuery) => Promise<{ expired: Buffer[]; counts: number[] }>,
): Promise<Prelude> {
  const sql = preludeSql(filters, now);
  if (!sql) return noPrelude;
  const row = await query(sql);
  return { expiredIds: row.expired, tagCounts: new Map(sql.counted.map((t, i) => [t, row.counts[i]])) };
}

/**
 * One SQL statement for a whole REQ: each filter with its own limit, the union deduplicated and
 * ordered newest first, ties by lowest id; when a filter searches (NIP-50), by relevance first. Returns undefined when no filter can match anything.
 * Rows: id (bytea), raw (text).
 */
export function reqToSql(filters: Filter[], now: number, prelude: Prelude = noPrelude): SqlQuery | undefined {
  const wanted = storedQueryFilters(filters);
  if (wanted.length === 0) return undefined;
  const params = parameters();
  const expired = wanted.flatMap(sqlFilters).some(isTagLed) ? params.add(prelude.expiredIds, '::bytea[]') : '';
  const ranked = isRanked(wanted);
  const parts = wanted.map((f) => filterGroupQuery(f, params, now, expired, prelude.tagCounts, ranked));
  const text =
    parts.length === 1
      ? parts[0]
      : ranked
        ? rankedUnion(parts)
        : `SELECT DISTINCT ON (created_at, id) id, created_at, raw FROM (${parts.map((p) => `(${p})`).join(' UNION ALL ')}) u ORDER BY created_at DESC, id`;
  return { text, values: params.values, reusePlan: params.state.reusePlan };
}

/**
 * One count for the union of the filters. With `hllOffset` (NIP-45, nostr/hll.ts) also the
 * HyperLogLog registers of the matching events' pubkeys, in the same scan: for each distinct pubkey,
 * register = its byte at the offset, value = 1 + the leading zero bits of the 7 bytes after it (at
 * most 57, as the reference scans 7 bytes); the maximum per register. No row leaves PostgreSQL.
 */
export function countToSql(filters: Filter[], now: number, hllOffset?: number): SqlQuery | undefined {
  const matching = filters.filter((f) => !matchesNothing(f)).flatMap(sqlFilters);
  if (matching.length === 0) return undefined;
  const { values, add } = parameters();
  const parts = matching.map((f) => `SELECT e.id, e.pubkey FROM events e WHERE ${eventConditions(f, add, 'e', now).join(' AND ')}`);
  const union = parts.join(' UNION ');
  if (hllOffset === undefined) return { text: `SELECT count(*)::bigint AS count FROM (${union}) u`, values };
  const offset = add(hllOffset);
  return {
    text: `WITH m AS MATERIALIZED (${union}),
      r AS (SELECT get_byte(pubkey, ${offset}::int) AS register,
                   position('1' IN (('x' || encode(substring(pubkey FROM ${offset}::int + 2 FOR 7), 'hex'))::bit(56))::text) AS first_one
              FROM (SELECT DISTINCT pubkey FROM m) p)
      SELECT (SELECT count(*) FROM m)::bigint AS count,
             (SELECT coalesce(json_agg(json_build_array(register, v)), '[]') FROM
                (SELECT register, max(CASE first_one WHEN 0 THEN 57 ELSE first_one END) AS v FROM r GROUP BY register) g) AS hll`,
    values,
  };
}

/**
 * NIP-77: the (created_at, id) records of the events a filter matches, the newest `limit` (the
 * filter's, at most `max` + 1, so the caller sees when there are too many), aggregated into two
 * byte strings in negentropy order (created_at, then id bytewise): `times`, 8 bytes big-endian per
 * record, and `ids`, 32 bytes per record. One row; no row object per event reaches Node.
 */
export function negentropyRecordsSql(f: Filter, now: number, max: number): SqlQuery | undefined {
  if (matchesNothing(f)) return undefined;
  const { values, add } = parameters();
  const parts = sqlFilters(f).map((sf) => `SELECT e.created_at, e.id FROM events e WHERE ${eventConditions(sf, add, 'e', now).join(' AND ')}`);
  return {
    text: `SELECT count(*)::int AS n,
        coalesce(string_agg(int8send(created_at), ''::bytea ORDER BY created_at, id), ''::bytea) AS times,
        coalesce(string_agg(id, ''::bytea ORDER BY created_at, id), ''::bytea) AS ids
      FROM (SELECT created_at, id FROM (${parts.join(' UNION ')}) u ORDER BY created_at DESC, id LIMIT ${add(Math.min(f.limit, max + 1))}) r`,
    values,
  };
}
