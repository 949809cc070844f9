// Live subscriptions, indexed so a new event is matched only against candidate filters: each filter
// is filed under one selective key family (ids, else authors, else one tag letter, else kinds), and
// an event looks up just the keys it carries. Filters with none of these are checked for every event.
import { compileFilter, matchesNothing, type Filter, type Matcher, type MatchableEvent } from '../nostr/filter.js';

/** What the index needs from a subscription: a target for matching events. */
export interface Subscriber {
  deliver(id: string, raw: string): void;
}

interface Entry {
  subscriber: Subscriber;
  matches: Matcher;
}

/** The index keys a filter is filed under, or undefined when it has no selective field. */
function filterKeys(f: Filter): string[] | undefined {
  if (f.ids) return f.ids.map((id) => 'i' + id);
  if (f.authors) return f.authors.map((pk) => 'a' + pk);
  if (f.tags.length) {
    const tag = [...f.tags].sort((a, b) => a.values.length - b.values.length)[0];
    return tag.values.map((v) => 't' + tag.name + v);
  }
  if (f.kinds) return f.kinds.map((k) => 'k' + k);
  return undefined;
}

/** The keys an event can be found under: the counterpart of filterKeys. */
function eventKeys(m: MatchableEvent): string[] {
  const keys = ['i' + m.event.id, 'a' + m.event.pubkey, 'k' + m.event.kind];
  for (const tagKey of m.tagKeys) keys.push('t' + tagKey);
  return keys;
}

export class SubscriptionIndex {
  private readonly byKey = new Map<string, Set<Entry>>();
  private readonly unkeyed = new Set<Entry>();
  private readonly filed = new Map<Subscriber, Array<{ entry: Entry; keys?: string[] }>>();

  add(subscriber: Subscriber, filters: Filter[]): void {
    const placements: Array<{ entry: Entry; keys?: string[] }> = [];
    for (const f of filters) {
      if (matchesNothing(f)) continue;
      const entry: Entry = { subscriber, matches: compileFilter(f) };
      const keys = filterKeys(f);
      if (keys) {
        for (const key of keys) {
          let set = this.byKey.get(key);
          if (!set) this.byKey.set(key, (set = new Set()));
          set.add(entry);
        }
      } else {
        this.unkeyed.add(entry);
      }
      placements.push({ entry, keys });
    }
    this.filed.set(subscriber, placements);
  }

  remove(subscriber: Subscriber): void {
    for (const { entry, keys } of this.filed.get(subscriber) ?? []) {
      if (!keys) {
        this.unkeyed.delete(entry);
        continue;
      }
      for (const key of keys) {
        const set = this.byKey.get(key);
        set?.delete(entry);
        if (set?.size === 0) this.byKey.delete(key);
      }
    }
    this.filed.delete(subscriber);
  }

  /** Every subscriber with at least one filter matching the event, each once. */
  matching(m: MatchableEvent): Set<Subscriber> {
    const found = new Set<Subscriber>();
    const consider = (entry: Entry) => {
      if (!found.has(entry.subscriber) && entry.matches(m)) found.add(entry.subscriber);
    };
    for (const key of eventKeys(m)) this.byKey.get(key)?.forEach(consider);
    this.unkeyed.forEach(consider);
    return found;
  }

  get size(): number {
    return this.filed.size;
  }
}
