// Opening the database: the server at DATABASE_URL, or else an embedded PostgreSQL in DATA_DIR.
// The relay's hot path uses a `pg` pool with explicit SQL; migrations and operator commands use knex.
import type { Knex } from 'knex';
import pg from 'pg';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from './embedded.js';
import { migrateLatest, migrationStatus, pendingMigrations } from './migrate.js';
import { SQLSTATE } from './pg-errors.js';
import { connectionOptions, currentUrl, describeHosts, finderFor, needsFinder, newClient, parseDatabaseUrl, type HostFinder } from './hosts.js';
import { FatalError } from '../fatal.js';

export interface Database {
  url: string;
  pool: pg.Pool;
  /** With several hosts (or target_session_attrs): which server is in use, and its changes. */
  finder?: HostFinder;
  /** The embedded server's restarts after a crash (undefined with DATABASE_URL). */
  embedded?: { restarts(): number };
  /** knex on this database, for the migrate command; loaded on first use (most starts never need it). */
  knex(): Promise<Knex>;
  /** `leaveAdopted`: after a failed start, an embedded server this process found running stays up. */
  close(options?: { leaveAdopted?: boolean }): Promise<void>;
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

/**
 * `pipeline`: each client sends a query without waiting for the answer to the one before (pg's
 * pipeline mode), for the writer (write.ts), whose statements are known in advance; such a client
 * cannot run cursors, so the relay's other queries use a pool without it.
 */
export function createPool(url: string, config: Pick<Config, 'DB_POOL_SIZE' | 'QUERY_TIMEOUT_MS'>, log: Logger, { pipeline = false } = {}): pg.Pool {
  const pool = new pg.Pool({
    ...connectionOptions(url),
    ...(pipeline ? ({ pipeline: true } as object) : {}),
    keepAlive: true,
    max: config.DB_POOL_SIZE,
    // One pathological query must not hold a connection for long (a REQ that times out gets CLOSED).
    statement_timeout: config.QUERY_TIMEOUT_MS,
    connectionTimeoutMillis: 5000,
    application_name: 'pgrelay',
    // Relay queries are many, short and already index-ordered: JIT compilation and parallel workers
    // only add start-up cost and steal the cores other connections need.
    options: '-c jit=off -c max_parallel_workers_per_gather=0',
  });
  // A client losing its server (restart, network) must not crash the process: idle ones report on
  // the pool; one checked out (pg-pool drops its own listener then) reports on the client, and the
  // query it runs fails as well, which its caller handles.
  pool.on('error', (err) => log.warn({ err: err.message }, 'idle database connection lost'));
  pool.on('connect', (client) => client.on('error', (err) => log.warn({ err: err.message }, 'database connection lost')));
  return pool;
}

export async function createKnex(url: string): Promise<Knex> {
  const { default: knexFactory } = await import('knex');
  // knex opens its own connections: on the server the URL leads to now.
  return knexFactory({ client: 'pg', connection: await currentUrl(url), pool: { min: 0, max: 4 } });
}

/** Where a URL points, without its password: for messages. */
function describeUrl(url: string): { server: string; user: string; database: string } {
  const server = describeHosts(url);
  try {
    const u = new URL(parseDatabaseUrl(url).base);
    return { server, user: decodeURIComponent(u.username) || '(default user)', database: decodeURIComponent(u.pathname.slice(1)) || '(default)' };
  } catch {
    return { server, user: '(default user)', database: '(default)' };
  }
}

const CONNECT_TIMEOUT_MS = 5000;

/**
 * Connects once to DATABASE_URL before anything else uses it, so that a server that is down, a wrong
 * password or a missing database is reported as such (FatalError), not as whatever statement failed first.
 */
async function checkConnection(url: string): Promise<void> {
  const client = newClient(url, { connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
  client.on('error', () => {}); // a failure is reported by connect()
  try {
    await client.connect();
  } catch (err) {
    throw connectionError(err, url);
  } finally {
    await client.end().catch(() => {});
  }
}

export function connectionError(err: unknown, url: string): FatalError {
  const { server, user, database } = describeUrl(url);
  const e = err as { code?: string; message?: string };
  const message = e.message ?? String(err);
  switch (e.code) {
    case 'ECONNREFUSED':
      return new FatalError(`the database server at ${server} refuses connections`, 'start PostgreSQL there or correct DATABASE_URL (unset, the relay runs its own embedded PostgreSQL)');
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new FatalError(`the database host in DATABASE_URL (${server}) cannot be resolved`, 'correct DATABASE_URL');
    case 'ETIMEDOUT':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return new FatalError(`the database server at ${server} cannot be reached (${e.code})`, 'check the address in DATABASE_URL and the network or firewall between');
    case SQLSTATE.invalidPassword:
    case SQLSTATE.invalidAuthorization:
      return new FatalError(`the database at ${server} refused user "${user}" (${message})`, 'correct the user and password in DATABASE_URL');
    case SQLSTATE.invalidCatalogName:
      return new FatalError(`database "${database}" does not exist on ${server}`, `create it (e.g. createdb ${database}) or correct the database name in DATABASE_URL`);
  }
  if (/timeout/i.test(message))
    return new FatalError(`the database server at ${server} did not answer within ${CONNECT_TIMEOUT_MS / 1000} s`, 'check that PostgreSQL runs there and DATABASE_URL points at it');
  return new FatalError(`cannot connect to the database at ${server} (${message})`, 'check DATABASE_URL and the server');
}

/** The migrations of this build not applied to the database at `url` (one connection, one query). */
async function pendingOn(url: string): Promise<string[]> {
  const pool = new pg.Pool({ ...connectionOptions(url), max: 1 });
  try {
    return await pendingMigrations(pool);
  } finally {
    await pool.end();
  }
}

/** Runs pending migrations; a failure names the migration and what state it leaves. */
async function migrate(knex: Knex, log: Logger): Promise<void> {
  try {
    const applied = await migrateLatest(knex, { waiting: () => log.info('another process is applying migrations: waiting for it') });
    if (applied.length) log.info({ applied }, 'migrations applied');
  } catch (err) {
    const pending = await migrationStatus(knex).then((s) => s.pending, () => []);
    // knex prefixes the server's message with the whole statement: keep the server's words.
    const message = (err as Error).message;
    throw new FatalError(
      `migration ${pending[0] ?? '(unknown)'} failed: ${message.includes(' - ') ? message.slice(message.lastIndexOf(' - ') + 3) : message}`,
      'the migrations before it stay applied; fix the cause and start again (`npm run cli -- migrate status` lists them)',
    );
  }
}

/** Connects (starting the embedded server if needed) and, unless told not to, runs pending migrations. */
export async function openDatabase(
  config: Config,
  log: Logger,
  options: { migrate?: boolean; ownEmbeddedServer?: boolean } = {},
): Promise<Database> {
  let embedded: EmbeddedPostgres | undefined;
  let url = config.DATABASE_URL;
  let knex: Knex | undefined;
  try {
    if (!url) {
      embedded = await startEmbeddedPostgres(config.DATA_DIR, config.EMBEDDED_PG_PORT, log, options.ownEmbeddedServer ?? true);
      await ensureDatabase(embedded.adminUrl, EMBEDDED_DATABASE);
      url = withDatabaseName(embedded.adminUrl, EMBEDDED_DATABASE);
    } else {
      await checkConnection(url);
    }
    // knex (and its migrator) only when a migration is pending: a start or a command on a current
    // database reads one small table and goes on.
    if (options.migrate !== false && (await pendingOn(url)).length > 0) {
      knex = await createKnex(url);
      await migrate(knex, log);
    }
  } catch (err) {
    await knex?.destroy();
    // Only a server this process started: one it found running belongs to someone else.
    if (embedded?.startedHere) await embedded.stop().catch((e) => log.error({ err: (e as Error).message }, 'embedded PostgreSQL not stopped'));
    throw err;
  }
  const pool = createPool(url, config, log);
  const at = url;
  let opened: Promise<Knex> | undefined = knex && Promise.resolve(knex);
  const finder = needsFinder(url) ? finderFor(url) : undefined;
  const server = embedded;
  return {
    url,
    pool,
    finder,
    embedded: server && { restarts: () => server.restarts() },
    knex: () => (opened ??= createKnex(at)),
    async close(closeOptions = {}) {
      finder?.stop();
      await pool.end();
      await (await opened)?.destroy();
      if (embedded && !(closeOptions.leaveAdopted && !embedded.startedHere)) await embedded.stop();
    },
  };
}
