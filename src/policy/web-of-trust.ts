// WOT_ROOTS: only pubkeys within WOT_DEPTH follows of a root may publish. The web is computed in
// PostgreSQL from the stored follow lists (store/web-of-trust.ts) into a snapshot that each relay
// process swaps whole when it is computed again; the rule reads whatever snapshot is current, as the
// moderation rules read theirs.
import { KIND_GIFT_WRAP, KIND_VANISH } from '../nostr/kinds.js';
import * as reason from '../nostr/reason.js';
import type { WriteRule } from './session.js';

export const NOT_IN_WEB = reason.blocked("not in this relay's web of trust");
/** Only before the first computation, which the relay awaits before it serves (store/web-of-trust.ts). */
export const WEB_NOT_COMPUTED = reason.error('the web of trust is not computed yet, try again shortly');

export interface WebOfTrustSettings {
  /** Hex pubkeys at depth 0. */
  roots: readonly string[];
  /** Follows away from a root a member may be. */
  depth: number;
  /** From depth 2 on, followers a pubkey needs among the members nearer the roots (0 and 1: one). */
  minFollowers: number;
}

/** One computation's result. */
export interface WebSnapshot {
  /** Every member (hex pubkeys), the roots included. */
  members: ReadonlySet<string>;
  /** The members whose follow lists count: those nearer the roots than WOT_DEPTH. A new kind 3 from
   * anyone else cannot change the web. */
  extending: ReadonlySet<string>;
  /** When it was computed (ms since the epoch) and how long that took. */
  computedAt: number;
  durationMs: number;
}

/**
 * The web as this process knows it: undefined until first computed, then the latest computation,
 * swapped whole (a failed computation leaves the last one in force). Refusals are counted here for
 * the metrics, whichever source the refused event came from.
 */
export class WebOfTrust {
  current: WebSnapshot | undefined;
  refusals = 0;

  constructor(readonly settings: WebOfTrustSettings) {}

  /** Whether `pubkey` (hex) is a member now. False before the first computation. */
  has(pubkey: string): boolean {
    return this.current?.members.has(pubkey) ?? false;
  }

  get size(): number {
    return this.current?.members.size ?? 0;
  }
}

export function webOfTrustFrom(config: { WOT_ROOTS: readonly string[]; WOT_DEPTH: number; WOT_MIN_FOLLOWERS: number }): WebOfTrust | undefined {
  if (config.WOT_ROOTS.length === 0) return undefined;
  return new WebOfTrust({ roots: config.WOT_ROOTS, depth: config.WOT_DEPTH, minFollowers: config.WOT_MIN_FOLLOWERS });
}

/**
 * Let through regardless: ADMIN_PUBKEYS (the operators themselves); a NIP-59 gift wrap addressed to a
 * member, since its author is a throwaway key; and a NIP-62 request to vanish, so that someone who has
 * left the web can still have the relay erase what it holds of them (it only deletes).
 */
export function webOfTrustRule(web: WebOfTrust, admins: readonly string[]): WriteRule {
  const exempt = new Set(admins);
  return function notInWebOfTrust(e) {
    const snapshot = web.current;
    if (!snapshot) return WEB_NOT_COMPUTED;
    const members = snapshot.members;
    if (members.has(e.pubkey) || exempt.has(e.pubkey) || e.kind === KIND_VANISH) return undefined;
    if (e.kind === KIND_GIFT_WRAP && e.tags.some((t) => t[0] === 'p' && members.has(t[1]))) return undefined;
    web.refusals++;
    return NOT_IN_WEB;
  };
}
