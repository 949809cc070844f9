import type { Knex } from 'knex';
import type pg from 'pg';
import { hasSqlState, SQLSTATE } from './pg-errors.js';
import { migrations } from '../../migrations/index.js';

const source: Knex.MigrationSource<string> = {
  getMigrations: async () => Object.keys(migrations).sort(),
  getMigrationName: (name) => name,
  getMigration: async (name) => migrations[name],
};

const config: Knex.MigratorConfig = { migrationSource: source, tableName: 'knex_migrations' };

// One migrator per database at a time, whichever process or host it runs in: relays starting together
// on a database with pending migrations (a rolling upgrade, WORKERS on several hosts) would otherwise
// race to create knex's tables and apply the same migration, and all but one would fail to start.
// knex's own lock (knex_migrations_lock) refuses the second migrator instead of making it wait.
const LOCK = "hashtextextended('pgrelay:migrations', 0)";

// Tried again every so often rather than waited for with pg_advisory_lock: a statement waiting on
// the lock holds a snapshot, and CREATE INDEX CONCURRENTLY in the holder's migrations waits for every
// older snapshot to end. Each would wait for the other, unseen by PostgreSQL's deadlock detector.
const LOCK_RETRY_MS = 200;

/**
 * Runs `work` holding the migration lock (a session advisory lock on a connection of its own, so a
 * process that dies releases it). `waiting` is called once if another migrator holds it.
 */
async function underMigrationLock<T>(knex: Knex, work: () => Promise<T>, waiting?: () => void): Promise<T> {
  const connection = await knex.client.acquireConnection();
  try {
    const tryLock = async () =>
      (await knex.raw<{ rows: Array<{ ok: boolean }> }>(`SELECT pg_try_advisory_lock(${LOCK}) AS ok`).connection(connection)).rows[0].ok;
    for (let tries = 0; !(await tryLock()); tries++) {
      if (tries === 0) waiting?.();
      await new Promise((r) => setTimeout(r, LOCK_RETRY_MS));
    }
    try {
      return await work();
    } finally {
      await knex.raw(`SELECT pg_advisory_unlock(${LOCK})`).connection(connection);
    }
  } finally {
    await knex.client.releaseConnection(connection);
  }
}

/**
 * Runs pending migrations under the migration lock; returns the names applied. A process that waited
 * for another's migrations finds them applied and returns none.
 */
export async function migrateLatest(knex: Knex, options: { waiting?: () => void } = {}): Promise<string[]> {
  return underMigrationLock(
    knex,
    async () => {
      const [, applied] = await knex.migrate.latest(config);
      return applied as string[];
    },
    options.waiting,
  );
}

export async function migrateRollback(knex: Knex): Promise<string[]> {
  return underMigrationLock(knex, async () => {
    const [, rolledBack] = await knex.migrate.rollback(config);
    return rolledBack as string[];
  });
}

/**
 * Migrations of this build not yet applied to the database, read with the relay's own pool (one small
 * query, for /ready). A database without the migrations table has all of them pending.
 */
export async function pendingMigrations(pool: pg.Pool): Promise<string[]> {
  let applied: Set<string>;
  try {
    applied = new Set((await pool.query<{ name: string }>('SELECT name FROM knex_migrations')).rows.map((r) => r.name));
  } catch (err) {
    if (!hasSqlState(err, SQLSTATE.undefinedTable)) throw err;
    applied = new Set();
  }
  return Object.keys(migrations).filter((name) => !applied.has(name));
}

export async function migrationStatus(knex: Knex): Promise<{ applied: string[]; pending: string[] }> {
  const [applied, pending] = (await knex.migrate.list(config)) as [Array<{ name: string } | string>, Array<{ file: string } | string>];
  const name = (m: { name?: string; file?: string } | string) => (typeof m === 'string' ? m : (m.name ?? m.file ?? String(m)));
  return { applied: applied.map(name), pending: pending.map(name) };
}
