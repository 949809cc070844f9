// NIP-70 protected events: an event with a bare ["-"] tag may be published only by its author.
import * as reason from '../nostr/reason.js';
import { isProtected } from '../nostr/tags.js';
import type { WriteRule } from './session.js';

/** Without NIP-42 authentication nobody can prove authorship, so protected events are refused. */
export const protectedEvent: WriteRule = function protectedEvent(e) {
  return isProtected(e.tags) ? reason.blocked('protected events (NIP-70) are not accepted by this relay') : undefined;
};
