// The allow list as a list of members whose memberships may end: the rule compares each end with
// the `now` it is given, and an expired member keeps the relay private.
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { noModeration, staticModeration, type ModerationLists } from '../../src/policy/moderation.js';
import { checkWrite, policyFrom } from '../../src/policy/policy.js';
import { importSession } from '../../src/policy/session.js';
import { newSigner } from '../support/keys.js';

const NOW = 1_800_000_000;
const member = newSigner();
const lapsed = newSigner();
const founder = newSigner();
const stranger = newSigner();

const lists = (allowed: Record<string, number | null>): ModerationLists => ({
  ...noModeration,
  allowedPubkeys: new Map(Object.keys(allowed).map((pk) => [pk, ''])),
  allowedUntil: new Map(Object.entries(allowed).filter((e): e is [string, number] => e[1] !== null)),
});

function verdict(allowed: Record<string, number | null>, author: ReturnType<typeof newSigner>, env: Record<string, string> = {}, now = NOW, tags: string[][] = [], kind = 1) {
  const policy = policyFrom(parseConfig(env), staticModeration(lists(allowed)));
  return checkWrite(policy, author.sign({ kind, tags, content: 'x', created_at: now }), importSession, now);
}

describe('memberships that end', () => {
  it('let a member publish until the second their membership ends, and not from then on', () => {
    const allowed = { [member.pubkey]: NOW + 10 };
    expect(verdict(allowed, member, {}, NOW + 9)).toBeUndefined();
    expect(verdict(allowed, member, {}, NOW + 10)).toBe('restricted: your membership expired at 2027-01-15T08:00:10Z');
  });

  it('let a member without end publish as before', () => {
    expect(verdict({ [founder.pubkey]: null }, founder)).toBeUndefined();
  });

  it('name where to renew when RELAY_PAYMENTS_URL is set', () => {
    expect(verdict({ [lapsed.pubkey]: NOW - 1 }, lapsed, { RELAY_PAYMENTS_URL: 'https://relay.example.com/join' })).toBe(
      'restricted: your membership expired at 2027-01-15T07:59:59Z; renew at https://relay.example.com/join',
    );
  });

  it('keep the relay private when every member has expired', () => {
    expect(verdict({ [lapsed.pubkey]: NOW - 1 }, stranger)).toBe('restricted: this relay accepts events only from its allowed pubkeys');
  });

  it('refuse a gift wrap addressed only to an expired member, and take one addressed to a current member', () => {
    const allowed = { [lapsed.pubkey]: NOW - 1, [member.pubkey]: NOW + 60 };
    expect(verdict(allowed, stranger, {}, NOW, [['p', lapsed.pubkey]], 1059)).toMatch(/^restricted: /);
    expect(verdict(allowed, stranger, {}, NOW, [['p', member.pubkey]], 1059)).toBeUndefined();
  });
});

describe('a relay that requires payment', () => {
  const env = { RELAY_PAYMENT_REQUIRED: 'true', RELAY_PAYMENTS_URL: 'https://relay.example.com/join' };

  it('admits nobody while it has no member, and says where to join', () => {
    expect(verdict({}, stranger, env)).toBe('restricted: this relay accepts events only from its allowed pubkeys; become a member at https://relay.example.com/join');
  });

  it('admits its members', () => {
    expect(verdict({ [member.pubkey]: NOW + 60 }, member, env)).toBeUndefined();
  });

  it('leaves a relay that does not charge open while its list is empty', () => {
    expect(verdict({}, stranger)).toBeUndefined();
  });
});
