// Live subscriptions, indexed so a new event is matched only against candidate filters: each filter
// is filed under one selective key family (ids, else authors, else one tag letter, else kinds), and
// an event looks up just the keys it carries. Filters with none of these are checked for every event.
//
// A subscription is filed only when an event is next matched, or once PENDING_FILE_AT of them wait
// (see SubscriptionIndex.add): most REQs are closed right after EOSE (a profile, a thread, a feed
// page), and one that closes before any event arrives is never filed at all.
import { compileFilterLazily, conditionKeys, matchesNothing, type Filter, type Matcher, type MatchableEvent } from '../nostr/filter.js';

/** Where the index keeps a subscriber's placements: on the subscriber (see SubscriptionIndex.add). */
const FILED: unique symbol = Symbol('filed placements');

/** What the index needs from a subscription: a target for matching events. */
export interface Subscriber {
  deliver(id: string, raw: string): void;
  /** Set and cleared by the index only. */
  [FILED]?: Filing;
}

/** A subscriber's filters as the index holds them: filed, or waiting at `slot` in the pending list. */
interface Filing {
  placements: Placement[];
  /** Its index in SubscriptionIndex.pending, or FILED_NOW once its placements are in the maps. */
  slot: number;
}

const FILED_NOW = -1;

/** The pending list is compacted once it is this much longer than twice the subscribers in it. */
const PENDING_SLACK = 1024;

/**
 * Subscribers waiting to be filed are filed once there are this many, without waiting for an event:
 * after a quiet spell, the first event would otherwise file every subscription opened meanwhile in
 * one go (10,000 connections holding 65,000 live subscriptions: ~400 ms of the main thread, every
 * EVENT's OK and delivery waiting behind it). 1,024 take a few milliseconds; REQs closed after EOSE
 * leave the list before it gets there.
 */
export const PENDING_FILE_AT = 1024;

interface Entry {
  subscriber: Subscriber;
  matches: Matcher;
}

/** A key no subscription is filed under any more (see Keyed). */
const VACANT = null;

/**
 * Vacant keys are dropped once there are this many and they are over half the keys: an index that
 * has seen every author of a large relay stays within a few megabytes.
 */
const COMPACT_VACANT_MIN = 16_384;

/**
 * Entries by key. A key most often has one entry (one subscription's author or tag value): it maps
 * to the entry itself, and to a Set once several share it, so filing a 500-author REQ makes no Set
 * per author.
 *
 * A key no longer filed under is left in the map as vacant, and a Set is kept once made, rather than
 * deleted: deletes made V8 rebuild the map's table every few thousand of them, and a discarded table
 * (or a Set dropped back to one entry) that had lived long enough to reach the old generation kept
 * every young entry it still pointed at alive through the next minor GCs. Each REQ's filters and
 * author strings then reached the old generation too: ~48 KB per 500-author REQ, minor GCs of ~20 ms
 * every ~130 ms under load (measured with --trace-gc-nvp; docs/benchmarks.md). Now the map's key
 * and Set are reused when another REQ files under the same key, and an emptied slot holds nothing.
 */
class Keyed<K> {
  private readonly slots = new Map<K, Entry | Set<Entry> | typeof VACANT>();
  /** Keys with no entry: VACANT, or an empty Set. */
  private vacant = 0;

  add(key: K, entry: Entry): void {
    const slot = this.slots.get(key);
    if (slot === undefined) {
      this.slots.set(key, entry);
    } else if (slot === VACANT) {
      this.slots.set(key, entry);
      this.vacant--;
    } else if (slot instanceof Set) {
      if (slot.size === 0) this.vacant--;
      slot.add(entry);
    } else if (slot !== entry) {
      this.slots.set(key, new Set([slot, entry]));
    }
  }

  delete(key: K, entry: Entry): void {
    const slot = this.slots.get(key);
    if (slot === entry) {
      this.slots.set(key, VACANT);
      this.vacated();
    } else if (slot instanceof Set && slot.delete(entry) && slot.size === 0) {
      this.vacated();
    }
  }

  visit(key: K, fn: (entry: Entry) => void): void {
    const slot = this.slots.get(key);
    if (slot === undefined || slot === VACANT) return;
    if (slot instanceof Set) slot.forEach(fn);
    else fn(slot);
  }

  /** Keys in the map, vacant ones included (for tests). */
  get keys(): number {
    return this.slots.size;
  }

  private vacated(): void {
    if (++this.vacant < COMPACT_VACANT_MIN || 2 * this.vacant <= this.slots.size) return;
    for (const [key, slot] of this.slots) if (slot === VACANT || (slot instanceof Set && slot.size === 0)) this.slots.delete(key);
    this.vacant = 0;
  }
}

/** Where a filter is filed: one key family and its keys (the filter's own lists where it can). */
type Placement =
  | { entry: Entry; family: 'ids' | 'authors' | 'tags'; keys: readonly string[] }
  | { entry: Entry; family: 'kinds'; keys: readonly number[] }
  | { entry: Entry; family: 'unkeyed' };

/** The key family a filter is filed under: ids, else authors, else its shortest tag list, else kinds. */
function placementOf(f: Filter, entry: Entry): Placement {
  if (f.ids) return { entry, family: 'ids', keys: f.ids };
  if (f.authors) return { entry, family: 'authors', keys: f.authors };
  if (f.tags.length) {
    let tag = f.tags[0]!;
    for (const t of f.tags) if (t.values.length < tag.values.length) tag = t;
    return { entry, family: 'tags', keys: conditionKeys(tag) };
  }
  if (f.kinds) return { entry, family: 'kinds', keys: f.kinds };
  return { entry, family: 'unkeyed' };
}

/** Adds or deletes the entry under each key (one family looked up once, one method per loop). */
function fileAll<K>(keyed: Keyed<K>, keys: readonly K[], entry: Entry, op: 'add' | 'delete'): void {
  if (op === 'add') for (const key of keys) keyed.add(key, entry);
  else for (const key of keys) keyed.delete(key, entry);
}

export class SubscriptionIndex {
  private readonly ids = new Keyed<string>();
  private readonly authors = new Keyed<string>();
  /** By tag name + value, the MatchableEvent tagKeys form. */
  private readonly tags = new Keyed<string>();
  private readonly kinds = new Keyed<number>();
  private readonly unkeyed = new Set<Entry>();
  private count = 0;
  /**
   * Subscribers added since the last event was matched, not filed yet; a removed one leaves an empty
   * slot (nothing in the list outlives its subscription, see Keyed on why that matters).
   */
  private readonly pending: Array<Subscriber | undefined> = [];
  private pendingCount = 0;

  /**
   * Takes the subscriber's filters; they are filed under their keys when the next event is matched
   * (matching() files every pending subscriber first), so a subscription removed before any event
   * arrives costs no filing nor unfiling: 500 map updates each way for a 500-author feed, ~18 % of
   * the relay's main thread under the query load (docs/benchmarks.md). Nothing is missed: a
   * subscriber is in the maps before any event added after it is matched.
   */
  add(subscriber: Subscriber, filters: Filter[]): void {
    this.remove(subscriber);
    const placements: Placement[] = [];
    for (const f of filters) if (!matchesNothing(f)) placements.push(placementOf(f, { subscriber, matches: compileFilterLazily(f) }));
    // On the subscriber, not in a Map by subscriber: a Map with one set and one delete per REQ is
    // rebuilt every few hundred, with the same old-generation effect as Keyed's deletes (see there).
    subscriber[FILED] = { placements, slot: this.pending.length };
    this.pending.push(subscriber);
    this.pendingCount++;
    this.count++;
    if (this.pendingCount >= PENDING_FILE_AT) this.fileAllPending();
  }

  remove(subscriber: Subscriber): void {
    const filing = subscriber[FILED];
    if (!filing) return;
    if (filing.slot === FILED_NOW) {
      for (const placement of filing.placements) this.apply(placement, 'delete');
    } else {
      this.pending[filing.slot] = undefined;
      this.pendingCount--;
      this.compactPending();
    }
    subscriber[FILED] = undefined;
    this.count--;
  }

  /** Every subscriber with at least one filter matching the event, each once. */
  matching(m: MatchableEvent): Set<Subscriber> {
    if (this.pendingCount > 0) this.fileAllPending();
    const found = new Set<Subscriber>();
    const consider = (entry: Entry) => {
      if (!found.has(entry.subscriber) && entry.matches(m)) found.add(entry.subscriber);
    };
    this.ids.visit(m.event.id, consider);
    this.authors.visit(m.event.pubkey, consider);
    this.kinds.visit(m.event.kind, consider);
    for (const tagKey of m.tagKeys) this.tags.visit(tagKey, consider);
    this.unkeyed.forEach(consider);
    return found;
  }

  /** Subscribers held, filed or pending. */
  get size(): number {
    return this.count;
  }

  /** Keys held by the author index, vacant ones included (tests: vacant keys are dropped in time). */
  get authorKeys(): number {
    return this.authors.keys;
  }

  /** Slots of the pending list, empty ones included (tests: it stays bounded). */
  get pendingSlots(): number {
    return this.pending.length;
  }

  /** Subscribers not filed yet (tests). */
  get pendingSubscribers(): number {
    return this.pendingCount;
  }

  private fileAllPending(): void {
    for (const subscriber of this.pending) {
      if (subscriber === undefined) continue;
      const filing = subscriber[FILED]!;
      for (const placement of filing.placements) this.apply(placement, 'add');
      filing.slot = FILED_NOW;
    }
    this.pending.length = 0;
    this.pendingCount = 0;
  }

  /** Empty slots are dropped once they far outnumber the pending subscribers (in place: no new array). */
  private compactPending(): void {
    const { pending } = this;
    if (this.pendingCount === 0) {
      pending.length = 0;
      return;
    }
    if (pending.length < 2 * this.pendingCount + PENDING_SLACK) return;
    let to = 0;
    for (let from = 0; from < pending.length; from++) {
      const subscriber = pending[from];
      if (subscriber === undefined) continue;
      subscriber[FILED]!.slot = to;
      pending[to++] = subscriber;
    }
    pending.length = to;
  }

  private apply(p: Placement, op: 'add' | 'delete'): void {
    if (p.family === 'unkeyed') {
      if (op === 'add') this.unkeyed.add(p.entry);
      else this.unkeyed.delete(p.entry);
    } else if (p.family === 'kinds') {
      fileAll(this.kinds, p.keys, p.entry, op);
    } else {
      fileAll(this[p.family], p.keys, p.entry, op);
    }
  }
}
