// Opening the database: the server at DATABASE_URL, or else an embedded PostgreSQL in DATA_DIR.
// The relay's hot path uses a `pg` pool with explicit SQL; migrations and operator commands use knex.
import knexFactory, { type Knex } from 'knex';
import pg from 'pg';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from './embedded.js';
import { migrateLatest } from './migrate.js';

export interface Database {
  url: string;
  pool: pg.Pool;
  knex: Knex;
  close(): Promise<void>;
}

const EMBEDDED_DATABASE = 'nostr';

/** Creates a database on the server if it does not exist yet. */
export async function ensureDatabase(adminUrl: string, name: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    // CREATE DATABASE takes no parameters; `name` is our own constant or a test's generated name.
    if (!rowCount) await client.query(`CREATE DATABASE "${name.replace(/"/g, '""')}"`);
  } finally {
    await client.end();
  }
}

export function withDatabaseName(url: string, name: string): string {
  const u = new URL(url);
  u.pathname = '/' + name;
  return u.toString();
}

export function createPool(url: string, config: Pick<Config, 'DB_POOL_SIZE' | 'QUERY_TIMEOUT_MS'>, log: Logger): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max: config.DB_POOL_SIZE,
    // One pathological query must not hold a connection for long (a REQ that times out gets CLOSED).
    statement_timeout: config.QUERY_TIMEOUT_MS,
    connectionTimeoutMillis: 5000,
    application_name: 'pgrelay',
    // Relay queries are many, short and already index-ordered: JIT compilation and parallel workers
    // only add start-up cost and steal the cores other connections need.
    options: '-c jit=off -c max_parallel_workers_per_gather=0',
  });
  // An idle client losing its server (restart, network) must not crash the process.
  pool.on('error', (err) => log.warn({ err: err.message }, 'idle database connection lost'));
  return pool;
}

export function createKnex(url: string): Knex {
  return knexFactory({ client: 'pg', connection: url, pool: { min: 0, max: 4 } });
}

/** Connects (starting the embedded server if needed) and, unless told not to, runs pending migrations. */
export async function openDatabase(
  config: Config,
  log: Logger,
  options: { migrate?: boolean; ownEmbeddedServer?: boolean } = {},
): Promise<Database> {
  let embedded: EmbeddedPostgres | undefined;
  let url = config.DATABASE_URL;
  if (!url) {
    embedded = await startEmbeddedPostgres(config.DATA_DIR, config.EMBEDDED_PG_PORT, log, options.ownEmbeddedServer ?? true);
    await ensureDatabase(embedded.adminUrl, EMBEDDED_DATABASE);
    url = withDatabaseName(embedded.adminUrl, EMBEDDED_DATABASE);
  }
  const knex = createKnex(url);
  try {
    if (options.migrate !== false) {
      const applied = await migrateLatest(knex);
      if (applied.length) log.info({ applied }, 'migrations applied');
    }
  } catch (err) {
    await knex.destroy();
    await embedded?.stop();
    throw err;
  }
  const pool = createPool(url, config, log);
  return {
    url,
    pool,
    knex,
    async close() {
      await pool.end();
      await knex.destroy();
      await embedded?.stop();
    },
  };
}

