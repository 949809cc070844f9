import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { withDatabaseName } from '../../src/store/database.js';

const quoted = (name: string) => `"${name.replace(/"/g, '""')}"`;

async function adminQuery(adminUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/**
 * A new database on the test server; returns its URL. By default a copy of the template the global
 * setup migrated (every migration applied, no rows), which is what a relay or a store would make of
 * a new database at its first start, without running the migrations again for each test file;
 * `empty`: a database with nothing in it, for a test of what happens before the migrations.
 */
export async function createTestDatabase({ empty = false }: { empty?: boolean } = {}): Promise<string> {
  const adminUrl = inject('pgAdminUrl');
  const name = `test_${randomBytes(6).toString('hex')}`;
  await adminQuery(adminUrl, `CREATE DATABASE ${quoted(name)}${empty ? '' : ` TEMPLATE ${quoted(inject('pgTemplate'))}`}`);
  return withDatabaseName(adminUrl, name);
}

export async function dropDatabase(adminUrl: string, name: string): Promise<void> {
  await adminQuery(adminUrl, `DROP DATABASE IF EXISTS ${quoted(name)} WITH (FORCE)`);
}
