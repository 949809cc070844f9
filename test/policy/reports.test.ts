// Whose reports count (admins, the allow list, the web of trust) and how an entry explains itself.
import { describe, expect, it } from 'vitest';
import { noModeration, staticModeration } from '../../src/policy/moderation.js';
import { reportReason, trustedReporter } from '../../src/policy/reports.js';

const [admin, allowed, member, stranger] = ['1', '2', '3', '4'].map((c) => c.repeat(64));

describe('trustedReporter', () => {
  it('trusts admins, allowed pubkeys and members of the web of trust, nobody else', () => {
    const trusted = trustedReporter({
      admins: [admin],
      moderation: staticModeration({ ...noModeration, allowedPubkeys: new Map([[allowed, '']]) }),
      inWeb: (pubkey) => pubkey === member,
    });
    expect([admin, allowed, member, stranger].map(trusted)).toEqual([true, true, true, false]);
  });

  it('trusts no member of a web of trust when there is none', () => {
    const trusted = trustedReporter({ admins: [admin], moderation: staticModeration() });
    expect([admin, member].map(trusted)).toEqual([true, false]);
  });

  it('reads the allow list as it is now', () => {
    const source = { current: noModeration };
    const trusted = trustedReporter({ admins: [], moderation: source });
    expect(trusted(allowed)).toBe(false);
    source.current = { ...noModeration, allowedPubkeys: new Map([[allowed, '']]) };
    expect(trusted(allowed)).toBe(true);
  });

  it('does not trust a member whose membership has ended', () => {
    const now = Math.floor(Date.now() / 1000);
    const renewed = 'a'.repeat(64);
    const trusted = trustedReporter({
      admins: [],
      moderation: staticModeration({
        ...noModeration,
        allowedPubkeys: new Map([[allowed, ''], [renewed, '']]),
        allowedUntil: new Map([[allowed, now - 60], [renewed, now + 3600]]),
      }),
    });
    expect([allowed, renewed].map(trusted)).toEqual([false, true]);
  });
});

describe('reportReason', () => {
  it('says how many reporters, then each type by the reporters who gave it, most given first', () => {
    expect(reportReason(3, new Map([['illegal', 1], ['spam', 2], ['other', 1]]))).toBe('3 reporters: spam (2), illegal (1), other (1)');
    expect(reportReason(1, new Map([['nudity', 1]]))).toBe('1 reporter: nudity (1)');
  });
});
