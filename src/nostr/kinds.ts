// Kind classes (NIP-01 "Kinds"). The only place that decides how a kind is stored, and the one place
// each kind number with special handling is named.

export type KindClass = 'regular' | 'replaceable' | 'ephemeral' | 'addressable';

export function kindClass(kind: number): KindClass {
  if (kind === 0 || kind === 3 || (kind >= 10000 && kind < 20000)) return 'replaceable';
  if (kind >= 20000 && kind < 30000) return 'ephemeral';
  if (kind >= 30000 && kind < 40000) return 'addressable';
  return 'regular';
}

export const isReplaceable = (kind: number) => kindClass(kind) === 'replaceable';
export const isAddressable = (kind: number) => kindClass(kind) === 'addressable';
export const isEphemeral = (kind: number) => kindClass(kind) === 'ephemeral';

/** Kinds with special handling. */
export const KIND_CONTACTS = 3; // NIP-02 follow list: what the web of trust follows (WOT_ROOTS)
export const KIND_DM = 4; // NIP-04 encrypted direct message: private by default (policy/private-kinds.ts)
export const KIND_DELETION = 5; // NIP-09
export const KIND_REPOST = 6; // NIP-18: must not embed a protected event (NIP-70)
export const KIND_GENERIC_REPOST = 16; // NIP-18
export const KIND_VANISH = 62; // NIP-62 request to vanish: a kind 5 never deletes it
export const KIND_GIFT_WRAP = 1059; // NIP-59: signed by a throwaway key, addressed by its `p` tag
export const KIND_AUTH = 22242; // NIP-42: never stored nor broadcast
export const KIND_REPORT = 1984; // NIP-56: a report from a trusted reporter feeds the moderation queue (store/reports.ts)
