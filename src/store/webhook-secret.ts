// A Standard Webhooks secret: `whsec_` and the base64 of 24 to 64 random bytes. The relay's webhook
// endpoints are given one each (webhook-endpoints.ts); MEMBERSHIP_WEBHOOK_SECRET is one too (config.ts).
import { randomBytes } from 'node:crypto';

const SECRET = /^whsec_([A-Za-z0-9+/]+={0,2})$/;
const SECRET_BYTES = { min: 24, max: 64 };

export function generateSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/** Why a secret is refused, or undefined when it is a usable `whsec_` secret. */
export function checkSecret(secret: string): string | undefined {
  const m = SECRET.exec(secret);
  if (!m || m[1].length % 4 !== 0) return 'the secret must be "whsec_" followed by base64';
  const bytes = Buffer.from(m[1], 'base64').length;
  if (bytes < SECRET_BYTES.min || bytes > SECRET_BYTES.max) return `the secret must hold ${SECRET_BYTES.min} to ${SECRET_BYTES.max} bytes (it holds ${bytes})`;
  return undefined;
}

