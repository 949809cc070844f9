// One index list of the hot tier: held events in reverse NIP-01 result order (oldest first; on a
// created_at tie the higher id first), so reading from the end gives the result order. New events
// mostly arrive newest (appended), the fill brings older ones (prepended), eviction takes the oldest
// (the front): each is O(1) amortized. Removed events stay in place, marked dead, until the list
// drops them (at its front at once, elsewhere when they pile up).
import { newerFirst, type HeldEvent } from './held-event.js';

/** Dead entries are swept once they are this fraction of the list (and at least DEAD_MIN). */
const DEAD_FRACTION = 4; // a quarter
const DEAD_MIN = 32;
/** Unused room before `start` is given back once it is both this large and twice the entries. */
const FRONT_ROOM_MAX = 1024;

export class SortedList {
  /** Entries are items[start..]; the slots before `start` are empty (evicted, or room to prepend). */
  items: Array<HeldEvent | undefined>;
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
  }

  /** A list of these events, already in its order (oldest first), taken as they are. */
  static of(key: string, items: HeldEvent[]): SortedList {
    const list = new SortedList(key);
    list.items = items;
    return list;
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
      this.items = [e]; // exactly one slot: many lists never get a second (an author's kind 0)
      return;
    }
    if (start === end || newerFirst(e, items[end - 1]!)) {
      items.push(e);
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
    if (start > 0 && lo - start < end - lo) {
      // nearer the front, and room there: move the older part one slot down
      items.copyWithin(start - 1, start, lo);
      items[lo - 1] = e;
      this.start = start - 1;
    } else {
      items.splice(lo, 0, e);
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
      const room = Math.max(8, used);
      const grown = new Array<HeldEvent | undefined>(room + used);
      for (let i = 0; i < used; i++) grown[room + i] = this.items[i];
      this.items = grown;
      this.start = room;
    }
    this.items[--this.start] = e;
  }

  /** Index of the newest entry with created_at <= t, or start - 1 when there is none. */
  lastAtOrBefore(t: number): number {
    const { items } = this;
    let lo = this.start;
    let hi = items.length;
    if (hi === lo || items[hi - 1]!.created_at <= t) return hi - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (items[mid]!.created_at > t) hi = mid;
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
      this.start = 0;
    }
  }

  /** Keeps only the alive entries, with no room at the front. */
  private sweep(): void {
    const kept: HeldEvent[] = [];
    const { items } = this;
    for (let i = this.start; i < items.length; i++) if (items[i]!.alive) kept.push(items[i]!);
    this.items = kept;
    this.start = 0;
    this.dead = 0;
  }
}
