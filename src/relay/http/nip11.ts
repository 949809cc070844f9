// NIP-11 relay information document, served on the relay's endpoint to `Accept: application/nostr+json`;
// other GETs there get a short human page.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Config } from '../../config.js';
import type { Limits } from '../../policy/limits.js';
import { SOFTWARE_URL, VERSION } from '../../version.js';
import type { Route } from './router.js';

export const SUPPORTED_NIPS = [1, 9, 11, 13, 40, 42, 45, 70];

export function relayInformation(config: Config, limits: Limits) {
  return {
    name: config.RELAY_NAME,
    description: config.RELAY_DESCRIPTION,
    ...(config.RELAY_PUBKEY ? { pubkey: config.RELAY_PUBKEY } : {}),
    ...(config.RELAY_CONTACT ? { contact: config.RELAY_CONTACT } : {}),
    supported_nips: SUPPORTED_NIPS,
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
      payment_required: false,
      restricted_writes: limits.minPowDifficulty > 0 || config.AUTH_REQUIRED !== 'none',
      created_at_lower_limit: limits.createdAtPastSeconds || undefined,
      created_at_upper_limit: limits.createdAtFutureSeconds,
    },
  };
}

/** NIP-11: relays MUST send CORS headers with the document. */
export const CORS = {
  'Access-Control-Allow-Origin': '*',
  'Access-Control-Allow-Headers': '*',
  'Access-Control-Allow-Methods': 'GET, OPTIONS',
};

/** The relay's endpoint: the NIP-11 document, CORS preflight, or a short human page. */
export function relayEndpoint(info: object): Route {
  const document = JSON.stringify(info);
  return {
    methods: ['GET', 'HEAD', 'OPTIONS'],
    headers: CORS,
    handle(req: IncomingMessage, res: ServerResponse) {
      if (req.method === 'OPTIONS') {
        res.writeHead(204, CORS).end();
        return;
      }
      if ((req.headers.accept ?? '').includes('application/nostr+json')) {
        res.writeHead(200, { ...CORS, 'Content-Type': 'application/nostr+json' }).end(document);
        return;
      }
      res
        .writeHead(200, { ...CORS, 'Content-Type': 'text/plain; charset=utf-8' })
        .end('This is a Nostr relay. Connect with a Nostr client over WebSocket (wss://) to this address.\n');
    },
  };
}
