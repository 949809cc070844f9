// The operator's lists (NIP-86, `npm run cli -- ban …`) as write rules: banned pubkeys and events,
// an allow list of pubkeys (a private relay; its entries may be memberships that end), an allow list
// of kinds. The lists are loaded from the database (store/moderation.ts) into a snapshot that each
// relay process swaps when they change; the rules read whatever snapshot is current, so a ban takes
// effect without a restart.
import { KIND_GIFT_WRAP } from '../nostr/kinds.js';
import * as reason from '../nostr/reason.js';
import type { WriteRule } from './session.js';

export interface ModerationLists {
  /** Hex pubkey → reason ('' when none was given). */
  bannedPubkeys: ReadonlyMap<string, string>;
  /** Empty: everyone may publish. Otherwise only these authors (and gift wraps addressed to them). */
  allowedPubkeys: ReadonlyMap<string, string>;
  /**
   * Allowed pubkeys whose membership ends → when (unix seconds); an allowed pubkey not here has no
   * end. From then on the entry no longer lets its key publish, yet still counts as the list's.
   */
  allowedUntil: ReadonlyMap<string, number>;
  /** Hex event id → reason. */
  bannedEvents: ReadonlyMap<string, string>;
  /** Empty: every kind. Otherwise only these. */
  allowedKinds: ReadonlySet<number>;
  /** Addresses and CIDR blocks → reason. */
  blockedIps: ReadonlyMap<string, string>;
  /** NIP-11 fields an admin changed (name, description, icon). */
  relayInfo: Readonly<Partial<Record<'name' | 'description' | 'icon', string>>>;
}

export const noModeration: ModerationLists = {
  bannedPubkeys: new Map(),
  allowedPubkeys: new Map(),
  allowedUntil: new Map(),
  bannedEvents: new Map(),
  allowedKinds: new Set(),
  blockedIps: new Map(),
  relayInfo: {},
};

/** Where the rules find the current lists: swapped whole when the database says they changed. */
export interface ModerationSource {
  readonly current: ModerationLists;
}

export const staticModeration = (lists: ModerationLists = noModeration): ModerationSource => ({ current: lists });

/** NIP-59 gift wraps are signed by a throwaway key: on a private relay their recipient is who counts. */
function recipients(tags: readonly string[][]): string[] {
  return tags.filter((t) => t[0] === 'p' && t.length >= 2).map((t) => t[1]);
}

/** How the allow list of pubkeys acts as a list of members (RELAY_PAYMENT_REQUIRED, RELAY_PAYMENTS_URL). */
export interface MembershipOptions {
  /** Only members may publish, even while the list is empty (a relay that charges for admission). */
  membersOnly: boolean;
  /** Where a refused key can pay to join or renew, named in the refusal. */
  joinUrl?: string;
}

/** Whether `pubkey` is on the allow list and its membership has not ended by `now` (unix seconds). */
export function isMember(lists: ModerationLists, pubkey: string, now: number): boolean {
  return lists.allowedPubkeys.has(pubkey) && !((lists.allowedUntil.get(pubkey) ?? Infinity) <= now);
}

/** Unix seconds as an operator reads them: 2027-03-01T12:00:00Z. */
export const isoSeconds = (unix: number) => new Date(unix * 1000).toISOString().replace('.000Z', 'Z');

export function moderationRules(source: ModerationSource, membership: MembershipOptions = { membersOnly: false }): WriteRule[] {
  const join = membership.joinUrl ? `; become a member at ${membership.joinUrl}` : '';
  const renew = membership.joinUrl ? `; renew at ${membership.joinUrl}` : '';
  return [
    function bannedEvent(e) {
      return source.current.bannedEvents.has(e.id) ? reason.blocked('this event is banned from this relay') : undefined;
    },
    function bannedPubkey(e) {
      return source.current.bannedPubkeys.has(e.pubkey) ? reason.blocked('this pubkey is banned from this relay') : undefined;
    },
    function notAllowedPubkey(e, _session, now) {
      const lists = source.current;
      // Expired entries keep the list non-empty: a relay whose members all expired stays private.
      if (lists.allowedPubkeys.size === 0 && !membership.membersOnly) return undefined;
      if (isMember(lists, e.pubkey, now)) return undefined;
      if (e.kind === KIND_GIFT_WRAP && recipients(e.tags).some((p) => isMember(lists, p, now))) return undefined;
      const ended = lists.allowedPubkeys.has(e.pubkey) ? lists.allowedUntil.get(e.pubkey) : undefined;
      if (ended !== undefined) return reason.restricted(`your membership expired at ${isoSeconds(ended)}${renew}`);
      return reason.restricted(`this relay accepts events only from its allowed pubkeys${join}`);
    },
    function kindNotAllowed(e) {
      const kinds = source.current.allowedKinds;
      return kinds.size > 0 && !kinds.has(e.kind) ? reason.blocked(`kind ${e.kind} is not accepted by this relay`) : undefined;
    },
  ];
}
