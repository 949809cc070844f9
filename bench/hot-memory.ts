// npm run bench:hot-memory: the heap one held event takes in the hot tier, with its indexes,
// measured, against the tier's own estimate (tier.ts heldBytes, which HOT_TIER_MB is spent on).
// Reads the newest --events events of the seeded database (DATABASE_URL or DATA_DIR, as bench:seed),
// holds them in a HotTier (store/hot/tier.ts) with no budget limit, and compares the heap in use
// after a full collection before and after (Node runs with --expose-gc). The events are what the
// relay would hold: the raw JSON strings are kept by the tier only.
import { parseArgs } from 'node:util';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { createPool, openDatabase } from '../src/store/database.js';
import { prepareHeld, readNewestFirst } from '../src/store/hot/fill.js';
import { HotTier } from '../src/store/hot/tier.js';

const { values } = parseArgs({ options: { events: { type: 'string', default: '300000' }, help: { type: 'boolean', default: false } } });
if (values.help) {
  console.log('usage: npm run bench:hot-memory -- [--events N]   (default 300000; needs a seeded database, see bench:seed)');
  process.exit(0);
}
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc (npm run bench:hot-memory does)');

function heapAfterGc(): number {
  for (let i = 0; i < 3; i++) gc!();
  return process.memoryUsage().heapUsed;
}

async function main(): Promise<void> {
  const wanted = Number(values.events);
  const config = loadConfig();
  const log = createLogger('warn', 2);
  const db = await openDatabase(config, log, { ownEmbeddedServer: false });
  const pool = createPool(db.url, { DB_POOL_SIZE: 1, QUERY_TIMEOUT_MS: 0 }, log);
  try {
    const tier = new HotTier({ budgetBytes: Infinity });
    const before = heapAfterGc();
    let rawChars = 0;
    let tags = 0;
    // As the relay's fill reads and prepares them (store/hot/fill.ts).
    await readNewestFirst(pool, (raws) => {
      const page = raws.slice(0, wanted - tier.size).map(prepareHeld);
      for (const p of page) {
        rawChars += p.raw.length;
        tags += p.tags.length;
      }
      tier.addOlder(page, false);
      return tier.size < wanted;
    });
    const measured = heapAfterGc() - before;
    const n = tier.size;
    const perEvent = (x: number) => Math.round(x / n);
    console.log(`npm run bench:hot-memory -- --events ${wanted}`);
    console.log(`held ${n} events: raw JSON ${perEvent(rawChars)} characters and ${(tags / n).toFixed(2)} indexed tags per event on average`);
    console.log(`heap measured: ${(measured / 2 ** 20).toFixed(1)} MB, ${perEvent(measured)} bytes per event`);
    console.log(`tier estimate: ${(tier.bytes / 2 ** 20).toFixed(1)} MB, ${perEvent(tier.bytes)} bytes per event (estimate / measured = ${(tier.bytes / measured).toFixed(3)})`);
  } finally {
    await pool.end();
    await db.close();
  }
}

main().catch((err) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
