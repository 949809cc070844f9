// A NIP-86 management client for tests: POST to the relay's URL with a NIP-98 Authorization header,
// made by nostr-tools' nip98.getToken as a real admin tool would, or built by hand to break it.
import { createHash } from 'node:crypto';
import { getToken } from 'nostr-tools/nip98';
import { finalizeEvent } from 'nostr-tools/pure';
import { now, type Signer } from './keys.js';

export interface RpcReply {
  status: number;
  body: { result?: unknown; error?: string };
}

/** The relay's http(s) URL for a ws(s) one. */
export const httpOf = (wsUrl: string) => wsUrl.replace(/^ws/, 'http') + '/';

export async function post(url: string, body: string, headers: Record<string, string>): Promise<RpcReply> {
  const res = await fetch(url, { method: 'POST', body, headers: { 'Content-Type': 'application/nostr+json+rpc', ...headers } });
  return { status: res.status, body: (await res.json()) as RpcReply['body'] };
}

/** A call signed by `admin` with nostr-tools (u = the URL, method = POST, payload = sha256 of the body). */
export async function rpc(url: string, admin: Signer, method: string, params: unknown[] = []): Promise<RpcReply> {
  const payload = { method, params };
  const token = await getToken(url, 'POST', (e) => finalizeEvent(e, admin.secretKey), true, payload);
  return post(url, JSON.stringify(payload), { Authorization: token });
}

export interface AuthParts {
  kind?: number;
  created_at?: number;
  u?: string | null;
  method?: string | null;
  payload?: string | null;
}

/** An Authorization header built by hand, each part overridable (null leaves the tag out). */
export function authHeader(signer: Signer, url: string, body: string, parts: AuthParts = {}): string {
  const tags: string[][] = [];
  if (parts.u !== null) tags.push(['u', parts.u ?? url]);
  if (parts.method !== null) tags.push(['method', parts.method ?? 'POST']);
  if (parts.payload !== null) tags.push(['payload', parts.payload ?? createHash('sha256').update(body).digest('hex')]);
  const event = signer.sign({ kind: parts.kind ?? 27235, created_at: parts.created_at ?? now(), tags, content: '' });
  return `Nostr ${Buffer.from(JSON.stringify(event)).toString('base64')}`;
}
