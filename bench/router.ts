// npm run bench:router -- [--live N] [--missed N]: the router (src/ops/router) as the relay runs it
// (ROUTER_CONFIG), between two relay processes, each on its own embedded PostgreSQL (DATA_DIR):
//
//   live      a stream down from the remote while N really signed events are published to it as fast
//             as it takes them (4 connections, 200 EVENTs awaiting OK each): events/s stored here,
//             from the first EVENT sent to the remote until the last one is stored here;
//   catch-up  the remote holds N events (really signed, COPYed into its database, created in the last
//             50 minutes) that we lack, as after a disconnect: the relay starts with the stream, its
//             first connection reconciles (negentropy) and fetches them; the time until all are stored
//             here. `catch-up (REQ)` is the same from a remote with NIP-77 turned off
//             (NEGENTROPY_MAX_RECORDS=0): REQ `since`, a page at a time.
//
// Every event goes the whole write path here: the write rules, the signature check, the writer.
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type pg from 'pg';
import WebSocket from 'ws';
import * as secp from 'tiny-secp256k1';
import { parseConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { computeEventId, type NostrEvent } from '../src/nostr/event.js';
import { copyRows, EventRows } from '../src/ops/bulk-load.js';
import { openDatabase, type Database } from '../src/store/database.js';
import { prepareEvent } from '../src/store/prepared-event.js';
import { withTransaction } from '../src/store/write.js';
import { startRelayProcess, type RelayProcess } from './lib/relay-process.js';
import { cpuTracker, loadAverage, machineDescription, postgresPids } from './load/system.js';

const HELP = `usage: npm run bench:router -- [options]

options:
  --live N      events published to the remote while the router streams them down (default 20000)
  --missed N    events the remote holds that we lack, for the catch-ups (default 100000)
  --parts P     comma-separated: live, catchup, catchup-req (default all three)`;

const { values } = parseArgs({
  options: {
    live: { type: 'string', default: '20000' },
    missed: { type: 'string', default: '100000' },
    parts: { type: 'string', default: 'live,catchup,catchup-req' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const liveCount = Number(values.live);
const missedCount = Number(values.missed);
const parts = new Set(values.parts.split(','));
const log = createLogger('silent');
const secs = (ms: number) => ms / 1000;
const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

/** Kind 1 notes from 50 keys, signed with libsecp256k1, created_at drawn from [from, to]. */
function signedNotes(count: number, label: string, from: number, to: number): NostrEvent[] {
  const keys = Array.from({ length: 50 }, (_, i) => {
    const secret = createHash('sha256').update(`router-bench:${label}:${i}`).digest();
    return { secret, pubkey: Buffer.from(secp.xOnlyPointFromScalar(secret)).toString('hex') };
  });
  const aux = Buffer.alloc(32);
  return Array.from({ length: count }, (_, i) => {
    const key = keys[i % keys.length];
    const unsigned = { pubkey: key.pubkey, created_at: from + Math.floor(((to - from) * i) / Math.max(1, count - 1)), kind: 1, tags: [['t', 'router-bench']], content: `${label} note ${i}` };
    const id = computeEventId(unsigned);
    return { id, ...unsigned, sig: Buffer.from(secp.signSchnorr(Buffer.from(id, 'hex'), key.secret, aux)).toString('hex') };
  });
}

async function openStoreOf(dataDir: string): Promise<Database> {
  const config = { ...parseConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'silent', DB_POOL_SIZE: '4' }), QUERY_TIMEOUT_MS: 0 };
  return openDatabase(config, log, { ownEmbeddedServer: false });
}

async function copyInto(pool: pg.Pool, events: NostrEvent[]): Promise<void> {
  for (let i = 0; i < events.length; i += 10_000) {
    const rows = new EventRows(Math.min(10_000, events.length - i));
    for (const e of events.slice(i, i + 10_000)) rows.add(prepareEvent(e));
    const encoded = rows.finish();
    await withTransaction(pool, (client) => copyRows(client, encoded));
  }
  await pool.query('VACUUM ANALYZE events');
}

const count = async (pool: pg.Pool) => (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0].n;

type Tracker = ReturnType<typeof cpuTracker>;

/** Polls until the pool holds `n` events (sampling the CPU trackers); resolves with performance.now() then. */
async function untilHolds(pool: pg.Pool, n: number, timeoutMs: number, trackers: Tracker[] = []): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    for (const t of trackers) t.sample();
    const held = await count(pool);
    if (held >= n) return performance.now();
    if (Date.now() > deadline) throw new Error(`only ${held} of ${n} events arrived within ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Publishes events over `connections` sockets, `window` EVENTs awaiting OK on each; resolves when all are answered. */
async function publishAll(url: string, events: NostrEvent[], connections = 4, window = 200): Promise<void> {
  const queue = [...events];
  await Promise.all(
    Array.from({ length: connections }, async () => {
      const ws = new WebSocket(url);
      await new Promise((resolve, reject) => (ws.once('open', resolve), ws.once('error', reject)));
      let inFlight = 0;
      await new Promise<void>((resolve, reject) => {
        const pump = () => {
          while (inFlight < window && queue.length) {
            inFlight++;
            ws.send(JSON.stringify(['EVENT', queue.shift()]));
          }
          if (inFlight === 0 && queue.length === 0) resolve();
        };
        ws.on('message', (data) => {
          const m = JSON.parse(data.toString());
          if (m[0] !== 'OK') return;
          if (m[2] !== true) return reject(new Error(`refused: ${m[3]}`));
          inFlight--;
          pump();
        });
        pump();
      });
      ws.close();
    }),
  );
}

/** This machine's speed now (a shared VM drifts): BIP-340 verifications per second on one core. */
function verificationsPerSecond(events: NostrEvent[]): number {
  const sample = events.slice(0, 1000).map((e) => [Buffer.from(e.id, 'hex'), Buffer.from(e.pubkey, 'hex'), Buffer.from(e.sig, 'hex')] as const);
  const started = performance.now();
  for (const [id, pubkey, sig] of sample) secp.verifySchnorr(id, pubkey, sig);
  return Math.round(sample.length / ((performance.now() - started) / 1000));
}

/**
 * How long the relay's writer spent in write transactions and in how many (its /metrics): the writer
 * runs WRITE_CONCURRENCY transactions at a time, so a busy time near the catch-up's own is its bound.
 */
async function writerBusy(url: string): Promise<string> {
  const text = await (await fetch(`${url.replace(/^ws/, 'http').replace(/\/$/, '')}/metrics`)).text();
  const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  const transactions = value('pgrelay_write_batch_seconds_count');
  return `writer in a transaction ${value('pgrelay_write_batch_seconds_sum').toFixed(1)} s, ${fmt(transactions)} of ${fmt(value('pgrelay_write_batch_events_sum') / transactions)} events`;
}

interface Row {
  part: string;
  events: number;
  seconds: number;
  note: string;
  load: number;
  /** CPU seconds: our relay (with the router), its PostgreSQL, the remote relay, its PostgreSQL. */
  cpu: string;
}

interface BenchRelay {
  process: RelayProcess;
  db: Database;
  dataDir: string;
}

/** CPU trackers for a local and a remote relay and their PostgreSQL servers. */
function trackCpu(local: BenchRelay, remote: BenchRelay): { trackers: Tracker[]; report(): string } {
  const trackers = [local.process.pid, () => postgresPids(local.dataDir), remote.process.pid, () => postgresPids(remote.dataDir)].map((p) =>
    cpuTracker(typeof p === 'number' ? () => [p] : p),
  );
  return { trackers, report: () => trackers.map((t) => (t.seconds() ?? 0).toFixed(1)).join(' / ') };
}

const rows: Row[] = [];
const cleanup: Array<() => Promise<void>> = [];
const dataDir = (name: string) => mkdtemp(path.join(tmpdir(), `pgrelay-router-${name}-`)).then((d) => (cleanup.push(() => rm(d, { recursive: true, force: true })), d));

/** A relay process on a fresh data folder, and our own pool on its database. */
async function relay(name: string, env: Record<string, string> = {}): Promise<BenchRelay> {
  const DATA_DIR = await dataDir(name);
  const process = await startRelayProcess({ DATA_DIR, ...env });
  const db = await openStoreOf(DATA_DIR);
  cleanup.unshift(async () => {
    await db.close();
    await process.stop();
  });
  return { process, db, dataDir: DATA_DIR };
}

async function routerConfig(remote: string, margin: number): Promise<string> {
  const dir = await dataDir('config');
  const file = path.join(dir, 'router.json');
  await writeFile(file, JSON.stringify({ verbose: false, catchUpMargin: margin, streams: { bench: { dir: 'down', urls: [remote] } } }));
  return file;
}

try {
  console.log(`${machineDescription()}; load average ${loadAverage().toFixed(1)}`);
  const now = Math.floor(Date.now() / 1000);

  if (parts.has('live')) {
    const events = signedNotes(liveCount, 'live', now - 60, now - 1);
    const remote = await relay('live-remote');
    const local = await relay('live-local', { ROUTER_CONFIG: await routerConfig(remote.process.url, 600) });
    // The stream is live once its first connection has caught up (nothing to fetch yet).
    for (let waited = 0; !local.process.logs.some((l) => l.msg === 'router: caught up'); waited += 50) {
      if (waited > 60_000) throw new Error('the router did not connect');
      await new Promise((r) => setTimeout(r, 50));
    }
    const load = loadAverage();
    const cpu = trackCpu(local, remote);
    const t0 = performance.now();
    const published = publishAll(remote.process.url, events).then(() => performance.now());
    const stored = await untilHolds(local.db.pool, liveCount, 600_000, cpu.trackers);
    const remoteDone = await published;
    rows.push({
      part: 'live down',
      events: liveCount,
      seconds: secs(stored - t0),
      note: `the remote took them at ${fmt(liveCount / secs(remoteDone - t0))}/s; the last stored here ${secs(stored - remoteDone).toFixed(2)} s after its last OK`,
      load,
      cpu: cpu.report(),
    });
  }

  const missed = parts.has('catchup') || parts.has('catchup-req') ? signedNotes(missedCount, 'missed', now - 3000, now - 60) : [];
  console.log(`this machine now: ${fmt(verificationsPerSecond(signedNotes(1000, 'speed', now - 60, now)))} BIP-340 verifications/s on one core`);
  for (const part of ['catchup', 'catchup-req']) {
    if (!parts.has(part)) continue;
    const remote = await relay(`${part}-remote`, part === 'catchup-req' ? { NEGENTROPY_MAX_RECORDS: '0' } : {});
    await copyInto(remote.db.pool, missed);
    const config = await routerConfig(remote.process.url, 3600);
    const load = loadAverage();
    const t0 = performance.now();
    const local = await relay(`${part}-local`, { ROUTER_CONFIG: config });
    const cpu = trackCpu(local, remote);
    const started = performance.now();
    const stored = await untilHolds(local.db.pool, missedCount, 1_800_000, cpu.trackers);
    const caught = local.process.logs.find((l) => l.msg === 'router: caught up' && l.direction === 'down');
    const writer = await writerBusy(local.process.url);
    rows.push({
      part: part === 'catchup' ? 'catch-up (negentropy)' : 'catch-up (REQ since)',
      events: missedCount,
      seconds: secs(stored - started),
      note: `relay start ${secs(started - t0).toFixed(1)} s not counted; method ${String(caught?.method ?? '?')}; ${writer}`,
      load,
      cpu: cpu.report(),
    });
  }

  const table = [
    ['part', 'events', 'seconds', 'events/s stored here', 'CPU s: ours / its PG / remote / its PG', 'load', 'note'],
    ...rows.map((r) => [r.part, fmt(r.events), r.seconds.toFixed(2), fmt(r.events / r.seconds), r.cpu, r.load.toFixed(1), r.note]),
  ];
  const widths = table[0].map((_, col) => Math.max(...table.map((r) => r[col].length)));
  console.log('');
  for (const [i, r] of table.entries()) {
    console.log(r.map((cell, col) => cell.padEnd(widths[col])).join('  ').trimEnd());
    if (i === 0) console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  }
  console.log(`\nload average now ${loadAverage().toFixed(1)}`);
} finally {
  for (const step of cleanup) await step().catch(() => undefined);
}
