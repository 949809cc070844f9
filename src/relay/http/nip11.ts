// NIP-11 relay information document, served on the relay's endpoint to `Accept: application/nostr+json`;
// other GETs there get a short human page.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Config } from '../../config.js';
import { writesRestricted, type Policy } from '../../policy/policy.js';
import { SOFTWARE_URL, VERSION } from '../../version.js';
import type { HttpHandler, Route } from './router.js';

export const SUPPORTED_NIPS = [1, 9, 11, 13, 40, 42, 45, 50, 62, 70, 77];

/** NIP-86: the management API carries out methods only for ADMIN_PUBKEYS; with none, every call gets 403. */
export function supportedNips(config: Pick<Config, 'ADMIN_PUBKEYS'>): number[] {
  return config.ADMIN_PUBKEYS.length > 0 ? [...SUPPORTED_NIPS, 86] : SUPPORTED_NIPS;
}

/**
 * Built per request from the current moderation lists: an admin may have renamed the relay (their
 * name wins) or changed an allow list.
 */
export function relayInformation(config: Config, policy: Policy) {
  const { limits } = policy;
  const changed = policy.moderation.current.relayInfo;
  return {
    name: changed.name ?? config.RELAY_NAME,
    description: changed.description ?? config.RELAY_DESCRIPTION,
    ...(changed.icon ? { icon: changed.icon } : {}),
    ...(config.RELAY_PUBKEY ? { pubkey: config.RELAY_PUBKEY } : {}),
    ...(config.RELAY_CONTACT ? { contact: config.RELAY_CONTACT } : {}),
    ...(config.RELAY_PAYMENTS_URL ? { payments_url: config.RELAY_PAYMENTS_URL } : {}),
    ...(config.RELAY_FEES ? { fees: config.RELAY_FEES } : {}),
    supported_nips: supportedNips(config),
    software: SOFTWARE_URL,
    version: VERSION,
    limitation: {
      max_message_length: limits.maxMessageBytes,
      max_subscriptions: limits.maxSubscriptions,
      max_filters: limits.maxFilters,
      max_limit: limits.maxLimit,
      default_limit: limits.defaultLimit,
      max_subid_length: limits.maxSubidLength,
      max_event_tags: limits.maxEventTags,
      max_content_length: limits.maxContentLength,
      min_pow_difficulty: limits.minPowDifficulty,
      // NIP-11: auth_required means AUTH before any other action; AUTH_REQUIRED=writes restricts writes only.
      auth_required: config.AUTH_REQUIRED === 'all',
      payment_required: config.RELAY_PAYMENT_REQUIRED,
      restricted_writes: writesRestricted(policy, config),
      created_at_lower_limit: limits.createdAtPastSeconds || undefined,
      created_at_upper_limit: limits.createdAtFutureSeconds,
    },
  };
}

/**
 * NIP-11: relays MUST send CORS headers with the document. NIP-86 admin tools in a browser POST
 * with an Authorization header, which a "*" does not cover: it is named.
 */
export const CORS = {
  'Access-Control-Allow-Origin': '*',
  'Access-Control-Allow-Headers': 'Authorization, *',
  'Access-Control-Allow-Methods': 'GET, POST, OPTIONS',
};

export interface EndpointHandlers {
  /** The NIP-11 document, built per request (an admin may have changed the name or a list). */
  info(): object;
  /** POST: the NIP-86 management API. */
  management?: HttpHandler;
  /** GET for a browser (Accept: text/html): the status page. */
  statusPage?: HttpHandler;
}

/** The relay's endpoint: NIP-11, NIP-86, the status page, CORS preflight, or a short human page. */
export function relayEndpoint(h: EndpointHandlers): Route {
  return {
    methods: ['GET', 'HEAD', 'OPTIONS', 'POST'],
    headers: CORS,
    handle(req: IncomingMessage, res: ServerResponse) {
      if (req.method === 'OPTIONS') {
        res.writeHead(204, CORS).end();
        return;
      }
      if (req.method === 'POST') {
        if (h.management) return h.management(req, res);
        res.writeHead(405, { ...CORS, Allow: 'GET, HEAD, OPTIONS' }).end();
        return;
      }
      const accept = req.headers.accept ?? '';
      if (accept.includes('application/nostr+json')) {
        res.writeHead(200, { ...CORS, 'Content-Type': 'application/nostr+json' }).end(JSON.stringify(h.info()));
        return;
      }
      if (h.statusPage && accept.includes('text/html')) return h.statusPage(req, res);
      res
        .writeHead(200, { ...CORS, 'Content-Type': 'text/plain; charset=utf-8' })
        .end('This is a Nostr relay. Connect with a Nostr client over WebSocket (wss://) to this address.\n');
    },
  };
}
