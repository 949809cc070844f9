// npm run bench:seed -- --events N: fills the relay's database (DATABASE_URL, or the embedded one in
// DATA_DIR) with a deterministic, realistic corpus, through COPY. See --help.
import { parseArgs } from 'node:util';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import { from as copyFrom } from 'pg-copy-streams';
import type pg from 'pg';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { createPool, openDatabase } from '../src/store/database.js';
import { tsvectorLiteral } from '../src/nostr/search.js';
import { prepareEvent, type PreparedEvent } from '../src/store/prepared-event.js';
import { withTransaction } from '../src/store/write.js';
import { generateCorpus, type Manifest } from './lib/corpus.js';
import { saveManifest } from './lib/manifest.js';

const HELP = `usage: npm run bench:seed -- [options]

Fills the relay's database with a deterministic, realistic corpus: ~authors with Zipf (power-law)
activity; kinds dominated by notes (1), reactions (7) and reposts (6), plus profiles (0), contact
lists (3), relay lists (10002), zap receipts (9735) and articles (30023); e/p tags that follow popular
authors' notes; hashtags with a long tail; created_at spread over --days days.
Signatures are NOT valid (random bytes): fine for query benchmarks, which never re-verify stored
events. Uses DATABASE_URL, or the embedded PostgreSQL in DATA_DIR, like the relay, so a relay
started afterwards on the same DATA_DIR serves the seeded data.

options:
  --events N     events to generate (default 200000)
  --seed N       random seed (default 1)
  --authors N    number of authors (default min(100000, events/10))
  --days N       time span (default 730)
  --end T        created_at of the newest event, unix seconds (default 1790000000)
  --reset        empty the events tables first (otherwise they must be empty)
  --resume       continue an interrupted run with the same options (batches commit in order, so
                 the first N generated events are exactly the N stored ones)
  --batch N      events per COPY transaction (default 5000)`;

function copyText(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n').replace(/\r/g, '\\r');
}

async function copyRows(client: pg.PoolClient, sql: string, lines: string[]): Promise<void> {
  await pipeline(Readable.from([lines.join('')]), client.query(copyFrom(sql)));
}

async function writeBatch(pool: pg.Pool, batch: PreparedEvent[]): Promise<void> {
  const events: string[] = [];
  const tags: string[] = [];
  for (const p of batch) {
    const e = p.event;
    const d = p.dTag === null ? '\\N' : copyText(p.dTag);
    // NIP-50: the words as the relay stores them (store/write.ts casts the same literal to tsvector).
    const search = p.search ? copyText(tsvectorLiteral(p.search)) : '\\N';
    events.push(`\\\\x${e.id}\t\\\\x${e.pubkey}\t${e.kind}\t${e.created_at}\t${d}\t${p.expiresAt ?? '\\N'}\t${copyText(p.raw)}\t${search}\n`);
    for (const [name, value] of p.tags) tags.push(`\\\\x${e.id}\t${name}\t${copyText(value)}\t${e.kind}\t${e.created_at}\n`);
  }
  await withTransaction(pool, async (client) => {
    await copyRows(client, 'COPY events (id, pubkey, kind, created_at, d_tag, expires_at, raw, search) FROM STDIN', events);
    await copyRows(client, 'COPY event_tags (event_id, name, value, kind, created_at) FROM STDIN', tags);
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      events: { type: 'string', default: '200000' },
      seed: { type: 'string', default: '1' },
      authors: { type: 'string' },
      days: { type: 'string', default: '730' },
      end: { type: 'string', default: '1790000000' },
      reset: { type: 'boolean', default: false },
      resume: { type: 'boolean', default: false },
      batch: { type: 'string', default: '5000' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) return console.log(HELP);
  const events = Number(values.events);
  const options = {
    events,
    seed: Number(values.seed),
    authors: Number(values.authors ?? Math.max(100, Math.min(100_000, Math.floor(events / 10)))),
    days: Number(values.days),
    end: Number(values.end),
  };
  const batchSize = Number(values.batch);
  const config = loadConfig();
  const log = createLogger(config.LOG_LEVEL, 2);
  const db = await openDatabase(config, log, { ownEmbeddedServer: false });
  // Bulk loading on a busy machine can take longer than the relay's statement timeout: none here.
  const pool = createPool(db.url, { DB_POOL_SIZE: 2, QUERY_TIMEOUT_MS: 0 }, log);
  try {
    if (values.reset) await pool.query('TRUNCATE events, event_tags');
    const { rows } = await pool.query('SELECT count(*)::bigint AS n FROM events');
    const stored = Number(rows[0].n);
    if (stored && !values.resume) throw new Error('the events table is not empty: pass --reset to empty it first, or --resume');

    const manifest: Manifest = { seed: options.seed, events, authors: [], hashtags: [], popularNotes: [], articles: [], sampleIds: [], start: 0, end: 0 };
    const started = Date.now();
    let batch: PreparedEvent[] = [];
    const initial = values.resume ? stored : 0;
    let written = initial;
    let lastReport = started;
    let skipped = 0;
    for (const event of generateCorpus(options, manifest)) {
      if (skipped < (values.resume ? stored : 0)) {
        skipped++;
        continue;
      }
      batch.push(prepareEvent(event));
      if (batch.length < batchSize) continue;
      await writeBatch(pool, batch);
      written += batch.length;
      batch = [];
      if (Date.now() - lastReport > 5000) {
        lastReport = Date.now();
        const rate = (written - initial) / ((lastReport - started) / 1000);
        console.error(`seeded ${written}/${events} events (${Math.round(rate)}/s, ETA ${Math.round((events - written) / rate)} s)`);
      }
    }
    if (batch.length) await writeBatch(pool, batch);
    written += batch.length;
    const seconds = (Date.now() - started) / 1000;
    console.error(`seeded ${written - initial} events in ${seconds.toFixed(1)} s (${Math.round((written - initial) / seconds)}/s); analysing…`);
    await pool.query('VACUUM ANALYZE events');
    await pool.query('VACUUM ANALYZE event_tags');
    await saveManifest(pool, manifest);
    const size = await pool.query("SELECT pg_size_pretty(pg_database_size(current_database())) AS size, (SELECT count(*) FROM event_tags) AS tags");
    console.log(JSON.stringify({ events: written, tagRows: Number(size.rows[0].tags), seconds: Math.round(seconds), database: size.rows[0].size }));
  } finally {
    await pool.end();
    await db.close();
  }
}

main().catch((err) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
