// Rate limits: token buckets per client address and per authenticated pubkey. Whatever a client does,
// the memory they take stays bounded (idle buckets are dropped as we go, and there is a hard cap), and
// every check is O(1), so the limiter cannot itself become the thing a flood exhausts.
import { isIP } from 'node:net';
import { addressList, normalizeAddress, type AddressList } from './client-address.js';

/** Milliseconds on a monotonic clock: the default `now` everywhere below. */
const clock = (): number => performance.now();

interface Bucket {
  tokens: number; // as of `at`
  at: number;
}

/** Tokens in a bucket at `now`: what it held plus the refill since, up to capacity. */
function refilled(bucket: Bucket, now: number, perMs: number, capacity: number): number {
  return Math.min(capacity, bucket.tokens + Math.max(0, now - bucket.at) * perMs);
}

/**
 * Many buckets keyed by string, each `burst` tokens refilled at `ratePerSecond`, lazily on access.
 * A full bucket is the same as no bucket, so full ones are never stored and idle ones are dropped:
 * the Map is kept in least-recently-used order (delete + set on each take), and each take drops at
 * most two full buckets from its front, one more than a take can add, so it drains with no pause.
 * Past `maxKeys` the least recently used bucket goes too: under a flood of fresh keys that forgives
 * the oldest one its debt, which is the price of bounded memory.
 * A rate or burst of 0 turns the family off: every take succeeds and nothing is stored.
 */
export class TokenBuckets {
  private readonly buckets = new Map<string, Bucket>();
  private readonly perMs: number;
  private readonly maxKeys: number;
  readonly enabled: boolean;

  constructor(
    ratePerSecond: number,
    private readonly burst: number,
    options: { maxKeys?: number } = {},
  ) {
    this.enabled = ratePerSecond > 0 && burst > 0;
    this.perMs = ratePerSecond / 1000;
    this.maxKeys = options.maxKeys ?? 100_000;
  }

  /** Buckets held. */
  get size(): number {
    return this.buckets.size;
  }

  private tokens(key: string, now: number): number {
    const bucket = this.buckets.get(key);
    return bucket === undefined ? this.burst : refilled(bucket, now, this.perMs, this.burst);
  }

  /** Whether `take` would succeed now; takes nothing and does not count as a use. */
  has(key: string, now: number, cost = 1): boolean {
    return !this.enabled || this.tokens(key, now) >= cost;
  }

  /** Takes `cost` tokens from the key's bucket if it holds that many; false (taking nothing) if not. */
  take(key: string, now: number, cost = 1): boolean {
    if (!this.enabled) return true;
    const tokens = this.tokens(key, now);
    const ok = tokens >= cost;
    const left = ok ? tokens - cost : tokens;
    this.buckets.delete(key); // re-set below, at the back: most recently used
    if (left < this.burst) this.buckets.set(key, { tokens: left, at: now });
    this.evict(now);
    return ok;
  }

  private evict(now: number): void {
    let dropped = 0;
    for (const [key, bucket] of this.buckets) {
      if (dropped === 2 || refilled(bucket, now, this.perMs, this.burst) < this.burst) break;
      this.buckets.delete(key);
      dropped++;
    }
    if (this.buckets.size > this.maxKeys) this.buckets.delete(this.buckets.keys().next().value!);
  }
}

/**
 * The key an address's budgets are kept under. IPv4 as is; IPv6 by its /64 prefix, because a host is
 * usually given a whole /64 and can pick a fresh address in it for every connection, so a limit on
 * single IPv6 addresses would be no limit at all. IPv4-mapped IPv6 counts as the IPv4 address.
 * Anything that is not an address ("unknown") is its own key.
 */
export function addressKey(address: string): string {
  const normal = normalizeAddress(address);
  if (normal === undefined || isIP(normal) === 4) return normal ?? address;
  // The canonical form's groups have no leading zeros, so the first four groups name the /64 uniquely.
  const [head, tail] = normal.split('::');
  const groups = head === '' ? [] : head.split(':');
  if (tail !== undefined) {
    const tailGroups = tail === '' ? [] : tail.split(':'); // a dotted IPv4 tail is last and beyond group 4
    groups.push(...Array<string>(Math.max(0, 8 - groups.length - tailGroups.length)).fill('0'), ...tailGroups);
  }
  return groups.slice(0, 4).join(':') + '::/64';
}

export interface RateLimitSettings {
  /** EVENT and AUTH messages, per address and per authenticated pubkey. 0 = off. */
  eventsPerSecond: number;
  eventsBurst: number;
  /** REQ and COUNT messages, per address and per authenticated pubkey. 0 = off. */
  reqsPerSecond: number;
  reqsBurst: number;
  /** New connections per address. 0 = off. */
  connectionsPerMinute: number;
  connectionsBurst: number;
  /** Open connections per address; 0 = no cap. */
  maxConnectionsPerAddress: number;
  /** Bytes of EVENT messages awaiting their OK per address, over all its connections; 0 = no cap. */
  maxPendingBytesPerAddress: number;
  /** Disconnect a connection refused more than this many times within 10 s; 0 = never. */
  disconnectAfter: number;
  /** 64-hex pubkeys, IP addresses and CIDR blocks that no limit applies to. */
  exempt: readonly string[];
  /** Buckets kept per family (see TokenBuckets). */
  maxKeys?: number;
}

export type ConnectionVerdict = 'ok' | 'rate' | 'cap';

/** A connection's message budgets (RateLimiter.forConnection). */
export interface ConnectionBudget {
  /** An EVENT or AUTH message, charged to the address and every authenticated pubkey. */
  allowEvent(pubkeys: ReadonlySet<string>, now?: number): boolean;
  /** A REQ or COUNT message, the same way. */
  allowQuery(pubkeys: ReadonlySet<string>, now?: number): boolean;
  /** Counts a refused message; true when the connection must now be closed (see ConnectionStrikes). */
  refused(now?: number): boolean;
  /**
   * An EVENT message of `bytes` now awaiting its OK, counted against its address: the function that
   * releases it once answered, or undefined (counting nothing) when it would pass the address's cap.
   */
  holdPending(bytes: number, pubkeys: ReadonlySet<string>): (() => void) | undefined;
}

const nothingHeld = (): void => undefined;

const STRIKE_WINDOW_MS = 10_000;

/** Refusals of one connection's messages: too many too fast and it is to be disconnected. */
export class ConnectionStrikes {
  private readonly bucket: Bucket;

  constructor(private readonly limit: number) {
    this.bucket = { tokens: limit, at: 0 };
  }

  /** Counts one refusal; true when this one is more than `limit` within a sliding 10 s. */
  refused(now = clock()): boolean {
    if (this.limit === 0) return false;
    const tokens = refilled(this.bucket, now, this.limit / STRIKE_WINDOW_MS, this.limit);
    const disconnect = tokens < 1;
    this.bucket.tokens = disconnect ? tokens : tokens - 1;
    this.bucket.at = now;
    return disconnect;
  }
}

/** One family's budget, charged per address and per authenticated pubkey. */
interface Budget {
  byAddress: TokenBuckets;
  byPubkey: TokenBuckets; // a separate map, so a flood of fresh pubkeys cannot evict address buckets
}

/** The relay's limits: messages, connections, and when to hang up. */
export class RateLimiter {
  private readonly events: Budget;
  private readonly queries: Budget;
  private readonly connections: TokenBuckets;
  private readonly open = new Map<string, number>(); // address key → open connections; never 0
  private readonly pending = new Map<string, number>(); // address key → bytes awaiting OK; never 0
  private readonly exemptPubkeys: ReadonlySet<string>;
  private readonly exemptAddresses: AddressList | undefined;

  constructor(private readonly settings: RateLimitSettings) {
    const options = { maxKeys: settings.maxKeys };
    const budget = (rate: number, burst: number): Budget => ({
      byAddress: new TokenBuckets(rate, burst, options),
      byPubkey: new TokenBuckets(rate, burst, options),
    });
    this.events = budget(settings.eventsPerSecond, settings.eventsBurst);
    this.queries = budget(settings.reqsPerSecond, settings.reqsBurst);
    this.connections = new TokenBuckets(settings.connectionsPerMinute / 60, settings.connectionsBurst, options);
    const pubkey = (entry: string) => /^[0-9a-f]{64}$/.test(entry);
    this.exemptPubkeys = new Set(settings.exempt.filter(pubkey));
    const addresses = settings.exempt.filter((entry) => !pubkey(entry));
    this.exemptAddresses = addresses.length ? addressList(addresses) : undefined;
  }

  /** An EVENT or AUTH message. */
  allowEvent(address: string, pubkeys: ReadonlySet<string>, now = clock()): boolean {
    return this.allow(this.events, addressKey(address), this.isExemptAddress(address), pubkeys, now);
  }

  /** A REQ or COUNT message. */
  allowQuery(address: string, pubkeys: ReadonlySet<string>, now = clock()): boolean {
    return this.allow(this.queries, addressKey(address), this.isExemptAddress(address), pubkeys, now);
  }

  /**
   * One connection's budgets, with its address key and exemption worked out once (its address never
   * changes), so a message costs only the bucket lookups: the relay's hot path uses this.
   */
  forConnection(address: string): ConnectionBudget {
    const key = addressKey(address);
    const exempt = this.isExemptAddress(address);
    const strikes = this.strikes();
    return {
      allowEvent: (pubkeys, now = clock()) => this.allow(this.events, key, exempt, pubkeys, now),
      allowQuery: (pubkeys, now = clock()) => this.allow(this.queries, key, exempt, pubkeys, now),
      refused: (now) => strikes.refused(now),
      holdPending: (bytes, pubkeys) => this.holdPending(key, exempt || this.hasExemptPubkey(pubkeys), bytes),
    };
  }

  /**
   * MAX_PENDING_EVENTS counts per connection, and an address may open many: this counts the bytes
   * per address, since the memory an event holds until its OK grows with its size. The first event
   * is let through whatever its size, so a cap below MAX_MESSAGE_BYTES cannot refuse everything.
   */
  private holdPending(key: string, exempt: boolean, bytes: number): (() => void) | undefined {
    const cap = this.settings.maxPendingBytesPerAddress;
    if (cap === 0 || exempt) return nothingHeld;
    const held = this.pending.get(key) ?? 0;
    if (held > 0 && held + bytes > cap) return undefined;
    this.pending.set(key, held + bytes);
    return () => {
      const left = (this.pending.get(key) ?? 0) - bytes;
      if (left <= 0) this.pending.delete(key);
      else this.pending.set(key, left);
    };
  }

  /**
   * The address is always charged (keys are free: authenticating fresh ones must not buy a flooder a
   * fresh budget), and so is every authenticated pubkey (one user spread over many addresses). All
   * buckets are checked first and charged only if all have a token, so a refusal costs nothing.
   */
  private allow(budget: Budget, key: string, exemptAddress: boolean, pubkeys: ReadonlySet<string>, now: number): boolean {
    if (!budget.byAddress.enabled || exemptAddress || this.hasExemptPubkey(pubkeys)) return true;
    if (!budget.byAddress.has(key, now)) return false;
    for (const pubkey of pubkeys) if (!budget.byPubkey.has(pubkey, now)) return false;
    budget.byAddress.take(key, now);
    for (const pubkey of pubkeys) budget.byPubkey.take(pubkey, now);
    return true;
  }

  private isExemptAddress(address: string): boolean {
    return this.exemptAddresses?.has(address) ?? false;
  }

  private hasExemptPubkey(pubkeys: ReadonlySet<string>): boolean {
    if (this.exemptPubkeys.size === 0) return false;
    for (const pubkey of pubkeys) if (this.exemptPubkeys.has(pubkey)) return true;
    return false;
  }

  /**
   * A new connection from the address: 'cap' when it already has the most open connections allowed,
   * 'rate' when it opens them too fast, else 'ok' and it counts as open until closeConnection.
   * Exempt addresses are never refused, but counted so that closing stays symmetrical.
   */
  openConnection(address: string, now = clock()): ConnectionVerdict {
    const key = addressKey(address);
    const open = this.open.get(key) ?? 0;
    if (!this.exemptAddresses?.has(address)) {
      const cap = this.settings.maxConnectionsPerAddress;
      if (cap > 0 && open >= cap) return 'cap'; // checked first: a capped attempt spends no token
      if (!this.connections.take(key, now)) return 'rate';
    }
    this.open.set(key, open + 1);
    return 'ok';
  }

  /** A connection that openConnection accepted has closed. */
  closeConnection(address: string): void {
    const key = addressKey(address);
    const open = this.open.get(key) ?? 0;
    if (open <= 1) this.open.delete(key);
    else this.open.set(key, open - 1);
  }

  /** Address keys with open connections. */
  get connectedAddresses(): number {
    return this.open.size;
  }

  /** A fresh strike count for a new connection. */
  strikes(): ConnectionStrikes {
    return new ConnectionStrikes(this.settings.disconnectAfter);
  }
}
