// The hot tier's tag lists, by tag name + value (the MatchableEvent tagKeys form). Most values are
// seen on one held event only (the `e` of a reply, a zapped note): such a value maps to the event
// itself, not to a list, which saves about 110 bytes per value; a second event makes it a list.
import type { HeldEvent } from './held-event.js';
import { SortedList } from './sorted-list.js';

/** What a tag value maps to: its list, or the one event that has it. */
export type TagEntry = SortedList | HeldEvent;

export const entrySize = (entry: TagEntry): number => (entry instanceof SortedList ? entry.size : 1);

export class TagIndex {
  private readonly entries = new Map<string, TagEntry>();

  /**
   * Files `e` under this tag (`oldest`: the fill's way in, SortedList.addOldest) and returns the key
   * string the event should hold: the list's own when the value has a list, so that all its events
   * share one string. Built by join, which gives a flat string (name + value would keep a 32-byte
   * cons cell in front of it). One lookup per tag: the fill makes millions.
   */
  put(name: string, value: string, e: HeldEvent, oldest: boolean): string {
    const key = [name, value].join('');
    const entry = this.entries.get(key);
    if (entry === undefined) {
      this.entries.set(key, e);
      return key;
    }
    let list: SortedList;
    if (entry instanceof SortedList) list = entry;
    else this.entries.set(key, (list = new SortedList(key, entry)));
    if (oldest) list.addOldest(e);
    else list.add(e);
    return list.key;
  }

  get(key: string): TagEntry | undefined {
    return this.entries.get(key);
  }

  /** To be called once the event is dead (alive = false). */
  remove(key: string, e: HeldEvent): void {
    const entry = this.entries.get(key);
    if (entry === e) {
      this.entries.delete(key);
    } else if (entry instanceof SortedList) {
      entry.dead++;
      entry.tidy();
      if (entry.size === 0) this.entries.delete(key);
    }
  }
}
