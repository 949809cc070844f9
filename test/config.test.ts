// Configuration: the variables that decide who is trusted are validated strictly, and a bad value
// stops start-up naming the variable.
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
