// Writing an event: NIP-01 replaceable/addressable rules, NIP-09 deletions, and the event_tags rows,
// all in one transaction, so `OK true` (sent after commit) always means the event is durable.
import type pg from 'pg';
import type { NostrEvent } from '../nostr/event.js';
import { canonicalEventJson } from '../nostr/event.js';
import { KIND_DELETION, kindClass, type KindClass } from '../nostr/kinds.js';
import { dTagOf, expirationOf, indexedTags } from '../nostr/tags.js';

/** An event with everything storage needs derived once. */
export interface PreparedEvent {
  event: NostrEvent;
  raw: string;
  kindClass: KindClass;
  /** '' for replaceable, the d value for addressable, null otherwise: the replacement key. */
  dTag: string | null;
  expiresAt: number | null;
  tags: Array<[string, string]>;
}

export function prepareEvent(event: NostrEvent): PreparedEvent {
  const cls = kindClass(event.kind);
  return {
    event,
    raw: canonicalEventJson(event),
    kindClass: cls,
    dTag: cls === 'replaceable' ? '' : cls === 'addressable' ? dTagOf(event.tags) : null,
    expiresAt: expirationOf(event.tags) ?? null,
    tags: indexedTags(event.tags),
  };
}

/** The NIP-09/NIP-01 address of a replaceable or addressable event: "kind:pubkey:d". */
export function addressOf(p: PreparedEvent): string | undefined {
  return p.dTag === null ? undefined : `${p.event.kind}:${p.event.pubkey}:${p.dTag}`;
}

export type WriteResult =
  | { status: 'stored' }
  | { status: 'duplicate' }
  | { status: 'rejected'; reason: string };

const hex = (s: string) => Buffer.from(s, 'hex');

export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/**
 * NIP-09: an event named by a stored kind 5 of the same author stays deleted when it is published
 * again; for an address, versions up to the deletion's created_at do.
 */
async function isDeleted(client: pg.PoolClient, p: PreparedEvent): Promise<boolean> {
  const { event } = p;
  const address = addressOf(p);
  const { rowCount } = await client.query(
    `SELECT 1 FROM event_tags t JOIN events d ON d.id = t.event_id
      WHERE t.kind = ${KIND_DELETION} AND d.pubkey = $1
        AND ((t.name = 'e' AND t.value = $2) OR (t.name = 'a' AND t.value = $3 AND t.created_at >= $4))
      LIMIT 1`,
    [hex(event.pubkey), event.id, address ?? null, event.created_at],
  );
  return rowCount !== 0;
}

/**
 * Replaceable and addressable events keep one version per key: newest created_at, ties to the lowest
 * id. An advisory lock on the key serialises concurrent writers of the same key (also across relay
 * processes); the unique index events_replace_key is the backstop.
 */
async function replaceCurrentVersion(client: pg.PoolClient, p: PreparedEvent): Promise<WriteResult | undefined> {
  const { event } = p;
  await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [addressOf(p)]);
  const { rows } = await client.query<{ id: Buffer; created_at: string }>(
    'SELECT id, created_at FROM events WHERE pubkey = $1 AND kind = $2 AND d_tag = $3',
    [hex(event.pubkey), event.kind, p.dTag],
  );
  const current = rows[0];
  if (!current) return undefined;
  const currentId = current.id.toString('hex');
  if (currentId === event.id) return { status: 'duplicate' };
  const currentTime = Number(current.created_at);
  if (currentTime > event.created_at || (currentTime === event.created_at && currentId < event.id))
    return { status: 'rejected', reason: 'blocked: a newer version of this event is stored' };
  await client.query('DELETE FROM events WHERE id = $1', [current.id]);
  return undefined;
}

async function insertEvent(client: pg.PoolClient, p: PreparedEvent): Promise<boolean> {
  const { event } = p;
  const { rowCount } = await client.query(
    `INSERT INTO events (id, pubkey, kind, created_at, d_tag, expires_at, raw)
     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING`,
    [hex(event.id), hex(event.pubkey), event.kind, event.created_at, p.dTag, p.expiresAt, p.raw],
  );
  if (rowCount === 0) return false;
  if (p.tags.length) {
    await client.query(
      `INSERT INTO event_tags (event_id, name, value, kind, created_at)
       SELECT $1, name, value, $4, $5 FROM unnest($2::text[], $3::text[]) AS t(name, value)`,
      [hex(event.id), p.tags.map((t) => t[0]), p.tags.map((t) => t[1]), event.kind, event.created_at],
    );
  }
  return true;
}

/**
 * NIP-09: delete the author's own events named by `e` tags, and versions of the author's addresses
 * named by `a` tags up to the request's created_at. Deletion requests (and NIP-62 vanish requests)
 * are never deleted this way. Gift wraps (kind 1059) are signed by throwaway keys, so a wrap whose `p`
 * tag is the requester can be deleted by it (NIP-59).
 */
async function applyDeletion(client: pg.PoolClient, p: PreparedEvent): Promise<void> {
  const { event } = p;
  const ids: Buffer[] = [];
  const addresses: Array<{ kind: number; d: string }> = [];
  for (const [name, value] of p.tags) {
    if (name === 'e' && /^[0-9a-f]{64}$/.test(value)) ids.push(hex(value));
    if (name === 'a') {
      const m = /^(\d{1,5}):([0-9a-f]{64}):(.*)$/s.exec(value);
      if (m && m[2] === event.pubkey) addresses.push({ kind: Number(m[1]), d: m[3] });
    }
  }
  if (ids.length) {
    await client.query(
      `DELETE FROM events e WHERE e.id = ANY($1::bytea[]) AND e.kind NOT IN (5, 62)
         AND (e.pubkey = $2 OR (e.kind = 1059 AND EXISTS (
           SELECT 1 FROM event_tags t WHERE t.event_id = e.id AND t.name = 'p' AND t.value = $3)))`,
      [ids, hex(event.pubkey), event.pubkey],
    );
  }
  for (const { kind, d } of addresses) {
    const cls = kindClass(kind);
    if (cls !== 'replaceable' && cls !== 'addressable') continue;
    await client.query(
      'DELETE FROM events WHERE pubkey = $1 AND kind = $2 AND d_tag = $3 AND created_at <= $4',
      [hex(event.pubkey), kind, cls === 'replaceable' ? '' : d, event.created_at],
    );
  }
}

/** Stores one event atomically and says what happened. Database errors propagate to the caller. */
export async function writeEvent(pool: pg.Pool, p: PreparedEvent): Promise<WriteResult> {
  return withTransaction(pool, async (client) => {
    if (p.event.kind !== KIND_DELETION && (await isDeleted(client, p)))
      return { status: 'rejected', reason: 'blocked: this event was deleted by its author' } as const;
    if (p.dTag !== null) {
      const settled = await replaceCurrentVersion(client, p);
      if (settled) return settled;
    }
    if (!(await insertEvent(client, p))) return { status: 'duplicate' } as const;
    if (p.event.kind === KIND_DELETION) await applyDeletion(client, p);
    return { status: 'stored' } as const;
  });
}
