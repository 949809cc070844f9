// Migrations under an advisory lock: processes that start at once on a database with pending
// migrations do not both run them; the later one waits for the lock and then finds nothing pending.
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { migrations } from '../../migrations/index.js';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import { createKnex, openDatabase, type Database } from '../../src/store/database.js';
import { migrateLatest } from '../../src/store/migrate.js';
import { createTestDatabase } from '../support/database.js';

const all = Object.keys(migrations).sort();
const closers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of closers) await close();
});

async function appliedNames(url: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<{ name: string }>('SELECT name FROM knex_migrations ORDER BY name')).rows.map((r) => r.name);
  } finally {
    await client.end();
  }
}

describe('the migration lock', () => {
  it('two migrators started at once on an empty database: one applies every migration, the other none', async () => {
    const url = await createTestDatabase({ empty: true });
    const [first, second] = await Promise.all([createKnex(url), createKnex(url)]);
    closers.push(() => first.destroy(), () => second.destroy());
    const results = await Promise.all([migrateLatest(first), migrateLatest(second)]);
    expect(results.map((applied) => applied.length).sort((a, b) => a - b)).toEqual([0, all.length]);
    expect(results.flat().sort()).toEqual(all);
    expect(await appliedNames(url)).toEqual(all);
  });

  it('two relays opening an empty database at once both start, and each migration is applied once', async () => {
    const url = await createTestDatabase({ empty: true });
    const config = parseConfig({ DATABASE_URL: url, LOG_LEVEL: 'silent' });
    const opened = await Promise.allSettled([openDatabase(config, createLogger('silent')), openDatabase(config, createLogger('silent'))]);
    for (const result of opened) if (result.status === 'fulfilled') closers.push(() => result.value.close());
    expect(opened.map((r) => (r.status === 'rejected' ? String(r.reason) : 'started'))).toEqual(['started', 'started']);
    expect(await appliedNames(url)).toEqual(all);
    const [a, b] = opened.map((r) => (r as PromiseFulfilledResult<Database>).value);
    expect((await a.pool.query('SELECT count(*)::int AS n FROM events')).rows[0].n).toBe(0);
    expect((await b.pool.query('SELECT count(*)::int AS n FROM events')).rows[0].n).toBe(0);
  });
});
