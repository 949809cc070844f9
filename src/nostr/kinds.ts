// Kind classes (NIP-01 "Kinds"). The only place that decides how a kind is stored.

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

/** Kinds with special handling on the write path. */
export const KIND_DELETION = 5; // NIP-09
export const KIND_AUTH = 22242; // NIP-42: never stored nor broadcast
