// NIP-40: an event that has already expired when it arrives is dropped (store/expiry.ts removes the
// ones that expire later, and every query leaves them out).
import * as reason from '../nostr/reason.js';
import { expirationOf } from '../nostr/tags.js';
import type { WriteRule } from './session.js';

export const alreadyExpired: WriteRule = function alreadyExpired(e, _session, now) {
  const expiration = expirationOf(e.tags);
  return expiration !== undefined && expiration <= now ? reason.invalid('event expired') : undefined;
};
