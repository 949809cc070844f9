// What the relay accepts, beyond a well-formed, correctly signed event (protocol.md 1.10).
// Each rule returns a NIP-01 prefixed reason, or undefined to let the event through.
import type { NostrEvent } from '../nostr/event.js';
import { powDifficulty } from '../nostr/event.js';
import { KIND_AUTH } from '../nostr/kinds.js';
import { expirationOf, isIndexableTagValue, isProtected, dTagOf } from '../nostr/tags.js';
import { isAddressable } from '../nostr/kinds.js';
import type { Limits } from './limits.js';

function codePointsOver(s: string, max: number): boolean {
  if (s.length <= max) return false; // code points <= UTF-16 units
  let n = 0;
  for (const _ of s) if (++n > max) return true;
  return false;
}

export function checkEventPolicy(e: NostrEvent, limits: Limits, now: number): string | undefined {
  if (e.kind === KIND_AUTH) return 'invalid: kind 22242 is for AUTH messages and is never stored or broadcast';
  if (e.tags.length > limits.maxEventTags) return `invalid: more than ${limits.maxEventTags} tags`;
  if (codePointsOver(e.content, limits.maxContentLength)) return `invalid: content longer than ${limits.maxContentLength} characters`;
  if (e.created_at > now + limits.createdAtFutureSeconds)
    return `invalid: created_at is more than ${limits.createdAtFutureSeconds} seconds in the future`;
  if (limits.createdAtPastSeconds > 0 && e.created_at < now - limits.createdAtPastSeconds)
    return `invalid: created_at is more than ${limits.createdAtPastSeconds} seconds in the past`;
  if (limits.minPowDifficulty > 0) {
    const difficulty = powDifficulty(e.id);
    if (difficulty < limits.minPowDifficulty) return `pow: difficulty ${difficulty} is less than ${limits.minPowDifficulty}`;
  }
  // NIP-70: without NIP-42 authentication nobody can prove authorship, so protected events are refused.
  if (isProtected(e.tags)) return 'blocked: protected events (NIP-70) are not accepted by this relay';
  const expiration = expirationOf(e.tags);
  if (expiration !== undefined && expiration <= now) return 'invalid: event expired';
  // The d value is part of the unique replacement key, so it must fit the index.
  if (isAddressable(e.kind) && !isIndexableTagValue(dTagOf(e.tags))) return 'invalid: d tag value is too long or contains NUL';
  return undefined;
}
