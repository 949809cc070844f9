// One event held by the hot tier (tier.ts): what matching and serving it need, in one object.
import type { NostrEvent } from '../../nostr/event.js';
import type { MatchableEvent } from '../../nostr/filter.js';

const NO_TAGS: string[][] = Object.freeze([]) as unknown as string[][];

/**
 * A held event is its own MatchableEvent and its own `event`, so the tier keeps one object per event
 * (memory: the tier holds up to millions). Its `tags`, `content` and `sig` read as empty: the
 * compiled matcher (nostr/filter.ts) reads only id, pubkey, kind, created_at and `tagKeys`, search
 * filters are never answered from memory, and `raw` is what a REQ serves.
 */
export class HeldEvent implements NostrEvent, MatchableEvent {
  /** False once removed, replaced or evicted: the index lists skip it until they drop it. */
  alive = true;

  constructor(
    readonly id: string,
    readonly pubkey: string,
    readonly created_at: number,
    readonly kind: number,
    /** The canonical JSON, served as is. */
    readonly raw: string,
    /** name + value of each indexed tag, as toMatchable builds them (nostr/filter.ts). */
    readonly tagKeys: Set<string>,
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
