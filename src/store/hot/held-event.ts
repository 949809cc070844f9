// One event held by the hot tier (tier.ts): what matching and serving it need, in one object.
import type { NostrEvent } from '../../nostr/event.js';
import type { MatchableEvent, TagKeys } from '../../nostr/filter.js';

const NO_TAGS: string[][] = Object.freeze([]) as unknown as string[][];

/** Indexed tags up to this many are matched by scanning the pairs; more (a follow list's), by a Set built once. */
const SCAN_PAIRS = 32;
const tagKeySets = new WeakMap<HeldEvent, Set<string>>();

/**
 * A held event is its own MatchableEvent, its own `event` and its own `tagKeys`, so the tier keeps
 * one object per event (memory: the tier holds up to millions) and one array of its indexed tags.
 * Its `tags`, `content` and `sig` read as empty: the compiled matcher (nostr/filter.ts) reads only
 * id, pubkey, kind, created_at and `tagKeys`, search filters are never answered from memory, and
 * `raw` is what a REQ serves.
 */
export class HeldEvent implements NostrEvent, MatchableEvent, TagKeys {
  /** False once removed, replaced or evicted: the index lists skip it until they drop it. */
  alive = true;
  /**
   * False while it is held only by id and as its replaceable version, not yet in the index lists
   * (HotTier.preHold: the fill's first pass over the replaceable events).
   */
  listed = true;

  constructor(
    readonly id: string,
    readonly pubkey: string,
    readonly created_at: number,
    readonly kind: number,
    /** The canonical JSON, served as is. */
    readonly raw: string,
    /** Each indexed tag as name, value, name, value … (the value strings the tag index keys by: tag-index.ts). */
    readonly tagPairs: string[],
    /** NIP-40: gone for readers once `now` reaches it. */
    readonly expiresAt: number | null,
    /** kind:pubkey:d for an addressable event, else null: at most one held per key (a replaceable one is found by kind and pubkey). */
    readonly key: string | null,
    /** The length of `raw` in UTF-8: framing it needs no scan (relay/frames.ts), and HotTier.bytes counts it. */
    readonly rawBytes: number,
  ) {}

  get event(): NostrEvent {
    return this;
  }
  get tagKeys(): TagKeys {
    return this;
  }

  /** TagKeys: whether this event has the indexed tag `key` (name + value, the MatchableEvent form). */
  has(key: string): boolean {
    const pairs = this.tagPairs;
    if (pairs.length > 2 * SCAN_PAIRS) {
      let keys = tagKeySets.get(this);
      if (!keys) tagKeySets.set(this, (keys = new Set(this)));
      return keys.has(key);
    }
    const name = key.charCodeAt(0);
    for (let i = 0; i < pairs.length; i += 2) {
      const value = pairs[i + 1]!;
      if (pairs[i]!.charCodeAt(0) === name && value.length === key.length - 1 && key.startsWith(value, 1)) return true;
    }
    return false;
  }

  /** TagKeys: name + value of each indexed tag. */
  *[Symbol.iterator](): Iterator<string> {
    const pairs = this.tagPairs;
    for (let i = 0; i < pairs.length; i += 2) yield pairs[i]! + pairs[i + 1]!;
  }
  get tags(): string[][] {
    return NO_TAGS;
  }
  get content(): string {
    return '';
  }
  get sig(): string {
    return '';
  }
}

/** `a` comes first in NIP-01 result order: newer, or as new with the lower id. */
export function newerFirst(a: HeldEvent, b: HeldEvent): boolean {
  return a.created_at > b.created_at || (a.created_at === b.created_at && a.id < b.id);
}
