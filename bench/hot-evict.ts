// npm run bench:hot-evict: does the hot tier's eviction pause the relay? A relay process with a
// small tier (--budget-mb) on a fresh embedded database holds what --preload events leave after
// eviction; then a burst of --burst newer events is written straight into the database (as an
// import or another process would: the relay sees them through its change stream), so the tier adds
// them all and evicts as many of its oldest. Meanwhile a probe connection sends one small REQ at a
// time (an active author's newest notes, answered from memory) and times each to EOSE. The same run
// with a budget that holds everything (--large-mb) is the baseline: the burst without eviction.
// Reported per budget and phase: probe p50/p95/p99/max, the relay's event-loop delay p99 (prom-client's
// monitor, reset at each scrape) and the events the tier held and evicted.
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { createLogger } from '../src/log.js';
import { createPool, ensureDatabase, withDatabaseName } from '../src/store/database.js';
import { startEmbeddedPostgres } from '../src/store/embedded.js';
import { prepareEvent } from '../src/store/prepared-event.js';
import { writeBatch } from '../src/store/write.js';
import { corpusAuthor, generateCorpus, type Manifest } from './lib/corpus.js';
import { startRelayProcess, waitForHotTier, type RelayProcess } from './lib/relay-process.js';
import { parsePrometheusText, total } from './lib/soak-metrics.js';
import { ms, summarize } from './lib/stats.js';
import { loadAverage, machineDescription } from './load/system.js';

const HELP = `usage: npm run bench:hot-evict -- [options]

options:
  --budget-mb N   the small tier, which evicts (default 64)
  --large-mb N    the baseline tier, which holds everything (default 1024)
  --preload N     events written before the probe starts (default 100000)
  --burst N       events written while the probe runs (default 100000)
  --quiet S       seconds of probing before the burst (default 10)`;

const { values } = parseArgs({
  options: {
    'budget-mb': { type: 'string', default: '64' },
    'large-mb': { type: 'string', default: '1024' },
    preload: { type: 'string', default: '100000' },
    burst: { type: 'string', default: '100000' },
    quiet: { type: 'string', default: '10' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const PRELOAD = Number(values.preload);
const BURST = Number(values.burst);
const BATCH = 1000;
const sleep = (msec: number) => new Promise<void>((r) => setTimeout(r, msec));

/** The relay's gauges and the event-loop delay p99 since the last scrape. */
async function scrape(relay: RelayProcess): Promise<{ held: number; lagP99Ms: number }> {
  const series = parsePrometheusText(await (await fetch(relay.url.replace(/^ws/, 'http') + '/metrics')).text());
  const value = (name: string) => total(series, name) ?? NaN;
  return { held: value('pgrelay_hot_tier_events'), lagP99Ms: value('nodejs_eventloop_lag_p99_seconds') * 1000 };
}

/** One REQ at a time until `stop()` says so; each timed from REQ to EOSE. */
function probe(url: string, authors: string[]): { stop: () => Promise<number[]> } {
  const ws = new WebSocket(url);
  const samples: number[] = [];
  let running = true;
  let n = 0;
  const done = new Promise<void>((resolve, reject) => {
    ws.on('error', reject);
    ws.on('open', () => {
      const next = () => {
        if (!running) return resolve();
        const sub = `p${n++}`;
        const started = performance.now();
        const onMessage = (data: WebSocket.RawData) => {
          const text = data.toString();
          if (!text.startsWith('["EOSE"') && !text.startsWith('["CLOSED"')) return;
          ws.off('message', onMessage);
          if (text.startsWith('["CLOSED"')) return reject(new Error(`probe REQ refused: ${text}`));
          samples.push(performance.now() - started);
          ws.send(JSON.stringify(['CLOSE', sub]));
          setTimeout(next, 5);
        };
        ws.on('message', onMessage);
        ws.send(JSON.stringify(['REQ', sub, { authors: [authors[n % authors.length]], kinds: [1], limit: 20 }]));
      };
      next();
    });
  });
  return {
    stop: async () => {
      running = false;
      await done;
      ws.close();
      return samples;
    },
  };
}

interface PhaseResult {
  budget: number;
  phase: string;
  seconds: number;
  samples: number[];
  lagP99Ms: number;
  heldBefore: number;
  heldAfter: number;
}

async function run(budgetMb: number): Promise<PhaseResult[]> {
  const dir = await mkdtemp(path.join(tmpdir(), 'pgrelay-hot-evict-'));
  await chmod(dir, 0o755); // the embedded server runs as `postgres` when we are root
  const log = createLogger('warn', 2);
  const embedded = await startEmbeddedPostgres(path.join(dir, 'pg'), 0, log);
  let relay: RelayProcess | undefined;
  try {
    await ensureDatabase(embedded.adminUrl, 'nostr');
    const url = withDatabaseName(embedded.adminUrl, 'nostr');
    relay = await startRelayProcess({ DATABASE_URL: url, HOT_TIER_MB: String(budgetMb) });
    await waitForHotTier(relay);
    const pool = createPool(url, { DB_POOL_SIZE: 2, QUERY_TIMEOUT_MS: 0 }, log);
    const manifest: Manifest = { seed: 1, events: 0, authors: [], hashtags: [], popularNotes: [], articles: [], sampleIds: [], start: 0, end: 0 };
    const end = Math.floor(Date.now() / 1000) - 60;
    // One corpus, in created_at order: the preload is its older part, the burst its newer part.
    const corpus = generateCorpus({ events: PRELOAD + BURST, seed: 1, authors: 5000, days: 30, end }, manifest);
    const write = async (count: number) => {
      for (let written = 0; written < count; ) {
        const batch = [];
        for (let i = 0; i < BATCH && written + i < count; i++) batch.push(prepareEvent(corpus.next().value!));
        await writeBatch(pool, batch);
        written += batch.length;
      }
    };
    await write(PRELOAD);
    await sleep(3000); // the feed has added the preload and the tier evicted down to its budget
    const results: PhaseResult[] = [];
    const phase = async (name: string, during: () => Promise<void>) => {
      const before = await scrape(relay!);
      const started = performance.now();
      const p = probe(relay!.url, Array.from({ length: 200 }, (_, rank) => corpusAuthor(1, rank)));
      await during();
      const samples = await p.stop();
      const after = await scrape(relay!);
      results.push({ budget: budgetMb, phase: name, seconds: (performance.now() - started) / 1000, samples, lagP99Ms: after.lagP99Ms, heldBefore: before.held, heldAfter: after.held });
    };
    await phase('quiet', () => sleep(Number(values.quiet) * 1000));
    await phase(`burst of ${BURST}`, async () => {
      await write(BURST);
      await sleep(2000); // the feed's last reads, and the eviction they cause
    });
    await pool.end();
    return results;
  } finally {
    await relay?.stop();
    await embedded.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  console.log(`npm run bench:hot-evict -- ${process.argv.slice(2).join(' ')}`.trim());
  console.log(`${machineDescription()}; load average ${loadAverage()} at the start`);
  const results = [...(await run(Number(values['large-mb']))), ...(await run(Number(values['budget-mb'])))];
  console.log(`load average ${loadAverage()} at the end\n`);
  console.log('| HOT_TIER_MB | phase | s | probes | p50 ms | p95 ms | p99 ms | max ms | event-loop delay p99 ms | held before → after |');
  console.log('|---:|---|---:|---:|---:|---:|---:|---:|---:|---|');
  for (const r of results) {
    const s = summarize(r.samples);
    console.log(`| ${r.budget} | ${r.phase} | ${r.seconds.toFixed(1)} | ${r.samples.length} | ${ms(s.p50)} | ${ms(s.p95)} | ${ms(s.p99)} | ${ms(s.max)} | ${ms(r.lagP99Ms)} | ${r.heldBefore} → ${r.heldAfter} |`);
  }
}

main().catch((err) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
