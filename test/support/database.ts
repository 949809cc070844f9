import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { ensureDatabase, withDatabaseName } from '../../src/store/database.js';

/** A new, empty database on the test server; returns its URL. */
export async function createTestDatabase(): Promise<string> {
  const adminUrl = inject('pgAdminUrl');
  const name = `test_${randomBytes(6).toString('hex')}`;
  await ensureDatabase(adminUrl, name);
  return withDatabaseName(adminUrl, name);
}
