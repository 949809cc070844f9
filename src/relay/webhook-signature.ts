// Standard Webhooks signatures (https://www.standardwebhooks.com): the headers a receiver verifies
// with the `standardwebhooks` package in any language. The signed content is
// `${webhook-id}.${webhook-timestamp}.${body}`, HMAC-SHA256 with the secret's bytes (the base64 after
// `whsec_`), sent as `v1,<base64>`. webhook-id stays the same across retries, so receivers can
// deduplicate. The relay signs what it delivers, and verifies what payment processors send it
// (POST /memberships).
import { createHmac, timingSafeEqual } from 'node:crypto';

export function secretKey(secret: string): Buffer {
  return Buffer.from(secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret, 'base64');
}

/** The base64 HMAC of one message; `body` as the bytes that travel. */
export function signature(id: string, timestampSeconds: number | string, body: string | Buffer, key: Buffer): string {
  return createHmac('sha256', key).update(`${id}.${timestampSeconds}.`).update(body).digest('base64');
}

export function signatureHeaders(id: string, timestampSeconds: number, body: string, key: Buffer): Record<string, string> {
  return { 'webhook-id': id, 'webhook-timestamp': String(timestampSeconds), 'webhook-signature': `v1,${signature(id, timestampSeconds, body, key)}` };
}

/** How far webhook-timestamp may be from now: the specification's suggestion, against replays. */
export const TIMESTAMP_TOLERANCE_SECONDS = 5 * 60;
const MAX_ID_LENGTH = 256;

export type SignatureCheck = { ok: true; id: string } | { ok: false; error: string };

/**
 * Checks a request's three headers against its body. The signature header may carry several
 * space-separated signatures (a sender rotating its secret); one `v1` that matches is enough, and
 * other versions are ignored. Compared in constant time.
 */
export function verifySignature(
  headers: { id: string | undefined; timestamp: string | undefined; signature: string | undefined },
  body: Buffer,
  key: Buffer,
  now: number,
): SignatureCheck {
  const { id, timestamp, signature: signatures } = headers;
  if (!id || !timestamp || !signatures) return { ok: false, error: 'the webhook-id, webhook-timestamp and webhook-signature headers are all required' };
  if (id.length > MAX_ID_LENGTH || !/^[\x21-\x7e]+$/.test(id)) return { ok: false, error: `the webhook-id must be at most ${MAX_ID_LENGTH} printable characters` };
  if (!/^\d{1,12}$/.test(timestamp)) return { ok: false, error: 'the webhook-timestamp must be unix seconds' };
  if (Math.abs(Number(timestamp) - now) > TIMESTAMP_TOLERANCE_SECONDS)
    return { ok: false, error: `the webhook-timestamp must be within ${TIMESTAMP_TOLERANCE_SECONDS / 60} minutes of now` };
  const expected = Buffer.from(signature(id, timestamp, body, key));
  for (const entry of signatures.split(' ')) {
    const [version, value] = entry.split(',', 2);
    if (version !== 'v1' || value === undefined) continue;
    const given = Buffer.from(value);
    if (given.length === expected.length && timingSafeEqual(given, expected)) return { ok: true, id };
  }
  return { ok: false, error: 'no v1 signature in webhook-signature matches the body' };
}
