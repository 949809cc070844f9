// Who may call the relay's admin APIs (NIP-86 management, POST /memberships): a NIP-98 Authorization
// (policy/http-auth.ts) by a pubkey in ADMIN_PUBKEYS. Missing or invalid: 401; a valid key that is
// not an admin: 403.
import { checkHttpAuth, type HttpAuthRequest } from '../../policy/http-auth.js';

export type AdminAuth = { ok: true; pubkey: string; id: string } | { ok: false; status: 401 | 403; error: string };

export function checkAdminAuth(req: HttpAuthRequest, admins: ReadonlySet<string>): AdminAuth {
  const auth = checkHttpAuth(req);
  if (!auth.ok) return { ok: false, status: 401, error: `unauthorized: ${auth.error}` };
  if (!admins.has(auth.pubkey))
    return { ok: false, status: 403, error: admins.size ? 'forbidden: this pubkey is not an admin of this relay' : 'forbidden: this relay has no admin (ADMIN_PUBKEYS)' };
  return auth;
}
