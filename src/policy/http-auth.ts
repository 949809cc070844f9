// NIP-98 HTTP authentication, as the NIP-86 management API requires it (protocol.md 12): an
// `Authorization: Nostr <base64 of a kind 27235 event>` header whose event is signed, recent, names
// the request's URL and method, and carries the sha256 of the body. Checked strictly: every check
// that can fail has its own reason, and the caller answers 401 with it.
import { createHash } from 'node:crypto';
import { checkIdAndSignature, parseEvent } from '../nostr/event.js';
import { firstTagValue } from '../nostr/tags.js';
import { relayIdentity } from './auth.js';

export const KIND_HTTP_AUTH = 27235;
/** NIP-98: created_at "within a reasonable time window (suggestion 60 seconds)". */
export const HTTP_AUTH_WINDOW_SECONDS = 60;
/** Larger headers are refused before decoding (an event of a few tags is a few hundred bytes). */
const MAX_HEADER_LENGTH = 8192;

export interface HttpAuthRequest {
  authorization: string | undefined;
  /** The request URL as this relay names itself (relayIdentity of RELAY_URL or Host + path), plus its query. */
  url: string;
  method: string;
  body: Buffer;
  now: number;
}

export type HttpAuthResult = { ok: true; pubkey: string; id: string } | { ok: false; error: string };

const fail = (error: string): HttpAuthResult => ({ ok: false, error });

/** A URL as the `u` tag is compared: scheme-insensitive host and path (relayIdentity), and the query. */
export function requestIdentity(url: string): string | undefined {
  const identity = relayIdentity(url);
  if (identity === undefined) return undefined;
  return identity + new URL(url.trim()).search;
}

export function checkHttpAuth(req: HttpAuthRequest): HttpAuthResult {
  const header = req.authorization;
  if (!header) return fail('an Authorization: Nostr header (NIP-98) is required');
  if (header.length > MAX_HEADER_LENGTH) return fail('the Authorization header is too long');
  const encoded = /^Nostr ([A-Za-z0-9+/_-]+={0,2})$/.exec(header)?.[1];
  if (!encoded) return fail('the Authorization header must be "Nostr <base64 event>"');
  let input: unknown;
  try {
    input = JSON.parse(Buffer.from(encoded, 'base64').toString('utf8'));
  } catch {
    return fail('the Authorization event is not base64-encoded JSON');
  }
  const parsed = parseEvent(input);
  if (!parsed.ok) return fail(`the Authorization event is malformed: ${parsed.reason}`);
  const e = parsed.value;
  if (e.kind !== KIND_HTTP_AUTH) return fail(`the Authorization event must have kind ${KIND_HTTP_AUTH}`);
  if (Math.abs(e.created_at - req.now) > HTTP_AUTH_WINDOW_SECONDS)
    return fail(`the Authorization event's created_at must be within ${HTTP_AUTH_WINDOW_SECONDS} seconds of now`);
  const u = firstTagValue(e.tags, 'u');
  if (u === undefined || requestIdentity(u) !== req.url) return fail('the u tag does not name this URL');
  if (firstTagValue(e.tags, 'method') !== req.method) return fail(`the method tag must be ${req.method}`);
  const payload = firstTagValue(e.tags, 'payload');
  if (payload === undefined) return fail('the payload tag (sha256 of the body) is required');
  if (payload !== createHash('sha256').update(req.body).digest('hex')) return fail('the payload tag is not the sha256 of the body');
  const invalid = checkIdAndSignature(e);
  if (invalid) return fail(`the Authorization event is not valid: ${invalid}`);
  return { ok: true, pubkey: e.pubkey, id: e.id };
}
