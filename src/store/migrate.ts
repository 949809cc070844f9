import type { Knex } from 'knex';
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

export async function migrationStatus(knex: Knex): Promise<{ applied: string[]; pending: string[] }> {
  const [applied, pending] = (await knex.migrate.list(config)) as [Array<{ name: string } | string>, Array<{ file: string } | string>];
  const name = (m: { name?: string; file?: string } | string) => (typeof m === 'string' ? m : (m.name ?? m.file ?? String(m)));
  return { applied: applied.map(name), pending: pending.map(name) };
}
