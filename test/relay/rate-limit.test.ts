// Token buckets and the relay's rate limits, on a fake clock (milliseconds).
import { describe, expect, it } from 'vitest';
import { RateLimiter, TokenBuckets, addressKey, type RateLimitSettings } from '../../src/relay/rate-limit.js';

const PK_A = 'a'.repeat(64);
const PK_B = 'b'.repeat(64);
const none: ReadonlySet<string> = new Set();

function limiter(overrides: Partial<RateLimitSettings> = {}): RateLimiter {
  return new RateLimiter({
    eventsPerSecond: 1,
    eventsBurst: 3,
    reqsPerSecond: 1,
    reqsBurst: 3,
    connectionsPerMinute: 60,
    connectionsBurst: 3,
    maxConnectionsPerAddress: 0,
    maxPendingBytesPerAddress: 0,
    disconnectAfter: 5,
    exempt: [],
    ...overrides,
  });
}

/** How many of `n` takes at `now` succeed. */
function granted(n: number, take: () => boolean): number {
  let ok = 0;
  for (let i = 0; i < n; i++) if (take()) ok++;
  return ok;
}

describe('TokenBuckets', () => {
  it('allows a burst, then refills at the rate', () => {
    const b = new TokenBuckets(2, 5);
    expect(granted(6, () => b.take('k', 0))).toBe(5);
    expect(b.take('k', 499)).toBe(false);
    expect(b.take('k', 500)).toBe(true);
    expect(b.take('k', 500)).toBe(false);
    expect(granted(10, () => b.take('k', 5_000))).toBe(5); // refilled to the burst, not beyond
  });

  it('starts a key never seen full', () => {
    const b = new TokenBuckets(1, 3);
    b.take('x', 0);
    expect(granted(4, () => b.take('y', 0))).toBe(3);
  });

  it('keeps keys apart', () => {
    const b = new TokenBuckets(1, 1);
    expect(b.take('x', 0)).toBe(true);
    expect(b.take('x', 0)).toBe(false);
    expect(b.take('y', 0)).toBe(true);
  });

  it('charges a cost, and refuses without taking when it exceeds the tokens', () => {
    const b = new TokenBuckets(1, 5);
    expect(b.take('k', 0, 4)).toBe(true);
    expect(b.take('k', 0, 2)).toBe(false);
    expect(b.take('k', 0, 1)).toBe(true);
  });

  it('is off with a rate or a burst of 0: always allows, stores nothing', () => {
    for (const b of [new TokenBuckets(0, 10), new TokenBuckets(10, 0)]) {
      expect(granted(1000, () => b.take('k', 0))).toBe(1000);
      expect(b.size).toBe(0);
    }
  });

  it('does not store a bucket that is full again', () => {
    const b = new TokenBuckets(1, 2);
    b.take('k', 0);
    expect(b.size).toBe(1);
    b.take('other', 1_000); // 'k' is full again: evicted from the front
    expect(b.size).toBe(1);
  });

  it('never holds more than maxKeys buckets', () => {
    const b = new TokenBuckets(1, 10, { maxKeys: 1000 });
    for (let i = 0; i < 100_000; i++) {
      b.take('k' + i, 0);
      expect(b.size).toBeLessThanOrEqual(1000);
    }
    expect(b.size).toBe(1000);
  });

  it('caps at 100,000 buckets by default', () => {
    const b = new TokenBuckets(1, 10);
    for (let i = 0; i < 150_000; i++) b.take('k' + i, 0);
    expect(b.size).toBe(100_000);
  });

  it('evicts the least recently used bucket at the cap, not a recently touched one', () => {
    const b = new TokenBuckets(1, 1, { maxKeys: 3 });
    b.take('a', 0);
    b.take('b', 0);
    b.take('c', 0);
    b.take('a', 0); // a touched: b is now the least recently used
    b.take('d', 0);
    expect(b.take('a', 0)).toBe(false); // still held, still empty
    expect(b.take('b', 0)).toBe(true); // evicted, so it starts full again
  });

  it('drops idle buckets a couple per take once they have refilled, so memory drains without a pause', () => {
    const b = new TokenBuckets(1, 10, { maxKeys: 200_000 }); // an empty bucket is full again 10 s after its last use
    for (let i = 0; i < 100_000; i++) b.take('k' + i, i / 100, 10); // emptied, all within one second
    expect(b.size).toBe(100_000);
    b.take('still', 5_000);
    expect(b.size).toBe(100_001); // not yet refilled: nothing dropped
    let now = 12_000;
    for (let i = 0; i < 60_000; i++) {
      const before = b.size;
      b.take('active' + (i % 3), now++);
      expect(before - b.size).toBeLessThanOrEqual(2); // bounded work per take
    }
    expect(b.size).toBeLessThanOrEqual(4);
  });

  it('treats a clock that steps back as no time passed', () => {
    const b = new TokenBuckets(1, 1);
    b.take('k', 10_000);
    expect(b.take('k', 0)).toBe(false);
  });
});

describe('addressKey', () => {
  it('keeps IPv4 as is', () => {
    expect(addressKey('203.0.113.7')).toBe('203.0.113.7');
  });

  it('keys IPv4-mapped IPv6 as IPv4', () => {
    expect(addressKey('::ffff:203.0.113.7')).toBe('203.0.113.7');
  });

  it('groups IPv6 by its /64 prefix', () => {
    expect(addressKey('2001:db8:1:2:aaaa::1')).toBe(addressKey('2001:DB8:1:2:bbbb:cccc:dddd:eeee'));
    expect(addressKey('2001:db8:1:2::1')).toBe('2001:db8:1:2::/64');
    expect(addressKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(addressKey('::1')).toBe('0:0:0:0::/64');
    expect(addressKey('1::2:3:4:5:6:7')).toBe('1:0:2:3::/64');
  });

  it('tells different /64s apart', () => {
    expect(addressKey('2001:db8:1:2::1')).not.toBe(addressKey('2001:db8:1:3::1'));
    expect(addressKey('2001:db8::1')).not.toBe(addressKey('2001:db8:0:1::1'));
  });

  it('keeps a non-address as its own key', () => {
    expect(addressKey('unknown')).toBe('unknown');
  });
});

describe('RateLimiter: messages', () => {
  it('refuses an address over its event budget while another address is allowed', () => {
    const rl = limiter();
    expect(granted(4, () => rl.allowEvent('203.0.113.1', none, 0))).toBe(3);
    expect(rl.allowEvent('203.0.113.2', none, 0)).toBe(true);
  });

  it('keeps the event and query budgets apart', () => {
    const rl = limiter();
    granted(3, () => rl.allowEvent('203.0.113.1', none, 0));
    expect(rl.allowEvent('203.0.113.1', none, 0)).toBe(false);
    expect(granted(4, () => rl.allowQuery('203.0.113.1', none, 0))).toBe(3);
  });

  it('charges an authenticated pubkey across addresses', () => {
    const rl = limiter();
    const me = new Set([PK_A]);
    expect(granted(2, () => rl.allowEvent('203.0.113.1', me, 0))).toBe(2);
    expect(rl.allowEvent('198.51.100.1', me, 0)).toBe(true);
    expect(rl.allowEvent('198.51.100.2', me, 0)).toBe(false); // pubkey empty, address fresh
    expect(rl.allowEvent('198.51.100.2', none, 0)).toBe(true); // and the refusal took nothing from it
  });

  it('charges the address even when authenticating fresh pubkeys', () => {
    const rl = limiter();
    let fresh = 0;
    const newKey = () => new Set([(fresh++).toString(16).padStart(64, '0')]);
    expect(granted(10, () => rl.allowQuery('203.0.113.1', newKey(), 0))).toBe(3);
  });

  it('refuses when any one authenticated pubkey is out of budget', () => {
    const rl = limiter();
    granted(3, () => rl.allowEvent('203.0.113.1', new Set([PK_B]), 0));
    expect(rl.allowEvent('198.51.100.1', new Set([PK_A, PK_B]), 0)).toBe(false);
    expect(granted(4, () => rl.allowEvent('198.51.100.1', new Set([PK_A]), 0))).toBe(3); // A was not charged
  });

  it('never refuses an exempt address, by address or CIDR', () => {
    const rl = limiter({ exempt: ['203.0.113.1', '10.0.0.0/8'] });
    expect(granted(100, () => rl.allowEvent('203.0.113.1', none, 0))).toBe(100);
    expect(granted(100, () => rl.allowQuery('::ffff:10.9.8.7', none, 0))).toBe(100);
    expect(granted(4, () => rl.allowEvent('203.0.113.2', none, 0))).toBe(3);
  });

  it('gives each connection a budget view that charges the same buckets as its address', () => {
    const rl = limiter({ exempt: ['10.0.0.0/8'] });
    const [a, b] = [rl.forConnection('203.0.113.1'), rl.forConnection('203.0.113.1')];
    expect(granted(2, () => a.allowEvent(none, 0))).toBe(2);
    expect(granted(2, () => b.allowEvent(none, 0))).toBe(1); // the address had 3 in all
    expect(rl.allowEvent('203.0.113.1', none, 0)).toBe(false);
    expect(granted(100, () => rl.forConnection('10.1.2.3').allowQuery(none, 0))).toBe(100);
    expect(granted(4, () => rl.forConnection('2001:db8::1').allowQuery(new Set([PK_A]), 0))).toBe(3);
    expect(rl.forConnection('2001:db8::2').allowQuery(none, 0)).toBe(false); // same /64
  });

  it('counts strikes per connection budget', () => {
    const rl = limiter({ disconnectAfter: 2 });
    const [a, b] = [rl.forConnection('203.0.113.1'), rl.forConnection('203.0.113.1')];
    expect([a.refused(0), a.refused(0), a.refused(0)]).toEqual([false, false, true]);
    expect(b.refused(0)).toBe(false);
  });

  it('never refuses a connection with an exempt pubkey authenticated', () => {
    const rl = limiter({ exempt: [PK_A] });
    expect(granted(100, () => rl.allowEvent('203.0.113.1', new Set([PK_B, PK_A]), 0))).toBe(100);
    expect(granted(4, () => rl.allowEvent('203.0.113.1', new Set([PK_B]), 0))).toBe(3); // nothing was charged
  });

  it('refills message budgets over time', () => {
    const rl = limiter();
    granted(3, () => rl.allowEvent('203.0.113.1', none, 0));
    expect(rl.allowEvent('203.0.113.1', none, 999)).toBe(false);
    expect(rl.allowEvent('203.0.113.1', none, 1000)).toBe(true);
  });

  it('shares one budget across a /64 and not across /64s', () => {
    const rl = limiter();
    expect(granted(3, () => rl.allowEvent('2001:db8:1:2::1', none, 0))).toBe(3);
    expect(rl.allowEvent('2001:db8:1:2:dead:beef:0:1', none, 0)).toBe(false);
    expect(rl.allowEvent('2001:db8:1:3::1', none, 0)).toBe(true);
  });

  it('shares one budget between an IPv4 address and its IPv4-mapped form', () => {
    const rl = limiter();
    granted(3, () => rl.allowEvent('203.0.113.1', none, 0));
    expect(rl.allowEvent('::ffff:203.0.113.1', none, 0)).toBe(false);
  });

  it('allows everything when a family is off', () => {
    const rl = limiter({ eventsPerSecond: 0, reqsBurst: 0 });
    expect(granted(100, () => rl.allowEvent('203.0.113.1', new Set([PK_A]), 0))).toBe(100);
    expect(granted(100, () => rl.allowQuery('203.0.113.1', new Set([PK_A]), 0))).toBe(100);
  });
});

describe('RateLimiter: bytes of events awaiting OK', () => {
  it('refuses an event that would take its address past the cap, over all its connections', () => {
    const rl = limiter({ maxPendingBytesPerAddress: 1000 });
    const [a, b] = [rl.forConnection('203.0.113.1'), rl.forConnection('203.0.113.1')];
    expect(a.holdPending(600, none)).toBeDefined();
    expect(b.holdPending(400, none)).toBeDefined();
    expect(b.holdPending(1, none)).toBeUndefined();
    expect(rl.forConnection('2001:db8::1').holdPending(1000, none)).toBeDefined(); // another address
  });

  it('frees the bytes once the event is answered, and refused ones were never counted', () => {
    const rl = limiter({ maxPendingBytesPerAddress: 1000 });
    const c = rl.forConnection('203.0.113.1');
    const release = c.holdPending(900, none)!;
    expect(c.holdPending(200, none)).toBeUndefined();
    release();
    expect(c.holdPending(1000, none)).toBeDefined();
  });

  it('lets the first event through whatever its size', () => {
    const rl = limiter({ maxPendingBytesPerAddress: 1000 });
    const c = rl.forConnection('203.0.113.1');
    expect(c.holdPending(5000, none)).toBeDefined();
    expect(c.holdPending(1, none)).toBeUndefined();
  });

  it('shares one cap across a /64', () => {
    const rl = limiter({ maxPendingBytesPerAddress: 1000 });
    expect(rl.forConnection('2001:db8:1:2::1').holdPending(1000, none)).toBeDefined();
    expect(rl.forConnection('2001:db8:1:2::2').holdPending(1, none)).toBeUndefined();
  });

  it('does not count an exempt address, a connection with an exempt key, or any address with a cap of 0', () => {
    const rl = limiter({ maxPendingBytesPerAddress: 1000, exempt: ['10.0.0.0/8', PK_A] });
    expect(granted(10, () => rl.forConnection('10.1.2.3').holdPending(1000, none) !== undefined)).toBe(10);
    const c = rl.forConnection('203.0.113.1');
    expect(granted(10, () => c.holdPending(1000, new Set([PK_A])) !== undefined)).toBe(10);
    expect(c.holdPending(1000, none)).toBeDefined(); // nothing was counted for it
    const uncapped = limiter().forConnection('203.0.113.1');
    expect(granted(10, () => uncapped.holdPending(1000, none) !== undefined)).toBe(10);
  });
});

describe('RateLimiter: connections', () => {
  it('refuses past the open-connection cap per address', () => {
    const rl = limiter({ maxConnectionsPerAddress: 2, connectionsBurst: 100 });
    expect(rl.openConnection('203.0.113.1', 0)).toBe('ok');
    expect(rl.openConnection('203.0.113.1', 0)).toBe('ok');
    expect(rl.openConnection('203.0.113.1', 0)).toBe('cap');
    expect(rl.openConnection('203.0.113.2', 0)).toBe('ok');
  });

  it('frees a slot on close and keeps no entry for an address with none open', () => {
    const rl = limiter({ maxConnectionsPerAddress: 1, connectionsBurst: 100 });
    expect(rl.openConnection('203.0.113.1', 0)).toBe('ok');
    expect(rl.openConnection('203.0.113.1', 0)).toBe('cap');
    rl.closeConnection('203.0.113.1');
    expect(rl.connectedAddresses).toBe(0);
    expect(rl.openConnection('203.0.113.1', 0)).toBe('ok');
    expect(rl.connectedAddresses).toBe(1);
  });

  it('ignores a close with nothing open', () => {
    const rl = limiter();
    rl.closeConnection('203.0.113.1');
    expect(rl.connectedAddresses).toBe(0);
  });

  it('refuses an address opening connections too fast, and refills per minute', () => {
    const rl = limiter({ connectionsPerMinute: 6, connectionsBurst: 2 }); // one every 10 s
    expect(rl.openConnection('203.0.113.1', 0)).toBe('ok');
    expect(rl.openConnection('203.0.113.1', 0)).toBe('ok');
    expect(rl.openConnection('203.0.113.1', 0)).toBe('rate');
    expect(rl.openConnection('203.0.113.2', 0)).toBe('ok');
    expect(rl.openConnection('203.0.113.1', 9_999)).toBe('rate');
    expect(rl.openConnection('203.0.113.1', 10_000)).toBe('ok');
  });

  it('spends no connection token on an attempt refused by the cap', () => {
    const rl = limiter({ maxConnectionsPerAddress: 1, connectionsBurst: 2, connectionsPerMinute: 1 });
    rl.openConnection('203.0.113.1', 0);
    for (let i = 0; i < 10; i++) expect(rl.openConnection('203.0.113.1', 0)).toBe('cap');
    rl.closeConnection('203.0.113.1');
    expect(rl.openConnection('203.0.113.1', 0)).toBe('ok');
  });

  it('counts a refused open as not open', () => {
    const rl = limiter({ connectionsBurst: 1 });
    rl.openConnection('203.0.113.1', 0);
    expect(rl.openConnection('203.0.113.1', 0)).toBe('rate');
    rl.closeConnection('203.0.113.1');
    expect(rl.connectedAddresses).toBe(0);
  });

  it('caps connections per /64', () => {
    const rl = limiter({ maxConnectionsPerAddress: 1, connectionsBurst: 100 });
    expect(rl.openConnection('2001:db8:1:2::1', 0)).toBe('ok');
    expect(rl.openConnection('2001:db8:1:2::2', 0)).toBe('cap');
    expect(rl.openConnection('2001:db8:1:3::1', 0)).toBe('ok');
  });

  it('never refuses an exempt address but counts its connections', () => {
    const rl = limiter({ exempt: ['127.0.0.1'], maxConnectionsPerAddress: 1, connectionsBurst: 1 });
    for (let i = 0; i < 10; i++) expect(rl.openConnection('127.0.0.1', 0)).toBe('ok');
    expect(rl.connectedAddresses).toBe(1);
    for (let i = 0; i < 10; i++) rl.closeConnection('127.0.0.1');
    expect(rl.connectedAddresses).toBe(0);
  });

  it('has no cap with maxConnectionsPerAddress 0', () => {
    const rl = limiter({ maxConnectionsPerAddress: 0, connectionsBurst: 1000 });
    expect(granted(1000, () => rl.openConnection('203.0.113.1', 0) === 'ok')).toBe(1000);
  });
});

describe('RateLimiter: strikes', () => {
  it('disconnects on more than disconnectAfter refusals within 10 s', () => {
    const strikes = limiter({ disconnectAfter: 5 }).strikes();
    for (let i = 0; i < 5; i++) expect(strikes.refused(i * 100)).toBe(false);
    expect(strikes.refused(600)).toBe(true);
  });

  it('does not disconnect when the refusals are spread out', () => {
    const strikes = limiter({ disconnectAfter: 5 }).strikes();
    for (let i = 0; i < 100; i++) expect(strikes.refused(i * 2_000)).toBe(false); // 5 per 10 s
  });

  it('forgets refusals older than 10 s', () => {
    const strikes = limiter({ disconnectAfter: 5 }).strikes();
    for (let i = 0; i < 5; i++) strikes.refused(0);
    for (let i = 0; i < 5; i++) expect(strikes.refused(10_000)).toBe(false);
  });

  it('counts strikes per connection', () => {
    const rl = limiter({ disconnectAfter: 2 });
    const a = rl.strikes();
    const b = rl.strikes();
    a.refused(0);
    a.refused(0);
    expect(b.refused(0)).toBe(false);
    expect(a.refused(0)).toBe(true);
  });

  it('never disconnects with disconnectAfter 0', () => {
    const strikes = limiter({ disconnectAfter: 0 }).strikes();
    expect(granted(1000, () => !strikes.refused(0))).toBe(1000);
  });
});
