// A real relay for a test file: its own database on the test server, a random port, real sockets.
import { parseConfig, type Config } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import { openDatabase, type Database } from '../../src/store/database.js';
import { startRelay, type RelayOptions, type RelayServer } from '../../src/relay/server.js';
import { createTestDatabase } from './database.js';

export interface TestRelay {
  url: string;
  config: Config;
  db: Database;
  relay: RelayServer;
  close(): Promise<void>;
}

/**
 * Rate limits are off unless a test sets them: most tests publish and query from one address far
 * faster than a client should (test/relay/rate-limits.test.ts tests the limits themselves).
 */
const NO_RATE_LIMITS = {
  RATE_LIMIT_EVENTS_PER_SECOND: '0',
  RATE_LIMIT_REQS_PER_SECOND: '0',
  RATE_LIMIT_CONNECTIONS_PER_MINUTE: '0',
  MAX_CONNECTIONS_PER_ADDRESS: '0',
};

/**
 * `databaseUrl`: share another test relay's database (several relay processes on one database).
 * `options`: what startRelay takes besides the configuration (a stand-in web of trust, say).
 */
export async function startTestRelay(env: Record<string, string> = {}, databaseUrl?: string, options: RelayOptions = {}): Promise<TestRelay> {
  databaseUrl ??= await createTestDatabase();
  const config = parseConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent', ...NO_RATE_LIMITS, HOT_TIER_SNAPSHOT: 'false', ...env, DATABASE_URL: databaseUrl });
  const log = createLogger(config.LOG_LEVEL);
  const db = await openDatabase(config, log);
  const relay = await startRelay(config, db, log, options);
  return {
    url: relay.url,
    config,
    db,
    relay,
    async close() {
      await relay.close();
      await db.close();
    },
  };
}
