// npm run load -- --scenario query|publish|fanout|connections: a k6 ladder against the relay (one k6
// run per step), written up as a markdown table and an SVG plot of latency against the ladder
// variable. Prepares what k6 cannot: the seeded corpus and its REQ mix, signed events. See --help.
import { execFileSync, spawn } from 'node:child_process';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type pg from 'pg';
import { loadConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import { openDatabase, type Database } from '../../src/store/database.js';
import { loadManifest } from '../lib/manifest.js';
import { prewarm } from '../lib/prewarm.js';
import { waitForHotTier } from '../lib/relay-process.js';
import { relayPids, startRelays, type RelayGroup } from '../lib/relays.js';
import { DEFAULT_QUERY_SHAPES, ensurePublishEvents, fanoutMessages, publishSigners, queryMix, signer } from './data.js';
import { findK6, findK6Nostr, k6Version, runK6 } from './k6.js';
import { latencySvg, ladderTable, SCENARIOS, shapeTable, stat, throughput, type ScenarioName, type Step, type StepSystem } from './report.js';
import {
  cpuTracker, establishedConnections, loadAverage, machineDescription, openFileLimit, postgresPids, reapedChildrenCpuSeconds, rssBytes, stolenCpuSeconds,
} from './system.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const LOAD_DIR = path.join(ROOT, 'load');
const CACHE_DIR = path.join(LOAD_DIR, 'data');

const HELP = `usage: npm run load -- --scenario NAME [options]

Runs a k6 scenario (load/NAME.js) once per step of a ladder and writes results.md (table),
latency.svg (plot), results.json and each step's k6 summary and log to the output folder.
Without --url it starts a relay with an embedded PostgreSQL in --data-dir (never ./data).
k6 must be installed: npm run load:install-k6.

scenarios:
  query        VUs send REQs from a realistic mix (feed by authors, #p mentions, thread, profiles,
               hashtags), time to EOSE. Seeds --seed-events events first if the database has no corpus.
  publish      VUs publish pre-signed ~1 KB notes, time to OK.
  fanout       subscribers hold live subscriptions while one publisher sends --rate events/s;
               delivery latency publish → EVENT.
  connections  mostly idle connections with a few subscriptions each; connections held, errors,
               relay RSS per connection.

options:
  --vus LIST            ladder of VUs, query/publish (default query 1,10,30,50,100,200; publish 1,10,50)
  --duration D          each step's duration, k6 syntax (default 30s; fanout: how long events are sent)
  --rate LIST           query/publish: open loop instead, a ladder of offered rates (requests/s, k6
                        constant-arrival-rate, one connection per request; --vus is then the most
                        requests in flight, default 100); fanout: events per second (default 10)
  --subscribers LIST    fanout ladder (default 1000)
  --connections LIST    connections ladder (default 10000)
  --hold D              connections: how long every connection is held (default 30s)
  --ramp D              connections: time to open them all (default 20s)
  --conns-per-vu N      fanout/connections: WebSockets per k6 VU (default 20 / 200)
  --shapes a,b          query shapes (default ${DEFAULT_QUERY_SHAPES.join(',')})
  --warmup D            query: unmeasured run before the ladder, to warm caches (default 10s; 0 = none)
  --p95 MS              p95 latency threshold in ms (default 50, connections: none; 0 = none)
  --url WS_URL          test a relay that is already running (nothing is seeded or cleaned up;
                        query still reads the corpus manifest from DATABASE_URL or --data-dir)
  --relay-pid PID       with --url: the relay's pid, for its CPU and RSS columns
  --workers N|auto      WORKERS for the relay process(es) started here (default 1)
  --relays N            fanout: N relay processes on one database (the embedded server in --data-dir,
                        or --database-url); subscribers round-robin over them, the publisher on the
                        first; delivery latency also split by the subscriber's relay (default 1)
  --data-dir DIR        embedded PostgreSQL folder for the relay started here (default load/data/db)
  --database-url URL    use this PostgreSQL instead of the embedded one (never reset: seed it yourself)
  --seed-events N       corpus size for query (default: keep the seeded corpus, or seed 1000000)
  --out DIR             output folder (default bench-out/load/<scenario>)
  --client k6ws|native  query: how k6 reads each REQ's answer. k6ws (default): load/query.js, every
                        message through k6/ws into the script. native: load/query-native.js, read in
                        Go by the k6/x/nostr module, a fraction of the client CPU per REQ; needs the k6
                        that \`npm run load:build-k6-nostr\` builds (load/bin/k6-nostr)
  --k6 PATH             the k6 binary (default: PATH, then $(go env GOPATH)/bin/k6; with --client
                        native: $K6_NOSTR, then load/bin/k6-nostr)
  --report DIR          only render DIR/results.json again as results.md and latency.svg`;

interface Args {
  scenario: ScenarioName;
  ladder: number[];
  duration: string;
  /** fanout: events/s. */
  rate: number;
  /** query/publish with --rate: the ladder is of offered rates, with at most maxVus requests in flight. */
  openLoop: boolean;
  maxVus: number;
  hold: string;
  ramp: string;
  connsPerVu: number;
  shapes: string[];
  warmup: string;
  p95: number;
  url?: string;
  relayPid?: number;
  /** WORKERS of the relays started here; relay processes on one database (fanout). */
  workers: string;
  relays: number;
  dataDir: string;
  databaseUrl?: string;
  seedEvents?: number;
  out: string;
  k6?: string;
  /** query: the reader, k6/ws in the script or k6/x/nostr in Go. */
  client: 'k6ws' | 'native';
}

const list = (text: string) => text.split(',').map((v) => {
  const n = Number(v.trim());
  if (!Number.isInteger(n) || n <= 0) throw new Error(`not a positive integer: ${v}`);
  return n;
});

/** k6 duration syntax → seconds ("1m30s" → 90). */
export function seconds(text: string): number {
  if (text === '0') return 0;
  const unit: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600 };
  let total = 0;
  const matched = text.replace(/(\d+(?:\.\d+)?)(ms|s|m|h)/g, (_, n, u) => ((total += Number(n) * unit[u]), ''));
  if (matched !== '' || !text) throw new Error(`not a duration: ${text}`);
  return total;
}

function parse(): Args | { report: string } | undefined {
  const { values } = parseArgs({
    options: {
      scenario: { type: 'string' },
      vus: { type: 'string' },
      duration: { type: 'string', default: '30s' },
      rate: { type: 'string' },
      subscribers: { type: 'string', default: '1000' },
      connections: { type: 'string', default: '10000' },
      hold: { type: 'string', default: '30s' },
      ramp: { type: 'string', default: '20s' },
      'conns-per-vu': { type: 'string' },
      shapes: { type: 'string', default: DEFAULT_QUERY_SHAPES.join(',') },
      warmup: { type: 'string', default: '10s' },
      p95: { type: 'string' },
      url: { type: 'string' },
      'relay-pid': { type: 'string' },
      workers: { type: 'string', default: '1' },
      relays: { type: 'string', default: '1' },
      'data-dir': { type: 'string', default: path.join(CACHE_DIR, 'db') },
      'database-url': { type: 'string' },
      'seed-events': { type: 'string' },
      out: { type: 'string' },
      k6: { type: 'string' },
      client: { type: 'string', default: 'k6ws' },
      report: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.log(HELP);
    return undefined;
  }
  if (values.report) return { report: values.report };
  const scenario = values.scenario as ScenarioName;
  if (!(scenario in SCENARIOS)) throw new Error(`--scenario must be one of ${Object.keys(SCENARIOS).join(', ')} (see --help)`);
  const openLoop = (scenario === 'query' || scenario === 'publish') && values.rate !== undefined;
  const ladderText =
    scenario === 'fanout' ? values.subscribers!
    : scenario === 'connections' ? values.connections!
    : openLoop ? values.rate!
    : values.vus ?? (scenario === 'query' ? '1,10,30,50,100,200' : '1,10,50');
  for (const d of [values.duration!, values.hold!, values.ramp!, values.warmup!]) seconds(d); // validate early
  if (!/^(auto|[1-9]\d*)$/.test(values.workers!)) throw new Error(`--workers must be a positive integer or auto, got ${values.workers}`);
  const [relays] = list(values.relays!);
  if (values.client !== 'k6ws' && values.client !== 'native') throw new Error(`--client must be k6ws or native, got ${values.client}`);
  if (values.client === 'native' && scenario !== 'query') throw new Error('--client native is for the query scenario');
  if (relays > 1 && (scenario !== 'fanout' || values.url)) throw new Error('--relays is for the fanout scenario, with relays started here (no --url)');
  return {
    scenario,
    ladder: list(ladderText),
    duration: values.duration!,
    rate: scenario === 'fanout' ? Number(values.rate ?? 10) : 0,
    openLoop,
    maxVus: Math.max(...list(values.vus ?? '100')),
    hold: values.hold!,
    ramp: values.ramp!,
    connsPerVu: Number(values['conns-per-vu'] ?? (scenario === 'fanout' ? 20 : 200)),
    shapes: values.shapes!.split(','),
    warmup: values.warmup!,
    p95: Number(values.p95 ?? (scenario === 'connections' ? 0 : 50)),
    url: values.url,
    relayPid: values['relay-pid'] ? Number(values['relay-pid']) : undefined,
    workers: values.workers!,
    relays,
    dataDir: path.resolve(values['data-dir']!),
    databaseUrl: values['database-url'],
    seedEvents: values['seed-events'] ? Number(values['seed-events']) : undefined,
    out: path.resolve(values.out ?? path.join(ROOT, 'bench-out', 'load', scenario + (openLoop ? '-open' : ''))),
    k6: values.k6,
    client: values.client,
  };
}

const say = (s: string) => console.error(s);

function run(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env, stdio: ['ignore', 'inherit', 'inherit'] });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${path.basename(args[0] ?? file)} exited with ${code}`))));
  });
}

/** The query corpus: the seeded manifest, seeding first when this runner owns the database and it has none. */
async function ensureCorpus(db: Database, a: Args, owned: boolean) {
  let manifest = await loadManifest(db.pool);
  const wanted = a.seedEvents ?? (manifest ? manifest.events : 1_000_000);
  if (manifest && manifest.events === wanted) return manifest;
  if (!owned || a.databaseUrl)
    throw new Error(
      `the database has ${manifest ? `a corpus of ${manifest.events} events, not ${wanted}` : 'no seeded corpus'}: ` +
        'seed it with `npm run bench:seed -- --events N` (this runner only seeds its own embedded database)',
    );
  say(`seeding ${wanted.toLocaleString('en-US')} events into ${a.dataDir} (once; about 8,000 events/s)…`);
  await run(process.execPath, [path.join(ROOT, 'dist', 'bench', 'seed.js'), '--events', String(wanted), '--reset'], {
    ...process.env, DATA_DIR: a.dataDir, DATABASE_URL: '',
  });
  manifest = await loadManifest(db.pool);
  if (!manifest) throw new Error('seeding left no manifest');
  return manifest;
}

async function deleteByAuthors(pool: pg.Pool, pubkeys: string[]): Promise<number> {
  const r = await pool.query('DELETE FROM events WHERE pubkey = ANY($1::bytea[])', [pubkeys.map((p) => Buffer.from(p, 'hex'))]);
  return r.rowCount ?? 0;
}

interface Context {
  a: Args;
  k6: string;
  /** The first relay: the one queried, published to, or (fanout) publishing. */
  url: string;
  /** Every relay under test, with its process when known. */
  relays: Array<{ url: string; pid?: number }>;
  db?: Database;
  owned: boolean;
  steps: Step[];
  notes: string[];
  /** The relays' RSS before the first step: memory per connection is measured from it, since a
   * Node process rarely gives memory back and a later step's "before" would hide what it costs. */
  initialRss?: number;
  /** Taken at the start: what the relay under test was built from. */
  revision: string;
}

/** The relays' processes, cluster workers included, each with the port it serves. */
function relayProcesses(ctx: Context): Array<{ pid: number; port: number }> {
  return ctx.relays.flatMap((r) => (r.pid ? relayPids(r.pid).map((pid) => ({ pid, port: Number(new URL(r.url).port || 80) })) : []));
}

/** RSS summed over the relays' processes; undefined when none is known or /proc cannot tell. */
function relaysRss(processes: Array<{ pid: number }>): number | undefined {
  return processes.length ? processes.reduce((sum, p) => sum + (rssBytes(p.pid) ?? NaN), 0) || undefined : undefined;
}

/** Runs one k6 step and measures CPU (relays, PostgreSQL, k6) and the relays' memory and connections around it. */
async function step(ctx: Context, x: number, script: string, env: Record<string, string | number>, label: string, measured = true): Promise<Step | undefined> {
  const { a } = ctx;
  const name = `${a.scenario}-${label}`;
  const files = { summary: path.join(a.out, 'steps', `${name}.summary.json`), log: path.join(a.out, 'steps', `${name}.log`) };
  await rm(files.summary, { force: true });
  const postgres = cpuTracker(() => (a.databaseUrl ? [] : postgresPids(a.dataDir)));
  const relayCpu = cpuTracker(() => relayProcesses(ctx).map((p) => p.pid));
  const k6Before = reapedChildrenCpuSeconds();
  const stolenBefore = stolenCpuSeconds();
  let peakConnections = 0;
  let rssAtPeak: number | undefined;
  let peakRss = 0;
  const sample = () => {
    postgres.sample();
    relayCpu.sample();
    // Without a known process, every established connection on the relays' ports.
    const processes = relayProcesses(ctx);
    const conns = processes.length
      ? processes.reduce((sum, p) => sum + (establishedConnections(p.port, p.pid) ?? 0), 0)
      : ctx.relays.reduce((sum, r) => sum + (establishedConnections(Number(new URL(r.url).port || 80)) ?? 0), 0);
    const rss = relaysRss(processes);
    if (rss !== undefined) peakRss = Math.max(peakRss, rss);
    if (conns >= peakConnections) {
      peakConnections = conns;
      rssAtPeak = rss;
    }
  };
  say(`${measured ? `step ${label}` : 'warm-up'}: k6 ${path.basename(script)} …`);
  const r = await runK6(ctx.k6, script, { RELAY_URL: ctx.url, P95_MS: measured ? a.p95 : 0, ...env }, files, sample);
  if (!r.summary) {
    say(`  k6 exited with ${r.exitCode} and no summary: see ${files.log}`);
    ctx.notes.push(`Step ${label}: k6 exited with ${r.exitCode} without a summary (see steps/${name}.log).`);
    return undefined;
  }
  const delta = (after: number | undefined, b: number | undefined) => (after !== undefined && b !== undefined ? (after - b) / r.seconds : undefined);
  const system: StepSystem = {
    relayCpu: (relayCpu.sample(), delta(relayCpu.seconds(), 0)),
    postgresCpu: (postgres.sample(), delta(postgres.seconds(), 0)),
    k6Cpu: delta(reapedChildrenCpuSeconds(), k6Before),
    stolenCpu: delta(stolenCpuSeconds(), stolenBefore),
    relayRssMb: peakRss ? peakRss / 2 ** 20 : undefined,
    peakConnections,
    rssPerConnectionKb:
      rssAtPeak !== undefined && ctx.initialRss !== undefined && peakConnections > 0 ? (rssAtPeak - ctx.initialRss) / 1024 / peakConnections : undefined,
  };
  const result: Step = { x, summary: r.summary, exitCode: r.exitCode, system };
  const spec = SCENARIOS[a.scenario];
  say(
    `  p50 ${stat(r.summary, spec.latencyMetric, 'p(50)').toFixed(1)} ms, p95 ${stat(r.summary, spec.latencyMetric, 'p(95)').toFixed(1)} ms, ` +
      `${throughput(a.scenario, r.summary).toFixed(1)} ${spec.throughputLabel}, errors ${stat(r.summary, 'relay_errors', 'count') || 0}` +
      (ctx.relays.length > 1 && a.scenario === 'fanout'
        ? `; publisher's relay p95 ${stat(r.summary, 'delivery_same_ms', 'p(95)').toFixed(1)} ms, other relays p95 ${stat(r.summary, 'delivery_other_ms', 'p(95)').toFixed(1)} ms ` +
          `(missed ${stat(r.summary, 'deliveries_missed_same', 'count') || 0} / ${stat(r.summary, 'deliveries_missed_other', 'count') || 0})`
        : '') +
      (r.exitCode === 99 ? ' (thresholds crossed)' : r.exitCode ? ` (k6 exit ${r.exitCode})` : ''),
  );
  if (measured) ctx.steps.push(result);
  return result;
}

/**
 * Loads the relations REQs and writes touch into PostgreSQL's buffer pool, so the first step does not
 * measure disk reads after a fresh server start (a cold publish step here ran at a third of its warm
 * rate).
 */
async function warmCache(ctx: Context, db: Database): Promise<void> {
  const warmed = await prewarm(db.pool);
  ctx.notes.push(
    typeof warmed === 'string'
      ? `Cache: not prewarmed (pg_prewarm: ${warmed}); the first steps may include disk reads.`
      : `Cache: ${(warmed / 2 ** 30).toFixed(2)} GiB of tables and indexes loaded into PostgreSQL's buffer pool first (pg_prewarm).`,
  );
}

/** How many REQs the first relay's hot tier answered from memory, from its /metrics. */
async function noteHotTier(ctx: Context): Promise<void> {
  try {
    const text = await (await fetch(`${ctx.url.replace(/^ws/, 'http')}/metrics`)).text();
    const count = (answered: string) => Number(new RegExp(`^pgrelay_hot_tier_reqs_total\\{answered="${answered}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
    const [memory, database, mixed] = ['memory', 'database', 'mixed'].map(count);
    const total = memory + database + mixed;
    ctx.notes.push(total
      ? `Hot tier: ${memory.toLocaleString('en-US')} of ${total.toLocaleString('en-US')} REQs (${((100 * memory) / total).toFixed(1)} %) answered from memory, ${mixed} mixed, ${database} by PostgreSQL.`
      : 'Hot tier: off (HOT_TIER_MB=0) or no REQ counted.');
  } catch {
    /* a relay without /metrics (--url elsewhere): nothing to say */
  }
}

async function runQuery(ctx: Context): Promise<void> {
  const { a, db } = ctx;
  if (!db) throw new Error('query needs the database for its corpus manifest');
  const manifest = await ensureCorpus(db, a, ctx.owned);
  const mixFile = path.join(CACHE_DIR, 'query-mix.json');
  await writeFile(mixFile, JSON.stringify(queryMix(manifest, a.shapes, 1000)));
  await warmCache(ctx, db); // first: counting 1M cold rows can outlast the pool's statement timeout
  const { rows } = await db.pool.query('SELECT count(*)::bigint AS n FROM events');
  ctx.notes.push(`Corpus: ${Number(rows[0].n).toLocaleString('en-US')} events (bench:seed, seed ${manifest.seed}); mix: ${a.shapes.join(', ')} in equal turns, 1,000 pre-drawn REQs.`);
  const env = { QUERY_MIX: mixFile, SHAPES: a.shapes.join(','), DURATION: a.duration };
  const script = path.join(LOAD_DIR, a.client === 'native' ? 'query-native.js' : 'query.js');
  ctx.notes.push(a.client === 'native'
    ? 'Client: load/query-native.js, each answer read in Go by the k6/x/nostr module (load/k6-nostr).'
    : 'Client: load/query.js, each message read through k6/ws into the script.');
  if (seconds(a.warmup) > 0) await step(ctx, 0, script, { ...env, VUS: a.openLoop ? 5 : Math.min(10, a.ladder[0]), DURATION: a.warmup }, 'warmup', false);
  for (const x of a.ladder)
    await step(ctx, x, script, a.openLoop ? { ...env, RATE: x, VUS: a.maxVus } : { ...env, VUS: x }, a.openLoop ? `${x}per-s` : `${x}vus`);
}

async function runPublish(ctx: Context): Promise<void> {
  const { a, db } = ctx;
  if (db) await warmCache(ctx, db);
  const file = path.join(CACHE_DIR, 'publish-events.json');
  const authors = publishSigners().map((s) => s.pubkey);
  // The cached events are reused run after run: remove the previous run's copies first.
  if (ctx.owned && db) say(`removed ${await deleteByAuthors(db.pool, authors)} events of earlier publish runs`);
  else ctx.notes.push('Against a relay this runner did not start, events published by an earlier run are answered "duplicate:" (see the duplicates column).');
  const durationS = seconds(a.duration);
  let start = 0;
  let previous: { vus: number; rate: number } | undefined;
  for (const x of a.ladder) {
    const vus = a.openLoop ? a.maxVus : x;
    // Sign enough for this step: the last step's rate scaled by VUs, capped at the ~6,000 events/s a
    // 2-core relay can verify and store (perf-notes), +20%.
    const perSecond = a.openLoop ? x : Math.min(6000, previous ? Math.max(previous.rate, (previous.rate * vus) / previous.vus) : 300 * vus);
    const available = await ensurePublishEvents(file, start + Math.ceil(perSecond * durationS * 1.2) + 1000, say);
    const s = await step(ctx, x, path.join(LOAD_DIR, 'publish.js'), {
      EVENTS_FILE: file, START: start, VUS: vus, DURATION: a.duration, ...(a.openLoop ? { RATE: x } : {}),
    }, a.openLoop ? `${x}per-s` : `${x}vus`);
    if (!s) continue;
    const last = stat(s.summary, 'event_index', 'max');
    start = Number.isFinite(last) ? last + 1 : start + (stat(s.summary, 'ok_ms', 'count') || 0);
    if (start > available) ctx.notes.push(`Step ${x} ran out of fresh signed events and resent some (counted as duplicates).`);
    previous = { vus, rate: stat(s.summary, 'events_accepted', 'rate') || 1 };
  }
  if (ctx.owned && db) await deleteByAuthors(db.pool, authors);
}

async function runFanout(ctx: Context): Promise<void> {
  const { a, db } = ctx;
  if (db) await warmCache(ctx, db);
  const file = path.join(CACHE_DIR, 'fanout-events.json');
  for (const subscribers of a.ladder) {
    const warmupMs = 3000 + subscribers * 5; // subscribers connect over the first half of it
    const runTag = `pgrelay-load-${Date.now().toString(36)}`;
    await writeFile(file, JSON.stringify(fanoutMessages(runTag, a.rate, seconds(a.duration))));
    await step(ctx, subscribers, path.join(LOAD_DIR, 'fanout.js'), {
      EVENTS_FILE: file, RUN_TAG: runTag, SUBSCRIBERS: subscribers, CONNS_PER_VU: a.connsPerVu, WARMUP_MS: warmupMs,
      RELAY_URLS: ctx.relays.map((r) => r.url).join(','),
    }, `${subscribers}subs`);
    if (ctx.owned && db) await deleteByAuthors(db.pool, [signer(`fanout-${runTag}`).pubkey]);
  }
  ctx.notes.push(
    `Each subscriber connection holds 1 matching subscription and 2 that never match; one publisher sends ${a.rate} kind-1 events/s for ${a.duration}, ` +
      `each on a schedule (delivery = arrival − planned send time, so the publisher's lateness, shown as "publish lag", is included).`,
  );
  if (ctx.relays.length > 1)
    ctx.notes.push(
      `${ctx.relays.length} relay processes on one database: subscriber connection i on relay i mod ${ctx.relays.length}, the publisher on the first; ` +
        "\"publisher's relay\" and \"other relays\" split the deliveries by the subscriber's relay (by relay, not by cluster worker).",
    );
}

async function runConnections(ctx: Context): Promise<void> {
  const { a } = ctx;
  const limit = openFileLimit();
  for (const connections of a.ladder) {
    if (limit !== undefined && limit < connections + 200)
      say(`warning: the open-file limit (ulimit -Hn) is ${limit}: k6 and the relay each need one descriptor per connection; raise it for ${connections}`);
    await step(ctx, connections, path.join(LOAD_DIR, 'connections.js'), {
      CONNECTIONS: connections, CONNS_PER_VU: a.connsPerVu, RAMP_MS: seconds(a.ramp) * 1000, HOLD_MS: seconds(a.hold) * 1000,
    }, `${connections}conns`);
  }
  ctx.notes.push(
    `Connections opened evenly over ${a.ramp} and held ${a.hold}, each with 3 subscriptions (mentions, DMs, 10 follows; limit 0, nothing matches). ` +
      'RSS/connection = (relay RSS when most connections were established − its RSS before the first step) ÷ those connections.',
  );
}

async function main(): Promise<void> {
  const a = parse();
  if (!a) return;
  if ('report' in a) {
    const r = JSON.parse(await readFile(path.join(a.report, 'results.json'), 'utf8')) as Results;
    return render(r, a.report);
  }
  const k6 = a.client === 'native' ? findK6Nostr(a.k6) : findK6(a.k6);
  await mkdir(path.join(a.out, 'steps'), { recursive: true });
  await mkdir(CACHE_DIR, { recursive: true });
  // The relay and the database: never the developer's ./data or a DATABASE_URL from .env by accident.
  process.env.DATA_DIR = a.dataDir;
  process.env.DATABASE_URL = a.databaseUrl ?? '';
  let relays: RelayGroup | undefined;
  let db: Database | undefined;
  const startedAt = new Date();
  const revision = sourceRevision();
  const loadBefore = loadAverage();
  try {
    if (!a.url) {
      say(`starting ${a.relays > 1 ? `${a.relays} relays` : 'a relay'} (WORKERS=${a.workers}) on ${a.databaseUrl ? 'the given database' : a.dataDir}…`);
      // No retention: it would prune the seeded corpus (its events are up to two years old).
      relays = await startRelays(a.relays, {
        dataDir: a.dataDir, databaseUrl: a.databaseUrl, env: { HOST: '127.0.0.1', RETENTION_OLDER_THAN: '', WORKERS: a.workers },
      });
    }
    // A relay with the hot tier (HOT_TIER_MB) is measured once it has filled, not while it warms up.
    for (const r of relays?.relays ?? []) {
      const filled = await waitForHotTier(r, undefined, a.workers === 'auto' ? availableParallelism() : Number(a.workers));
      if (filled) say(`hot tier filled: ${filled.events} events, ~${filled.megabytes} MB, in ${filled.seconds} s`);
    }
    const targets = relays?.relays.map((r) => ({ url: r.url, pid: r.pid })) ?? [{ url: a.url!, pid: a.relayPid }];
    const url = targets[0].url;
    const host = new URL(url).hostname;
    if (!['127.0.0.1', 'localhost', '[::1]', '::1'].includes(host)) say(`note: ${url} is not on this machine`);
    if (a.scenario === 'query' || relays) {
      const config = loadConfig();
      db = await openDatabase(config, createLogger('warn', 2), { migrate: false, ownEmbeddedServer: false });
    }
    const ctx: Context = { a, k6, url, relays: targets, db, owned: !!relays, steps: [], notes: [], revision };
    ctx.initialRss = relaysRss(relayProcesses(ctx));
    say(`relay ${targets.map((r) => r.url).join(', ')}; ${k6Version(k6)}`);
    if (a.scenario === 'query') await runQuery(ctx);
    else if (a.scenario === 'publish') await runPublish(ctx);
    else if (a.scenario === 'fanout') await runFanout(ctx);
    else await runConnections(ctx);
    await noteHotTier(ctx);
    await writeReport(ctx, startedAt, loadBefore);
  } finally {
    await db?.close();
    await relays?.stop();
  }
}

/** The commit the relay was built from, marked when its sources differ from it. Read-only git. */
function sourceRevision(): string {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src', 'migrations'], { cwd: ROOT, encoding: 'utf8' }).trim();
    return dirty ? `${commit} + uncommitted changes in src/ or migrations/` : commit;
  } catch {
    return 'unknown revision';
  }
}

/** Everything the report needs, kept in results.json so `--report DIR` can render it again. */
interface Results {
  command: string;
  startedAt: string;
  machine: string;
  /** The relay's source: commit, and whether src/ or migrations/ had uncommitted changes. */
  revision: string;
  k6: string;
  loadAverage: { start: number; end: number };
  args: Args;
  steps: Step[];
  notes: string[];
}

async function writeReport(ctx: Context, startedAt: Date, loadBefore: number): Promise<void> {
  if (ctx.steps.length === 0) throw new Error('no step produced a summary: see the logs in ' + path.join(ctx.a.out, 'steps'));
  const results: Results = {
    command: `npm run load -- ${process.argv.slice(2).join(' ')}`,
    startedAt: startedAt.toISOString(),
    machine: machineDescription(),
    revision: ctx.revision,
    k6: k6Version(ctx.k6),
    loadAverage: { start: loadBefore, end: loadAverage() },
    args: ctx.a,
    steps: ctx.steps,
    notes: ctx.notes,
  };
  await writeFile(path.join(ctx.a.out, 'results.json'), JSON.stringify(results, null, 2));
  await render(results, ctx.a.out);
}

/** How the relays were run, when this runner started them (WORKERS, relay processes on one database). */
function relaySetup(a: Args): string {
  if (a.url || a.workers === undefined) return ''; // results.json of an older runner has neither
  return ` with WORKERS=${a.workers}` + (a.relays > 1 ? `, ${a.relays} relay processes on one database` : '');
}

/** results.json → results.md and latency.svg in `out`. */
async function render(r: Results, out: string): Promise<void> {
  const a = r.args;
  const spec = SCENARIOS[a.scenario];
  const mode = a.openLoop ? `open loop, at most ${a.maxVus} in flight` : a.scenario === 'fanout' ? `${a.rate} events/s` : a.scenario === 'connections' ? 'idle connections' : 'closed loop';
  const xLabel = a.openLoop ? `offered ${spec.throughputLabel}` : spec.xLabel;
  const title = `pgrelay ${a.scenario} (${mode}): ${spec.latencyLabel} by ${xLabel}`;
  const svg = latencySvg(a.scenario, r.steps, { title, targetMs: a.p95 > 0 ? a.p95 : undefined, xLabel });
  const perShape = a.scenario === 'query' ? shapeTable(r.steps, a.openLoop ? '/s' : 'VUs') : '';
  const over = a.scenario === 'fanout' ? 'over the time events were sent' : a.scenario === 'connections' ? '= connections open with all their subscriptions at the end of the hold' : 'over the whole k6 run';
  const md = [
    `## ${a.scenario}: ${spec.latencyLabel} (${mode})`,
    '',
    `\`${r.command}\` — ${r.startedAt.slice(0, 16).replace('T', ' ')} UTC, ${a.scenario === 'connections' ? `ramp ${a.ramp}, hold ${a.hold}` : `${a.duration} per step`}; ` +
      `relay ${r.revision ?? 'unknown revision'}${relaySetup(a)}; machine: ${r.machine}; ${r.k6}; relay and k6 on the same machine; load average ${r.loadAverage.start.toFixed(1)} at the start, ${r.loadAverage.end.toFixed(1)} at the end.`,
    '',
    ladderTable(a.scenario, r.steps, xLabel),
    '',
    `Latency in ms (${spec.latencyMetric}); throughput (${spec.throughputLabel}) ${over}; errors = relay_errors (CLOSED, NOTICE, OK false, timeouts, socket errors and drops); ` +
      'CPU in cores, averaged over the k6 run (2.00 = both cores of a 2-core machine); stolen = CPU the hypervisor gave to other machines while this one wanted it (/proc/stat steal).',
    ...(perShape ? ['', 'Per shape, p50 / p95 (ms):', '', perShape] : []),
    ...(r.notes.length ? ['', ...r.notes.map((n) => `- ${n}`)] : []),
    '',
    '![latency](latency.svg)',
    '',
  ].join('\n');
  await writeFile(path.join(out, 'latency.svg'), svg);
  await writeFile(path.join(out, 'results.md'), md);
  console.log(md);
  say(`written to ${out} (results.md, latency.svg, results.json, steps/)`);
}

main().catch((err) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
