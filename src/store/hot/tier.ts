// The in-memory hot tier: the most recent stored events, indexed like the events table,
// answering a REQ filter or a COUNT from memory when the answer lies entirely inside what it holds.
// PostgreSQL stays the source of truth: the tier is fed by the fill (older pages read from the
// database), the change stream (newly stored events) and removals, and it says "undefined" whenever
// memory cannot give the exact answer. Pure: no I/O, no timers.
//
// The window: every stored event with created_at >= windowStart is held. A filter's answer is exact
// when it is complete before the walk reaches below windowStart (its `limit` is reached, or its
// `since` is at or above windowStart), when every event it names by id is held, or when it asks for
// authors' replaceable kinds and every stored replaceable version is held (replaceableComplete).
import { compileFilter, matchesNothing, type Filter, type Matcher } from '../../nostr/filter.js';
import { isReplaceable } from '../../nostr/kinds.js';
import type { PreparedEvent } from '../prepared-event.js';
import type { StoredRow } from '../read.js';
import { HeldEvent, newerFirst } from './held-event.js';
import { HexTable, IdIndex } from './hex-table.js';
import { kindTest, NewestFirst, Run, type EventTest, type KindTest } from './merge.js';
import { metaOf, SortedList } from './sorted-list.js';
import { entrySize, TagIndex } from './tag-index.js';

export interface HotTierOptions {
  /** Evict (evict()) down to this estimate of the heap the held events take. */
  budgetBytes: number;
  /** Events it will soon hold (a snapshot's), to size the id index once. */
  expectedEvents?: number;
}

/** An authors × kinds filter reads the author+kind lists up to this many pairs, else author lists. */
const MAX_AUTHOR_KIND_PAIRS = 4096;

/**
 * Estimated heap bytes of one held event, measured on Node 20 x64 (8-byte pointers): 400 for the
 * HeldEvent, its id, its table slot and its slots in the all, kind, author and author+kind lists
 * (each slot a pointer and a number, sorted-list.ts, with the room the lists keep to grow);
 * the raw JSON; with indexed tags, 70 for the array of their names and values and about 120 per
 * tag. A tag value other events have too costs ~23 bytes (a slot in its list), one only this event
 * has ~130 (its value string and Map entry), and in a real corpus most are the latter (a reply's
 * `e`, a mention's `p`): 120 errs high where values are shared. Events the fill brings keep their id
 * as a slice of raw (fill.ts). `npm run bench:hot-memory` on the 1M bench corpus (638-character
 * JSON, 2.14 tags): 1,198 bytes per event measured for 1,000,000 events, 1,371 estimated.
 */
const EVENT_BYTES = 400;
const TAG_ARRAY_BYTES = 70;
const TAG_BYTES = 120;

export function heldBytes(raw: string, tagCount: number, rawBytes = Buffer.byteLength(raw, 'utf8')): number {
  // V8 keeps a string of Latin-1 characters at one byte each, any other at two: non-ASCII is
  // counted as two.
  const charBytes = rawBytes === raw.length ? 1 : 2;
  return EVENT_BYTES + charBytes * raw.length + (tagCount > 0 ? TAG_ARRAY_BYTES + TAG_BYTES * tagCount : 0);
}

/** What holding this event added to HotTier.bytes. */
function bytesOf(e: HeldEvent): number {
  return heldBytes(e.raw, e.tagPairs.length / 2, e.rawBytes);
}

/** A flat copy of a string, sharing no memory with the one it came from (a slice keeps its whole source). */
function ownString(s: string): string {
  return Buffer.from(s, 'utf8').toString('utf8');
}

/** One array for every event without indexed tags; never added to. */
const NO_TAG_PAIRS: string[] = Object.freeze([]) as unknown as string[];

/** Where candidates are read from: an index list, or one event (a replaceable version, a tag value held on one event only). */
type Source = SortedList | HeldEvent;

/**
 * All of an author's events (keyed by the pubkey string their held events share), with their lists
 * per kind: the author index maps a pubkey straight to it, one pointer fewer to follow per author
 * of a 500-author feed (the lookups wait on memory).
 */
class AuthorList extends SortedList {
  readonly byKind = new Map<number, SortedList>();
}

/** Authors' lists by pubkey (hex-table.ts). */
class AuthorTable extends HexTable<AuthorList> {
  protected keyOf(list: AuthorList): string {
    return list.key;
  }
}

/** A snapshot read back (snapshot.ts), for HotTier.restore: the events and how they group. */
export interface TierImage {
  windowStart: number;
  replaceableComplete: boolean;
  /** Oldest first, in list order. */
  events: HeldEvent[];
  /** Per event: its kind, and its author (an index into strings). */
  kind: Uint32Array;
  /** Per event: its created_at (the lists keep it beside each entry: read from here, not from the events). */
  createdAt: Float64Array;
  author: Uint32Array;
  /** Per event: the end of its indexed tags among the pairs. */
  pairEnd: Uint32Array;
  /** Per pair: the tag name's character code, and the value (an index into strings). */
  pairName: Uint8Array;
  pairValue: Uint32Array;
  /** The strings the events share: authors' pubkeys, tag values … (each event holds these very strings). */
  strings: string[];
}

export class HotTier {
  private readonly budgetBytes: number;
  private start = Infinity;
  private heldBytesTotal = 0;
  /** Set by an eviction: the fill can no longer continue below what was evicted. */
  private evicted = false;
  /**
   * Every stored replaceable event's current version is held (the fill's first pass, preHold, then
   * the change stream), whatever the window: authors × replaceable kinds are answered exactly. Set
   * by the service once that pass is over; cleared by an eviction of a replaceable event.
   */
  replaceableComplete = false;
  /** Held by preHold and not yet in the index lists. */
  private readonly unlisted = new Set<HeldEvent>();

  private readonly byId: IdIndex;
  /** Addressable events by kind:pubkey:d: the one version held. */
  private readonly byKey = new Map<string, HeldEvent>();
  private readonly all = new SortedList();
  private readonly byAuthor = new AuthorTable();
  /**
   * Replaceable events (kind 0, 3, 10000–19999) by kind, then pubkey: the one version held. A filter
   * finds them by the pubkey strings it already has (hashed when it was parsed), with no key string
   * built per lookup.
   */
  private readonly replaceable = new Map<number, Map<string, HeldEvent>>();
  private readonly byKind = new Map<number, SortedList>();
  private readonly byTag = new TagIndex();

  constructor(options: HotTierOptions) {
    this.budgetBytes = options.budgetBytes;
    this.byId = new IdIndex(options.expectedEvents);
  }

  /**
   * Every stored event with created_at >= windowStart is held (the invariant). -Infinity: the tier
   * holds the whole store. +Infinity: nothing trusted yet (empty, before the fill).
   */
  get windowStart(): number {
    return this.start;
  }

  /** Events held. */
  get size(): number {
    return this.byId.size;
  }

  /** Estimated heap bytes of the held events and their index entries (heldBytes above). */
  get bytes(): number {
    return this.heldBytesTotal;
  }

  /** Entries of the replaceable versions index (tests: as many as replaceable events held). */
  get replaceableVersions(): number {
    let n = 0;
    for (const versions of this.replaceable.values()) n += versions.size;
    return n;
  }

  has(id: string): boolean {
    return this.byId.has(id);
  }

  /**
   * A newly stored event (the change stream). Ignored when created_at < windowStart, or when held
   * already. Replaceable and addressable: the store's choice between it and a held version of the
   * same key is kept (the higher created_at, on a tie the lower id), the other dropped; below the
   * window too, where a replaceable one is held while every version is (replaceableComplete), and
   * a held version it replaces is dropped in any case: the store deleted it in the same commit,
   * and this process's writer does not wait for the feed to read that removal.
   */
  add(p: PreparedEvent): void {
    if (p.event.created_at >= this.start || (p.kindClass === 'replaceable' && this.replaceableComplete)) return this.hold(p, false);
    if (p.dTag !== null && !this.byId.has(p.event.id)) this.replacesHeld(p, p.kindClass === 'replaceable' ? null : `${p.event.kind}:${p.event.pubkey}:${p.dTag}`);
  }

  /** Events deleted in the database (kind 5, replaced, vanished, pruned, banned …). Ids not held: no-op. */
  remove(ids: Iterable<string>): void {
    for (const id of ids) {
      const e = this.byId.get(id);
      if (e) this.drop(e);
    }
  }

  /**
   * The fill: a page of events older than (or tied with the oldest of) everything held, newest
   * first, as read from PostgreSQL by keyset (created_at DESC, id ASC); `end` when the page reached
   * the end of the table. Afterwards windowStart is -Infinity if `end`, else the last event's
   * created_at + 1 (events at that created_at may be only partly loaded: held, but below the window).
   * Throws once evict() has dropped anything: the events evicted above the page would be missing.
   */
  addOlder(page: PreparedEvent[], end: boolean): void {
    if (this.evicted) throw new Error('hot tier: the fill cannot go on after an eviction');
    for (const p of page) this.hold(p, true);
    if (end) this.start = -Infinity;
    else if (page.length > 0) this.start = Math.min(this.start, page[page.length - 1].event.created_at + 1);
  }

  // -------------------------------------------------------------------------------------------------
  // Snapshots (snapshot.ts): what a stopping relay writes, and a starting one reads back

  /**
   * The events a snapshot keeps, oldest first in list order: every held event at or above the
   * window, and, when replaceableComplete, every replaceable version below it (events the fill held
   * below the window are left out: the window says nothing of them). Undefined while the tier is not
   * in a state worth keeping (nothing trusted yet, or events held but not yet listed: a fill runs).
   */
  image(): { windowStart: number; replaceableComplete: boolean; events: HeldEvent[] } | undefined {
    if (this.start === Infinity || this.unlisted.size > 0) return undefined;
    const events: HeldEvent[] = [];
    const { items, start } = this.all;
    for (let i = start; i < items.length; i++) {
      const e = items[i]!;
      if (e.alive && (e.created_at >= this.start || (this.replaceableComplete && isReplaceable(e.kind)))) events.push(e);
    }
    return { windowStart: this.start, replaceableComplete: this.replaceableComplete, events };
  }

  /**
   * A snapshot's event read back (snapshot.ts), into a tier empty until now and reached by nothing
   * else yet: held by id, key and replaceable version, and appended to its kind's list, as it is read
   * (its strings still in the CPU cache). `bytes`: heldBytes of it. The other lists follow at once
   * for all events (restoreLists).
   */
  restoreEvent(e: HeldEvent, bytes: number): void {
    this.byId.set(e);
    if (e.key !== null) this.byKey.set(e.key, e);
    if (isReplaceable(e.kind)) {
      const versions = this.replaceable.get(e.kind);
      if (versions) versions.set(e.pubkey, e);
      else this.replaceable.set(e.kind, new Map([[e.pubkey, e]]));
    }
    this.heldBytesTotal += bytes;
    const list = this.byKind.get(e.kind);
    if (list) list.push(e);
    else this.byKind.set(e.kind, new SortedList('', e));
  }

  /**
   * The rest of a snapshot read back, once every event has been through restoreEvent: each list
   * made whole at once from the events grouped by author, kind and tag value, in their order (oldest
   * first, trusted), rather than event by event. A generator: it yields every few milliseconds of
   * work, so its caller can let the event loop turn. The window and replaceableComplete are the
   * snapshot's once it has run to its end.
   */
  *restoreLists(image: TierImage): Generator<void, void, void> {
    const { events, kind, createdAt, author, pairEnd, pairName, pairValue, strings } = image;
    const n = events.length;
    const STEP = 5000;
    const metas = new Array<number>(n);
    for (let i = 0; i < n; i++) metas[i] = metaOf(createdAt[i]!, kind[i]!);
    this.all.take(events, metas);
    yield;
    // Authors: the events grouped by author (a counting sort, stable: each group in list order).
    const byAuthor = groupBy(author, strings.length);
    for (let a = 0, done = 0; a < strings.length; a++) {
      const from = byAuthor.starts[a]!;
      const to = byAuthor.starts[a + 1]!;
      if (from === to) continue;
      const list = new AuthorList(strings[a]!);
      const items = new Array<HeldEvent>(to - from);
      const ofAuthor = new Array<number>(to - from);
      for (let j = from; j < to; j++) {
        const at = byAuthor.order[j]!;
        const e = (items[j - from] = events[at]!);
        const meta = (ofAuthor[j - from] = metas[at]!);
        const ofKind = list.byKind.get(kind[at]!);
        if (ofKind) ofKind.push(e, meta);
        else list.byKind.set(kind[at]!, SortedList.of('', [e], [meta]));
      }
      list.take(items, ofAuthor);
      this.byAuthor.set(list);
      if ((done += to - from) >= STEP) {
        done = 0;
        yield;
      }
    }
    // Tags: the pairs grouped by value, then by name (a value is nearly always under one name only).
    const pairOf = new Uint32Array(pairValue.length);
    for (let i = 0, p = 0; i < n; i++) for (const end = pairEnd[i]!; p < end; p++) pairOf[p] = i;
    const { starts, order } = groupBy(pairValue, strings.length);
    yield;
    for (let v = 0, done = 0; v < strings.length; v++) {
      const from = starts[v]!;
      const to = starts[v + 1]!;
      if (from === to) continue;
      const first = pairName[order[from]!]!;
      let names: Set<number> | undefined;
      for (let j = from + 1; j < to; j++) if (pairName[order[j]!] !== first) (names ??= new Set()).add(pairName[order[j]!]!);
      for (const name of names ? [first, ...names] : [first]) {
        // Exactly as long as the group (one name: every pair of the value), so no room is left over.
        const group = new Array<HeldEvent>(names ? 0 : to - from);
        const ofValue = new Array<number>(names ? 0 : to - from);
        let g = 0;
        for (let j = from; j < to; j++) {
          if (pairName[order[j]!] !== name) continue;
          const at = pairOf[order[j]!]!;
          group[g] = events[at]!;
          ofValue[g++] = metas[at]!;
        }
        this.byTag.restore(String.fromCharCode(name), strings[v]!, group, ofValue);
      }
      if ((done += to - from) >= STEP) {
        done = 0;
        yield;
      }
    }
    this.start = image.windowStart;
    this.replaceableComplete = image.replaceableComplete;
  }

  /**
   * The held events (alive, listed) with lo <= created_at < hi, oldest first: a snapshot's part
   * compared with the database (hot/restore.ts).
   */
  heldBetween(lo: number, hi: number): HeldEvent[] {
    const { items, start } = this.all;
    const out: HeldEvent[] = [];
    for (let i = this.all.lastAtOrBefore(lo - 1) + 1; i < items.length && i >= start; i++) {
      const e = items[i]!;
      if (e.created_at >= hi) break;
      if (e.alive) out.push(e);
    }
    return out;
  }

  /**
   * Evicts the oldest events until bytes <= budgetBytes, at most `maxEvents` in this call, so a
   * caller can spread the work over turns of the event loop. windowStart rises above each evicted
   * event's created_at: a created_at group evicted in part is held below the window, like the
   * fill's last group. Returns true when more eviction is needed.
   */
  evict(maxEvents: number): boolean {
    for (let n = 0; n < maxEvents && this.heldBytesTotal > this.budgetBytes; n++) {
      const oldest = this.oldest();
      if (!oldest) break;
      this.drop(oldest);
      if (isReplaceable(oldest.kind)) this.replaceableComplete = false;
      this.evicted = true;
      this.start = Math.max(this.start, oldest.created_at + 1);
    }
    return this.heldBytesTotal > this.budgetBytes && this.byId.size > 0;
  }

  /**
   * One REQ filter answered from memory: its newest `limit` live matches in result order, or
   * undefined when memory cannot give the exact answer (and search filters: PostgreSQL ranks them).
   */
  answer(filter: Filter, now: number): StoredRow[] | undefined {
    if (filter.limit === 0 || matchesNothing(filter)) return [];
    if (filter.search) return undefined;
    const { runs, matches, kindOk, complete } = this.candidates(filter);
    const since = filter.since ?? -Infinity;
    const trusted = complete || since >= this.start;
    const out: StoredRow[] = [];
    // Only matching events come out of the walk. One below the window (while the limit is not
    // reached) means the answer may go on in PostgreSQL only; a non-matching one cannot be in it.
    const walk = new NewestFirst(runs, liveAndMatching(matches, now), since, kindOk, filter.limit);
    for (let e = walk.next(); e !== undefined; e = walk.next()) {
      if (!trusted && e.created_at < this.start) return undefined; // the rest may be in PostgreSQL only
      out.push(e); // a StoredRow as it is (id, raw): a row object per event would only be garbage
      if (out.length >= filter.limit) return out;
    }
    return trusted ? out : undefined;
  }

  /** NIP-45 COUNT of the union of the filters (each event once, limit ignored), or undefined when not exact from memory. */
  count(filters: Filter[], now: number): number | undefined {
    const plans: Array<{ since: number; runs: Run[]; matches: Matcher; kindOk: KindTest | undefined }> = [];
    for (const filter of filters) {
      if (matchesNothing(filter)) continue;
      if (filter.search) return undefined;
      const since = filter.since ?? -Infinity;
      const { runs, matches, kindOk, complete } = this.candidates(filter);
      if (!complete && !(since >= this.start)) return undefined;
      plans.push({ since, runs, matches, kindOk });
    }
    const counted = plans.length > 1 ? new Set<HeldEvent>() : undefined;
    let n = 0;
    for (const { since, runs, matches, kindOk } of plans) {
      const walk = new NewestFirst(runs, liveAndMatching(matches, now), since, kindOk, Infinity);
      for (let e = walk.next(); e !== undefined; e = walk.next()) {
        if (counted) counted.add(e);
        else n++;
      }
    }
    return counted ? counted.size : n;
  }

  // -------------------------------------------------------------------------------------------------
  // Holding and dropping

  private hold(p: PreparedEvent, oldest: boolean): void {
    const { event } = p;
    if (p.kindClass === 'ephemeral') return;
    const existing = this.byId.get(event.id);
    if (existing) {
      if (!existing.listed) this.list(existing, oldest);
      return;
    }
    const key = p.kindClass !== 'replaceable' && p.dTag !== null ? `${event.kind}:${event.pubkey}:${p.dTag}` : null;
    if (!this.replacesHeld(p, key)) return;
    const author = this.authorOf(event.pubkey);
    const e = this.create(p, author.key, key);
    this.list(e, oldest, author);
  }

  /**
   * The store's choice between `p` and the version of its key held, if any (the higher created_at,
   * on a tie the lower id): false when the held one stays; otherwise the held one is dropped.
   * `key`: an addressable event's kind:pubkey:d (a replaceable one is found by kind and pubkey).
   */
  private replacesHeld(p: PreparedEvent, key: string | null): boolean {
    const { event } = p;
    const held = p.kindClass === 'replaceable' ? this.replaceable.get(event.kind)?.get(event.pubkey) : key !== null ? this.byKey.get(key) : undefined;
    if (!held) return true;
    if (held.created_at > event.created_at || (held.created_at === event.created_at && held.id < event.id)) return false;
    this.drop(held);
    return true;
  }

  /** The author's list, created if there is none. */
  private authorOf(pubkey: string): AuthorList {
    let author = this.byAuthor.get(pubkey);
    if (!author) {
      // The author's key outlives this event: a copy of its own, never a slice of the event's raw
      // (the fill's prepareHeld), which would keep that JSON after the event is gone.
      const key = ownString(pubkey);
      this.byAuthor.set((author = new AuthorList(key)));
    }
    return author;
  }

  /** The held event for `p`, in the id, key and replaceable-version indexes (not yet in the lists). */
  private create(p: PreparedEvent, pubkey: string, key: string | null): HeldEvent {
    const { event } = p;
    const pairs = p.tags.length === 0 ? NO_TAG_PAIRS : new Array<string>(2 * p.tags.length);
    for (let i = 0; i < p.tags.length; i++) {
      pairs[2 * i] = p.tags[i]![0];
      pairs[2 * i + 1] = p.tags[i]![1];
    }
    const e = new HeldEvent(event.id, pubkey, event.created_at, event.kind, p.raw, pairs, p.expiresAt, key, Buffer.byteLength(p.raw, 'utf8'));
    this.byId.set(e);
    if (key !== null) this.byKey.set(key, e);
    if (p.kindClass === 'replaceable') {
      const versions = this.replaceable.get(e.kind);
      if (versions) versions.set(e.pubkey, e);
      else this.replaceable.set(e.kind, new Map([[e.pubkey, e]]));
    }
    this.heldBytesTotal += bytesOf(e);
    return e;
  }

  /** Files a held event in the index lists (`oldest`: the fill's way in, SortedList.addOldest). */
  private list(e: HeldEvent, oldest: boolean, author = this.authorOf(e.pubkey)): void {
    if (!e.listed) {
      e.listed = true;
      this.unlisted.delete(e);
    }
    put(this.all, e, oldest);
    put(author, e, oldest);
    putIn(author.byKind, e.kind, e, oldest);
    putIn(this.byKind, e.kind, e, oldest);
    const pairs = e.tagPairs;
    for (let i = 0; i < pairs.length; i += 2) pairs[i + 1] = this.byTag.put(pairs[i]!, pairs[i + 1]!, e, oldest);
  }

  /**
   * The fill's first pass: a stored replaceable event (kind 0, 3, 10000–19999), held as its author's
   * version of its kind, by id, and nowhere else until the fill's newest-first pass reaches it (hold
   * then files it in the lists) or listUnlisted() does. Of two versions the store's choice is kept
   * (the higher created_at, on a tie the lower id), as hold does. Once every stored replaceable
   * event has been through here (the service sets replaceableComplete), filters of authors and
   * replaceable kinds are answered from memory whatever the window.
   */
  preHold(p: PreparedEvent): void {
    const { event } = p;
    if (p.kindClass !== 'replaceable' || this.byId.has(event.id) || !this.replacesHeld(p, null)) return;
    // The author's list is created (empty) for its key: the version shares it, as listed events do.
    const e = this.create(p, this.authorOf(event.pubkey).key, null);
    e.listed = false;
    this.unlisted.add(e);
  }

  /** Files every event preHold left unlisted in the lists, wherever they fall (the fill is over). */
  listUnlisted(): void {
    const rest = [...this.unlisted].sort((a, b) => (newerFirst(a, b) ? -1 : 1));
    for (const e of rest) this.list(e, false);
  }

  /** Drops every event preHold left unlisted (the first pass gave up: replaceableComplete stays false). */
  dropUnlisted(): void {
    for (const e of [...this.unlisted]) this.drop(e);
  }

  /** Removes an event from the tier: dead in its lists, which drop it lazily (sorted-list.ts). */
  private drop(e: HeldEvent): void {
    e.alive = false;
    this.byId.delete(e.id);
    if (e.key !== null && this.byKey.get(e.key) === e) this.byKey.delete(e.key);
    const versions = this.replaceable.get(e.kind);
    if (versions?.get(e.pubkey) === e) {
      versions.delete(e.pubkey);
      if (versions.size === 0) this.replaceable.delete(e.kind);
    }
    this.heldBytesTotal -= bytesOf(e);
    if (!e.listed) {
      this.unlisted.delete(e);
      const author = this.byAuthor.get(e.pubkey);
      if (author?.items.length === 0) this.byAuthor.delete(e.pubkey); // created for it by preHold
      return;
    }

    release(this.all);
    const author = this.byAuthor.get(e.pubkey)!;
    releaseIn(author.byKind, e.kind);
    if (release(author)) this.byAuthor.delete(e.pubkey);
    releaseIn(this.byKind, e.kind);
    const pairs = e.tagPairs;
    for (let i = 0; i < pairs.length; i += 2) this.byTag.remove(pairs[i]!, pairs[i + 1]!, e);
  }

  private oldest(): HeldEvent | undefined {
    const { items, start } = this.all;
    for (let i = start; i < items.length; i++) if (items[i]!.alive) return items[i];
    return undefined;
  }

  // -------------------------------------------------------------------------------------------------
  // Choosing the lists to read

  /**
   * The held events that may match, as runs of index lists (each read from `until` down); the
   * matcher for them, without the conditions their lists already ensure (a 150-value `#p` is not
   * checked again per event); and whether they are all the stored events that may match (ids, every
   * one held) whatever the window.
   */
  private candidates(f: Filter): { runs: Run[]; matches: Matcher; kindOk: KindTest | undefined; complete: boolean } {
    if (f.ids) {
      const found: HeldEvent[] = [];
      for (const id of f.ids) {
        const e = this.byId.get(id);
        if (e) found.push(e);
      }
      return { runs: [oneRun(found)], ...testsOf({ ...f, ids: undefined }), complete: found.length === f.ids.length };
    }
    const { sources, ensured, complete } = this.narrowestSources(f);
    const runs: Run[] = [];
    // Sources that are one event (a replaceable version, a tag value held on one event) are sorted
    // into one run: a heap entry and a run each would cost more than sorting them.
    const single: HeldEvent[] = [];
    for (const source of sources) {
      if (source instanceof SortedList) runs.push(runOf(source, f.until));
      else if (f.until === undefined || source.created_at <= f.until) single.push(source);
    }
    if (single.length > 0) runs.push(oneRun(single));
    return { runs, ...testsOf(ensured), complete };
  }

  /** The kinds are at least half of the held events. */
  private mostlyOfKinds(kinds: number[]): boolean {
    let n = 0;
    for (const kind of kinds) n += this.byKind.get(kind)?.size ?? 0;
    return 2 * n >= this.all.size;
  }

  /**
   * The family of lists with the fewest entries among the filter's authors, tags and kinds (a tag
   * value held on one event only is that event: tag-index.ts), and the filter less the conditions
   * every event in them meets.
   */
  private narrowestSources(f: Filter): { sources: Source[]; ensured: Filter; complete: boolean } {
    let best: { sources: Source[]; ensured: Filter; complete: boolean } | undefined;
    let bestSize = Infinity;
    const consider = (sources: Source[], size: number, ensured: () => Filter) => {
      if (size < bestSize) {
        best = { sources, ensured: ensured(), complete: false };
        bestSize = size;
      }
    };
    if (f.authors && f.kinds && f.kinds.every(isReplaceable)) {
      // At most one event per author and kind: the version held, if any.
      const found: HeldEvent[] = [];
      for (const kind of f.kinds) {
        const versions = this.replaceable.get(kind);
        if (!versions) continue;
        for (const pubkey of f.authors) {
          const e = versions.get(pubkey);
          if (e) found.push(e);
        }
      }
      const ensured = () => ({ ...f, authors: undefined, kinds: undefined });
      // Every stored version held: exact whatever the window, and no list can have fewer entries.
      if (this.replaceableComplete) return { sources: found, ensured: ensured(), complete: true };
      consider(found, found.length, ensured);
    } else if (f.authors) {
      const lists: SortedList[] = [];
      // Per kind, unless the kinds are at least half of what is held (a feed's notes and reposts):
      // then an author's one list, read at most ~2x as far, costs half the lookups and merge runs.
      const kinds = f.kinds && f.authors.length * f.kinds.length <= MAX_AUTHOR_KIND_PAIRS && !this.mostlyOfKinds(f.kinds) ? f.kinds : undefined;
      for (const pubkey of f.authors) {
        const author = this.byAuthor.get(pubkey);
        if (!author) continue;
        if (!kinds) {
          lists.push(author);
          continue;
        }
        for (const kind of kinds) {
          const list = author.byKind.get(kind);
          if (list) lists.push(list);
        }
      }
      consider(lists, sizeOf(lists), () => ({ ...f, authors: undefined, kinds: kinds ? undefined : f.kinds }));
    }
    for (const t of f.tags) {
      if (bestSize === 0) break;
      const entries: Source[] = [];
      for (const value of t.values) {
        const entry = this.byTag.get(t.name, value);
        if (entry) entries.push(entry);
      }
      consider(entries, sizeOf(entries), () => ({ ...f, tags: f.tags.filter((other) => other !== t) }));
    }
    if (f.kinds && bestSize > 0) {
      const lists: SortedList[] = [];
      for (const kind of f.kinds) {
        const list = this.byKind.get(kind);
        if (list) lists.push(list);
      }
      consider(lists, sizeOf(lists), () => ({ ...f, kinds: undefined }));
    }
    return best ?? { sources: [this.all], ensured: f, complete: false };
  }
}

/**
 * Entries alive in the sources together (an event in two of them counted twice). Summed after the
 * lookups, in a loop of its own: each size reads a list not in the CPU cache, and here those reads
 * need not wait on one another.
 */
function sizeOf(sources: Source[]): number {
  let n = 0;
  for (const source of sources) n += entrySize(source);
  return n;
}

/**
 * The merge's tests for what the lists do not ensure: the filter's kinds, checked on the lists' own
 * copies of them (merge.ts), and the rest on each event of those kinds.
 */
function testsOf(ensured: Filter): { matches: Matcher; kindOk: KindTest | undefined } {
  if (!ensured.kinds) return { matches: compileFilter(ensured), kindOk: undefined };
  return { matches: compileFilter({ ...ensured, kinds: undefined }), kindOk: kindTest(ensured.kinds) };
}

/** Not expired at `now` (NIP-40), and matching. */
function liveAndMatching(matches: Matcher, now: number): EventTest {
  return (e) => (e.expiresAt === null || e.expiresAt > now) && matches(e);
}

function put(list: SortedList, e: HeldEvent, oldest: boolean): void {
  if (oldest) list.addOldest(e);
  else list.add(e);
}

function putIn<K>(lists: Map<K, SortedList>, key: K, e: HeldEvent, oldest: boolean): void {
  const list = lists.get(key);
  if (list) put(list, e, oldest);
  else lists.set(key, new SortedList('', e));
}

/**
 * A counting sort of the positions 0..keys.length-1 by their key (each below `size`), stable:
 * the positions of key k are order[starts[k] .. starts[k+1]-1], in ascending order.
 */
function groupBy(keys: ArrayLike<number>, size: number): { starts: Uint32Array; order: Uint32Array } {
  const starts = new Uint32Array(size + 1);
  for (let i = 0; i < keys.length; i++) starts[keys[i]! + 1]!++;
  for (let k = 0; k < size; k++) starts[k + 1]! += starts[k]!;
  const next = starts.slice(0, size);
  const order = new Uint32Array(keys.length);
  for (let i = 0; i < keys.length; i++) order[next[keys[i]!]!++] = i;
  return { starts, order };
}

/** Counts a dead entry in the list; true when the list has no alive entry left. */
function release(list: SortedList): boolean {
  list.dead++;
  list.tidy();
  return list.size === 0;
}

function releaseIn<K>(lists: Map<K, SortedList>, key: K): void {
  if (release(lists.get(key)!)) lists.delete(key);
}

/** A list read newest first from `until` (inclusive) down. */
function runOf(list: SortedList, until: number | undefined): Run {
  return new Run(list.items, list.metas, until === undefined ? list.items.length - 1 : list.lastAtOrBefore(until), list.start);
}

/** Events in any order (one may come twice) as one run: sorted into list order, oldest first. */
function oneRun(events: HeldEvent[]): Run {
  events.sort((a, b) => (a === b ? 0 : newerFirst(a, b) ? 1 : -1));
  return Run.of(events);
}
