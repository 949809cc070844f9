// NIP-42 authentication (protocol.md 6): the AUTH event a client answers the challenge with, and the
// rules that depend on who is authenticated. Kind 22242 is never stored nor broadcast.
import type { NostrEvent } from '../nostr/event.js';
import { KIND_AUTH } from '../nostr/kinds.js';
import * as reason from '../nostr/reason.js';
import { firstTagValue } from '../nostr/tags.js';
import type { ReadRule, WriteRule } from './session.js';

export type AuthRequired = 'none' | 'writes' | 'all';

/** How far created_at of an AUTH event may be from now (NIP-42: "about 10 minutes"). */
export const AUTH_WINDOW_SECONDS = 600;

/**
 * Pubkeys one connection may authenticate. NIP-42 lets several count; a bound keeps a connection's
 * session small and the private-kinds SQL (one author and one `#p` value per key) short.
 */
export const MAX_AUTHENTICATED_PUBKEYS = 32;

export const authEventAsEvent: WriteRule = function authEventAsEvent(e) {
  return e.kind === KIND_AUTH ? reason.invalid(`kind ${KIND_AUTH} is for AUTH messages and is never stored or broadcast`) : undefined;
};

/**
 * A relay URL as NIP-42 compares it: host (lower case, default port dropped) and path without a
 * trailing slash. The scheme does not matter (ws, wss, http, https name the same relay); the host and
 * the path do. Undefined when it is not a URL.
 */
export function relayIdentity(url: string): string | undefined {
  let u: URL;
  try {
    u = new URL(url.trim());
  } catch {
    return undefined;
  }
  if (!['ws:', 'wss:', 'http:', 'https:'].includes(u.protocol) || !u.host) return undefined;
  // URL drops the default port of its own scheme only; ws/http and wss/https share 80 and 443.
  const host = u.port === '80' || u.port === '443' ? u.hostname : u.host;
  return `${host}${u.pathname.replace(/\/+$/, '')}`;
}

/**
 * Checks an AUTH event against this connection's challenge and this relay's identity (from
 * RELAY_URL, or the Host header and path of the connection's upgrade). The id and signature are
 * checked by the caller, on the verifier's threads. Returns the refusal, or undefined.
 */
export function checkAuthEvent(e: NostrEvent, challenge: string, relay: string | undefined, now: number): reason.Reason | undefined {
  if (e.kind !== KIND_AUTH) return reason.invalid(`an AUTH event has kind ${KIND_AUTH}`);
  if (Math.abs(e.created_at - now) > AUTH_WINDOW_SECONDS)
    return reason.invalid(`created_at of an AUTH event must be within ${AUTH_WINDOW_SECONDS / 60} minutes of now`);
  if (firstTagValue(e.tags, 'challenge') !== challenge) return reason.invalid('the challenge tag does not match the challenge sent on this connection');
  const tagged = firstTagValue(e.tags, 'relay');
  if (relay === undefined || tagged === undefined || relayIdentity(tagged) !== relay)
    return reason.invalid('the relay tag does not name this relay');
  return undefined;
}

/** AUTH_REQUIRED=writes or all: a connection with no authenticated pubkey may not publish. */
export function authRequiredForWrites(mode: AuthRequired): WriteRule | undefined {
  if (mode === 'none') return undefined;
  return function notAuthenticated(_e, session) {
    return session.origin === 'connection' && session.pubkeys.size === 0 ? reason.authRequired('this relay accepts events only from authenticated users') : undefined;
  };
}

/** AUTH_REQUIRED=all: a connection with no authenticated pubkey may not read either. */
export function authRequiredForReads(mode: AuthRequired): ReadRule | undefined {
  if (mode !== 'all') return undefined;
  return {
    name: 'notAuthenticated',
    refuse: (_filters, session) =>
      session.origin === 'connection' && session.pubkeys.size === 0 ? reason.authRequired('this relay serves authenticated users only') : undefined,
  };
}
