// node dist/bench/nostream-fixture.js: builds a nostream database to benchmark `import-nostream`
// against: nostream's `events` table, in a schema `nostream` of the relay's own database (DATABASE_URL,
// or the embedded one in DATA_DIR), filled with the events stored there (seed them first with
// `npm run bench:seed`), with ~1% soft-deleted and ~1% expired rows, and event_tags NULL in ~1% of
// the rows with no tags (nostream's column is nullable). Prints the --from URL.
import { parseArgs } from 'node:util';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { openDatabase } from '../src/store/database.js';
import { nostreamEventsTable } from './lib/nostream-schema.js';

const { values } = parseArgs({ options: { help: { type: 'boolean', default: false } } });
if (values.help) {
  console.log('usage: node dist/bench/nostream-fixture.js   (after npm run bench:seed; same DATA_DIR / DATABASE_URL)');
  process.exit(0);
}
const config = loadConfig();
const log = createLogger(config.LOG_LEVEL, 2);
const db = await openDatabase({ ...config, QUERY_TIMEOUT_MS: 0 }, log, { ownEmbeddedServer: false });
try {
  const started = Date.now();
  await db.pool.query(`
    DROP SCHEMA IF EXISTS nostream CASCADE;
    CREATE SCHEMA nostream;
    ${nostreamEventsTable('nostream.events')};`);
  const { rowCount } = await db.pool.query(`
    INSERT INTO nostream.events (event_id, event_pubkey, event_kind, event_created_at, event_content, event_tags,
                                 event_signature, first_seen, deleted_at, expires_at, remote_address)
    SELECT e.id, e.pubkey, e.kind, e.created_at, j->>'content',
           CASE WHEN j->'tags' = '[]'::jsonb AND get_byte(e.id, 29) < 3 THEN NULL ELSE j->'tags' END, decode(j->>'sig', 'hex'),
           to_timestamp(e.created_at), CASE WHEN get_byte(e.id, 31) < 3 THEN now() END,
           CASE WHEN get_byte(e.id, 30) < 3 THEN e.created_at + 60 ELSE e.expires_at END, '127.0.0.1'
      FROM public.events e CROSS JOIN LATERAL (SELECT e.raw::jsonb AS j) x
     WHERE strpos(e.raw, '\\u0000') = 0`);
  await db.pool.query('VACUUM ANALYZE nostream.events');
  const from = new URL(db.url);
  from.searchParams.set('options', '-c search_path=nostream');
  console.error(`nostream.events: ${rowCount} rows in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  console.log(from.toString());
} finally {
  await db.close();
}
