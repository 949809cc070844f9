// The hot tier's tag lists, by tag name, then value. Most values are seen on one held event only
// (the `e` of a reply, a zapped note): such a value maps to the event itself, not to a list, which
// saves about 110 bytes per value; a second event makes it a list. Keyed by the value itself (no
// name + value string per tag): the fill files millions without building a key for each, and a
// filter's values, hashed once when it was parsed, are looked up as they are.
import type { HeldEvent } from './held-event.js';
import { SortedList } from './sorted-list.js';

/** What a tag value maps to: its list, or the one event that has it. */
export type TagEntry = SortedList | HeldEvent;

export const entrySize = (entry: TagEntry): number => (entry instanceof SortedList ? entry.size : 1);

export class TagIndex {
  /** By tag name (one letter), then value. */
  private readonly names = new Map<string, Map<string, TagEntry>>();

  /**
   * Files `e` under this tag (`oldest`: the fill's way in, SortedList.addOldest) and returns the
   * value string the event should hold: the list's own when the value has a list, so that all its
   * events share one string.
   */
  put(name: string, value: string, e: HeldEvent, oldest: boolean): string {
    let values = this.names.get(name);
    if (values === undefined) this.names.set(name, (values = new Map()));
    const entry = values.get(value);
    if (entry === undefined) {
      values.set(value, e);
      return value;
    }
    let list: SortedList;
    if (entry instanceof SortedList) list = entry;
    else values.set(value, (list = new SortedList(tagValueOf(entry, name, value), entry)));
    if (oldest) list.addOldest(e);
    else list.add(e);
    return list.key;
  }

  /**
   * A snapshot's value (HotTier.restore): the events that have it, in list order (oldest first), with
   * their created_at and kinds (SortedList.metas), as its entry; nothing filed under it yet.
   */
  restore(name: string, value: string, events: HeldEvent[], metas: number[]): void {
    let values = this.names.get(name);
    if (values === undefined) this.names.set(name, (values = new Map()));
    values.set(value, events.length === 1 ? events[0]! : SortedList.of(value, events, metas));
  }

  get(name: string, value: string): TagEntry | undefined {
    return this.names.get(name)?.get(value);
  }

  /** To be called once the event is dead (alive = false). */
  remove(name: string, value: string, e: HeldEvent): void {
    const values = this.names.get(name);
    const entry = values?.get(value);
    if (entry === e) {
      values!.delete(value);
    } else if (entry instanceof SortedList) {
      entry.dead++;
      entry.tidy();
      if (entry.size === 0) values!.delete(value);
    }
  }
}

/** The value string `e` holds for this tag (the index's key for it): the new list shares it. */
function tagValueOf(e: HeldEvent, name: string, value: string): string {
  const pairs = e.tagPairs;
  for (let i = 0; i < pairs.length; i += 2) if (pairs[i] === name && pairs[i + 1] === value) return pairs[i + 1]!;
  return value;
}
