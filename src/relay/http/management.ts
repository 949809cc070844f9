// NIP-86 relay management API (protocol.md 12): JSON-RPC-like POSTs to the relay's URL with
// Content-Type application/nostr+json+rpc, authenticated with NIP-98 (policy/http-auth.ts) by a
// pubkey in ADMIN_PUBKEYS. Missing or invalid auth: 401; a valid key that is not an admin: 403.
// Every action is store/moderation.ts's, the same the CLI runs; the relay process that took the
// request applies it at once, the others within a second.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type pg from 'pg';
import { isAddressOrCidr } from '../../config.js';
import type { Logger } from '../../log.js';
import { eventIdFromText, pubkeyFromText } from '../../nostr/nip19.js';
import * as memberships from '../../store/memberships.js';
import * as moderation from '../../store/moderation.js';
import * as reports from '../../store/reports.js';
import * as webhooks from '../../store/webhook-endpoints.js';
import { checkAdminAuth } from './admin-auth.js';
import { readBody } from './body.js';

export const RPC_CONTENT_TYPE = 'application/nostr+json+rpc';
const MAX_BODY_BYTES = 64 * 1024;
const MAX_REASON_LENGTH = 1000;

class RpcError extends Error {}

type Params = unknown[];
type Method = (params: Params) => Promise<unknown>;

const reasonOf = (params: Params, at: number): string | undefined => {
  const r = params[at];
  if (r === undefined || r === null) return undefined;
  if (typeof r !== 'string' || r.length > MAX_REASON_LENGTH) throw new RpcError(`the reason must be a string of at most ${MAX_REASON_LENGTH} characters`);
  return r;
};
const pubkeyOf = (params: Params): string => {
  const pk = typeof params[0] === 'string' ? pubkeyFromText(params[0]) : undefined;
  if (!pk) throw new RpcError('the first parameter must be a pubkey: 64 lowercase hex characters or npub');
  return pk;
};
const eventIdOf = (params: Params): string => {
  const id = typeof params[0] === 'string' ? eventIdFromText(params[0]) : undefined;
  if (!id) throw new RpcError('the first parameter must be an event id: 64 lowercase hex characters or note');
  return id;
};
const kindOf = (params: Params): number => {
  const k = typeof params[0] === 'string' && /^\d{1,5}$/.test(params[0]) ? Number(params[0]) : params[0];
  if (typeof k !== 'number' || !Number.isInteger(k) || k < 0 || k > 65535) throw new RpcError('the first parameter must be a kind from 0 to 65535');
  return k;
};
const ipOf = (params: Params): string => {
  const ip = params[0];
  if (typeof ip !== 'string' || !isAddressOrCidr(ip.trim())) throw new RpcError('the first parameter must be an IP address or a CIDR block');
  return ip.trim();
};
const textOf = (params: Params, max: number, what: string): string => {
  const t = params[0];
  if (typeof t !== 'string' || t.length > max) throw new RpcError(`the first parameter must be the ${what}, a string of at most ${max} characters`);
  return t;
};
const iconOf = (params: Params): string => {
  const url = textOf(params, 2000, 'icon URL');
  if (!/^https?:\/\/\S+$/.test(url)) throw new RpcError('the icon must be an http(s) URL');
  return url;
};

// Memberships (store/memberships.ts): an integer as a number or a decimal string, like kinds.
const integerOf = (params: Params, at: number): number | undefined => {
  const v = typeof params[at] === 'string' && /^\d{1,12}$/.test(params[at]) ? Number(params[at]) : params[at];
  return typeof v === 'number' && Number.isInteger(v) ? v : undefined;
};
const daysOf = (params: Params): number => {
  const days = integerOf(params, 1);
  if (days === undefined || days < 1 || days > memberships.MAX_MEMBERSHIP_DAYS) throw new RpcError(`the second parameter must be the days to add, from 1 to ${memberships.MAX_MEMBERSHIP_DAYS}`);
  return days;
};
const untilOf = (params: Params, now: number): number => {
  const until = integerOf(params, 1);
  if (until === undefined || until < 0 || until > now + memberships.MAX_MEMBERSHIP_DAYS * memberships.DAY_SECONDS)
    throw new RpcError(`the second parameter must be when the membership ends, in unix seconds, at most ${memberships.MAX_MEMBERSHIP_DAYS} days ahead`);
  return until;
};
const unixNow = () => Math.floor(Date.now() / 1000);

const endpointIdOf = (params: Params): number => {
  const id = typeof params[0] === 'string' && /^\d{1,9}$/.test(params[0]) ? Number(params[0]) : params[0];
  if (typeof id !== 'number' || !Number.isInteger(id) || id < 1) throw new RpcError('the first parameter must be a webhook endpoint id');
  return id;
};
const found = <T>(value: T | undefined | false): T => {
  if (value === undefined || value === false) throw new RpcError('no webhook endpoint with this id');
  return value;
};

/** Webhooks (store/webhook-endpoints.ts, as `npm run cli -- webhook`): params [url, filter or filters, secret?, batch?]. */
async function addWebhook(pool: pg.Pool, p: Params): Promise<{ id: number; secret: string }> {
  const [url, filters, secret, batch] = p;
  if (typeof url !== 'string') throw new RpcError('the first parameter must be the endpoint URL');
  if (typeof filters !== 'object' || filters === null) throw new RpcError('the second parameter must be a NIP-01 filter or an array of them');
  if (secret !== undefined && secret !== null && typeof secret !== 'string') throw new RpcError('the third parameter, if given, must be a whsec_ secret');
  if (batch !== undefined && batch !== null && typeof batch !== 'number') throw new RpcError('the fourth parameter, if given, must be the batch size');
  const chosen = (secret as string | null | undefined) ?? webhooks.generateSecret();
  try {
    const id = await webhooks.addEndpoint(pool, { url, filters: Array.isArray(filters) ? filters : [filters], secret: chosen, batchSize: (batch as number | undefined) ?? 1 });
    return { id, secret: chosen };
  } catch (err) {
    throw new RpcError((err as Error).message);
  }
}

function methods(pool: pg.Pool): Record<string, Method> {
  const table: Record<string, Method> = {
    supportedmethods: async () => Object.keys(table),
    banpubkey: async (p) => (await moderation.banPubkey(pool, pubkeyOf(p), reasonOf(p, 1)), true),
    unbanpubkey: async (p) => (await moderation.unbanPubkey(pool, pubkeyOf(p)), true),
    listbannedpubkeys: async () => (await moderation.list.bannedPubkeys(pool)).map((r) => ({ pubkey: r.key, reason: r.reason })),
    allowpubkey: async (p) => (await moderation.allowPubkey(pool, pubkeyOf(p), reasonOf(p, 1)), true),
    unallowpubkey: async (p) => (await moderation.unallowPubkey(pool, pubkeyOf(p)), true),
    listallowedpubkeys: async () =>
      (await moderation.list.allowedPubkeys(pool)).map((r) => ({ pubkey: r.key, reason: r.reason, ...(r.expiresAt === null ? {} : { expires_at: r.expiresAt }) })),
    // Memberships: not in NIP-86; named in its style. allowpubkey makes a membership without end.
    allowpubkeyuntil: async (p) => {
      const now = unixNow();
      await memberships.changeMembership(pool, pubkeyOf(p), { until: untilOf(p, now) }, now, reasonOf(p, 2));
      return true;
    },
    extendmembership: async (p) => {
      const pubkey = pubkeyOf(p);
      return { pubkey, expires_at: await memberships.changeMembership(pool, pubkey, { days: daysOf(p) }, unixNow(), reasonOf(p, 2)) };
    },
    banevent: async (p) => (await moderation.banEvent(pool, eventIdOf(p), reasonOf(p, 1)), true),
    allowevent: async (p) => (await reports.keepEvent(pool, eventIdOf(p)), true),
    listbannedevents: async () => (await moderation.list.bannedEvents(pool)).map((r) => ({ id: r.key, reason: r.reason })),
    listeventsneedingmoderation: async () => (await reports.listQueue(pool)).filter((e) => e.target === 'event').map((e) => ({ id: e.id, reason: e.reason })),
    allowkind: async (p) => (await moderation.allowKind(pool, kindOf(p)), true),
    disallowkind: async (p) => (await moderation.disallowKind(pool, kindOf(p)), true),
    listallowedkinds: async () => moderation.list.allowedKinds(pool),
    blockip: async (p) => (await moderation.blockIp(pool, ipOf(p), reasonOf(p, 1)), true),
    unblockip: async (p) => (await moderation.unblockIp(pool, ipOf(p)), true),
    listblockedips: async () => (await moderation.list.blockedIps(pool)).map((r) => ({ ip: r.key, reason: r.reason })),
    changerelayname: async (p) => (await moderation.setRelayInfo(pool, 'name', textOf(p, 100, 'name')), true),
    changerelaydescription: async (p) => (await moderation.setRelayInfo(pool, 'description', textOf(p, 5000, 'description')), true),
    changerelayicon: async (p) => (await moderation.setRelayInfo(pool, 'icon', iconOf(p)), true),
    // Reported pubkeys: not in NIP-86 (it lists events only); named in its style. banpubkey clears an entry too.
    listpubkeysneedingmoderation: async () => (await reports.listQueue(pool)).filter((e) => e.target === 'pubkey').map((e) => ({ pubkey: e.id, reason: e.reason })),
    dismisspubkeyreports: async (p) => (await reports.clearReports(pool, 'pubkey', pubkeyOf(p)), true),
    // Webhooks: not in NIP-86; named in its style.
    listwebhooks: async () =>
      (await webhooks.listEndpoints(pool)).map((e) => ({ id: e.id, url: e.url, filters: e.filters, paused: e.paused, batch: e.batchSize, queued: e.queued, dead: e.dead, oldest_queued_seconds: e.oldestQueuedSeconds })),
    addwebhook: async (p) => addWebhook(pool, p),
    pausewebhook: async (p) => found(await webhooks.setPaused(pool, endpointIdOf(p), true)),
    resumewebhook: async (p) => found(await webhooks.setPaused(pool, endpointIdOf(p), false)),
    removewebhook: async (p) => found(await webhooks.removeEndpoint(pool, endpointIdOf(p))),
  };
  return table;
}

const READ_ONLY = new Set(['supportedmethods', 'listbannedpubkeys', 'listallowedpubkeys', 'listbannedevents', 'listeventsneedingmoderation', 'listallowedkinds', 'listblockedips', 'listwebhooks']);
READ_ONLY.add('listpubkeysneedingmoderation'); // an extension: see methods

function reply(res: ServerResponse, status: number, body: { result?: unknown; error?: string }): void {
  res.writeHead(status, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store', 'Access-Control-Allow-Origin': '*' });
  res.end(JSON.stringify({ result: body.result ?? null, ...(body.error ? { error: body.error } : {}) }));
}


export interface ManagementOptions {
  pool: pg.Pool;
  log: Logger;
  admins: readonly string[];
  /** The request's URL as NIP-98's `u` tag must name it (see policy/http-auth.ts requestIdentity). */
  urlOf(req: IncomingMessage): string | undefined;
  /** Called after a change, so this process applies it at once. */
  changed(): Promise<void>;
}

/** The POST handler of the relay's endpoint. */
export function managementHandler(o: ManagementOptions) {
  const admins = new Set(o.admins);
  const table = methods(o.pool);
  // NIP-98 events that already changed something, until they are too old to be accepted anyway: a
  // captured header cannot be replayed to change something again on this process. (Reads may repeat:
  // an admin tool refreshing a list twice in one second sends the very same event.)
  const used = new Map<string, number>();
  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const type = (req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
    if (type !== RPC_CONTENT_TYPE) return reply(res, 415, { error: `POST here is the NIP-86 management API: Content-Type must be ${RPC_CONTENT_TYPE}` });
    const body = await readBody(req, MAX_BODY_BYTES);
    if (!body) return reply(res, 413, { error: `the request body is larger than ${MAX_BODY_BYTES} bytes` });
    const now = Math.floor(Date.now() / 1000);
    const url = o.urlOf(req);
    const auth = checkAdminAuth({ authorization: req.headers.authorization, url: url ?? '', method: 'POST', body, now }, admins);
    if (!auth.ok) return reply(res, auth.status, { error: auth.error });

    let request: { method?: unknown; params?: unknown };
    try {
      request = JSON.parse(body.toString('utf8'));
    } catch {
      return reply(res, 400, { error: 'the body is not JSON' });
    }
    const name = typeof request?.method === 'string' ? request.method : '';
    const method = Object.hasOwn(table, name) ? table[name] : undefined;
    if (!method) return reply(res, 200, { error: `unsupported method ${JSON.stringify(name).slice(0, 60)}` });
    const params = Array.isArray(request.params) ? request.params : [];
    if (!READ_ONLY.has(name)) {
      for (const [id, at] of used) if (at < now - 2 * 60) used.delete(id);
      if (used.has(auth.id)) return reply(res, 401, { error: 'unauthorized: this Authorization event was already used' });
      used.set(auth.id, now);
    }
    try {
      const result = await method(params);
      if (!READ_ONLY.has(name)) {
        o.log.info({ admin: auth.pubkey, method: name, params }, 'management: change applied');
        await o.changed();
      }
      reply(res, 200, { result });
    } catch (err) {
      if (err instanceof RpcError) return reply(res, 200, { error: err.message });
      o.log.error({ err: (err as Error).message, method: name }, 'management method failed');
      reply(res, 500, { error: 'the relay could not carry out this method' });
    }
  };
}
