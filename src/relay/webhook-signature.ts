// Standard Webhooks signatures (https://www.standardwebhooks.com): the headers a receiver verifies
// with the `standardwebhooks` package in any language. The signed content is
// `${webhook-id}.${webhook-timestamp}.${body}`, HMAC-SHA256 with the secret's bytes (the base64 after
// `whsec_`), sent as `v1,<base64>`. webhook-id stays the same across retries, so receivers can
// deduplicate.
import { createHmac } from 'node:crypto';

export function secretKey(secret: string): Buffer {
  return Buffer.from(secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret, 'base64');
}

export function signatureHeaders(id: string, timestampSeconds: number, body: string, key: Buffer): Record<string, string> {
  const signature = createHmac('sha256', key).update(`${id}.${timestampSeconds}.${body}`).digest('base64');
  return { 'webhook-id': id, 'webhook-timestamp': String(timestampSeconds), 'webhook-signature': `v1,${signature}` };
}
