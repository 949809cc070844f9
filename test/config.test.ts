// Configuration: the variables that decide who is trusted are validated strictly, and a bad value
// stops start-up naming the variable.
import { noteEncode, npubEncode, nsecEncode } from 'nostr-tools/nip19';
import { describe, expect, it } from 'vitest';
import { ConfigError, isAddressOrCidr, parseConfig } from '../src/config.js';

const refused = (env: Record<string, string>, variable: string) => {
  expect(() => parseConfig(env)).toThrow(ConfigError);
  expect(() => parseConfig(env)).toThrow(new RegExp(variable));
};

describe('configuration for the public internet', () => {
  it('has the documented defaults', () => {
    const c = parseConfig({});
    expect(c).toMatchObject({
      AUTH_REQUIRED: 'none',
      RESTRICTED_READ_KINDS: [4, 1059],
      TRUSTED_PROXIES: [],
      RATE_LIMIT_EXEMPT: [],
      RATE_LIMIT_EVENTS_PER_SECOND: 10,
      RATE_LIMIT_EVENTS_BURST: 1000,
      MAX_PENDING_EVENTS: 1000,
      MAX_PENDING_BYTES_PER_ADDRESS: 16 * 1024 * 1024,
      RATE_LIMIT_REQS_PER_SECOND: 10,
      RATE_LIMIT_REQS_BURST: 100,
      RATE_LIMIT_CONNECTIONS_PER_MINUTE: 60,
      RATE_LIMIT_CONNECTIONS_BURST: 30,
      MAX_CONNECTIONS_PER_ADDRESS: 100,
      RATE_LIMIT_DISCONNECT_AFTER: 100,
    });
  });

  it('reads TRUSTED_PROXIES as addresses and CIDR blocks, spaces allowed around commas', () => {
    expect(parseConfig({ TRUSTED_PROXIES: '127.0.0.1/32, 10.0.0.0/8,::1,fd00::/8' }).TRUSTED_PROXIES).toEqual(['127.0.0.1/32', '10.0.0.0/8', '::1', 'fd00::/8']);
  });

  it.each(['10.0.0.0/33', '::1/129', 'localhost', '10.0.0/8', '10.0.0.0/8/1', '1.2.3.4/x', '*'])('refuses TRUSTED_PROXIES=%s', (value) => {
    refused({ TRUSTED_PROXIES: value }, 'TRUSTED_PROXIES');
  });

  it('reads RATE_LIMIT_EXEMPT as hex pubkeys and addresses', () => {
    const pk = 'a'.repeat(64);
    expect(parseConfig({ RATE_LIMIT_EXEMPT: `${pk},192.0.2.0/24` }).RATE_LIMIT_EXEMPT).toEqual([pk, '192.0.2.0/24']);
  });

  it.each(['A'.repeat(64), 'npub1xyz', 'a'.repeat(63)])('refuses RATE_LIMIT_EXEMPT=%s', (value) => {
    refused({ RATE_LIMIT_EXEMPT: value }, 'RATE_LIMIT_EXEMPT');
  });

  it.each(['relay.example.com', 'ftp://relay.example.com', 'wss://', 'wss:// spaced.example.com'])('refuses RELAY_URL=%s', (value) => {
    refused({ RELAY_URL: value }, 'RELAY_URL');
  });

  it('refuses an unknown AUTH_REQUIRED and kinds out of range', () => {
    refused({ AUTH_REQUIRED: 'yes' }, 'AUTH_REQUIRED');
    refused({ RESTRICTED_READ_KINDS: '4,70000' }, 'RESTRICTED_READ_KINDS');
    refused({ RESTRICTED_READ_KINDS: '4;1059' }, 'RESTRICTED_READ_KINDS');
    expect(parseConfig({ RESTRICTED_READ_KINDS: '' }).RESTRICTED_READ_KINDS).toEqual([]);
  });

  it('refuses negative rates and a TLS certificate without its key', () => {
    refused({ RATE_LIMIT_EVENTS_PER_SECOND: '-1' }, 'RATE_LIMIT_EVENTS_PER_SECOND');
    refused({ TLS_CERT_FILE: '/x.pem' }, 'TLS_CERT_FILE');
    refused({ TLS_KEY_FILE: '/x.pem' }, 'TLS_KEY_FILE');
  });

  it('refuses BACKUP_DIR beside DATABASE_URL: it backs up the embedded server only', () => {
    refused({ BACKUP_DIR: '/var/backups/pgrelay', DATABASE_URL: 'postgres://u:p@127.0.0.1/nostr' }, 'BACKUP_DIR: backs up the embedded PostgreSQL only');
    expect(parseConfig({ BACKUP_DIR: '/var/backups/pgrelay' }).BACKUP_ARCHIVE_TIMEOUT_SECONDS).toBe(60);
  });

  it('tells an address or CIDR block from anything else', () => {
    expect(['1.2.3.4', '1.2.3.4/0', '::', '2001:db8::/32'].every(isAddressOrCidr)).toBe(true);
    expect(['1.2.3.4/', '/8', '1.2.3.4 /8', '2001:db8::/-1'].some(isAddressOrCidr)).toBe(false);
  });
});

describe('memberships and payments', () => {
  const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

  it('reads RELAY_FEES as the NIP-11 fees object, unit msats unless given', () => {
    const fees = '{"admission":[{"amount":1000000}],"subscription":[{"amount":5000000,"unit":"msats","period":2592000}],"publication":[{"kinds":[4],"amount":100}]}';
    expect(parseConfig({ RELAY_FEES: fees }).RELAY_FEES).toEqual({
      admission: [{ amount: 1000000, unit: 'msats' }],
      subscription: [{ amount: 5000000, unit: 'msats', period: 2592000 }],
      publication: [{ kinds: [4], amount: 100, unit: 'msats' }],
    });
    expect(parseConfig({}).RELAY_FEES).toBeUndefined();
  });

  it.each([
    ['text that is not JSON', 'admission: 1000'],
    ['a subscription without its period', '{"subscription":[{"amount":5000}]}'],
    ['a negative amount', '{"admission":[{"amount":-1}]}'],
    ['an amount that is not an integer', '{"admission":[{"amount":1.5}]}'],
    ['a misspelt list', '{"admision":[{"amount":1000}]}'],
    ['a field NIP-11 does not know', '{"admission":[{"amount":1000,"currency":"usd"}]}'],
  ])('refuses RELAY_FEES with %s', (_, value) => {
    refused({ RELAY_FEES: value }, 'RELAY_FEES');
  });

  it('refuses a MEMBERSHIP_WEBHOOK_SECRET that is not a whsec_ secret of 24 to 64 bytes', () => {
    expect(parseConfig({ MEMBERSHIP_WEBHOOK_SECRET: secret }).MEMBERSHIP_WEBHOOK_SECRET).toBe(secret);
    refused({ MEMBERSHIP_WEBHOOK_SECRET: 'a-plain-password' }, 'MEMBERSHIP_WEBHOOK_SECRET.*whsec_');
    refused({ MEMBERSHIP_WEBHOOK_SECRET: 'whsec_c2hvcnQ=' }, 'MEMBERSHIP_WEBHOOK_SECRET.*24 to 64 bytes');
  });

  it('refuses RELAY_PAYMENT_REQUIRED without RELAY_PAYMENTS_URL, and a payments URL that is not http(s)', () => {
    refused({ RELAY_PAYMENT_REQUIRED: 'true' }, 'RELAY_PAYMENT_REQUIRED: set RELAY_PAYMENTS_URL');
    refused({ RELAY_PAYMENTS_URL: 'lightning:lnurl1xyz' }, 'RELAY_PAYMENTS_URL');
    expect(parseConfig({ RELAY_PAYMENT_REQUIRED: 'true', RELAY_PAYMENTS_URL: 'https://relay.example.com/join' })).toMatchObject({ RELAY_PAYMENT_REQUIRED: true });
  });
});

describe('configuration of the web of trust', () => {
  const hex = 'b'.repeat(64);
  const npub = npubEncode(hex);

  it('reads WOT_ROOTS as hex or npub pubkeys, each once, with the documented defaults beside it', () => {
    expect(parseConfig({ WOT_ROOTS: `${hex}, ${npub},${'c'.repeat(64)}` })).toMatchObject({
      WOT_ROOTS: [hex, 'c'.repeat(64)],
      WOT_DEPTH: 2,
      WOT_MIN_FOLLOWERS: 0,
      WOT_REFRESH_SECONDS: 3600,
    });
    expect(parseConfig({}).WOT_ROOTS).toEqual([]);
  });

  it('refuses an nsec in WOT_ROOTS, asking for its npub', () => {
    const nsec = nsecEncode(new Uint8Array(32).fill(7));
    refused({ WOT_ROOTS: nsec }, 'WOT_ROOTS.*an nsec is a secret key: give its npub or hex pubkey instead');
  });

  it.each([
    ['uppercase hex', 'B'.repeat(64)],
    ['63 hex characters', 'b'.repeat(63)],
    ['65 hex characters', 'b'.repeat(65)],
    ['an npub with a broken checksum', npub.slice(0, -1) + (npub.endsWith('q') ? 'p' : 'q')],
    ['an event id as a note', noteEncode(hex)],
    ['a name', 'alice@example.com'],
  ])('refuses %s in WOT_ROOTS, naming the entry', (_what, value) => {
    refused({ WOT_ROOTS: `${hex},${value}` }, `WOT_ROOTS.*"${value.replace(/[.@]/g, '\\$&')}" is not a pubkey`);
  });

  it.each([
    ['WOT_DEPTH', '-1'],
    ['WOT_DEPTH', '7'],
    ['WOT_DEPTH', 'two'],
    ['WOT_MIN_FOLLOWERS', '-1'],
    ['WOT_REFRESH_SECONDS', '0'],
  ])('refuses %s=%s', (variable, value) => {
    refused({ [variable]: value }, variable);
  });
});

describe('configuration of the read rules', () => {
  it('has them off by default', () => {
    const c = parseConfig({});
    expect(c).toMatchObject({ READ_REFUSE_BROAD: false, READ_AUTH_KINDS: [] });
    expect(c.READ_LIMIT_CAPS).toBeUndefined();
    expect(parseConfig({ READ_LIMIT_CAPS: '' }).READ_LIMIT_CAPS).toBeUndefined();
  });

  it('reads READ_LIMIT_CAPS as a cap per shape, spaces allowed around commas and colons', () => {
    expect(parseConfig({ READ_LIMIT_CAPS: 'search:100, time : 50,default:1000' }).READ_LIMIT_CAPS).toEqual({ search: 100, time: 50, default: 1000 });
    expect(parseConfig({ READ_LIMIT_CAPS: 'ids:1,authors:2,tags:3,kinds:4' }).READ_LIMIT_CAPS).toEqual({ ids: 1, authors: 2, tags: 3, kinds: 4 });
  });

  it.each([
    ['search', 'not shape:events'],
    ['search:', 'not shape:events'],
    ['search=100', 'not shape:events'],
    ['search:1.5', 'not shape:events'],
    ['search:-1', 'not shape:events'],
    ['search:100,', 'not shape:events'],
    ['search:0', 'must be 1 or more'],
    ['hashtags:10', 'not a shape'],
    ['Search:10', 'not shape:events'],
    ['kinds:10,kinds:20', 'given twice'],
  ])('refuses READ_LIMIT_CAPS=%s (%s)', (value, problem) => {
    refused({ READ_LIMIT_CAPS: value }, `READ_LIMIT_CAPS=.*${problem}`);
  });

  it.each(['70000', '1;2', 'longform', '1,,2'])('refuses READ_AUTH_KINDS=%s', (value) => {
    refused({ READ_AUTH_KINDS: value }, 'READ_AUTH_KINDS');
  });

  it.each(['yes', 'on', '2'])('refuses READ_REFUSE_BROAD=%s', (value) => {
    refused({ READ_REFUSE_BROAD: value }, 'READ_REFUSE_BROAD');
  });
});
