// NIP-62 requests to vanish (kind 62, protocol.md §9): the shape the request must have, and whether it
// is addressed to this relay. What a request does to stored events is the write planner's
// (store/plan-batch.ts), so the relay and the importers apply it alike.
import type { NostrEvent } from '../nostr/event.js';
import { KIND_VANISH } from '../nostr/kinds.js';
import * as reason from '../nostr/reason.js';
import { relayIdentity } from './auth.js';
import type { WriteRule } from './session.js';

export const ALL_RELAYS = 'ALL_RELAYS';

/** NIP-62: a request MUST name at least one relay (`ALL_RELAYS` for every relay). */
export const vanishWithoutRelay: WriteRule = function vanishWithoutRelay(event) {
  if (event.kind !== KIND_VANISH) return undefined;
  return event.tags.some((t) => t[0] === 'relay' && typeof t[1] === 'string' && t[1] !== '')
    ? undefined
    : reason.invalid('a request to vanish (kind 62) must name a relay, or ALL_RELAYS');
};

/**
 * Is this kind 62 addressed to this relay? `ALL_RELAYS`, or a relay tag naming `relay` (its RELAY_URL
 * as relayIdentity gives it). A relay with no RELAY_URL knows no name of its own: only ALL_RELAYS.
 */
export function vanishNamesRelay(event: Pick<NostrEvent, 'kind' | 'tags'>, relay: string | undefined): boolean {
  if (event.kind !== KIND_VANISH) return false;
  return event.tags.some((t) => t[0] === 'relay' && (t[1] === ALL_RELAYS || (relay !== undefined && relayIdentity(t[1]) === relay)));
}
