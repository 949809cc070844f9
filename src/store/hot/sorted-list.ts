// One index list of the hot tier: held events in reverse NIP-01 result order (oldest first; on a
// created_at tie the higher id first), so reading from the end gives the result order. New events
// mostly arrive newest (appended), the fill brings older ones (prepended), eviction takes the oldest
// (the front): each is O(1) amortized. Removed events stay in place, marked dead, until the list
// drops them (at its front at once, elsewhere when they pile up).
//
// Beside each entry the list keeps its event's created_at and kind, as one number (metaOf) in an
// array of its own: a merge (merge.ts) orders the lists and passes over entries of other kinds by
// reading those, in memory laid out one after another, and reaches an event (a read not in the CPU
// cache, ~0.2–0.4 µs here) only for entries of the filter's kinds. A 150-value `#p` query for notes
// passes over ~2,100 reactions and reposts of the ~2,800 entries it reads.
import { newerFirst, type HeldEvent } from './held-event.js';

/** Kinds are below this (NIP-01: 0–65535). */
const KIND_SPAN = 65536;
/**
 * created_at at or above this (the year 6325) is not kept in an entry's number, which would lose
 * precision (the largest, AT_LIMIT × 65536 + 65535, is 2^53 - 1); the entry keeps AT_LIMIT and reads
 * created_at from its event (entryAt).
 */
const AT_LIMIT = 2 ** 37 - 1;

/** An entry's created_at and kind as one number: created_at × 65536 + kind, exact below AT_LIMIT. */
export function metaOf(at: number, kind: number): number {
  return (at < AT_LIMIT ? at : AT_LIMIT) * KIND_SPAN + kind;
}

/** The kind kept in an entry's number. */
export function kindOf(meta: number): number {
  return meta - Math.floor(meta / KIND_SPAN) * KIND_SPAN;
}

/** The created_at of entry i of a list's arrays, from its number (from its event above AT_LIMIT). */
export function entryAt(items: ReadonlyArray<HeldEvent | undefined>, metas: readonly number[], i: number): number {
  const at = Math.floor(metas[i]! / KIND_SPAN);
  return at < AT_LIMIT ? at : items[i]!.created_at;
}

/** metaOf an event. */
export const metaOfEvent = (e: HeldEvent): number => metaOf(e.created_at, e.kind);

/** Dead entries are swept once they are this fraction of the list (and at least DEAD_MIN). */
const DEAD_FRACTION = 4; // a quarter
const DEAD_MIN = 32;
/**
 * Below this many entries a list grows by one slot at a time, copied: an array's push leaves room
 * for 16 more, which in the many lists of one or two entries (an author's profile, a note's replies)
 * cost ~30 bytes per held event across the two arrays.
 */
const EXACT_BELOW = 16;
/** Unused room before `start` is given back once it is both this large and twice the entries. */
const FRONT_ROOM_MAX = 1024;

export class SortedList {
  /** Entries are items[start..]; the slots before `start` are empty (evicted, or room to prepend). */
  items: Array<HeldEvent | undefined>;
  /** Per entry (items' index), its event's created_at and kind (metaOf); in the slots before `start`, anything. */
  metas: number[];
  start = 0;
  /** Entries whose event is no longer alive. */
  dead = 0;

  /**
   * `key`: the list's key in its index, when it is a string, for held events to share rather than
   * each keep a copy (a tag list's name + value, in their tagKeys; an author's pubkey).
   */
  constructor(
    readonly key = '',
    first?: HeldEvent,
  ) {
    this.items = first ? [first] : [];
    this.metas = first ? [metaOfEvent(first)] : [];
  }

  /**
   * A list of these events, already in its order (oldest first), taken as they are; `metas`, their
   * metaOf, when the caller has them at hand (else read from the events).
   */
  static of(key: string, items: HeldEvent[], metas?: number[]): SortedList {
    const list = new SortedList(key);
    list.take(items, metas);
    return list;
  }

  /** Takes these events, already in list order (oldest first), as the list's entries (`metas`: as of()). */
  take(items: HeldEvent[], metas = items.map(metaOfEvent)): void {
    this.items = items;
    this.metas = metas;
    this.start = 0;
    this.dead = 0;
  }

  /** Appends `e`, known to be newer than every entry (a snapshot read back: its lists come in order). */
  push(e: HeldEvent, meta = metaOfEvent(e)): void {
    if (this.items.length < EXACT_BELOW) {
      this.items = appended(this.items, e);
      this.metas = appendedNumber(this.metas, meta);
      return;
    }
    this.items.push(e);
    this.metas.push(meta);
  }

  /** Alive entries. */
  get size(): number {
    return this.items.length - this.start - this.dead;
  }

  /** Places a new event (not already in the list) by its order. */
  add(e: HeldEvent): void {
    const { items, start } = this;
    const end = items.length;
    if (end === 0) {
      // exactly one slot: many lists never get a second (an author's kind 0)
      this.items = [e];
      this.metas = [metaOfEvent(e)];
      return;
    }
    if (start === end || newerFirst(e, items[end - 1]!)) {
      this.push(e);
      return;
    }
    if (newerFirst(items[start]!, e)) {
      this.prependOne(e);
      return;
    }
    // First entry newer than e (start < at < end): e goes just before it.
    let lo = start + 1;
    let hi = end - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (newerFirst(items[mid]!, e)) hi = mid;
      else lo = mid + 1;
    }
    const { metas } = this;
    if (start > 0 && lo - start < end - lo) {
      // nearer the front, and room there: move the older part one slot down
      items.copyWithin(start - 1, start, lo);
      metas.copyWithin(start - 1, start, lo);
      items[lo - 1] = e;
      metas[lo - 1] = metaOfEvent(e);
      this.start = start - 1;
    } else {
      items.splice(lo, 0, e);
      metas.splice(lo, 0, metaOfEvent(e));
    }
  }

  /** The fill's way in: e is usually older than everything in the list. */
  addOldest(e: HeldEvent): void {
    if (this.items.length === 0 || (this.start < this.items.length && !newerFirst(this.items[this.start]!, e))) this.add(e);
    else this.prependOne(e);
  }

  private prependOne(e: HeldEvent): void {
    if (this.start === 0) {
      // Make room at the front as large as the list, so a run of prepends costs O(1) each.
      const used = this.items.length;
      const room = Math.max(1, used);
      this.items = grownAtFront(this.items, room);
      this.metas = numbersGrownAtFront(this.metas, room);
      this.start = room;
    }
    const at = --this.start;
    this.items[at] = e;
    this.metas[at] = metaOfEvent(e);
  }

  /** Index of the newest entry with created_at <= t, or start - 1 when there is none. */
  lastAtOrBefore(t: number): number {
    const { items, metas } = this;
    let lo = this.start;
    let hi = items.length;
    if (hi === lo || entryAt(items, metas, hi - 1) <= t) return hi - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (entryAt(items, metas, mid) > t) hi = mid;
      else lo = mid + 1;
    }
    return lo - 1;
  }

  /**
   * To be called after an entry's event died (its `dead` already counted): drops the dead entries at
   * the front (where eviction takes events), and sweeps the list when dead ones make up too much.
   */
  tidy(): void {
    const { items } = this;
    let s = this.start;
    while (s < items.length && !items[s]!.alive) {
      items[s++] = undefined;
      this.dead--;
    }
    this.start = s;
    const used = items.length - s;
    if (this.dead >= DEAD_MIN && this.dead * DEAD_FRACTION > used) this.sweep();
    else if (s > FRONT_ROOM_MAX && s > 2 * used) {
      this.items = items.slice(s);
      this.metas = this.metas.slice(s);
      this.start = 0;
    }
  }

  /** Keeps only the alive entries, with no room at the front. */
  private sweep(): void {
    const kept: HeldEvent[] = [];
    const metas: number[] = [];
    const { items } = this;
    for (let i = this.start; i < items.length; i++) {
      if (!items[i]!.alive) continue;
      kept.push(items[i]!);
      metas.push(this.metas[i]!);
    }
    this.items = kept;
    this.metas = metas;
    this.start = 0;
    this.dead = 0;
  }
}

// The arrays of entries and of their numbers are made by functions of their own: V8 remembers, per
// place in the code that makes arrays, what kind of elements they came to hold, and makes the next
// ones ready for that. Made in one place with the entries (objects), the numbers' arrays held each
// number in an object of its own: ~90 bytes more per held event, measured.

/** `values` and then `value`, in a new array of exactly that length. */
function appended(values: Array<HeldEvent | undefined>, value: HeldEvent): Array<HeldEvent | undefined> {
  const n = values.length;
  const grown = new Array<HeldEvent | undefined>(n + 1);
  for (let i = 0; i < n; i++) grown[i] = values[i];
  grown[n] = value;
  return grown;
}

/** appended() for the numbers. */
function appendedNumber(values: number[], value: number): number[] {
  const n = values.length;
  const grown = new Array<number>(n + 1);
  for (let i = 0; i < n; i++) grown[i] = values[i]!;
  grown[n] = value;
  return grown;
}

/** `values` with `room` empty slots before them. */
function grownAtFront(values: Array<HeldEvent | undefined>, room: number): Array<HeldEvent | undefined> {
  const grown = new Array<HeldEvent | undefined>(room + values.length);
  for (let i = 0; i < values.length; i++) grown[room + i] = values[i];
  return grown;
}

/** grownAtFront() for the numbers, the room filled with 0 (so the array holds numbers only). */
function numbersGrownAtFront(values: number[], room: number): number[] {
  const grown = new Array<number>(room + values.length).fill(0, 0, room);
  for (let i = 0; i < values.length; i++) grown[room + i] = values[i]!;
  return grown;
}
