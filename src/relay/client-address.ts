// Who the client is. Behind a reverse proxy the socket's peer is the proxy, and the client's address
// arrives in X-Forwarded-For; but that header is just text anyone can send. nostream's TRUST_PROXY
// took it from every peer, so a flooder escaped its rate limits by sending a fresh made-up address
// with each connection (nostream issues #467, #492). Here the header is read only when the peer is a
// proxy we were told to trust, and only as far back as the chain of trusted proxies goes.
import { BlockList, SocketAddress, isIP } from 'node:net';

/** A set of IP addresses and CIDR blocks. */
export interface AddressList {
  /** Whether the address (any form normalizeAddress accepts) is in the set; false for a non-address. */
  has(address: string): boolean;
}

export type TrustedProxies = AddressList;

const LOOPBACK = ['127.0.0.0/8', '::1/128'];

/** A valid IP address in canonical form, IPv4-mapped IPv6 ("::ffff:1.2.3.4") as plain IPv4; else undefined. */
export function normalizeAddress(address: string): string | undefined {
  const family = isIP(address);
  if (family === 4) return address; // isIP accepts dotted decimal only, which is already canonical
  if (family !== 6) return undefined;
  const canonical = new SocketAddress({ address, family: 'ipv6' }).address; // lower case, compressed, no zone
  const mapped = canonical.startsWith('::ffff:') ? canonical.slice(7) : undefined;
  return mapped !== undefined && isIP(mapped) === 4 ? mapped : canonical;
}

/** Entries are addresses or CIDR blocks, already validated by config (isAddressOrCidr). */
export function addressList(entries: readonly string[]): AddressList {
  const list = new BlockList();
  for (const entry of entries) {
    const [address, prefix] = entry.split('/');
    const family = isIP(address) === 4 ? 'ipv4' : 'ipv6';
    if (prefix === undefined) list.addAddress(address, family);
    else list.addSubnet(address, Number(prefix), family);
  }
  return {
    has(address) {
      const normal = normalizeAddress(address);
      // BlockList matches IPv4 against IPv4-mapped rules and the other way round.
      return normal !== undefined && list.check(normal, isIP(normal) === 4 ? 'ipv4' : 'ipv6');
    },
  };
}

/** The proxies whose X-Forwarded-For we believe; undefined means the header is never read. */
export function trustedProxies(entries: readonly string[], trustLoopback: boolean): TrustedProxies | undefined {
  if (entries.length === 0 && !trustLoopback) return undefined;
  return addressList(trustLoopback ? [...entries, ...LOOPBACK] : entries);
}

/** One X-Forwarded-For entry without brackets or port ("[2001:db8::1]:443", "1.2.3.4:5678"), normalised. */
function forwardedAddress(entry: string): string | undefined {
  let address = entry.trim();
  const bracketed = /^\[([^\]]*)\](?::\d+)?$/.exec(address);
  if (bracketed) address = bracketed[1];
  else if (/^[\d.]+:\d+$/.test(address)) address = address.slice(0, address.lastIndexOf(':'));
  return normalizeAddress(address);
}

/**
 * The client's address. X-Forwarded-For is read only when the socket's peer is a trusted proxy; its
 * entries are walked from the right (each proxy appends the address it saw), skipping trusted proxies:
 * the first untrusted one is the client, and if all are trusted the left-most is. An entry that is not
 * an address ends the walk at the last trusted hop: we can vouch for that one, not for what it relayed.
 */
export function clientAddress(
  socketAddress: string | undefined,
  forwardedFor: string | string[] | undefined,
  trusted: TrustedProxies | undefined,
): string {
  if (socketAddress === undefined) return 'unknown';
  const peer = normalizeAddress(socketAddress) ?? socketAddress;
  if (trusted === undefined || forwardedFor === undefined || !trusted.has(peer)) return peer;
  // Several headers form one list, in order (Node joins repeated ones with ", " or gives an array).
  const entries = (Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor).split(',');
  let client = peer;
  for (let i = entries.length - 1; i >= 0; i--) {
    const address = forwardedAddress(entries[i]);
    if (address === undefined) return client;
    client = address;
    if (!trusted.has(address)) return address;
  }
  return client;
}
