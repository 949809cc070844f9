// The relay's policy: the ordered lists of write rules and read rules, built once from the
// configuration. The relay checks every EVENT, REQ and COUNT against them with the connection's
// session; the importers check every event with importSession. A rule lives in the file named after
// its concern; this file only puts them in order (cheap and common refusals first).
import type { Config } from '../config.js';
import type { NostrEvent } from '../nostr/event.js';
import type { Filter } from '../nostr/filter.js';
import type { Reason } from '../nostr/reason.js';
import { authEventAsEvent, authRequiredForReads, authRequiredForWrites, relayIdentity } from './auth.js';
import { alreadyExpired } from './expiration.js';
import { addressTooLong, limitRules, limitsFrom, type Limits } from './limits.js';
import { moderationRules, staticModeration, type ModerationSource } from './moderation.js';
import { powRule } from './pow.js';
import { privateKindsRule } from './private-kinds.js';
import { protectedEvent, repostOfProtected } from './protected.js';
import { authKindsRule, broadFilterRule, limitCapsRule } from './read-rules.js';
import type { ReadRule, Session, WriteRule } from './session.js';
import { vanishWithoutRelay } from './vanish.js';
import { webOfTrustFrom, webOfTrustRule, type WebOfTrust } from './web-of-trust.js';

const present = <T>(rules: Array<T | undefined>): T[] => rules.filter((r): r is T => r !== undefined);

export interface Policy {
  limits: Limits;
  write: readonly WriteRule[];
  read: readonly ReadRule[];
  /** The operator's lists the moderation rules read (swapped by the relay when they change). */
  moderation: ModerationSource;
  /** This relay's name (RELAY_URL as relayIdentity gives it), for NIP-62 requests; none without RELAY_URL. */
  relay: string | undefined;
  /** WOT_ROOTS: the web the rule reads, computed and kept current by store/web-of-trust.ts; none without roots. */
  webOfTrust: WebOfTrust | undefined;
}

/** `moderation`: where the current lists are (store/moderation.ts); none by default. */
export function policyFrom(config: Config, moderation: ModerationSource = staticModeration()): Policy {
  const limits = limitsFrom(config);
  const webOfTrust = webOfTrustFrom(config);
  const write = present<WriteRule>([
    authRequiredForWrites(config.AUTH_REQUIRED),
    authEventAsEvent,
    ...moderationRules(moderation, { membersOnly: config.RELAY_PAYMENT_REQUIRED, joinUrl: config.RELAY_PAYMENTS_URL }),
    webOfTrust && webOfTrustRule(webOfTrust, config.ADMIN_PUBKEYS),
    ...limitRules(limits),
    powRule(limits.minPowDifficulty),
    protectedEvent,
    repostOfProtected,
    alreadyExpired,
    addressTooLong,
    vanishWithoutRelay,
  ]);
  const read = present<ReadRule>([
    authRequiredForReads(config.AUTH_REQUIRED),
    broadFilterRule(config.READ_REFUSE_BROAD),
    privateKindsRule(config.RESTRICTED_READ_KINDS),
    authKindsRule(config.READ_AUTH_KINDS),
    limitCapsRule(config.READ_LIMIT_CAPS),
  ]);
  return { limits, write, read, moderation, relay: config.RELAY_URL === undefined ? undefined : relayIdentity(config.RELAY_URL), webOfTrust };
}

/**
 * NIP-11 `restricted_writes`: whether publishing takes a condition beyond the protocol's that a user
 * is expected to know of: proof of work, AUTH (AUTH_REQUIRED=writes or all), an allow list of pubkeys
 * or of kinds. Read on every request, since the lists change while the relay runs. Not counted: bans
 * and blocked addresses, rate limits and the size and time limits (the anti-spam NIP-11 leaves out,
 * the limits announced on their own), and a write-policy plugin, which may be a whitelist or only a
 * spam filter: the relay cannot tell, and a client that reads true may not publish here at all.
 * A web of trust (WOT_ROOTS) counts: most pubkeys may not publish. So does RELAY_PAYMENT_REQUIRED:
 * a relay that charges admits members only (moderation.ts), even before it has any.
 */
export function writesRestricted(policy: Policy, config: Pick<Config, 'AUTH_REQUIRED' | 'RELAY_PAYMENT_REQUIRED'>): boolean {
  const lists = policy.moderation.current;
  if (policy.webOfTrust || config.RELAY_PAYMENT_REQUIRED) return true;
  return policy.limits.minPowDifficulty > 0 || config.AUTH_REQUIRED !== 'none' || lists.allowedPubkeys.size > 0 || lists.allowedKinds.size > 0;
}

/** The first write rule's refusal, or undefined when every rule lets the event through. */
export function checkWrite(policy: Policy, event: NostrEvent, session: Session, now: number): Reason | undefined {
  for (const rule of policy.write) {
    const refusal = rule(event, session, now);
    if (refusal) return refusal;
  }
  return undefined;
}

/** What asks to read: a rule may narrow some only (ReadRule.reqOnly). */
export type ReadRequest = 'REQ' | 'COUNT' | 'NEG-OPEN';

/**
 * A REQ's, COUNT's or NEG-OPEN's filters narrowed to what the session may see, with the names of the
 * rules that changed one (none: undefined); or the reason it is refused and the rule that refused it.
 */
export function checkRead(
  policy: Policy,
  filters: Filter[],
  session: Session,
  request: ReadRequest = 'REQ',
): { ok: true; filters: Filter[]; narrowedBy?: string[] } | { ok: false; reason: Reason; rule: string } {
  for (const rule of policy.read) {
    const refusal = rule.refuse?.(filters, session);
    if (refusal) return { ok: false, reason: refusal, rule: rule.name };
  }
  // Copied only when a rule changes a filter: most REQs pass every rule as they are.
  let narrowed = filters;
  let narrowedBy: string[] | undefined;
  for (const rule of policy.read) {
    if (!rule.narrow || (rule.reqOnly && request !== 'REQ')) continue;
    let changed = false;
    for (let i = 0; i < narrowed.length; i++) {
      const f = narrowed[i]!;
      const g = rule.narrow(f, session);
      if (g === f) continue;
      if (narrowed === filters) narrowed = [...filters];
      narrowed[i] = g;
      changed = true;
    }
    if (changed) (narrowedBy ??= []).push(rule.name);
  }
  return narrowedBy ? { ok: true, filters: narrowed, narrowedBy } : { ok: true, filters: narrowed };
}
