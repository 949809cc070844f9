// Memberships: allow-list entries that end (migration 20270110000003_memberships). Days are added to
// whichever is later, now or the current end, so a member who renews early loses nothing and one who
// renews late starts from today; an explicit end replaces the current one. A membership without end
// (`allow pubkey` with neither) stays without end when days are added. What payment processors send
// (POST /memberships) is applied once per request and per payment reference, however often it is
// retried, by any relay process.
import type pg from 'pg';
import { UNIX_EXPIRY } from './moderation.js';
import { withTransaction } from './write.js';

/** The longest membership one change may add or set: ten years. */
export const MAX_MEMBERSHIP_DAYS = 3650;
export const DAY_SECONDS = 86_400;

/** Add `days` to max(now, current end), or set the end to `until` (unix seconds). */
export type MembershipChange = { days: number } | { until: number };

type Queryable = Pick<pg.Pool | pg.PoolClient, 'query'>;

const hex = (s: string) => Buffer.from(s, 'hex');

/**
 * Allows `pubkey` (adding it if needed) with its membership changed as `change` says, at `now` (unix
 * seconds). The reason is replaced only when one is given. Returns the new end in unix seconds,
 * or null for a membership without end.
 */
export async function changeMembership(db: Queryable, pubkey: string, change: MembershipChange, now: number, reason?: string): Promise<number | null> {
  const { rows } =
    'days' in change
      ? await db.query<{ until: string | null }>(
          `INSERT INTO allowed_pubkeys AS a (pubkey, reason, expires_at) VALUES ($1, $2, to_timestamp($3::bigint + $4::bigint * ${DAY_SECONDS}))
           ON CONFLICT (pubkey) DO UPDATE SET
             reason = coalesce(excluded.reason, a.reason),
             expires_at = CASE WHEN a.expires_at IS NULL THEN NULL
                               ELSE greatest(a.expires_at, to_timestamp($3::bigint)) + ($4::bigint * ${DAY_SECONDS}) * interval '1 second' END
           RETURNING ${UNIX_EXPIRY} AS until`,
          [hex(pubkey), reason ?? null, now, change.days],
        )
      : await db.query<{ until: string | null }>(
          `INSERT INTO allowed_pubkeys AS a (pubkey, reason, expires_at) VALUES ($1, $2, to_timestamp($3::bigint))
           ON CONFLICT (pubkey) DO UPDATE SET reason = coalesce(excluded.reason, a.reason), expires_at = excluded.expires_at
           RETURNING ${UNIX_EXPIRY} AS until`,
          [hex(pubkey), reason ?? null, change.until],
        );
  return rows[0].until === null ? null : Number(rows[0].until);
}

/** One request of a payment processor, as POST /memberships checked it. */
export interface MembershipRequest {
  /** Names the request, the same on every retry: `webhook:<webhook-id>` or `nip98:<event id>`. */
  requestId: string;
  /** The processor's reference for the payment: the same payment sent again in another request. */
  reference?: string;
  pubkey: string;
  change: MembershipChange;
  now: number;
}

/**
 * `applied`: the change was made now. `repeated`: this request (or this reference, with the same
 * pubkey and change) was applied before; `expiresAt` is what that first application gave.
 * `conflict`: the request id or the reference was used before for another pubkey or change.
 */
export type MembershipOutcome = { outcome: 'applied' | 'repeated'; expiresAt: number | null } | { outcome: 'conflict' };

export function admitMembership(pool: pg.Pool, r: MembershipRequest): Promise<MembershipOutcome> {
  const days = 'days' in r.change ? r.change.days : null;
  const until = 'until' in r.change ? r.change.until : null;
  return withTransaction(pool, async (client) => {
    // A concurrent copy of the same request waits here for the first one's commit, then inserts nothing.
    const inserted = await client.query(
      `INSERT INTO membership_admissions (request_id, reference, pubkey, days, until) VALUES ($1, $2, $3, $4, to_timestamp($5::bigint))
       ON CONFLICT DO NOTHING`,
      [r.requestId, r.reference ?? null, hex(r.pubkey), days, until],
    );
    if (inserted.rowCount === 1) {
      const expiresAt = await changeMembership(client, r.pubkey, r.change, r.now);
      await client.query('UPDATE membership_admissions SET expires_at = to_timestamp($2::bigint) WHERE request_id = $1', [r.requestId, expiresAt]);
      return { outcome: 'applied', expiresAt };
    }
    const { rows } = await client.query<{ pubkey: string; days: number | null; until: string | null; expires_at: string | null }>(
      `SELECT encode(pubkey, 'hex') AS pubkey, days, floor(extract(epoch FROM until))::bigint AS until, ${UNIX_EXPIRY} AS expires_at
         FROM membership_admissions WHERE request_id = $1 OR reference = $2 ORDER BY request_id = $1 DESC LIMIT 1`,
      [r.requestId, r.reference ?? null],
    );
    const first = rows[0];
    const same = first !== undefined && first.pubkey === r.pubkey && first.days === days && (first.until === null ? null : Number(first.until)) === until;
    if (!same) return { outcome: 'conflict' };
    return { outcome: 'repeated', expiresAt: first.expires_at === null ? null : Number(first.expires_at) };
  });
}
