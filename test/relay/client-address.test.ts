// Who the client is: X-Forwarded-For is believed only from trusted proxies, and only back to the first
// hop that is not one (the nostream rate-limit bypass, issues #467/#492).
import { describe, expect, it } from 'vitest';
import { clientAddress, normalizeAddress, trustedProxies } from '../../src/relay/client-address.js';

const proxies = trustedProxies(['10.0.0.0/8', '192.168.1.1', '2001:db8:ffff::/48'], false);

describe('normalizeAddress', () => {
  it('returns IPv4 unchanged', () => {
    expect(normalizeAddress('203.0.113.7')).toBe('203.0.113.7');
  });

  it('turns IPv4-mapped IPv6 into IPv4, in either notation', () => {
    expect(normalizeAddress('::ffff:203.0.113.7')).toBe('203.0.113.7');
    expect(normalizeAddress('::FFFF:cb00:7107')).toBe('203.0.113.7');
  });

  it('gives IPv6 its canonical form', () => {
    expect(normalizeAddress('2001:DB8:0:0:0:0:0:1')).toBe('2001:db8::1');
  });

  it('rejects what is not an address', () => {
    for (const bad of ['unknown', '', '_hidden', '1.2.3.4:80', '[::1]', '01.2.3.4', '1.2.3']) {
      expect(normalizeAddress(bad), bad).toBeUndefined();
    }
  });
});

describe('trustedProxies', () => {
  it('is undefined with no proxies and no legacy TRUST_PROXY, so headers are never read', () => {
    expect(trustedProxies([], false)).toBeUndefined();
  });

  it('matches addresses and CIDR blocks', () => {
    expect(proxies!.has('10.200.3.4')).toBe(true);
    expect(proxies!.has('192.168.1.1')).toBe(true);
    expect(proxies!.has('192.168.1.2')).toBe(false);
    expect(proxies!.has('2001:db8:ffff:1::5')).toBe(true);
    expect(proxies!.has('2001:db8:fffe::5')).toBe(false);
  });

  it('matches IPv4-mapped IPv6 against IPv4 rules', () => {
    expect(proxies!.has('::ffff:10.1.2.3')).toBe(true);
  });

  it('never matches a non-address', () => {
    expect(proxies!.has('unknown')).toBe(false);
  });
});

describe('clientAddress', () => {
  it('is the socket address when no proxy is trusted, even with a forged X-Forwarded-For', () => {
    expect(clientAddress('203.0.113.7', '198.51.100.1', undefined)).toBe('203.0.113.7');
  });

  it('ignores X-Forwarded-For from a peer that is not a trusted proxy', () => {
    expect(clientAddress('203.0.113.7', '198.51.100.1', proxies)).toBe('203.0.113.7');
  });

  it('is the socket address when a trusted proxy sends no X-Forwarded-For', () => {
    expect(clientAddress('10.0.0.2', undefined, proxies)).toBe('10.0.0.2');
  });

  it('takes the entry a trusted proxy appended', () => {
    expect(clientAddress('10.0.0.2', '198.51.100.1', proxies)).toBe('198.51.100.1');
  });

  it('skips trusted proxies from the right and takes the first untrusted entry', () => {
    expect(clientAddress('10.0.0.2', '198.51.100.1, 10.0.0.3', proxies)).toBe('198.51.100.1');
  });

  it('does not believe entries to the left of the first untrusted one (client-forged)', () => {
    expect(clientAddress('10.0.0.2', '1.1.1.1, 198.51.100.1, 10.0.0.3', proxies)).toBe('198.51.100.1');
  });

  it('is the left-most entry when every entry is a trusted proxy', () => {
    expect(clientAddress('10.0.0.2', '10.0.0.5, 192.168.1.1, 10.0.0.3', proxies)).toBe('10.0.0.5');
  });

  it('stops at garbage and takes the last trusted hop, never the garbage', () => {
    expect(clientAddress('10.0.0.2', 'unknown', proxies)).toBe('10.0.0.2');
    expect(clientAddress('10.0.0.2', '198.51.100.1, _hidden, 10.0.0.3', proxies)).toBe('10.0.0.3');
    expect(clientAddress('10.0.0.2', '198.51.100.1,, 10.0.0.3', proxies)).toBe('10.0.0.3');
  });

  it('strips ports and brackets from entries', () => {
    expect(clientAddress('10.0.0.2', '198.51.100.1:5678', proxies)).toBe('198.51.100.1');
    expect(clientAddress('10.0.0.2', '[2001:db8::1]:443', proxies)).toBe('2001:db8::1');
    expect(clientAddress('10.0.0.2', '[2001:db8::1]', proxies)).toBe('2001:db8::1');
    expect(clientAddress('10.0.0.2', '198.51.100.1, 10.0.0.3:80', proxies)).toBe('198.51.100.1');
  });

  it('normalises IPv4-mapped socket addresses and entries to IPv4', () => {
    expect(clientAddress('::ffff:203.0.113.7', undefined, undefined)).toBe('203.0.113.7');
    expect(clientAddress('::ffff:10.0.0.2', '::ffff:198.51.100.1', proxies)).toBe('198.51.100.1');
    expect(clientAddress('::ffff:10.0.0.2', '198.51.100.1, ::ffff:10.0.0.3', proxies)).toBe('198.51.100.1');
  });

  it('reads several X-Forwarded-For headers as one list, in order', () => {
    expect(clientAddress('10.0.0.2', ['198.51.100.1', '10.0.0.3'], proxies)).toBe('198.51.100.1');
    expect(clientAddress('10.0.0.2', ['10.0.0.5', '198.51.100.1, 10.0.0.3'], proxies)).toBe('198.51.100.1');
    expect(clientAddress('10.0.0.2', ['10.0.0.5', '10.0.0.3'], proxies)).toBe('10.0.0.5');
  });

  it('with legacy TRUST_PROXY trusts loopback only', () => {
    const loopback = trustedProxies([], true);
    expect(clientAddress('127.0.0.1', '198.51.100.1', loopback)).toBe('198.51.100.1');
    expect(clientAddress('::1', '198.51.100.1', loopback)).toBe('198.51.100.1');
    expect(clientAddress('10.0.0.2', '198.51.100.1', loopback)).toBe('10.0.0.2');
  });

  it('with legacy TRUST_PROXY keeps the configured proxies too', () => {
    const both = trustedProxies(['10.0.0.0/8'], true);
    expect(clientAddress('10.0.0.2', '198.51.100.1, 127.0.0.1', both)).toBe('198.51.100.1');
  });

  it("is 'unknown' without a socket address", () => {
    expect(clientAddress(undefined, '198.51.100.1', proxies)).toBe('unknown');
  });
});
