// Whose NIP-56 reports the relay acts on, and how a queued entry explains itself. A report counts
// when its author is trusted at the moment a relay process reads it: an admin (ADMIN_PUBKEYS), a key
// on the allow list whose membership has not ended, or, when the web of trust is on, one of its members. Anyone else's reports are
// stored like any event and change nothing.
import { isMember, type ModerationSource } from './moderation.js';

export interface ReporterTrust {
  admins: readonly string[];
  /** The operator's lists as each relay process holds them (their allow list). */
  moderation: ModerationSource;
  /** Membership of the web of trust, when it is on. */
  inWeb?: (pubkey: string) => boolean;
}

export type TrustedReporter = (pubkey: string) => boolean;

export function trustedReporter({ admins, moderation, inWeb }: ReporterTrust): TrustedReporter {
  const adminSet = new Set(admins);
  return (pubkey) => adminSet.has(pubkey) || isMember(moderation.current, pubkey, Date.now() / 1000) || (inWeb?.(pubkey) ?? false);
}

/**
 * An entry's reason (NIP-86 `listeventsneedingmoderation`): how many reporters, then each report type
 * with the number of reporters who gave it, most given first: "3 reporters: spam (2), illegal (1)".
 */
export function reportReason(reporters: number, reportersByType: ReadonlyMap<string, number>): string {
  const types = [...reportersByType].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return `${reporters} ${reporters === 1 ? 'reporter' : 'reporters'}: ${types.map(([type, n]) => `${type} (${n})`).join(', ')}`;
}
