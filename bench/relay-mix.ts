// npm run bench:relay-mix: a big relay's traffic all at once, on 127.0.0.1. N subscriber connections
// each hold 3–10 live subscriptions (kinds, authors, #p, #t, #e; `since` = when they subscribed);
// K publisher connections send freshly signed events at a fixed rate; V closed-loop VUs send one-shot
// REQs. Reports REQ/s and p95, EVENT → OK p95, publish → delivery p95, missed and duplicate
// deliveries (exact: each subscriber process knows which of its subscriptions every published event
// should reach), failed connections, the relay's RSS per connection and the CPU of every process.
// The client is the Go program in load/relay-mix (built into load/bin/relay-mix when missing or older
// than its sources), run as several processes: see HELP for why.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import os, { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { openDatabase } from '../src/store/database.js';
import { loadManifest } from './lib/manifest.js';
import { startRelayProcess, type RelayProcess } from './lib/relay-process.js';
import { relayPids } from './lib/relays.js';
import { latency, mergeHistograms, relayWorkers, subscriberShares, type GoHistogram, type Latency } from './lib/relay-mix-stats.js';
import { cpuSeconds, cpuTracker, establishedConnections, machineDescription, openFileLimit, postgresPids, rssBytes } from './load/system.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const GO_SRC = path.join(ROOT, 'load', 'relay-mix');
const BIN = path.join(ROOT, 'load', 'bin', 'relay-mix');

const HELP = `usage: npm run bench:relay-mix -- [options]

A big relay's mix at once, against a relay on 127.0.0.1 started here:
  N subscriber connections, each with 3-10 live subscriptions (since = now) on kinds, authors, #p,
    #t, #e, drawn from the publishers' pubkeys so deliveries happen; every delivery is checked against
    what each subscription should get: missed and duplicate deliveries are exact counts
  K publisher connections sending freshly signed events (BIP-340) at --rate events/s: EVENT -> OK,
    publish -> delivery at every subscriber
  V closed-loop VUs sending one-shot REQs (kinds:[1] limit 50, a 20-author feed, a #p query)
for --seconds of steady state, after all N connections are open and live.

options:
  --connections LIST   subscriber connections, one run each (default 1000)
  --relay LIST         pgrelay and/or strfry (default pgrelay); strfry from --strfry, STRFRY_BIN, PATH or load/bin/strfry
  --seconds S          steady state: publishing and REQs (default 60)
  --rate R             events per second, all publishers together (default 20)
  --publishers K       publisher connections (default 4)
  --vus V              REQ VUs (default 20; 0 = none)
  --authors A          publisher pubkeys (default 10000); subscriptions follow 10-40 of them, so
                       deliveries per event grow with N (about N x 37 / A)
  --workers N          pgrelay WORKERS (default ceil(N / 15000): see below)
  --hot-tier-mb MB     pgrelay HOT_TIER_MB, held by each worker (default 64)
  --data-dir DIR       pgrelay on this embedded PostgreSQL folder (e.g. seeded with bench:seed; its
                       authors are then the REQ VUs' pubkeys). Default: a fresh one, deleted after.
                       Published events stay in it.
  --connect-rate R     new subscriber connections per second, all processes (default 2000)
  --ramp-timeout S     connections (and their EOSEs) not done by then count as failed
                       (default 2 x N / --connect-rate + 120)
  --hold S             idle hold after the ramp, to measure the relay's memory and idle CPU (default 10)
  --per-process N      subscriber connections per client process (default 16000)
  --strfry PATH        strfry binary (default $STRFRY_BIN, else strfry on PATH, else load/bin/strfry)
  --out DIR            output folder (default bench-out/relay-mix)

Limits of the machine this was written on, which shape the run:
  RLIMIT_NOFILE is per process and its hard limit (20,000 there) cannot be raised without
  CAP_SYS_RESOURCE. So the client runs as ceil(N / --per-process) processes, each raising its soft
  limit to the hard one, and pgrelay runs with WORKERS = ceil(N / 15000) cluster workers, each holding
  its own connections. strfry is one process: above ~20,000 connections it must refuse some, and the
  failures are reported as such. Each client process connects from its own loopback source address
  (127.0.0.10, .11, …): one source address has ~28,000 ephemeral ports towards one destination.
  somaxconn (4096 there) bounds the accept queue: connections open at --connect-rate, with up to 2
  retries each (counted apart from final failures).`;

interface Options {
  connections: number[];
  relays: Array<'pgrelay' | 'strfry'>;
  seconds: number;
  rate: number;
  publishers: number;
  vus: number;
  authors: number;
  workers?: number;
  hotTierMb: number;
  dataDir?: string;
  connectRate: number;
  rampTimeout?: number;
  hold: number;
  perProcess: number;
  strfry?: string;
  out: string;
}

const say = (s: string) => console.error(`[${new Date().toISOString().slice(11, 19)}] ${s}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const SEED = 'relay-mix';
const TAGS = 1000;

function positive(name: string, text: string, allowZero = false): number {
  const n = Number(text);
  if (!Number.isFinite(n) || n < 0 || (!allowZero && n === 0)) throw new Error(`--${name} must be a positive number, got ${text}`);
  return n;
}

function parse(): Options | undefined {
  const { values } = parseArgs({
    options: {
      connections: { type: 'string', default: '1000' },
      relay: { type: 'string', default: 'pgrelay' },
      seconds: { type: 'string', default: '60' },
      rate: { type: 'string', default: '20' },
      publishers: { type: 'string', default: '4' },
      vus: { type: 'string', default: '20' },
      authors: { type: 'string', default: '10000' },
      workers: { type: 'string' },
      'hot-tier-mb': { type: 'string', default: '64' },
      'data-dir': { type: 'string' },
      'connect-rate': { type: 'string', default: '2000' },
      'ramp-timeout': { type: 'string' },
      hold: { type: 'string', default: '10' },
      'per-process': { type: 'string', default: '16000' },
      strfry: { type: 'string' },
      out: { type: 'string', default: path.join(ROOT, 'bench-out', 'relay-mix') },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    console.log(HELP);
    return undefined;
  }
  const relays = values.relay!.split(',').map((r) => r.trim());
  for (const r of relays) if (r !== 'pgrelay' && r !== 'strfry') throw new Error(`--relay must be pgrelay or strfry, got ${r}`);
  const authors = positive('authors', values.authors!);
  if (authors < 10) throw new Error('--authors must be at least 10');
  return {
    connections: values.connections!.split(',').map((c) => Math.round(positive('connections', c))),
    relays: relays as Options['relays'],
    seconds: positive('seconds', values.seconds!),
    rate: positive('rate', values.rate!),
    publishers: Math.round(positive('publishers', values.publishers!)),
    vus: Math.round(positive('vus', values.vus!, true)),
    authors,
    workers: values.workers ? Math.round(positive('workers', values.workers)) : undefined,
    hotTierMb: positive('hot-tier-mb', values['hot-tier-mb']!, true),
    dataDir: values['data-dir'] ? path.resolve(values['data-dir']) : undefined,
    connectRate: positive('connect-rate', values['connect-rate']!),
    rampTimeout: values['ramp-timeout'] ? positive('ramp-timeout', values['ramp-timeout']) : undefined,
    hold: positive('hold', values.hold!),
    perProcess: Math.round(positive('per-process', values['per-process']!)),
    strfry: values.strfry,
    out: path.resolve(values.out!),
  };
}

// ---- the Go client ----------------------------------------------------------------------------

function findGo(): string | undefined {
  for (const candidate of ['go', '/usr/local/go/bin/go']) {
    try {
      execFileSync(candidate, ['version'], { stdio: 'ignore' });
      return candidate;
    } catch {
      /* next */
    }
  }
  return undefined;
}

/** load/bin/relay-mix, built with `go build` when missing or older than a source in load/relay-mix. */
function ensureClient(): string {
  const sources = readdirSync(GO_SRC).filter((f) => /(?<!_test)\.go$|^go\.(mod|sum)$/.test(f));
  const newest = Math.max(...sources.map((f) => statSync(path.join(GO_SRC, f)).mtimeMs));
  if (existsSync(BIN) && statSync(BIN).mtimeMs >= newest) return BIN;
  const go = findGo();
  if (!go) {
    throw new Error(
      `${existsSync(BIN) ? 'load/bin/relay-mix is older than its sources' : 'load/bin/relay-mix is missing'} and Go is not installed: ` +
        'install Go 1.25+ (https://go.dev/dl/), then run this again (or `npm run load:build-relay-mix`); it needs the Go module proxy ' +
        'or a module cache holding github.com/gorilla/websocket and github.com/btcsuite/btcd/btcec/v2',
    );
  }
  say(`building load/bin/relay-mix (${execFileSync(go, ['version'], { encoding: 'utf8' }).trim()})…`);
  execFileSync(go, ['build', '-trimpath', '-o', BIN, '.'], { cwd: GO_SRC, stdio: ['ignore', 'inherit', 'inherit'] });
  return BIN;
}

type Message = Record<string, any>;

/** One relay-mix process: its JSON lines by type, and a wait for the next line of a type. */
class Client {
  readonly child: ChildProcess;
  readonly last = new Map<string, Message>();
  private waiters: Array<{ type: string; resolve: (m: Message) => void }> = [];
  exited = false;

  constructor(
    readonly name: string,
    bin: string,
    args: string[],
  ) {
    this.child = spawn(bin, args, { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, GOGC: process.env.GOGC ?? '200' } });
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      let m: Message;
      try {
        m = JSON.parse(line);
      } catch {
        return;
      }
      if (m.type === 'error') say(`${name}: ${m.error}`);
      this.last.set(m.type, m);
      this.waiters = this.waiters.filter((w) => (w.type === m.type ? (w.resolve(m), false) : true));
    });
    this.child.once('exit', (code, signal) => {
      this.exited = true;
      if (code !== 0 && signal !== 'SIGKILL') say(`${name} exited with ${code ?? signal}`);
      const m = { type: 'exit', code, signal };
      this.waiters = this.waiters.filter((w) => (w.resolve(m), false));
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** The next line of this type (or its last one, if one came already and `fresh` is false); an `exit` message if the process ends first. */
  next(type: string, timeoutMs: number, fresh = true): Promise<Message> {
    if (!fresh && this.last.has(type)) return Promise.resolve(this.last.get(type)!);
    if (this.exited) return Promise.resolve({ type: 'exit' });
    return new Promise((resolve) => {
      const w = { type, resolve };
      this.waiters.push(w);
      setTimeout(() => {
        this.waiters = this.waiters.filter((x) => x !== w);
        resolve({ type: 'timeout' });
      }, timeoutMs);
    });
  }

  send(line: string): void {
    if (!this.exited) this.child.stdin!.write(line + '\n');
  }

  kill(): void {
    if (!this.exited) this.child.kill('SIGKILL');
  }
}

// ---- the relays -------------------------------------------------------------------------------

interface Relay {
  name: string;
  url: string;
  port: number;
  workers: number;
  /** The relay's own processes (not PostgreSQL's). */
  pids(): number[];
  /** PostgreSQL's processes, for pgrelay on an embedded server. */
  postgres(): number[];
  notes: string[];
  stop(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

async function startPgrelay(o: Options, n: number): Promise<Relay> {
  const workers = o.workers ?? relayWorkers(n);
  const fresh = !o.dataDir;
  const dataDir = o.dataDir ?? (await mkdtemp(path.join(tmpdir(), 'pgrelay-relay-mix-')));
  say(`starting pgrelay: WORKERS=${workers}, HOT_TIER_MB=${o.hotTierMb} each, ${fresh ? 'fresh embedded database' : dataDir}…`);
  let relay: RelayProcess;
  try {
    relay = await startRelayProcess({
      DATA_DIR: dataDir,
      DATABASE_URL: '',
      HOST: '127.0.0.1',
      WORKERS: String(workers),
      HOT_TIER_MB: String(o.hotTierMb),
      RETENTION_OLDER_THAN: '',
      // Every client is on loopback: no rate limits, no cap per address (counted per process anyway).
      RATE_LIMIT_EXEMPT: '127.0.0.0/8,::1',
      MAX_CONNECTIONS_PER_ADDRESS: '0',
      MAX_SUBSCRIPTIONS: '20',
    });
  } catch (err) {
    if (fresh) await rm(dataDir, { recursive: true, force: true });
    throw err;
  }
  // A relay with a hot tier answers REQs from memory once every worker has filled it (from the
  // database or from the snapshot its last stop wrote).
  for (let waited = 0; o.hotTierMb > 0 && waited < 15 * 60_000; waited += 200) {
    if (relay.logs.filter((l) => l.msg === 'hot tier filled').length >= workers) break;
    await sleep(200);
  }
  const pg = () => postgresPids(dataDir);
  return {
    name: 'pgrelay',
    url: relay.url,
    port: Number(new URL(relay.url).port),
    workers,
    pids: () => {
      const exclude = new Set(pg());
      return relayPids(relay.pid).filter((p) => !exclude.has(p));
    },
    postgres: pg,
    notes: [
      `pgrelay: WORKERS=${workers} (${workers > 1 ? 'cluster workers, each holding its own connections' : 'one process'}), HOT_TIER_MB=${o.hotTierMb} per process, ` +
        `rate limits off for 127.0.0.0/8, MAX_CONNECTIONS_PER_ADDRESS=0, ${fresh ? 'a fresh embedded database' : `the database in ${dataDir}`}`,
    ],
    async stop() {
      const stopped = relay.stop();
      const timer = sleep(90_000).then(() => 'timeout');
      if ((await Promise.race([stopped.then(() => 'ok'), timer])) === 'timeout') {
        say('pgrelay did not stop within 90 s: SIGKILL');
        for (const pid of [...relayPids(relay.pid)].reverse()) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            /* gone */
          }
        }
      }
      if (fresh) await rm(dataDir, { recursive: true, force: true });
    },
  };
}

function findStrfry(o: Options): string {
  const bin = o.strfry ?? process.env.STRFRY_BIN;
  if (bin) return bin;
  for (const dir of (process.env.PATH ?? '').split(':')) if (dir && existsSync(path.join(dir, 'strfry'))) return path.join(dir, 'strfry');
  const installed = path.join(ROOT, 'load', 'bin', 'strfry');
  if (existsSync(installed)) return installed;
  throw new Error('strfry not found: give --strfry PATH, set STRFRY_BIN, or unpack a build with npm run interop:install-strfry');
}

async function startStrfry(o: Options): Promise<Relay> {
  const bin = findStrfry(o);
  const dir = await mkdtemp(path.join(tmpdir(), 'strfry-relay-mix-'));
  await mkdir(path.join(dir, 'db'));
  const port = await freePort();
  const conf = path.join(dir, 'strfry.conf');
  await writeFile(conf, `db = "${path.join(dir, 'db')}/"\nrelay {\n  bind = "127.0.0.1"\n  port = ${port}\n  nofiles = 0\n}\n`);
  say(`starting strfry (${bin}) on port ${port}, fresh database in ${dir}…`);
  // nofiles = 0: strfry leaves its limit alone; the shell raises the soft limit to the hard one.
  const child = spawn('sh', ['-c', 'ulimit -n "$(ulimit -Hn)"; exec "$0" --config="$1" relay', bin, conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderrTail = '';
  child.stderr!.on('data', (b: Buffer) => (stderrTail = (stderrTail + b.toString()).slice(-4000)));
  const url = `ws://127.0.0.1:${port}`;
  for (let waited = 0; ; waited += 200) {
    if (child.exitCode !== null) throw new Error(`strfry exited with ${child.exitCode}: ${stderrTail}`);
    try {
      if ((await fetch(`http://127.0.0.1:${port}/`, { headers: { Accept: 'application/nostr+json' } })).ok) break;
    } catch {
      /* not yet */
    }
    if (waited > 30_000) throw new Error(`strfry did not listen within 30 s: ${stderrTail}`);
    await sleep(200);
  }
  let limit = '?';
  try {
    limit = /Max open files\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/limits`, 'utf8'))?.[1] ?? '?';
  } catch {
    /* no /proc */
  }
  return {
    name: 'strfry',
    url,
    port,
    workers: 1,
    pids: () => [child.pid!],
    postgres: () => [],
    notes: [`strfry: one process, open-file limit ${limit} (it cannot hold more connections than that), fresh LMDB database`],
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        if ((await Promise.race([exited.then(() => 'ok'), sleep(20_000).then(() => 'timeout')])) === 'timeout') {
          child.kill('SIGKILL');
          await exited;
        }
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

// ---- one run --------------------------------------------------------------------------------

const sum = (xs: Array<number | undefined>) => xs.reduce<number>((s, x) => s + (x ?? 0), 0);
const relayRss = (r: Relay) => sum(r.pids().map((p) => rssBytes(p)));
const loadavg = () => os.loadavg().map((x) => Number(x.toFixed(2)));

/** The machine's CPU time so far from /proc/stat, in seconds: busy (user, nice, system, irq, softirq), idle (+ iowait), stolen by the hypervisor. */
function machineCpu(): { busy: number; idle: number; steal: number } | undefined {
  try {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
    const hz = 100; // USER_HZ: /proc/stat counts in it whatever CONFIG_HZ is
    return { busy: (f[0] + f[1] + f[2] + f[5] + f[6]) / hz, idle: (f[3] + f[4]) / hz, steal: (f[7] ?? 0) / hz };
  } catch {
    return undefined;
  }
}

/** Time some runnable task waited for a CPU, in seconds so far (/proc/pressure/cpu, "some"). */
function cpuPressure(): number | undefined {
  try {
    return Number(/some .*total=(\d+)/.exec(readFileSync('/proc/pressure/cpu', 'utf8'))?.[1]) / 1e6;
  } catch {
    return undefined;
  }
}

interface RunResult {
  relay: string;
  connections: number;
  workers: number;
  clientProcesses: number;
  startedAt: string;
  loadAverage: { start: number[]; steadyStart: number[]; steadyEnd: number[] };
  ramp: { seconds: number; opened: number; failed: number; retries: number; live: number; failSample?: string; relayCpuSeconds: number };
  held: { kernelEstablished?: number; afterSteady?: number; dropped: number; idleSeconds: number; relayIdleCores: number };
  /** Per second of the steady state (by when each event was sent): events sent, the slowest EVENT → OK in ms. */
  okBySecond: Array<{ second: number; sent: number; maxOkMs: number }>;
  rss: { relayBeforeMb: number; relayHeldMb: number; relayPerConnectionKb: number; relayAfterSteadyMb: number; clientHeldMb: number; clientPerConnectionKb: number; postgresMb: number };
  req?: { vus: number; reqs: number; perSecond: number; errors: number; errorSample?: string; eventsPerReq: number; latency: Latency; shapes: Record<string, Latency> };
  publish: { sent: number; okTrue: number; okFalse: number; okNone: number; okFalseSample?: string; ok: Latency; lagP95: number };
  delivery: {
    expected: number; delivered: number; missed: number; missedOnDropped: number; duplicates: number; unexpected: number;
    initialEvents: number; closed: number; closedSample?: string; notices: number; latency: Latency;
  };
  cpu: {
    steadySeconds: number;
    relay: Array<{ pid: number; seconds: number; cores: number }>;
    relayCores: number;
    postgresCores: number;
    subscribersCores: number;
    publisherCores: number;
    queryCores: number;
    /** The whole machine (/proc/stat): busy, stolen by the hypervisor, idle; in cores. */
    machineBusyCores: number;
    machineStealCores: number;
    machineIdleCores: number;
    /** Share of the time some runnable task waited for a CPU (/proc/pressure/cpu). */
    cpuPressure: number;
  };
  notes: string[];
}

async function runOne(o: Options, bin: string, relayName: 'pgrelay' | 'strfry', n: number): Promise<RunResult> {
  const startedAt = new Date().toISOString();
  const loadStart = loadavg();
  const relay = relayName === 'pgrelay' ? await startPgrelay(o, n) : await startStrfry(o);
  const work = await mkdtemp(path.join(tmpdir(), 'relay-mix-'));
  const clients: Client[] = [];
  const notes = [...relay.notes];
  try {
    // Pubkeys for the REQ VUs: a seeded corpus' authors, else the publishers'.
    let pubkeysFile: string | undefined;
    if (relayName === 'pgrelay' && o.dataDir) {
      process.env.DATA_DIR = o.dataDir;
      process.env.DATABASE_URL = '';
      const db = await openDatabase(loadConfig(), createLogger('warn', 2), { migrate: false, ownEmbeddedServer: false });
      try {
        const manifest = await loadManifest(db.pool);
        if (manifest) {
          pubkeysFile = path.join(work, 'pubkeys.txt');
          await writeFile(pubkeysFile, manifest.authors.slice(0, 2000).join('\n') + '\n');
          notes.push(`REQ VUs query the seeded corpus (${manifest.events.toLocaleString('en-US')} events): its 2,000 most active authors`);
        }
      } finally {
        await db.close();
      }
    }
    if (!pubkeysFile) notes.push(`REQ VUs query the publishers' ${o.authors} pubkeys (no seeded corpus: answers hold only what was published in the run)`);

    await sleep(2000);
    const rssBefore = relayRss(relay);
    // The publishers and REQ VUs connect first (a busy relay's publishers are connected already) and
    // wait for "start": a relay that fills up refuses subscribers, and that shows as failed connections.
    const publishedFile = path.join(work, 'published.jsonl');
    const publisher = new Client('publisher', bin, [
      'publish', '--url', relay.url, '--source', '127.0.1.1', '--conns', String(o.publishers), '--rate', String(o.rate),
      '--seconds', String(o.seconds), '--seed', SEED, '--authors', String(o.authors), '--tags', String(TAGS), '--out', publishedFile,
    ]);
    clients.push(publisher);
    const query = o.vus
      ? new Client('query', bin, [
          'query', '--url', relay.url, '--source', '127.0.1.2', '--vus', String(o.vus), '--seconds', String(o.seconds),
          '--seed', SEED, '--authors', String(o.authors), ...(pubkeysFile ? ['--pubkeys', pubkeysFile] : []),
        ])
      : undefined;
    if (query) clients.push(query);
    const connected = await Promise.all([publisher, ...(query ? [query] : [])].map((c) => c.next('connected', 120_000)));
    for (const [i, m] of connected.entries()) {
      const who = i === 0 ? `publisher (${o.publishers} connections)` : `REQ VUs (${o.vus} connections)`;
      if (m.type !== 'connected') throw new Error(`${who}: no connection report (${m.type})`);
      if (m.connectError) notes.push(`${who}: ${m.conns} connected; \`${m.connectError}\``);
    }
    const shares = subscriberShares(n, o.perProcess);
    const rampTimeoutS = o.rampTimeout ?? Math.ceil(n / o.connectRate) * 2 + 120;
    say(`${relayName}, ${n} connections: ${shares.length} client process(es) from ${shares[0].source}…, ${o.connectRate}/s, ramp timeout ${rampTimeoutS} s`);
    const relayCpuAt = () => new Map(relay.pids().map((p) => [p, cpuSeconds(p) ?? 0]));
    const rampCpu0 = relayCpuAt();
    const rampStart = performance.now();
    const subs = shares.map(
      (s, i) =>
        new Client(`subscribers#${i}`, bin, [
          'subscribe', '--url', relay.url, '--source', s.source, '--first', String(s.first), '--conns', String(s.count),
          '--connect-rate', String(o.connectRate / shares.length), '--ramp-timeout', `${rampTimeoutS}s`,
          '--seed', SEED, '--authors', String(o.authors), '--tags', String(TAGS),
        ]),
    );
    clients.push(...subs);
    const progress = setInterval(() => {
      const p = subs.map((c) => c.last.get('progress') ?? {});
      say(`  opened ${sum(p.map((m) => m.opened))}, live ${sum(p.map((m) => m.ready))}, failed ${sum(p.map((m) => m.failed))}, retries ${sum(p.map((m) => m.retries))}, relay RSS ${(relayRss(relay) / 2 ** 20).toFixed(0)} MB`);
    }, 5000);
    const ready = await Promise.all(subs.map((c) => c.next('ready', (rampTimeoutS + 60) * 1000)));
    clearInterval(progress);
    const rampSeconds = (performance.now() - rampStart) / 1000;
    const rampCpu1 = relayCpuAt();
    const rampRelayCpu = sum([...rampCpu1].map(([p, s]) => s - (rampCpu0.get(p) ?? 0)));
    const failSample = ready.find((m) => m.failSample)?.failSample;
    const ramp = {
      seconds: Number(rampSeconds.toFixed(1)),
      opened: sum(ready.map((m) => m.opened)),
      failed: sum(ready.map((m) => m.failed)) + sum(ready.map((m, i) => (m.type === 'ready' ? 0 : shares[i].count))),
      retries: sum(ready.map((m) => m.retries)),
      live: sum(ready.map((m) => m.ready)),
      failSample,
      relayCpuSeconds: Number(rampRelayCpu.toFixed(1)),
    };
    say(`ramp: ${ramp.opened} opened, ${ramp.live} live (every subscription's EOSE), ${ramp.failed} failed, ${ramp.retries} retries, ${ramp.seconds} s` + (failSample ? ` (e.g. ${failSample})` : ''));

    // Held: the relay's memory, and its CPU, with every connection open and subscribed and no traffic.
    const idle0 = relayCpuAt();
    const idleStart = performance.now();
    await sleep(o.hold * 1000);
    const idle1 = relayCpuAt();
    const idleCores = sum([...idle1].map(([p, s]) => s - (idle0.get(p) ?? s))) / ((performance.now() - idleStart) / 1000);
    const rssHeld = relayRss(relay);
    const kernelEstablished = establishedConnections(relay.port);
    const clientRss = sum(subs.map((c) => rssBytes(c.pid)));
    const pgRss = sum(relay.postgres().map((p) => rssBytes(p)));

    // Steady state: publishers and REQ VUs for --seconds.
    const postgresCpu = cpuTracker(relay.postgres);
    const sampler = setInterval(() => postgresCpu.sample(), 1000);
    const cpu0 = relayCpuAt();
    const subCpu0 = subs.map((c) => cpuSeconds(c.pid) ?? 0);
    const loadSteadyStart = loadavg();
    const machine0 = machineCpu();
    const pressure0 = cpuPressure();
    const steadyStart = performance.now();
    say(`steady state: ${o.rate} events/s over ${o.publishers} connections, ${o.vus} REQ VUs, ${o.seconds} s (load average ${loadSteadyStart.join(' ')})…`);
    publisher.send('start');
    query?.send('start');
    let peakRss = 0;
    const rssSampler = setInterval(() => (peakRss = Math.max(peakRss, relayRss(relay))), 2000);
    const qWait = query?.next('result', (o.seconds + 60) * 1000);
    const pub = await publisher.next('result', (o.seconds + 60) * 1000);
    const q = qWait ? await qWait : undefined;
    const steadySeconds = (performance.now() - steadyStart) / 1000;
    clearInterval(sampler);
    clearInterval(rssSampler);
    postgresCpu.sample();
    const cpu1 = relayCpuAt();
    const subCpu1 = subs.map((c) => cpuSeconds(c.pid) ?? 0);
    const loadSteadyEnd = loadavg();
    const machine1 = machineCpu();
    const pressure1 = cpuPressure();
    if (pub.type !== 'result') throw new Error(`the publisher gave no result (${pub.type})`);
    say(`published ${pub.sent}: OK true ${pub.okTrue}, false ${pub.okFalse}, none ${pub.okNone}${pub.okFalseSample ? ` (${pub.okFalseSample})` : ''}`);

    // Deliveries: give the last events time to arrive, then every subscriber process counts its own.
    await sleep(3000);
    const afterSteady = establishedConnections(relay.port);
    const rssAfter = relayRss(relay);
    for (const c of subs) c.send(`finish ${publishedFile}`);
    const results = await Promise.all(subs.map((c) => c.next('result', 300_000)));
    const got = results.filter((m) => m.type === 'result');
    if (got.length < subs.length) notes.push(`${subs.length - got.length} subscriber process(es) gave no result: their deliveries are not counted`);
    const relayCpu = [...cpu1].map(([pid, s]) => ({ pid, seconds: Number((s - (cpu0.get(pid) ?? s)).toFixed(2)), cores: Number(((s - (cpu0.get(pid) ?? s)) / steadySeconds).toFixed(3)) }));
    const opened = ramp.opened;
    const r: RunResult = {
      relay: relayName,
      connections: n,
      workers: relay.workers,
      clientProcesses: subs.length,
      startedAt,
      loadAverage: { start: loadStart, steadyStart: loadSteadyStart, steadyEnd: loadSteadyEnd },
      ramp,
      held: { kernelEstablished, afterSteady, dropped: sum(got.map((m) => m.dropped)), idleSeconds: o.hold, relayIdleCores: idleCores },
      okBySecond: await okBySecond(publishedFile),
      rss: {
        relayBeforeMb: rssBefore / 2 ** 20,
        relayHeldMb: rssHeld / 2 ** 20,
        relayPerConnectionKb: opened ? (rssHeld - rssBefore) / 1024 / opened : NaN,
        relayAfterSteadyMb: Math.max(peakRss, rssAfter) / 2 ** 20,
        clientHeldMb: clientRss / 2 ** 20,
        clientPerConnectionKb: opened ? clientRss / 1024 / opened : NaN,
        postgresMb: pgRss / 2 ** 20,
      },
      req:
        q?.type === 'result'
          ? {
              vus: q.vus, reqs: q.reqs, perSecond: q.reqs / q.seconds, errors: q.errors, errorSample: q.errorSample,
              eventsPerReq: q.reqs ? q.events / q.reqs : NaN, latency: latency(q.latency),
              shapes: Object.fromEntries(Object.entries(q.shapes as Record<string, GoHistogram>).map(([k, h]) => [k, latency(h)])),
            }
          : undefined,
      publish: {
        sent: pub.sent, okTrue: pub.okTrue, okFalse: pub.okFalse, okNone: pub.okNone, okFalseSample: pub.okFalseSample || undefined,
        ok: latency(pub.ok), lagP95: latency(pub.lag).p95,
      },
      delivery: {
        expected: sum(got.map((m) => m.expected)),
        delivered: sum(got.map((m) => m.delivered)),
        missed: sum(got.map((m) => m.missed)),
        missedOnDropped: sum(got.map((m) => m.missedOnDropped)),
        duplicates: sum(got.map((m) => m.duplicates)),
        unexpected: sum(got.map((m) => m.unexpected)),
        initialEvents: sum(got.map((m) => m.initialEvents)),
        closed: sum(got.map((m) => m.closed)),
        closedSample: got.find((m) => m.closedSample)?.closedSample,
        notices: sum(got.map((m) => m.notices)),
        latency: latency(mergeHistograms(got.map((m) => m.latency))),
      },
      cpu: {
        steadySeconds: Number(steadySeconds.toFixed(1)),
        relay: relayCpu,
        relayCores: sum(relayCpu.map((x) => x.cores)),
        postgresCores: (postgresCpu.seconds() ?? 0) / steadySeconds,
        subscribersCores: sum(subCpu1.map((s, i) => s - subCpu0[i])) / steadySeconds,
        publisherCores: pub.cpuSeconds / steadySeconds,
        queryCores: q?.type === 'result' ? q.cpuSeconds / steadySeconds : 0,
        machineBusyCores: machine0 && machine1 ? (machine1.busy - machine0.busy) / steadySeconds : NaN,
        machineStealCores: machine0 && machine1 ? (machine1.steal - machine0.steal) / steadySeconds : NaN,
        machineIdleCores: machine0 && machine1 ? (machine1.idle - machine0.idle) / steadySeconds : NaN,
        cpuPressure: pressure0 !== undefined && pressure1 !== undefined ? (pressure1 - pressure0) / steadySeconds : NaN,
      },
      notes,
    };
    if (r.delivery.unexpected) notes.push(`${r.delivery.unexpected} deliveries to a subscription the event does not match`);
    if (r.delivery.initialEvents) notes.push(`${r.delivery.initialEvents} events arrived before a subscription's EOSE`);
    return r;
  } finally {
    for (const c of clients) c.kill();
    await relay.stop();
    await rm(work, { recursive: true, force: true });
  }
}

async function okBySecond(file: string): Promise<RunResult['okBySecond']> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch {
    return [];
  }
  const events = text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { s: number; o?: number });
  if (!events.length) return [];
  const t0 = events[0].s;
  const out: RunResult['okBySecond'] = [];
  for (const e of events) {
    const second = Math.floor((e.s - t0) / 1e9);
    out[second] ??= { second, sent: 0, maxOkMs: 0 };
    out[second].sent++;
    out[second].maxOkMs = Math.max(out[second].maxOkMs, e.o ? (e.o - e.s) / 1e6 : Infinity);
  }
  return out.filter(Boolean);
}

// ---- the report -------------------------------------------------------------------------------

const f0 = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '–');
const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : '–');
const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '–');

function table(runs: RunResult[]): string {
  const head =
    '| relay | N | workers | opened / failed (retries) | ramp s | relay RSS before → held MB | KB/conn | REQ/s | REQ p95 ms | EVENT→OK p95 ms | delivery p50 / p95 ms | deliveries | missed | dup | cores: relay / PG / clients | load avg |\n' +
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|';
  const rows = runs.map((r) =>
    [
      r.relay, f0(r.connections), r.workers, `${f0(r.ramp.opened)} / ${f0(r.ramp.failed)} (${f0(r.ramp.retries)})`, f1(r.ramp.seconds),
      `${f0(r.rss.relayBeforeMb)} → ${f0(r.rss.relayHeldMb)}`, f1(r.rss.relayPerConnectionKb),
      r.req ? f0(r.req.perSecond) : '–', r.req ? f1(r.req.latency.p95) : '–', f1(r.publish.ok.p95),
      `${f1(r.delivery.latency.p50)} / ${f1(r.delivery.latency.p95)}`, f0(r.delivery.delivered), f0(r.delivery.missed), f0(r.delivery.duplicates),
      `${f2(r.cpu.relayCores)} / ${f2(r.cpu.postgresCores)} / ${f2(r.cpu.subscribersCores + r.cpu.publisherCores + r.cpu.queryCores)}`,
      `${r.loadAverage.steadyStart[0]}–${r.loadAverage.steadyEnd[0]}`,
    ].join(' | '),
  );
  return [head, ...rows.map((r) => `| ${r} |`)].join('\n');
}

function details(r: RunResult): string {
  const lines = [
    `### ${r.relay}, ${f0(r.connections)} connections`,
    `- ramp: ${f0(r.ramp.opened)} opened, ${f0(r.ramp.live)} live (EOSE on every subscription), ${f0(r.ramp.failed)} failed, ${f0(r.ramp.retries)} retries, ${r.ramp.seconds} s; relay CPU during the ramp ${f1(r.ramp.relayCpuSeconds)} s` +
      (r.ramp.failSample ? `; a failure: \`${r.ramp.failSample}\`` : ''),
    `- idle hold (${r.held.idleSeconds} s, every connection open, no traffic): relay CPU ${f2(r.held.relayIdleCores)} cores`,
    `- slowest EVENT → OK by second of the steady state (events sent that second: max ms): ` +
      r.okBySecond.map((b) => `${b.second}: ${f0(b.maxOkMs)}`).join(', '),
    `- held: ${r.held.kernelEstablished ?? '–'} established sockets on the relay's port (the relay's ends, from /proc/net/tcp) after the ramp, ${r.held.afterSteady ?? '–'} after the steady state; ${r.held.dropped} connections dropped`,
    `- memory: relay ${f0(r.rss.relayBeforeMb)} MB before, ${f0(r.rss.relayHeldMb)} MB held (${f1(r.rss.relayPerConnectionKb)} KB per connection), ${f0(r.rss.relayAfterSteadyMb)} MB peak after; PostgreSQL ${f0(r.rss.postgresMb)} MB (shared buffers counted once per process touching them); client ${f0(r.rss.clientHeldMb)} MB (${f1(r.rss.clientPerConnectionKb)} KB per connection) over ${r.clientProcesses} process(es)`,
    r.req
      ? `- REQs: ${r.req.vus} VUs, ${f0(r.req.reqs)} in ${r.cpu.steadySeconds} s = ${f0(r.req.perSecond)}/s, p50 ${f1(r.req.latency.p50)} / p95 ${f1(r.req.latency.p95)} / p99 ${f1(r.req.latency.p99)} ms, ${f1(r.req.eventsPerReq)} events per REQ, ${r.req.errors} errors` +
        (r.req.errorSample ? ` (\`${r.req.errorSample}\`)` : '') +
        '; per shape p95: ' + Object.entries(r.req.shapes).map(([k, l]) => `${k} ${f1(l.p95)} ms`).join(', ')
      : '- REQs: none',
    `- publish: ${r.publish.sent} events, OK true ${r.publish.okTrue}, false ${r.publish.okFalse}, none ${r.publish.okNone}` +
      (r.publish.okFalseSample ? ` (\`${r.publish.okFalseSample}\`)` : '') +
      `; EVENT → OK p50 ${f1(r.publish.ok.p50)} / p95 ${f1(r.publish.ok.p95)} / p99 ${f1(r.publish.ok.p99)} ms; publisher lateness p95 ${f2(r.publish.lagP95)} ms`,
    `- deliveries: expected ${f0(r.delivery.expected)}, delivered ${f0(r.delivery.delivered)}, missed ${f0(r.delivery.missed)} (${f0(r.delivery.missedOnDropped)} on dropped connections), duplicates ${f0(r.delivery.duplicates)}, unexpected ${f0(r.delivery.unexpected)}; ` +
      `publish → EVENT p50 ${f1(r.delivery.latency.p50)} / p95 ${f1(r.delivery.latency.p95)} / p99 ${f1(r.delivery.latency.p99)} / max ${f1(r.delivery.latency.max)} ms; CLOSED ${r.delivery.closed}` +
      (r.delivery.closedSample ? ` (\`${r.delivery.closedSample}\`)` : '') + `, NOTICE ${r.delivery.notices}`,
    `- CPU over the ${r.cpu.steadySeconds} s steady state, in cores: relay ${f2(r.cpu.relayCores)} (` +
      r.cpu.relay.map((p) => `pid ${p.pid}: ${f2(p.cores)}`).join(', ') +
      `), PostgreSQL ${f2(r.cpu.postgresCores)}, subscriber processes ${f2(r.cpu.subscribersCores)}, publisher ${f2(r.cpu.publisherCores)}, REQ VUs ${f2(r.cpu.queryCores)}; ` +
      `the whole machine: ${f2(r.cpu.machineBusyCores)} busy (so ${f2(r.cpu.machineBusyCores - r.cpu.relayCores - r.cpu.postgresCores - r.cpu.subscribersCores - r.cpu.publisherCores - r.cpu.queryCores)} by other programs), ` +
      `${f2(r.cpu.machineStealCores)} stolen by the hypervisor, ${f2(r.cpu.machineIdleCores)} idle; some task waiting for a CPU ${f0(r.cpu.cpuPressure * 100)} % of the time`,
    `- load average (1/5/15 min): ${r.loadAverage.start.join(' ')} at the start, ${r.loadAverage.steadyStart.join(' ')} → ${r.loadAverage.steadyEnd.join(' ')} over the steady state`,
    ...r.notes.map((n) => `- ${n}`),
  ];
  return lines.join('\n');
}

async function main(): Promise<void> {
  const o = parse();
  if (!o) return;
  const bin = ensureClient();
  const limit = openFileLimit();
  const header = [
    `${machineDescription()}; open-file limit (hard, per process) ${limit}, somaxconn ${readSysctl('net/core/somaxconn')}, ` +
      `ephemeral ports ${readSysctl('net/ipv4/ip_local_port_range')?.replace(/\s+/, '–')}`,
    `${o.seconds} s steady state: ${o.rate} events/s from ${o.publishers} publisher connections over ${o.authors} authors, ${o.vus} REQ VUs; ` +
      `subscribers opened at ${o.connectRate}/s, at most ${o.perProcess} per client process, each process from its own 127.0.0.x source address`,
  ];
  say(header.join('\n'));
  const runs: RunResult[] = [];
  await mkdir(o.out, { recursive: true });
  const write = async () => {
    const md = [...header, '', table(runs), '', ...runs.map(details), ''].join('\n');
    await writeFile(path.join(o.out, 'results.md'), md);
    await writeFile(path.join(o.out, 'results.json'), JSON.stringify({ options: o, header, runs }, null, 2) + '\n');
    return md;
  };
  for (const relay of o.relays) {
    for (const n of o.connections) {
      try {
        const r = await runOne(o, bin, relay, n);
        runs.push(r);
        console.error(details(r));
      } catch (err) {
        say(`${relay}, ${n} connections: the run failed: ${(err as Error).stack ?? err}`);
        process.exitCode = 1;
      }
      await write();
    }
  }
  const md = await write();
  console.log(md);
  console.log(`(written to ${path.relative(process.cwd(), o.out) || '.'}/results.md and results.json)`);
  if (runs.some((r) => r.delivery.missed || r.ramp.failed)) process.exitCode = 1;
}

function readSysctl(name: string): string | undefined {
  try {
    return readFileSync(`/proc/sys/${name}`, 'utf8').trim();
  } catch {
    return undefined;
  }
}

await main();
