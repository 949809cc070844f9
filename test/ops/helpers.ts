// Helpers for the operator-command tests: a migrated store on its own database, events with correct
// ids but unchecked signatures (for tests where signatures are not the subject), and row snapshots.
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { parseConfig, type Config } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import { computeEventId, type NostrEvent } from '../../src/nostr/event.js';
import { openDatabase, type Database } from '../../src/store/database.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatch } from '../../src/store/write.js';
import { createTestDatabase } from '../support/database.js';

export const silentLog = createLogger('silent');

export function testConfig(env: Record<string, string> = {}): Config {
  return parseConfig({ LOG_LEVEL: 'silent', ...env });
}

/** A fresh, migrated database. */
export async function openTestStore(env: Record<string, string> = {}): Promise<Database> {
  const url = await createTestDatabase();
  return openDatabase(testConfig({ ...env, DATABASE_URL: url }), silentLog);
}

const fakePubkey = randomBytes(32).toString('hex');

/** An event whose id is right and whose signature is random bytes (stores never re-check it). */
export function unsignedEvent(t: Partial<Omit<NostrEvent, 'id' | 'sig'>> = {}): NostrEvent {
  const base = {
    pubkey: t.pubkey ?? fakePubkey,
    created_at: t.created_at ?? 1_700_000_000,
    kind: t.kind ?? 1,
    tags: t.tags ?? [],
    content: t.content ?? '',
  };
  return { id: computeEventId(base), ...base, sig: randomBytes(64).toString('hex') };
}

export async function store(pool: pg.Pool, events: NostrEvent[]): Promise<void> {
  const results = await writeBatch(pool, events.map(prepareEvent));
  const refused = results.filter((r) => r.status !== 'stored');
  if (refused.length) throw new Error(`setup: ${refused.length} events not stored: ${JSON.stringify(refused[0])}`);
}

/** Every event_tags row, sorted, as comparable strings. */
export async function tagRows(pool: pg.Pool): Promise<string[]> {
  const { rows } = await pool.query<{ row: string }>(
    `SELECT encode(event_id, 'hex') || ' ' || name || ' ' || kind || ' ' || created_at || ' ' || value AS row FROM event_tags`,
  );
  return rows.map((r) => r.row).sort();
}

/** Every stored event's raw JSON, sorted. */
export async function storedRaw(pool: pg.Pool): Promise<string[]> {
  const { rows } = await pool.query<{ raw: string }>('SELECT raw FROM events');
  return rows.map((r) => r.raw).sort();
}

export async function storedIds(pool: pg.Pool): Promise<Set<string>> {
  const { rows } = await pool.query<{ id: string }>("SELECT encode(id, 'hex') AS id FROM events");
  return new Set(rows.map((r) => r.id));
}

/**
 * A pool on the same database as a role that is not a superuser, or undefined when the test server
 * does not let us create one. The role is dropped by `close`.
 */
export async function ordinaryRolePool(db: { url: string; pool: pg.Pool }): Promise<{ pool: pg.Pool; close(): Promise<void> } | undefined> {
  const role = `ordinary_${randomBytes(4).toString('hex')}`;
  try {
    await db.pool.query(`CREATE ROLE ${role} LOGIN PASSWORD '${role}' NOSUPERUSER`);
  } catch {
    return undefined;
  }
  await db.pool.query(`GRANT ALL ON SCHEMA public TO ${role}; GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role}; GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO ${role}`);
  const url = new URL(db.url);
  url.username = role;
  url.password = role;
  const { default: pgModule } = await import('pg');
  const pool = new pgModule.Pool({ connectionString: url.toString(), max: 4 });
  return {
    pool,
    async close() {
      await pool.end();
      await db.pool.query(`REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ${role}; REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM ${role}; REVOKE ALL ON SCHEMA public FROM ${role}; DROP ROLE ${role}`);
    },
  };
}

/** A row of nostream's `events` table, built from a (signed) event. */
export interface NostreamRow {
  event: Record<string, unknown> & { id: string; pubkey: string; sig: string };
  deleted?: boolean;
  expiresAt?: number;
  /** Stored instead of the signed content: a row that does not hash to its event_id. */
  content?: string;
}

/** Inserts rows into nostream's `events` table (already created in `pool`'s database). */
export async function insertNostreamRows(pool: pg.Pool, rows: NostreamRow[]): Promise<void> {
  for (const r of rows) {
    const e = r.event;
    await pool.query(
      `INSERT INTO events (event_id, event_pubkey, event_kind, event_created_at, event_content, event_tags, event_signature, deleted_at, expires_at, remote_address)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, '127.0.0.1')`,
      [
        Buffer.from(e.id, 'hex'),
        Buffer.from(e.pubkey, 'hex'),
        e.kind,
        e.created_at,
        r.content ?? e.content,
        JSON.stringify(e.tags),
        Buffer.from(e.sig, 'hex'),
        r.deleted ? new Date() : null,
        r.expiresAt ?? null,
      ],
    );
  }
}
