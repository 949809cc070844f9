// The operator's lists (NIP-86, `npm run cli -- ban …`) as write rules: banned pubkeys and events,
// an allow list of pubkeys (a private relay), an allow list of kinds. The lists are loaded from the
// database (store/moderation.ts) into a snapshot that each relay process swaps when they change;
// the rules read whatever snapshot is current, so a ban takes effect without a restart.
import { KIND_GIFT_WRAP } from '../nostr/kinds.js';
import * as reason from '../nostr/reason.js';
import type { WriteRule } from './session.js';

export interface ModerationLists {
  /** Hex pubkey → reason ('' when none was given). */
  bannedPubkeys: ReadonlyMap<string, string>;
  /** Empty: everyone may publish. Otherwise only these authors (and gift wraps addressed to them). */
  allowedPubkeys: ReadonlyMap<string, string>;
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

export function moderationRules(source: ModerationSource): WriteRule[] {
  return [
    function bannedEvent(e) {
      return source.current.bannedEvents.has(e.id) ? reason.blocked('this event is banned from this relay') : undefined;
    },
    function bannedPubkey(e) {
      return source.current.bannedPubkeys.has(e.pubkey) ? reason.blocked('this pubkey is banned from this relay') : undefined;
    },
    function notAllowedPubkey(e) {
      const allowed = source.current.allowedPubkeys;
      if (allowed.size === 0 || allowed.has(e.pubkey)) return undefined;
      if (e.kind === KIND_GIFT_WRAP && recipients(e.tags).some((p) => allowed.has(p))) return undefined;
      return reason.restricted('this relay accepts events only from its allowed pubkeys');
    },
    function kindNotAllowed(e) {
      const kinds = source.current.allowedKinds;
      return kinds.size > 0 && !kinds.has(e.kind) ? reason.blocked(`kind ${e.kind} is not accepted by this relay`) : undefined;
    },
  ];
}
