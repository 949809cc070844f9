// npm run soak -- --minutes 30: steady mixed traffic against one relay process for a long while,
// on an embedded PostgreSQL that is restarted every few minutes, sampling the relay's memory,
// handles, event loop and pool from /metrics and the clients' latencies. It fails when memory or
// handles grow after warm-up, p95 drifts, an acknowledged event is not stored, or the relay drops
// a connection it did not mean to. Writes bench-out/soak/results.md, results.json and plot.svg.
import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { cpuSeconds, loadAverage, machineDescription } from './load/system.js';
import { startRelayProcess, type RelayProcess } from './lib/relay-process.js';
import { missingEvents, startSoakDatabase, type SoakDatabase } from './lib/soak-database.js';
import { relayReady, scrapeRelay, type RelayReading } from './lib/soak-metrics.js';
import {
  countVerdict, handlesVerdict, inOutage, p95Verdict, passed, renderResults, rssVerdict, soakSvg, verdictTable,
  type Outage, type SoakReport, type SoakSample, type Verdict,
} from './lib/soak-report.js';
import { percentile } from './lib/stats.js';
import { SoakTraffic, type Tally } from './lib/soak-traffic.js';

const HELP = `usage: npm run soak -- [options]

Starts an embedded PostgreSQL in a temporary folder and one relay process on it, runs steady mixed
traffic (publishers, REQ clients, churning live subscribers, a slow reader), restarts the database
now and then, samples the relay every interval and judges: RSS and handles flat after warm-up,
p95 stable, every acknowledged event stored, no unexpected disconnects. Exits 1 on FAIL.

options:
  --minutes M             length of the run (default 30)
  --db-restart-every M    restart the database every M minutes; 0 = never (default 10)
  --db-down-seconds S     how long the database stays down at a restart (default 5)
  --sample-seconds S      sampling interval, one table row each (default 60)
  --warmup M              minutes left out of the trends (default: 20 % of the run, at most 5)
  --events-per-second R   total publish rate (default 50)
  --publishers N          publisher connections (default 5)
  --reqs-per-second R     total REQ rate (default 10)
  --req-clients N         REQ connections (default 2)
  --live N                live subscribers, each staying 10-60 s then replaced (default 20)
  --slow-reader-bps B     the slow reader's read rate in bytes/s; 0 = no slow reader (default 8192)
  --out DIR               output folder (default bench-out/soak)
  --keep                  keep the temporary database folder (its path is printed)

The relay runs with its defaults; its variables in the environment reach it (MAX_BUFFERED_BYTES=…).`;

const SCRAPE_MS = 10_000;

function options() {
  const { values } = parseArgs({
    options: {
      minutes: { type: 'string', default: '30' },
      'db-restart-every': { type: 'string', default: '10' },
      'db-down-seconds': { type: 'string', default: '5' },
      'sample-seconds': { type: 'string', default: '60' },
      warmup: { type: 'string' },
      'events-per-second': { type: 'string', default: '50' },
      publishers: { type: 'string', default: '5' },
      'reqs-per-second': { type: 'string', default: '10' },
      'req-clients': { type: 'string', default: '2' },
      live: { type: 'string', default: '20' },
      'slow-reader-bps': { type: 'string', default: '8192' },
      out: { type: 'string', default: 'bench-out/soak' },
      keep: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  });
  const number = (name: keyof typeof values, min: number, integer = false) => {
    const v = Number(values[name]);
    if (!Number.isFinite(v) || v < min || (integer && !Number.isInteger(v))) throw new Error(`--${name} must be ${integer ? 'an integer' : 'a number'} ≥ ${min}, got ${values[name]}`);
    return v;
  };
  if (values.help) return undefined;
  const minutes = number('minutes', 0.5);
  return {
    minutes,
    restartEvery: number('db-restart-every', 0),
    downSeconds: number('db-down-seconds', 0),
    sampleSeconds: number('sample-seconds', 5, true),
    warmup: values.warmup === undefined ? Math.min(5, Math.ceil(minutes / 5)) : number('warmup', 0),
    eventsPerSecond: number('events-per-second', 0.1),
    publishers: number('publishers', 1, true),
    reqsPerSecond: number('reqs-per-second', 0),
    reqClients: number('req-clients', 1, true),
    live: number('live', 0, true),
    slowReaderBps: number('slow-reader-bps', 0),
    out: path.resolve(values.out!),
    keep: values.keep!,
  };
}

type Options = NonNullable<ReturnType<typeof options>>;

/** The worst of a gauge over the interval's scrapes. */
const worst = (readings: RelayReading[], pick: (r: RelayReading) => number | null) => {
  const values = readings.map(pick).filter((v): v is number => v !== null);
  return values.length ? Math.max(...values) : null;
};

const p95 = (samples: number[]) => (samples.length ? percentile([...samples].sort((a, b) => a - b), 95) : null);

function sampleOf(t: number, readings: RelayReading[], tally: Tally, ackedTotal: number, cpuPercent: number | null): SoakSample {
  const last = readings[readings.length - 1];
  return {
    t,
    relay: {
      rssMb: last?.rssMb ?? null,
      heapUsedMb: last?.heapUsedMb ?? null,
      loopP99Ms: worst(readings, (r) => r.loopP99Ms),
      handles: last?.handles ?? null,
      poolInUseMax: worst(readings, (r) => r.poolInUse),
      poolWaitingMax: worst(readings, (r) => r.poolWaiting),
      poolSize: last?.poolSize ?? null,
      connections: last?.connections ?? null,
      storedTotal: last?.storedTotal ?? null,
      cpuPercent,
    },
    clients: {
      okN: tally.okMs.length,
      okP95: p95(tally.okMs),
      reqN: tally.reqMs.length,
      reqP95: p95(tally.reqMs),
      liveN: tally.liveMs.length,
      liveP95: p95(tally.liveMs),
      acked: tally.acked,
      errors: tally.errors,
      ackedTotal,
      slowCloses: tally.slowCloses,
      unexpected: tally.unexpected,
    },
    load: loadAverage(),
    dbRestarts: 0,
  };
}

const say = (s: string) => console.log(`[soak ${new Date().toISOString().slice(11, 19)}] ${s}`);

/** What a run has going while it samples. */
interface Run {
  o: Options;
  relay: RelayProcess;
  traffic: SoakTraffic;
  /** Ends the sampling and the restarts early: a signal, or the relay gone. */
  halt: AbortSignal;
  /** Set when the relay process exits. */
  relayGone(): string | undefined;
  /** Scrapes /metrics; the reading also joins the current interval's. */
  scrape(): Promise<RelayReading | undefined>;
  takeReadings(): RelayReading[];
  outages: Outage[];
}

/** Restarts the database every `restartEvery` minutes, each time until the relay is ready again. */
async function restartDatabase(run: Run, db: SoakDatabase): Promise<void> {
  const { o, traffic } = run;
  if (!o.restartEvery) return;
  for (let k = 1; k * o.restartEvery < o.minutes; k++) {
    await sleep(Math.max(0, (k * o.restartEvery - traffic.now()) * 60_000), undefined, { signal: run.halt }).catch(() => undefined);
    if (run.halt.aborted) return;
    const outage = { stoppedAt: traffic.now(), startedAt: NaN, readyAt: NaN };
    say(`restarting the database (down ${o.downSeconds} s)`);
    await db.restart(o.downSeconds * 1000);
    outage.startedAt = traffic.now();
    for (let waited = 0; !(await relayReady(run.relay.url)); waited += 100) {
      if (run.relayGone()) return;
      if (waited > 120_000) throw new Error('the relay was not ready 120 s after the database came back');
      await sleep(100);
    }
    outage.readyAt = traffic.now();
    run.outages.push(outage);
    say(`database back; relay ready ${((outage.readyAt - outage.startedAt) * 60).toFixed(1)} s after it started`);
  }
}

/** One row every `sampleSeconds` until the end (or a halt); row 0 is taken before the traffic starts. */
async function sample(run: Run, samples: SoakSample[]): Promise<void> {
  const { o, traffic } = run;
  let cpu = cpuSeconds(run.relay.pid);
  const intervals = Math.ceil((o.minutes * 60) / o.sampleSeconds);
  for (let k = 1; k <= intervals && !run.halt.aborted; k++) {
    const t = Math.min(o.minutes, (k * o.sampleSeconds) / 60);
    await sleep(Math.max(0, (t - traffic.now()) * 60_000), undefined, { signal: run.halt }).catch(() => undefined);
    if (run.halt.aborted) return;
    await run.scrape();
    const cpuNow = cpuSeconds(run.relay.pid);
    const cpuPercent = cpu !== undefined && cpuNow !== undefined ? ((cpuNow - cpu) / o.sampleSeconds) * 100 : null;
    cpu = cpuNow;
    const s = sampleOf(t, run.takeReadings(), traffic.take(), traffic.acked.length, cpuPercent);
    samples.push(s);
    const c = s.clients, r = s.relay;
    say(
      `${t.toFixed(2)} min: RSS ${r.rssMb?.toFixed(1)} MB, heap ${r.heapUsedMb?.toFixed(1)} MB, handles ${r.handles}, conns ${r.connections}, ` +
        `OK p95 ${c.okP95?.toFixed(1)} ms (${c.okN}), REQ p95 ${c.reqP95?.toFixed(1)} ms (${c.reqN}), acked ${c.acked}, errors ${c.errors}, unexpected ${c.unexpected}`,
    );
  }
}

function describeSetup(o: Options, traffic: SoakTraffic, final: RelayReading | undefined): string[] {
  return [
    `traffic: ${o.eventsPerSecond} events/s from ${o.publishers} publishers (20 authors; kind-1 notes of 60–600 characters with t, p and e tags, 1 in 10 a kind-7 reaction), ` +
      `${o.reqsPerSecond} REQ/s from ${o.reqClients} clients (an author's notes, a home feed, a hashtag, mentions, the last minute, ids just acknowledged)`,
    `${o.live} live subscribers, each staying 10–60 s and then replaced (${traffic.liveConnections} connections over the run)` +
      (o.slowReaderBps ? `; a slow reader subscribed to everything, reading ${o.slowReaderBps} bytes/s (${traffic.slowReaderConnections} connections)` : ''),
    o.restartEvery ? `database: embedded PostgreSQL, restarted every ${o.restartEvery} min, down ${o.downSeconds} s each time` : 'database: embedded PostgreSQL, never restarted',
    `relay: one process (WORKERS=1), default settings, loopback clients exempt from rate limits; /metrics scraped every ${SCRAPE_MS / 1000} s, a row every ${o.sampleSeconds} s` +
      (final ? `; at the end: RSS ${final.rssMb?.toFixed(1)} MB, stored ${final.storedTotal}, slow-client closes ${final.slowClientCloses}` : ''),
  ];
}

function judge(o: Options, run: Run, samples: SoakSample[], missing: string[] | Error): Verdict[] {
  const { traffic, outages } = run;
  const endMin = samples[samples.length - 1].t;
  const unexpected = traffic.disconnects.filter((d) => !d.expected && d.code !== 0).length;
  const failedConnects = traffic.disconnects.filter((d) => d.code === 0).length;
  const acked = traffic.acked.length;
  return [
    rssVerdict(samples, o.warmup),
    handlesVerdict(samples, o.warmup),
    p95Verdict('OK', traffic.okLatencies, o.warmup, endMin, outages),
    p95Verdict('REQ → EOSE', traffic.reqLatencies, o.warmup, endMin, outages),
    missing instanceof Error
      ? { criterion: 'every acknowledged event stored', threshold: '0 missing', measured: `could not check: ${missing.message}`, pass: false }
      : countVerdict('every acknowledged event stored', `acknowledged ${acked}, stored ${acked - missing.length}, missing ${missing.length}`, missing.length),
    countVerdict('every EVENT answered', `${traffic.unanswered} of ${traffic.published} without an OK`, traffic.unanswered),
    countVerdict('unexpected disconnects', `${unexpected} (and ${failedConnects} failed connection attempts)`, unexpected + failedConnects),
    { criterion: 'relay process stayed up', threshold: '–', measured: run.relayGone() ?? 'yes', pass: run.relayGone() === undefined },
  ];
}

function disconnectSummary(traffic: SoakTraffic): string {
  const expected = traffic.disconnects.filter((d) => d.expected);
  const by = (why: string) => expected.filter((d) => d.expected === why).length;
  const refusals = [...traffic.refusals].map(([prefix, n]) => `${n} ${prefix}:`).join(', ');
  return (
    `the relay closed ${expected.length} connection(s) on purpose (slow consumers: ${by('announced')} announced with "too slowly", ` +
    `${by('relay counter')} counted by nostr_slow_client_disconnects_total, ${by('heartbeat')} slow readers cut off by the heartbeat while > 30 s behind)` +
    (refusals ? `; OK false reasons: ${refusals}` : '')
  );
}

async function soak(o: Options, stop: AbortSignal): Promise<boolean> {
  const command = `npm run soak -- ${process.argv.slice(2).join(' ')}`.trim();
  const startedAt = new Date().toISOString();
  const loadStart = loadAverage();
  const dataDir = await mkdtemp(path.join(tmpdir(), 'pgrelay-soak-'));
  let db: SoakDatabase | undefined;
  let relay: RelayProcess | undefined;
  let traffic: SoakTraffic | undefined;
  try {
    db = await startSoakDatabase(dataDir);
    const token = randomBytes(16).toString('hex');
    relay = await startRelayProcess({ DATABASE_URL: db.url, DATA_DIR: path.join(dataDir, 'relay'), WORKERS: '1', METRICS_TOKEN: token });
    const relayUrl = relay.url;
    say(`relay ${relayUrl} (pid ${relay.pid}), database in ${dataDir}`);
    const halt = new AbortController();
    setMaxListeners(100, halt.signal);
    // A Ctrl-C reaches the relay too: our sockets are closed first, so its goodbyes are not counted.
    const stopped = () => {
      halt.abort();
      void traffic?.close();
    };
    if (stop.aborted) stopped();
    else stop.addEventListener('abort', stopped);
    let relayGone: string | undefined;
    relay.child.once('exit', (code, signal) => {
      relayGone = stop.aborted ? undefined : `exited (${signal ?? `code ${code}`})`;
      halt.abort();
      void traffic?.close(); // no one left to answer, or to reconnect to
    });
    let readings: RelayReading[] = [];
    let latest: RelayReading | undefined;
    const scrape = async () => {
      const r = await scrapeRelay(relayUrl, token);
      if (r) readings.push((latest = r));
      return r;
    };
    traffic = new SoakTraffic({
      url: relayUrl,
      publishers: o.publishers,
      eventsPerSecond: o.eventsPerSecond,
      reqClients: o.reqClients,
      reqsPerSecond: o.reqsPerSecond,
      liveSubscribers: o.live,
      liveSeconds: [10, 60],
      slowReaderBytesPerSecond: o.slowReaderBps,
      seed: 1,
      relaySlowCloses: async () => ((await scrape()) ?? latest)?.slowClientCloses ?? null,
    });
    const run: Run = {
      o, relay, traffic, halt: halt.signal, relayGone: () => relayGone, scrape, outages: [],
      takeReadings: () => {
        const taken = readings;
        readings = [];
        return taken;
      },
    };

    await scrape();
    const samples: SoakSample[] = [sampleOf(0, run.takeReadings(), traffic.take(), 0, null)];
    await traffic.start();
    say(`traffic started: ${o.minutes} min, a sample every ${o.sampleSeconds} s`);
    const scraper = setInterval(() => void scrape(), SCRAPE_MS);
    const restarts = restartDatabase(run, db);
    restarts.catch(() => undefined); // awaited below
    await sample(run, samples);
    clearInterval(scraper);
    let interrupted = stop.aborted ? `stopped (${String(stop.reason)})` : relayGone ? `the relay ${relayGone}` : undefined;
    halt.abort(); // no restart after the last sample; one under way finishes
    await restarts.catch((err: Error) => (interrupted ??= err.message));
    // A restart belongs to the rows it overlaps by more than a second (timers fire a hair early, so
    // one begun on a row's boundary may start in the row before).
    const overlaps = (x: Outage, from: number, to: number) => Math.min(x.readyAt, to) - Math.max(x.stoppedAt, from) > 1 / 60;
    samples.forEach((s, i) => (s.dbRestarts = i === 0 ? 0 : run.outages.filter((x) => overlaps(x, samples[i - 1].t, s.t)).length));

    say('stopping the traffic; waiting for the last OKs');
    await traffic.stopSending();
    await traffic.close();
    const final = relayGone ? undefined : await scrapeRelay(relayUrl, token);
    say(`checking ${traffic.acked.length} acknowledged events in the database`);
    const missing = await missingEvents(db.url, traffic.acked).catch((err: Error) => err);
    const verdicts = judge(o, run, samples, missing);
    const report: SoakReport = {
      command,
      startedAt,
      machine: machineDescription(),
      loadStart,
      loadEnd: loadAverage(),
      setup: describeSetup(o, traffic, final),
      warmupMin: o.warmup,
      samples,
      outages: run.outages,
      verdicts,
      events: {
        published: traffic.published,
        notSent: traffic.scheduled - traffic.published,
        acked: traffic.acked.length,
        stored: missing instanceof Error ? NaN : traffic.acked.length - missing.length,
        missing: missing instanceof Error ? [] : missing,
        refused: traffic.refusedAt.length,
        refusedOutsideOutages: traffic.refusedAt.filter((t) => !inOutage(t, run.outages)).length,
        unanswered: traffic.unanswered,
      },
      disconnects: { expected: disconnectSummary(traffic), unexpected: traffic.disconnects.filter((d) => !d.expected) },
      interrupted,
    };
    await mkdir(o.out, { recursive: true });
    await writeFile(path.join(o.out, 'results.md'), renderResults(report));
    await writeFile(path.join(o.out, 'plot.svg'), soakSvg(samples, run.outages, o.warmup, `pgrelay soak: ${o.minutes} min, ${o.eventsPerSecond} events/s, ${o.reqsPerSecond} REQ/s`));
    const json = { ...report, options: o, refusals: Object.fromEntries(traffic.refusals), closes: traffic.disconnects };
    await writeFile(path.join(o.out, 'results.json'), JSON.stringify(json, null, 2) + '\n');
    console.log('\n' + verdictTable(verdicts));
    const ok = passed(verdicts) && !interrupted;
    console.log(`\n${ok ? 'PASS' : 'FAIL'}${interrupted ? ` (${interrupted})` : ''}; wrote ${path.relative(process.cwd(), o.out)}/results.md, plot.svg, results.json`);
    return ok;
  } finally {
    // Each step on its own: a Ctrl-C in a terminal also reaches the relay and PostgreSQL.
    await traffic?.close().catch(() => undefined);
    await relay?.stop().catch(() => undefined);
    await db?.stop().catch(() => undefined);
    if (o.keep) say(`kept ${dataDir}`);
    else await rm(dataDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const o = options();
  if (!o) return console.log(HELP);
  const stop = new AbortController();
  const onSignal = (signal: string) => {
    if (stop.signal.aborted) return;
    console.log(`\n${signal}: stopping (relay, database, temporary folder)…`);
    stop.abort(signal);
  };
  process.on('SIGINT', () => onSignal('SIGINT'));
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  // Bounded in time whatever happens: a run that overruns by 10 minutes is stopped.
  setTimeout(() => onSignal('overrun'), (o.minutes + 10) * 60_000).unref();
  process.exitCode = (await soak(o, stop.signal)) ? 0 : 1;
}

await main();
