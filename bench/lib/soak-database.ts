// The soak's own PostgreSQL: the embedded server (src/store/embedded.ts) in a temporary folder,
// started here rather than by the relay so the soak can stop it and start it again on the same
// port while the relay keeps running, and afterwards look up what the relay acknowledged.
import { chmod } from 'node:fs/promises';
import pg from 'pg';
import { createLogger } from '../../src/log.js';
import { ensureDatabase, withDatabaseName } from '../../src/store/database.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/store/embedded.js';

export interface SoakDatabase {
  /** The `nostr` database, for the relay's DATABASE_URL. */
  url: string;
  /** Stops the server, waits `downMs`, starts it again on the same port. */
  restart(downMs: number): Promise<void>;
  stop(): Promise<void>;
}

const log = createLogger('warn');

export async function startSoakDatabase(dataDir: string): Promise<SoakDatabase> {
  // As root the server runs as `postgres` (embedded.ts), which must be able to enter the folder.
  await chmod(dataDir, 0o755);
  let server: EmbeddedPostgres | undefined = await startEmbeddedPostgres(dataDir, 0, log);
  const port = server.port;
  await ensureDatabase(server.adminUrl, 'nostr');
  const url = withDatabaseName(server.adminUrl, 'nostr');
  return {
    url,
    async restart(downMs) {
      await server!.stop();
      server = undefined;
      await new Promise((r) => setTimeout(r, downMs));
      server = await startEmbeddedPostgres(dataDir, port, log);
    },
    async stop() {
      await server?.stop();
      server = undefined;
    },
  };
}

/** The ids (hex) among `ids` that the `events` table does not hold. */
export async function missingEvents(url: string, ids: string[]): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const missing: string[] = [];
    for (let i = 0; i < ids.length; i += 5000) {
      const batch = ids.slice(i, i + 5000);
      const { rows } = await client.query<{ id: string }>(
        "SELECT encode(id, 'hex') AS id FROM events WHERE id = ANY (SELECT decode(x, 'hex') FROM unnest($1::text[]) AS x)",
        [batch],
      );
      const found = new Set(rows.map((r) => r.id));
      for (const id of batch) if (!found.has(id)) missing.push(id);
    }
    return missing;
  } finally {
    await client.end();
  }
}
