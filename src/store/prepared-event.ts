// An event as the store handles it: everything writing needs, derived once, and the outcome of a
// write. Shared by the writer (write.ts), its pure planner (plan-batch.ts) and the bulk import path.
import type { NostrEvent } from '../nostr/event.js';
import { canonicalEventJson } from '../nostr/event.js';
import { kindClass, type KindClass } from '../nostr/kinds.js';
import { searchDocument, type SearchDocument } from '../nostr/search.js';
import { dTagOf, expirationOf, indexedTags } from '../nostr/tags.js';

/** An event with everything storage needs derived once. */
export interface PreparedEvent {
  event: NostrEvent;
  raw: string;
  kindClass: KindClass;
  /** '' for replaceable, the d value for addressable, null otherwise: the replacement key. */
  dTag: string | null;
  expiresAt: number | null;
  tags: Array<[string, string]>;
  /** NIP-50: its words, stored in events.search; undefined for kinds that are not searchable. */
  search: SearchDocument | undefined;
}

export function prepareEvent(event: NostrEvent): PreparedEvent {
  return prepared(event, canonicalEventJson(event), searchDocument(event));
}

/**
 * A row read back from the events table: `raw` is its stored JSON, kept as it is (never serialised
 * again); its search words only when `withSearch` (the hot tier never searches, and skips them).
 */
export function prepareStored(raw: string, withSearch = true): PreparedEvent {
  const event = JSON.parse(raw) as NostrEvent;
  return prepared(event, raw, withSearch ? searchDocument(event) : undefined);
}

function prepared(event: NostrEvent, raw: string, search: SearchDocument | undefined): PreparedEvent {
  const cls = kindClass(event.kind);
  return {
    event,
    raw,
    kindClass: cls,
    dTag: cls === 'replaceable' ? '' : cls === 'addressable' ? dTagOf(event.tags) : null,
    expiresAt: expirationOf(event.tags) ?? null,
    tags: indexedTags(event.tags),
    search,
  };
}

export type WriteResult =
  | { status: 'stored' }
  | { status: 'duplicate' }
  | { status: 'rejected'; reason: string };
