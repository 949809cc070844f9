// npm run bench:hot-restart: how soon a restarted relay answers from memory. Starts the relay (a
// separate process, as operators run it) on an already seeded DATA_DIR (bench:seed) with a hot tier
// large enough for the whole store, --runs times, and reports per start: seconds from the spawn
// until it listens, until its tier holds 50 % and 90 % of what it holds at the end, and until the
// "hot tier filled" log line (with that line's own seconds); the relay's peak RSS; and a probe that
// sends one REQ at a time from the moment the relay listens, drawn in turns from the query ladder's
// shapes (--shapes, from the corpus' manifest), and reads the relay's pgrelay_hot_tier_reqs_total
// after each: so each REQ is known to have been answered from memory or by PostgreSQL, and each
// shape has a time from which every one of its REQs was answered from memory. --from says whether
// the relay reads back the snapshot its last stop wrote (HOT_TIER_SNAPSHOT) or fills from the
// database, or alternates the two; each start says which it did, and how long its stop took to write.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { openDatabase } from '../src/store/database.js';
import { queryMix, type MixEntry } from './load/data.js';
import { loadManifest } from './lib/manifest.js';
import { startRelayProcess, type RelayProcess } from './lib/relay-process.js';
import { parsePrometheusText, total } from './lib/soak-metrics.js';
import { ms, summarize } from './lib/stats.js';
import { loadAverage, machineDescription } from './load/system.js';

/** The query ladder's mix (docs/benchmarks.md, the comparison with strfry). */
const PROBE_SHAPES = 'seed-150p,feed-300,thread,profiles-100,global';

const HELP = `usage: npm run bench:hot-restart -- [options]

Needs a seeded DATA_DIR (npm run bench:seed -- --events 1000000); no relay may be running on it.

options:
  --data-dir DIR   the seeded DATA_DIR (default: DATA_DIR from the environment, else ./data)
  --budget-mb N    HOT_TIER_MB for the relay (default 1600: a million bench events and their indexes)
  --runs N         starts, one after the other (default 2)
  --shapes a,b     the probe's REQ shapes, in turns (default ${PROBE_SHAPES})
  --from WHAT      snapshot: HOT_TIER_SNAPSHOT on (a start with no snapshot yet fills, its stop writes one);
                   database: off, every start fills; alternate: on and off in turns (default snapshot)`;

const { values } = parseArgs({
  options: {
    'data-dir': { type: 'string' },
    'budget-mb': { type: 'string', default: '1600' },
    runs: { type: 'string', default: '2' },
    shapes: { type: 'string', default: PROBE_SHAPES },
    from: { type: 'string', default: 'snapshot' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
if (!['snapshot', 'database', 'alternate'].includes(values.from!)) {
  console.error(`--from: snapshot, database or alternate, not ${values.from}`);
  process.exit(2);
}
const DATA_DIR = path.resolve(values['data-dir'] ?? process.env.DATA_DIR ?? 'data');
const sleep = (msec: number) => new Promise<void>((r) => setTimeout(r, msec));

function peakRssBytes(pid: number): number | undefined {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

async function scrape(relay: RelayProcess): Promise<{ held: number; memory: number; database: number; mixed: number }> {
  const series = parsePrometheusText(await (await fetch(relay.url.replace(/^ws/, 'http') + '/metrics')).text());
  const value = (name: string) => total(series, name) ?? 0;
  return {
    held: value('pgrelay_hot_tier_events'),
    memory: series.get('pgrelay_hot_tier_reqs_total{answered="memory"}') ?? 0,
    database: series.get('pgrelay_hot_tier_reqs_total{answered="database"}') ?? 0,
    mixed: series.get('pgrelay_hot_tier_reqs_total{answered="mixed"}') ?? 0,
  };
}

interface ProbeSample {
  /** When it was sent (performance.now()). */
  at: number;
  ms: number;
  shape: string;
  /** How the relay answered it (its pgrelay_hot_tier_reqs_total, read after each REQ). */
  answered: 'memory' | 'database' | 'mixed' | 'unknown';
}

/**
 * One REQ at a time until stopped, the mix's entries in turn; each timed from REQ to EOSE, with the
 * time it was sent, and classified by the relay's REQ counters read after its EOSE (the probe is the
 * relay's only client, so the counter that moved is this REQ's).
 */
function probe(relay: RelayProcess, mix: MixEntry[]): { samples: ProbeSample[]; stop: () => Promise<void> } {
  const ws = new WebSocket(relay.url);
  const samples: ProbeSample[] = [];
  let running = true;
  let n = 0;
  let before = { memory: 0, database: 0, mixed: 0 };
  const done = new Promise<void>((resolve, reject) => {
    ws.on('error', reject);
    ws.on('open', () => {
      const next = () => {
        if (!running) return resolve();
        const entry = mix[n % mix.length]!;
        const sub = `p${n++}`;
        const started = performance.now();
        const onMessage = (data: WebSocket.RawData) => {
          const text = data.toString();
          if (!text.startsWith('["EOSE"') && !text.startsWith('["CLOSED"')) return;
          ws.off('message', onMessage);
          if (text.startsWith('["CLOSED"')) return reject(new Error(`probe REQ refused: ${text}`));
          const ms = performance.now() - started;
          ws.send(JSON.stringify(['CLOSE', sub]));
          scrape(relay).then((after) => {
            const moved = (['memory', 'database', 'mixed'] as const).filter((k) => after[k] > before[k]);
            samples.push({ at: started, ms, shape: entry.shape, answered: moved.length === 1 ? moved[0]! : 'unknown' });
            before = after;
            setTimeout(next, 20);
          }, reject);
        };
        ws.on('message', onMessage);
        ws.send(`["REQ",${JSON.stringify(sub)},${entry.filters}]`);
      };
      scrape(relay).then((first) => {
        before = first;
        next();
      }, reject);
    });
  });
  return {
    samples,
    stop: async () => {
      running = false;
      await done;
      ws.close();
    },
  };
}

/** Per shape: seconds from the spawn after which every probe of it was answered from memory (undefined: the last one was not). */
function memorySince(samples: ProbeSample[], spawned: number): Map<string, { since?: number; memory: number; database: number }> {
  const out = new Map<string, { since?: number; memory: number; database: number }>();
  for (const s of samples) {
    const r = out.get(s.shape) ?? { memory: 0, database: 0 };
    if (s.answered === 'memory') {
      r.memory++;
      r.since ??= (s.at - spawned) / 1000;
    } else {
      r.database++;
      r.since = undefined;
    }
    out.set(s.shape, r);
  }
  return out;
}

interface StartResult {
  loadBefore: number;
  loadAfter: number;
  listening: number;
  half?: number;
  ninety?: number;
  filled?: number;
  filledLogSeconds?: number;
  /** A snapshot start's phases (the log line's): reading the file, building the lists, PostgreSQL's figures, reading again, s. */
  phases?: number[];
  /** Where the tier was filled from (the "hot tier filled" line's `from`). */
  from: string;
  /** Seconds the stop took to write the snapshot, if it wrote one. */
  writtenSeconds?: number;
  held: number;
  peakRssMb?: number;
  probesDuringFill: number;
  probeP50: number;
  probeMax: number;
  memory: number;
  database: number;
  mixed: number;
  /** Per shape: see memorySince. */
  shapes: Map<string, { since?: number; memory: number; database: number }>;
}

async function start(mix: MixEntry[], snapshot: boolean): Promise<StartResult> {
  const loadBefore = loadAverage();
  const spawned = performance.now();
  const since = (t: number) => (t - spawned) / 1000;
  const relay = await startRelayProcess({ DATA_DIR, HOT_TIER_MB: values['budget-mb']!, HOT_TIER_SNAPSHOT: String(snapshot) });
  let result: StartResult;
  try {
    const listening = since(performance.now());
    const p = probe(relay, mix);
    const curve: Array<{ at: number; held: number }> = [];
    let filledAt: number | undefined;
    for (;;) {
      const reading = await scrape(relay);
      curve.push({ at: performance.now(), held: reading.held });
      const filled = relay.logs.find((l) => l.msg === 'hot tier filled' || l.msg?.toString().startsWith('hot tier: fill failed'));
      if (filled) {
        filledAt ??= performance.now();
        break;
      }
      await sleep(100);
    }
    await sleep(3000); // a few probes of each shape after the fill too
    await p.stop();
    const after = await scrape(relay);
    const held = after.held;
    const reached = (fraction: number) => curve.find((c) => c.held >= fraction * held)?.at;
    const filledLine = relay.logs.find((l) => l.msg === 'hot tier filled');
    const during = summarize(p.samples.filter((s) => s.at < filledAt!).map((s) => s.ms));
    result = {
      loadBefore,
      loadAfter: loadAverage(),
      listening,
      half: reached(0.5) && since(reached(0.5)!),
      ninety: reached(0.9) && since(reached(0.9)!),
      filled: since(filledAt!),
      filledLogSeconds: filledLine?.seconds as number | undefined,
      phases: filledLine?.phases as number[] | undefined,
      from: (filledLine?.from as string | undefined) ?? 'database',
      held,
      peakRssMb: (peakRssBytes(relay.pid) ?? NaN) / 2 ** 20,
      probesDuringFill: p.samples.filter((s) => s.at < filledAt!).length,
      probeP50: during.p50,
      probeMax: during.max,
      memory: after.memory,
      database: after.database,
      mixed: after.mixed,
      shapes: memorySince(p.samples, spawned),
    };
  } finally {
    await relay.stop();
  }
  result.writtenSeconds = relay.logs.find((l) => l.msg === 'hot tier snapshot written')?.seconds as number | undefined;
  return result;
}

/** The probe's REQs: the shapes drawn from the corpus' manifest (read before the timed starts). */
async function probeMix(): Promise<MixEntry[]> {
  const db = await openDatabase({ ...loadConfig(), DATA_DIR }, createLogger('warn', 2));
  try {
    const manifest = await loadManifest(db.pool);
    if (!manifest) throw new Error(`no corpus manifest in ${DATA_DIR}: seed it first (npm run bench:seed)`);
    return queryMix(manifest, values.shapes!.split(','), 1000);
  } finally {
    await db.close();
  }
}

async function main(): Promise<void> {
  console.log(`npm run bench:hot-restart -- ${process.argv.slice(2).join(' ')}`.trim());
  console.log(`${machineDescription()}; DATA_DIR ${DATA_DIR}`);
  const mix = await probeMix();
  const results: StartResult[] = [];
  for (let i = 0; i < Number(values.runs); i++) {
    results.push(await start(mix, values.from === 'snapshot' || (values.from === 'alternate' && i % 2 === 1)));
    await sleep(2000);
  }
  const s = (x: number | undefined) => (x === undefined ? '–' : x.toFixed(1));
  console.log('\n| start | from | load avg before → after | listening s | 50 % held s | 90 % held s | filled s (log line s) | snapshot read / lists / PostgreSQL / read again s | events held | peak RSS MB | probe REQs during the fill (p50 / max ms) | REQs: memory / mixed / database | snapshot written at stop s |');
  console.log('|---:|---|---|---:|---:|---:|---|---|---:|---:|---|---|---:|');
  results.forEach((r, i) => {
    console.log(
      `| ${i + 1} | ${r.from} | ${r.loadBefore.toFixed(2)} → ${r.loadAfter.toFixed(2)} | ${s(r.listening)} | ${s(r.half)} | ${s(r.ninety)} | ${s(r.filled)} (${s(r.filledLogSeconds)}) | ${r.phases ? r.phases.map((x) => x.toFixed(1)).join(' / ') : '–'} | ${r.held} | ${Math.round(r.peakRssMb ?? NaN)} | ${r.probesDuringFill} (${ms(r.probeP50)} / ${ms(r.probeMax)}) | ${r.memory} / ${r.mixed} / ${r.database} | ${s(r.writtenSeconds)} |`,
    );
  });
  const shapes = values.shapes!.split(',');
  console.log('\nSeconds from the spawn after which every probe REQ of a shape was answered from memory (its REQs from memory / by PostgreSQL):\n');
  console.log(`| start | from | ${shapes.join(' | ')} |`);
  console.log(`|---:|---|${shapes.map(() => '---:').join('|')}|`);
  results.forEach((r, i) => {
    const cells = shapes.map((name) => {
      const x = r.shapes.get(name);
      return x ? `${s(x.since)} (${x.memory} / ${x.database})` : '–';
    });
    console.log(`| ${i + 1} | ${r.from} | ${cells.join(' | ')} |`);
  });
}

main().catch((err) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
