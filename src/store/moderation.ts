// The operator's lists in PostgreSQL (migration 20261224000001_moderation): the actions of the NIP-86
// management API and of `npm run cli -- ban …` (one implementation for both), loading the lists
// into the snapshot the policy rules read, and watching them so that every relay process on the
// database applies a change within a second.
import type pg from 'pg';
import type { Logger } from '../log.js';
import { noModeration, type ModerationLists, type ModerationSource } from '../policy/moderation.js';
import { deleteEventsWhere } from './batched-delete.js';
import { withTransaction } from './write.js';

const hex = (s: string) => Buffer.from(s, 'hex');

export type RelayInfoField = 'name' | 'description' | 'icon';

/** allowed_pubkeys.expires_at as whole unix seconds (bigint arrives as a string). */
export const UNIX_EXPIRY = 'floor(extract(epoch FROM expires_at))::bigint';

/** Reads every list: small tables (even 100,000 bans load in well under a second). */
export async function loadModeration(pool: pg.Pool): Promise<{ version: string; lists: ModerationLists }> {
  const client = await pool.connect();
  try {
    // One snapshot: a change committed between two of these reads cannot be half-seen.
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const version = (await client.query<{ version: string }>('SELECT version FROM moderation_state')).rows[0].version;
    const pairs = async (sql: string) => new Map((await client.query<{ key: string; reason: string | null }>(sql)).rows.map((r) => [r.key, r.reason ?? '']));
    const lists: ModerationLists = {
      bannedPubkeys: await pairs("SELECT encode(pubkey, 'hex') AS key, reason FROM banned_pubkeys"),
      allowedPubkeys: await pairs("SELECT encode(pubkey, 'hex') AS key, reason FROM allowed_pubkeys"),
      allowedUntil: new Map(
        (await client.query<{ key: string; until: string }>(`SELECT encode(pubkey, 'hex') AS key, ${UNIX_EXPIRY} AS until FROM allowed_pubkeys WHERE expires_at IS NOT NULL`)).rows.map((r) => [r.key, Number(r.until)]),
      ),
      bannedEvents: await pairs("SELECT encode(id, 'hex') AS key, reason FROM banned_events"),
      allowedKinds: new Set((await client.query<{ kind: number }>('SELECT kind FROM allowed_kinds')).rows.map((r) => r.kind)),
      blockedIps: await pairs('SELECT text(address) AS key, reason FROM blocked_ips'),
      relayInfo: Object.fromEntries((await client.query<{ field: RelayInfoField; value: string }>('SELECT field, value FROM relay_info')).rows.map((r) => [r.field, r.value])),
    };
    await client.query('COMMIT');
    return { version, lists };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/** How often a relay process checks whether the lists changed. */
export const MODERATION_POLL_MS = 500;

/**
 * The current lists for one relay process: loaded at start, then reloaded whenever
 * moderation_state.version moves (one one-row query every MODERATION_POLL_MS). A failed poll keeps
 * the lists it has (a database outage must not lift every ban) and tries again.
 */
export class ModerationWatch implements ModerationSource {
  current: ModerationLists = noModeration;
  private version = '';
  private timer: NodeJS.Timeout | undefined;
  private readonly listeners = new Set<(lists: ModerationLists) => void>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly log: Logger,
    private readonly pollMs = MODERATION_POLL_MS,
  ) {}

  async start(): Promise<this> {
    await this.reload();
    const tick = async () => {
      try {
        const { rows } = await this.pool.query<{ version: string }>('SELECT version FROM moderation_state');
        if (rows[0]?.version !== this.version) await this.reload();
      } catch (err) {
        this.log.debug({ err: (err as Error).message }, 'moderation: could not check for changes');
      }
      if (this.timer) this.timer = setTimeout(tick, this.pollMs).unref();
    };
    this.timer = setTimeout(tick, this.pollMs).unref();
    return this;
  }

  /** Told the new lists after every change (e.g. to close connections from a newly blocked address). */
  onChange(listener: (lists: ModerationLists) => void): void {
    this.listeners.add(listener);
  }

  async reload(): Promise<void> {
    const { version, lists } = await loadModeration(this.pool);
    const changed = version !== this.version;
    this.version = version;
    this.current = lists;
    if (changed) for (const listener of this.listeners) listener(lists);
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}

// ---------------------------------------------------------------------------------------------------
// Actions. Each returns whether it changed anything; the trigger bumps the version.

export async function banPubkey(pool: pg.Pool, pubkey: string, reason?: string): Promise<void> {
  await pool.query(
    `INSERT INTO banned_pubkeys (pubkey, reason) VALUES ($1, $2) ON CONFLICT (pubkey) DO UPDATE SET reason = excluded.reason`,
    [hex(pubkey), reason ?? null],
  );
}

export async function unbanPubkey(pool: pg.Pool, pubkey: string): Promise<boolean> {
  return ((await pool.query('DELETE FROM banned_pubkeys WHERE pubkey = $1', [hex(pubkey)])).rowCount ?? 0) > 0;
}

/** A member without end: an expiry the entry had is dropped (store/memberships.ts sets one). */
export async function allowPubkey(pool: pg.Pool, pubkey: string, reason?: string): Promise<void> {
  await pool.query(
    `INSERT INTO allowed_pubkeys (pubkey, reason) VALUES ($1, $2) ON CONFLICT (pubkey) DO UPDATE SET reason = excluded.reason, expires_at = NULL`,
    [hex(pubkey), reason ?? null],
  );
}

export async function unallowPubkey(pool: pg.Pool, pubkey: string): Promise<boolean> {
  return ((await pool.query('DELETE FROM allowed_pubkeys WHERE pubkey = $1', [hex(pubkey)])).rowCount ?? 0) > 0;
}

/** Bans an event and removes it from the store in one transaction: it leaves every answer at once. */
export async function banEvent(pool: pg.Pool, id: string, reason?: string): Promise<{ removed: boolean }> {
  return withTransaction(pool, async (client) => {
    await client.query(
      `INSERT INTO banned_events (id, reason) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET reason = excluded.reason`,
      [hex(id), reason ?? null],
    );
    const { rowCount } = await client.query('DELETE FROM events WHERE id = $1', [hex(id)]);
    return { removed: (rowCount ?? 0) > 0 };
  });
}

/** NIP-86 allowevent: the event may be published again (the ban is lifted). */
export async function unbanEvent(pool: pg.Pool, id: string): Promise<boolean> {
  return ((await pool.query('DELETE FROM banned_events WHERE id = $1', [hex(id)])).rowCount ?? 0) > 0;
}

export async function allowKind(pool: pg.Pool, kind: number): Promise<void> {
  await pool.query('INSERT INTO allowed_kinds (kind) VALUES ($1) ON CONFLICT DO NOTHING', [kind]);
}

export async function disallowKind(pool: pg.Pool, kind: number): Promise<boolean> {
  return ((await pool.query('DELETE FROM allowed_kinds WHERE kind = $1', [kind])).rowCount ?? 0) > 0;
}

/**
 * `address`: an IP address or a CIDR block (validated by the caller); a block's host bits are
 * dropped ("10.1.2.3/8" is 10.0.0.0/8).
 */
export async function blockIp(pool: pg.Pool, address: string, reason?: string): Promise<void> {
  await pool.query(
    `INSERT INTO blocked_ips (address, reason) VALUES (network($1::inet), $2) ON CONFLICT (address) DO UPDATE SET reason = excluded.reason`,
    [address, reason ?? null],
  );
}

export async function unblockIp(pool: pg.Pool, address: string): Promise<boolean> {
  return ((await pool.query('DELETE FROM blocked_ips WHERE address = network($1::inet)', [address])).rowCount ?? 0) > 0;
}

/** A stored block as an operator writes it: "203.0.113.7" for one address, "10.0.0.0/8" for a block. */
export const blockText = (cidr: string) => cidr.replace(/\/(32|128)$/, '');

export interface Listed {
  key: string;
  reason: string | null;
}

/** An allow-list entry: `expiresAt` in unix seconds, null for a membership without end. */
export interface ListedMember extends Listed {
  expiresAt: number | null;
}

/** The lists as stored now (not a process's snapshot), oldest entry first. */
export const list = {
  bannedPubkeys: async (pool: pg.Pool) =>
    (await pool.query<Listed>("SELECT encode(pubkey, 'hex') AS key, reason FROM banned_pubkeys ORDER BY created_at, pubkey")).rows,
  allowedPubkeys: async (pool: pg.Pool): Promise<ListedMember[]> =>
    (
      await pool.query<Listed & { until: string | null }>(
        `SELECT encode(pubkey, 'hex') AS key, reason, ${UNIX_EXPIRY} AS until FROM allowed_pubkeys ORDER BY created_at, pubkey`,
      )
    ).rows.map(({ key, reason, until }) => ({ key, reason, expiresAt: until === null ? null : Number(until) })),
  bannedEvents: async (pool: pg.Pool) =>
    (await pool.query<Listed>("SELECT encode(id, 'hex') AS key, reason FROM banned_events ORDER BY created_at, id")).rows,
  allowedKinds: async (pool: pg.Pool) => (await pool.query<{ kind: number }>('SELECT kind FROM allowed_kinds ORDER BY kind')).rows.map((r) => r.kind),
  blockedIps: async (pool: pg.Pool) =>
    (await pool.query<Listed>('SELECT text(address) AS key, reason FROM blocked_ips ORDER BY created_at, address')).rows.map((r) => ({ ...r, key: blockText(r.key) })),
};

export async function setRelayInfo(pool: pg.Pool, field: RelayInfoField, value: string): Promise<void> {
  await pool.query(
    `INSERT INTO relay_info (field, value) VALUES ($1, $2) ON CONFLICT (field) DO UPDATE SET value = excluded.value, updated_at = now()`,
    [field, value],
  );
}

/**
 * Deletes every stored event of a pubkey, in batches of `batchSize` (each its own short
 * transaction, as prune does, so writers never wait long). Returns how many were removed.
 */
export function purgePubkey(pool: pg.Pool, pubkey: string, batchSize = 1000): Promise<number> {
  return deleteEventsWhere(pool, 'pubkey = $1', [hex(pubkey)], batchSize);
}
