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

/** Runs pending migrations; returns the names applied. */
export async function migrateLatest(knex: Knex): Promise<string[]> {
  const [, applied] = await knex.migrate.latest(config);
  return applied as string[];
}

export async function migrateRollback(knex: Knex): Promise<string[]> {
  const [, rolledBack] = await knex.migrate.rollback(config);
  return rolledBack as string[];
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
