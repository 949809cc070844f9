// NIP-70 protected events (protocol.md 10): an event with a bare ["-"] tag may be published only by
// its author, authenticated (NIP-42) on the connection that sends it; and a repost must not carry one.
import type { NostrEvent } from '../nostr/event.js';
import { KIND_GENERIC_REPOST, KIND_REPOST } from '../nostr/kinds.js';
import * as reason from '../nostr/reason.js';
import { isProtected } from '../nostr/tags.js';
import type { WriteRule } from './session.js';

/**
 * An import has no connection to authenticate on: it is the operator moving events another relay
 * already accepted (an export of ours keeps protected events), so the operator vouches for them.
 */
export const protectedEvent: WriteRule = function protectedEvent(e, session) {
  if (!isProtected(e.tags) || session.origin === 'import' || session.pubkeys.has(e.pubkey)) return undefined;
  return session.pubkeys.size === 0
    ? reason.authRequired('this event is protected (NIP-70): only its author may publish it, authenticated with AUTH')
    : reason.restricted('this event is protected (NIP-70): only its author may publish it, and it is not authenticated here');
};

/** The event a kind 6 or 16 repost embeds in its content (NIP-18), if it has the shape of one. */
function embeddedEvent(e: NostrEvent): { tags?: unknown } | undefined {
  if (!e.content.startsWith('{')) return undefined;
  try {
    const inner = JSON.parse(e.content) as unknown;
    return typeof inner === 'object' && inner !== null ? (inner as { tags?: unknown }) : undefined;
  } catch {
    return undefined;
  }
}

/** NIP-70: reposts MUST NOT embed protected events; relays SHOULD refuse such a repost. */
export const repostOfProtected: WriteRule = function repostOfProtected(e) {
  if (e.kind !== KIND_REPOST && e.kind !== KIND_GENERIC_REPOST) return undefined;
  const tags = embeddedEvent(e)?.tags;
  if (!Array.isArray(tags) || !tags.some((t) => Array.isArray(t) && t.length === 1 && t[0] === '-')) return undefined;
  return reason.blocked('a repost must not embed a protected event (NIP-70)');
};
