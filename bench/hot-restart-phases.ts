// npm run bench:hot-restart-phases: where the hot tier's fill spends its time, phase by phase, in
// one process on the seeded database (DATABASE_URL or DATA_DIR, as bench:seed), no relay around it.
// Each --mode reads the newest --events events newest first and reports the seconds spent reading
// rows (the database and the driver), preparing them (prepareStored: JSON.parse and tag rows) and
// holding them (HotTier.addOlder: the indexes), and the garbage collector's pauses.
//   pages: the fill as it was (keyset SELECT pages of 2000, one after the other)
//   fill:  the fill as the relay runs it now (fill.ts: one cursor, read ahead, parsing up to the tags)
//   read:  the fill's reading alone (rows counted, nothing held)
import { PerformanceObserver } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { createPool, openDatabase } from '../src/store/database.js';
import { HotTier } from '../src/store/hot/tier.js';
import { prepareStored } from '../src/store/prepared-event.js';
import { loadAverage } from './load/system.js';
import type pg from 'pg';

/** The fill's page as it was: keyset by (created_at DESC, id) with an OR PostgreSQL cannot start an index scan at. */
async function oldPage(pool: pg.Pool, after: { createdAt: number; id: Buffer } | undefined, limit: number) {
  const { rows } = await pool.query<{ raw: string; created_at: string; id: Buffer }>(
    after
      ? `SELECT raw, created_at, id FROM events WHERE created_at < $1 OR (created_at = $1 AND id > $2) ORDER BY created_at DESC, id LIMIT $3`
      : `SELECT raw, created_at, id FROM events ORDER BY created_at DESC, id LIMIT $1`,
    after ? [after.createdAt, after.id, limit] : [limit],
  );
  return rows;
}

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '1000000' },
    mode: { type: 'string', default: 'pages' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log('usage: npm run bench:hot-restart-phases -- [--events N] [--mode pages|fill|read]   (needs a seeded database, see bench:seed)');
  process.exit(0);
}

let gcMs = 0;
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) gcMs += entry.duration;
}).observe({ entryTypes: ['gc'] });

async function main(): Promise<void> {
  const wanted = Number(values.events);
  const config = loadConfig();
  const log = createLogger('warn', 2);
  const db = await openDatabase(config, log, { ownEmbeddedServer: false });
  const pool = createPool(db.url, { DB_POOL_SIZE: 4, QUERY_TIMEOUT_MS: 0 }, log);
  const load = loadAverage();
  const started = performance.now();
  const cpuBefore = process.cpuUsage();
  const phase = { read: 0, prepare: 0, hold: 0 };
  const tier = new HotTier({ budgetBytes: Infinity });
  try {
    if (values.mode === 'pages') {
      let after: { createdAt: number; id: Buffer } | undefined;
      for (let held = 0; held < wanted; ) {
        let t = performance.now();
        const rows = await oldPage(pool, after, Math.min(2000, wanted - held));
        phase.read += performance.now() - t;
        if (rows.length === 0) break;
        t = performance.now();
        const page = rows.map((r) => prepareStored(r.raw, false));
        phase.prepare += performance.now() - t;
        t = performance.now();
        tier.addOlder(page, false);
        phase.hold += performance.now() - t;
        held += rows.length;
        after = { createdAt: Number(rows[rows.length - 1]!.created_at), id: rows[rows.length - 1]!.id };
      }
    } else {
      const { readNewestFirst, prepareHeld } = await import('../src/store/hot/fill.js');
      let held = 0;
      await readNewestFirst(
        pool,
        (raws) => {
          held += raws.length;
          if (values.mode === 'read') return held < wanted;
          let t = performance.now();
          const page = raws.map(prepareHeld);
          phase.prepare += performance.now() - t;
          t = performance.now();
          tier.addOlder(page, false);
          phase.hold += performance.now() - t;
          return held < wanted;
        },
        (ms) => (phase.read += ms),
      );
    }
    const seconds = (performance.now() - started) / 1000;
    const cpu = process.cpuUsage(cpuBefore);
    const s = (ms: number) => (ms / 1000).toFixed(1);
    console.log(`npm run bench:hot-restart-phases -- --mode ${values.mode} --events ${wanted}   (load average ${load.toFixed(2)} at start, ${loadAverage().toFixed(2)} at end)`);
    console.log(`${tier.size} events held in ${seconds.toFixed(1)} s: reading ${s(phase.read)} s, preparing ${s(phase.prepare)} s, holding ${s(phase.hold)} s, GC pauses ${s(gcMs)} s; CPU ${s((cpu.user + cpu.system) / 1000)} s (all threads); RSS ${Math.round(process.memoryUsage().rss / 2 ** 20)} MB`);
  } finally {
    await pool.end();
    await db.close();
  }
}

main().catch((err) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
