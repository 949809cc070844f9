// An event as the store handles it: everything writing needs, derived once, and the outcome of a
// write. Shared by the writer (write.ts), its pure planner (plan-batch.ts) and the bulk import path.
import type { NostrEvent, Verdict } from '../nostr/event.js';
import { canonicalEventJson } from '../nostr/event.js';
import { kindClass, type KindClass } from '../nostr/kinds.js';
import { searchDocument, tsvectorBinary, type SearchDocument } from '../nostr/search.js';
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
  /**
   * NIP-50: its words, stored in events.search; undefined for kinds that are not searchable, and
   * when only `searchBinary` was computed (the live matcher finds the words if a search asks).
   */
  search: SearchDocument | undefined;
  /** Its words as the binary tsvector stored (null: none), when the verifier computed it instead of `search`. */
  searchBinary?: Uint8Array | null;
}

export function prepareEvent(event: NostrEvent): PreparedEvent {
  return prepared(event, canonicalEventJson(event), searchDocument(event));
}

/**
 * prepareEvent with the verifier's serialisations of the event (nostr/verifier.ts), when it made
 * them, instead of making them again here on the main thread.
 */
export function prepareVerified(event: NostrEvent, verdict: Verdict | undefined): PreparedEvent {
  if (verdict?.raw === undefined || verdict.search === undefined) return prepareEvent(event);
  const p = prepared(event, verdict.raw, undefined);
  p.searchBinary = verdict.search;
  return p;
}

/** The binary tsvector events.search gets, or null. */
export function storedSearch(p: PreparedEvent): Uint8Array | null {
  if (p.searchBinary !== undefined) return p.searchBinary;
  return p.search ? tsvectorBinary(p.search) : null;
}

/** Whether the event has words to index. */
export const hasWords = (p: PreparedEvent): boolean => (p.searchBinary !== undefined ? p.searchBinary !== null : p.search !== undefined);

/**
 * The words for the live matcher (nostr/filter.ts MatchableEvent.searchDocument): null when there
 * are none, undefined when not computed yet (the matcher computes them only for a search filter).
 */
export const matchableWords = (p: PreparedEvent): SearchDocument | null | undefined =>
  p.search ?? (p.searchBinary === null || p.searchBinary === undefined ? null : undefined);

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
