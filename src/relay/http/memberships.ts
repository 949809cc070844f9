// POST /memberships: a payment processor (or its glue) tells the relay that a pubkey paid, and the
// relay adds or extends its membership (store/memberships.ts). Body: {"pubkey", "days" or "until",
// "reference"?}. Two ways in:
// - Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature), HMAC with
//   MEMBERSHIP_WEBHOOK_SECRET: what processors send;
// - NIP-98 `Authorization: Nostr …` by a pubkey in ADMIN_PUBKEYS, payload tag required.
// A processor retries until it gets a 2xx: every request is applied once, however often it comes, by
// any relay process (the request's webhook-id or NIP-98 event id, and the payment's reference, are
// recorded in the database with the change). No payment network is reached from here.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type pg from 'pg';
import type { Logger } from '../../log.js';
import { pubkeyFromText } from '../../nostr/nip19.js';
import { admitMembership, DAY_SECONDS, MAX_MEMBERSHIP_DAYS, type MembershipChange } from '../../store/memberships.js';
import { secretKey, verifySignature } from '../webhook-signature.js';
import { checkAdminAuth } from './admin-auth.js';
import { readBody } from './body.js';
import type { Route } from './router.js';

export const MEMBERSHIPS_PATH = '/memberships';
const MAX_BODY_BYTES = 16 * 1024;
const MAX_REFERENCE_LENGTH = 256;
const FIELDS = new Set(['pubkey', 'days', 'until', 'reference']);

export interface MembershipsOptions {
  pool: pg.Pool;
  log: Logger;
  admins: readonly string[];
  /** MEMBERSHIP_WEBHOOK_SECRET; without it only admins may call. */
  secret: string | undefined;
  /** The request's URL as NIP-98's `u` tag must name it (policy/http-auth.ts requestIdentity). */
  urlOf(req: IncomingMessage): string | undefined;
  /** Called after a change, so this process applies it at once. */
  changed(): Promise<void>;
}

interface Request {
  pubkey: string;
  change: MembershipChange;
  reference?: string;
}

/** The body's meaning, or why it has none (answered 400). */
export function parseMembershipRequest(body: Buffer, now: number): { ok: true; request: Request } | { ok: false; error: string } {
  const fail = (error: string) => ({ ok: false as const, error });
  let input: unknown;
  try {
    input = JSON.parse(body.toString('utf8'));
  } catch {
    return fail('the body is not JSON');
  }
  if (typeof input !== 'object' || input === null || Array.isArray(input)) return fail('the body must be a JSON object');
  const o = input as Record<string, unknown>;
  const unknown = Object.keys(o).find((k) => !FIELDS.has(k));
  if (unknown !== undefined) return fail(`unknown field ${JSON.stringify(unknown).slice(0, 60)}: the body has pubkey, days or until, and reference`);
  // Never a secret key, even one that would name the pubkey: it would be in the processor's logs.
  const pubkey = typeof o.pubkey === 'string' && !o.pubkey.startsWith('nsec') ? pubkeyFromText(o.pubkey) : undefined;
  if (!pubkey) return fail('pubkey must be 64 lowercase hex characters or an npub');
  if ((o.days === undefined) === (o.until === undefined)) return fail('give either days (to add) or until (unix seconds), not both');
  let change: MembershipChange;
  if (o.days !== undefined) {
    if (typeof o.days !== 'number' || !Number.isInteger(o.days) || o.days < 1 || o.days > MAX_MEMBERSHIP_DAYS)
      return fail(`days must be an integer from 1 to ${MAX_MEMBERSHIP_DAYS}`);
    change = { days: o.days };
  } else {
    const latest = now + MAX_MEMBERSHIP_DAYS * DAY_SECONDS;
    if (typeof o.until !== 'number' || !Number.isInteger(o.until) || o.until <= now || o.until > latest)
      return fail(`until must be unix seconds after now and at most ${MAX_MEMBERSHIP_DAYS} days ahead`);
    change = { until: o.until };
  }
  if (o.reference !== undefined && (typeof o.reference !== 'string' || o.reference.length === 0 || o.reference.length > MAX_REFERENCE_LENGTH))
    return fail(`reference must be a string of 1 to ${MAX_REFERENCE_LENGTH} characters`);
  return { ok: true, request: { pubkey, change, ...(o.reference !== undefined ? { reference: o.reference as string } : {}) } };
}

function reply(res: ServerResponse, status: number, body: object): void {
  res.writeHead(status, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' }).end(JSON.stringify(body));
}

const header = (req: IncomingMessage, name: string): string | undefined => {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join(' ') : v;
};

export function membershipsRoute(o: MembershipsOptions): Route {
  const admins = new Set(o.admins);
  const key = o.secret === undefined ? undefined : secretKey(o.secret);
  return {
    path: MEMBERSHIPS_PATH,
    methods: ['POST'],
    async handle(req, res) {
      const body = await readBody(req, MAX_BODY_BYTES);
      if (!body) return reply(res, 413, { error: `the request body is larger than ${MAX_BODY_BYTES} bytes` });
      const now = Math.floor(Date.now() / 1000);

      // Who is asking: a processor with the shared secret, or an admin.
      let requestId: string;
      let via: 'webhook' | 'admin';
      const signed = ['webhook-id', 'webhook-timestamp', 'webhook-signature'].some((h) => req.headers[h] !== undefined);
      if (signed) {
        if (!key) return reply(res, 401, { error: 'unauthorized: this relay takes no signed webhooks (MEMBERSHIP_WEBHOOK_SECRET is not set)' });
        const check = verifySignature(
          { id: header(req, 'webhook-id'), timestamp: header(req, 'webhook-timestamp'), signature: header(req, 'webhook-signature') },
          body,
          key,
          now,
        );
        if (!check.ok) return reply(res, 401, { error: `unauthorized: ${check.error}` });
        requestId = `webhook:${check.id}`;
        via = 'webhook';
      } else {
        if (req.headers.authorization === undefined)
          return reply(res, 401, { error: 'unauthorized: sign the request as a Standard Webhook (MEMBERSHIP_WEBHOOK_SECRET) or with a NIP-98 Authorization header of an admin' });
        const auth = checkAdminAuth({ authorization: req.headers.authorization, url: o.urlOf(req) ?? '', method: 'POST', body, now }, admins);
        if (!auth.ok) return reply(res, auth.status, { error: auth.error });
        requestId = `nip98:${auth.id}`;
        via = 'admin';
      }

      const parsed = parseMembershipRequest(body, now);
      if (!parsed.ok) return reply(res, 400, { error: `bad request: ${parsed.error}` });
      const { pubkey, change, reference } = parsed.request;
      const result = await admitMembership(o.pool, { requestId, reference, pubkey, change, now });
      if (result.outcome === 'conflict')
        return reply(res, 409, { error: 'conflict: this request id or reference was already applied to another pubkey or change' });
      if (result.outcome === 'applied') {
        o.log.info({ pubkey, ...change, reference, via, request: requestId, expires_at: result.expiresAt }, 'membership: change applied');
        await o.changed();
      }
      reply(res, 200, { pubkey, expires_at: result.expiresAt, repeated: result.outcome === 'repeated' });
    },
  };
}
