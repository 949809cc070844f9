// npm run bench:ingest: publish pre-signed events from many WebSocket publishers and measure accepted
// events/s, OK latency, relay CPU, peak RSS and the writer's batch size; batched and unbatched
// (one transaction per event) side by side. See --help.
import { mkdtemp, readFile, rm, writeFile, mkdir } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import os, { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import * as secp from 'tiny-secp256k1';
import WebSocket from 'ws';
import { computeEventId, type NostrEvent } from '../src/nostr/event.js';
import { cpuSeconds, mainThreadCpuSeconds, postgresPids } from './load/system.js';
import { words } from './lib/corpus.js';
import { prng } from './lib/random.js';
import { startRelayProcess, type RelayProcess } from './lib/relay-process.js';
import { relayPids, relaysCpuSeconds } from './lib/relays.js';
import { ms, summarize, type Summary } from './lib/stats.js';

const HELP = `usage: npm run bench:ingest -- [options]

Pre-signs events (not timed; cached in the output folder), starts the relay as a separate process on
a fresh embedded database for each mode, and publishes from concurrent WebSocket publishers.

options:
  --events N            events per batched run (default 30000)
  --unbatched-events N  events for the unbatched run (default 3000; it is ~30x slower)
  --publishers N        concurrent WebSocket publishers (default 20)
  --window N            events in flight per publisher (default 25); closed loop
  --rate R              open loop instead: send R events/s in total (e.g. 5000)
  --size BYTES          content size of each event (default 1000)
  --text random|words   content: random letters in new words (default; the worst case for the search
                        index), or words from the benchmark corpus's vocabulary
  --modes a,b           batched,unbatched (default both)
  --workers N|auto      WORKERS for the relay process (default 1; its cluster workers are counted in
                        its CPU, RSS and mean batch)
  --plugin COMMAND      WRITE_POLICY_PLUGIN for the relay (e.g. bench/plugins/accept-all.js): every
                        event goes through it; its CPU is counted in the relay's and shown apart
  --url ws://…          publish to a relay already running instead (no CPU/RSS/batch figures)
  --out DIR             output folder (default bench-out/ingest)`;

interface RunResult {
  mode: string;
  events: number;
  accepted: number;
  refused: Record<string, number>;
  seconds: number;
  eventsPerSecond: number;
  ok: Summary;
  relayCpuPercent: number;
  mainThreadCpuPercent: number;
  postgresCpuPercent: number;
  peakRssMb: number;
  meanBatch: number;
  /** CPU of the write-policy plugin's process (also counted in relayCpuPercent: it is the relay's child). */
  pluginCpuPercent: number;
}

/** Signs with libsecp256k1 (fast), not timed. Each publisher signs with its own key. */
function signEvents(count: number, size: number, publishers: number, text: Text): NostrEvent[] {
  const random = prng(42);
  const keys = Array.from({ length: publishers }, (_, i) => {
    const sk = Buffer.alloc(32);
    sk.writeUInt32BE(i + 1, 28);
    return { sk, pubkey: Buffer.from(secp.xOnlyPointFromScalar(sk)).toString('hex') };
  });
  const base = Math.floor(Date.now() / 1000) - count;
  const filler = 'abcdefghijklmnopqrstuvwxyz0123456789 ';
  return Array.from({ length: count }, (_, i) => {
    const key = keys[i % publishers];
    let content = '';
    if (text === 'words') content = words(random, size);
    else while (content.length < size) content += filler[Math.floor(random() * filler.length)];
    const unsigned = { pubkey: key.pubkey, created_at: base + i, kind: 1, tags: [['t', 'bench'], ['p', keys[(i + 1) % publishers].pubkey]], content };
    const id = computeEventId(unsigned);
    const sig = Buffer.from(secp.signSchnorr(Buffer.from(id, 'hex'), key.sk, Buffer.alloc(32))).toString('hex');
    return { id, ...unsigned, sig };
  });
}

/**
 * `random`: random letters and digits in words of ~37 characters, every word new (the worst case for
 * the NIP-50 GIN index: each event adds ~27 keys it has never seen); `words`: the corpus's note words.
 */
type Text = 'random' | 'words';

async function loadOrSign(outDir: string, count: number, size: number, publishers: number, text: Text): Promise<NostrEvent[]> {
  const file = path.join(outDir, `events-${count}-${size}-${publishers}${text === 'words' ? '-words' : ''}.jsonl`);
  if (existsSync(file)) return (await readFile(file, 'utf8')).trim().split('\n').map((l) => JSON.parse(l));
  const events = signEvents(count, size, publishers, text);
  await writeFile(file, events.map((e) => JSON.stringify(e)).join('\n') + '\n');
  return events;
}

/** Peak RSS of the relay process, plus each cluster worker's (their peaks need not coincide). */
function peakRssMb(pid: number): number {
  return relayPids(pid).reduce((sum, p) => {
    try {
      const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${p}/status`, 'utf8'));
      return sum + (m ? Number(m[1]) / 1024 : NaN);
    } catch {
      return NaN;
    }
  }, 0);
}

/** Main-thread CPU seconds of the relay process and each cluster worker (their event loops), not of other children (a plugin). */
const mainThreadsCpuSeconds = (pid: number, others: number[] = []) =>
  relayPids(pid).filter((p) => !others.includes(p)).reduce((sum, p) => sum + (mainThreadCpuSeconds(p) ?? NaN), 0);

async function publish(relay: RelayProcess, events: NostrEvent[], publishers: number, window: number, rate?: number) {
  const sockets = await Promise.all(
    Array.from({ length: publishers }, () => new Promise<WebSocket>((resolve, reject) => {
      const ws = new WebSocket(relay.url);
      ws.once('open', () => resolve(ws));
      ws.once('error', reject);
    })),
  );
  const queues = sockets.map((_, p) => events.filter((_, i) => i % publishers === p));
  const sentAt = new Map<string, number>();
  const latencies: number[] = [];
  const refused: Record<string, number> = {};
  let accepted = 0;
  let answered = 0;
  const started = performance.now();
  await new Promise<void>((done) => {
    const sendNext = (p: number) => {
      const e = queues[p].shift();
      if (!e) return;
      sentAt.set(e.id, performance.now());
      sockets[p].send(JSON.stringify(['EVENT', e]));
    };
    sockets.forEach((ws, p) => {
      ws.on('message', (data) => {
        const m = JSON.parse(data.toString());
        if (m[0] !== 'OK') return;
        latencies.push(performance.now() - sentAt.get(m[1])!);
        if (m[2]) accepted++;
        else {
          const prefix = String(m[3]).split(':')[0];
          refused[prefix] = (refused[prefix] ?? 0) + 1;
        }
        if (!rate) sendNext(p);
        if (++answered === events.length) done();
      });
      if (!rate) for (let i = 0; i < window; i++) sendNext(p);
    });
    if (rate) {
      // Open loop: every 10 ms, send the events due by now, round-robin over publishers.
      let due = 0;
      let sent = 0;
      const timer = setInterval(() => {
        due = Math.min(events.length, Math.floor(((performance.now() - started) / 1000) * rate));
        for (; sent < due; sent++) sendNext(sent % publishers);
        if (sent >= events.length) clearInterval(timer);
      }, 10);
    }
  });
  const seconds = (performance.now() - started) / 1000;
  sockets.forEach((ws) => ws.close());
  return { seconds, accepted, refused, ok: summarize(latencies) };
}

/** The write-policy plugins' pids, as the relay logs them when it starts one. */
const pluginPids = (relay: RelayProcess) => relay.logs.flatMap((l) => (l.msg === 'write policy plugin started' && typeof l.pid === 'number' ? [l.pid] : []));

async function runMode(mode: string, events: NostrEvent[], o: { publishers: number; window: number; rate?: number; url?: string; workers: string; plugin?: string }): Promise<RunResult> {
  if (o.url) {
    const r = await publish({ url: o.url } as RelayProcess, events, o.publishers, o.window, o.rate);
    return { mode: 'external', events: events.length, accepted: r.accepted, refused: r.refused, seconds: r.seconds, eventsPerSecond: r.accepted / r.seconds, ok: r.ok, relayCpuPercent: NaN, mainThreadCpuPercent: NaN, postgresCpuPercent: NaN, peakRssMb: NaN, meanBatch: NaN, pluginCpuPercent: NaN };
  }
  const dataDir = await mkdtemp(path.join(tmpdir(), 'pgrelay-ingest-'));
  const relay = await startRelayProcess({
    DATA_DIR: dataDir, WORKERS: o.workers, WRITE_BATCH_SIZE: mode === 'batched' ? '500' : '1', MAX_PENDING_EVENTS: '100000', WRITE_QUEUE_MAX: '100000',
    ...(o.plugin && { WRITE_POLICY_PLUGIN: o.plugin }),
  });
  try {
    const cpu = (pid: number) => cpuSeconds(pid) ?? 0;
    const cpu0 = relaysCpuSeconds([relay.pid]);
    const main0 = mainThreadsCpuSeconds(relay.pid, pluginPids(relay));
    const pg0 = new Map(postgresPids(dataDir).map((p) => [p, cpu(p)]));
    const plugin0 = new Map(pluginPids(relay).map((p) => [p, cpu(p)]));
    const r = await publish(relay, events, o.publishers, o.window, o.rate);
    const pluginCpu = pluginPids(relay).reduce((sum, p) => sum + cpu(p) - (plugin0.get(p) ?? 0), 0);
    const relayCpu = relaysCpuSeconds([relay.pid]) - cpu0;
    const mainCpu = mainThreadsCpuSeconds(relay.pid, pluginPids(relay)) - main0;
    // This run's PostgreSQL: backends that started during the run count from zero, those that ended
    // are not counted.
    const pgCpu = postgresPids(dataDir).reduce((sum, p) => sum + cpu(p) - (pg0.get(p) ?? 0), 0);
    const rss = peakRssMb(relay.pid);
    await relay.stop();
    // One writer per process: with cluster workers, each logs its own.
    const writers = relay.logs.flatMap((l) => (l.msg === 'relay stopped' && l.writer ? [l.writer as { batches: number; events: number }] : []));
    const batches = writers.reduce((sum, w) => sum + w.batches, 0);
    return {
      mode,
      events: events.length,
      accepted: r.accepted,
      refused: r.refused,
      seconds: r.seconds,
      eventsPerSecond: r.accepted / r.seconds,
      ok: r.ok,
      relayCpuPercent: (relayCpu / r.seconds) * 100,
      mainThreadCpuPercent: (mainCpu / r.seconds) * 100,
      postgresCpuPercent: (pgCpu / r.seconds) * 100,
      peakRssMb: rss,
      meanBatch: batches ? writers.reduce((sum, w) => sum + w.events, 0) / batches : NaN,
      pluginCpuPercent: o.plugin ? (pluginCpu / r.seconds) * 100 : NaN,
    };
  } finally {
    await relay.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

/** CPU microseconds per accepted event, from a CPU share in percent. */
const perEvent = (r: RunResult, percent: number) => Math.round((percent / 100 / r.eventsPerSecond) * 1e6);

/**
 * This machine's speed right now: BIP-340 verifications per second on one core, on events already
 * signed. A shared VM's speed drifts (../shared/perf-notes.md measured ~4,900/s with sha256), so a
 * run is comparable with another only next to this figure.
 */
function verificationsPerSecond(events: NostrEvent[]): number {
  const sample = events.slice(0, 1000).map((e) => [Buffer.from(e.id, 'hex'), Buffer.from(e.pubkey, 'hex'), Buffer.from(e.sig, 'hex')] as const);
  const started = performance.now();
  for (const [id, pubkey, sig] of sample) secp.verifySchnorr(id, pubkey, sig);
  return Math.round(sample.length / ((performance.now() - started) / 1000));
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      events: { type: 'string', default: '30000' },
      'unbatched-events': { type: 'string', default: '3000' },
      publishers: { type: 'string', default: '20' },
      window: { type: 'string', default: '25' },
      rate: { type: 'string' },
      size: { type: 'string', default: '1000' },
      text: { type: 'string', default: 'random' },
      modes: { type: 'string', default: 'batched,unbatched' },
      workers: { type: 'string', default: '1' },
      out: { type: 'string', default: 'bench-out/ingest' },
      url: { type: 'string' },
      plugin: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) return console.log(HELP);
  const outDir = path.resolve(values.out!);
  await mkdir(outDir, { recursive: true });
  const publishers = Number(values.publishers);
  const workers = values.workers!;
  if (!/^(auto|[1-9]\d*)$/.test(workers)) throw new Error(`--workers must be a positive integer or auto, got ${workers}`);
  // A plugin given as a path is started by the relay from its own working directory: made absolute.
  const plugin = values.plugin && !values.plugin.includes(' ') ? path.resolve(values.plugin) : values.plugin;
  const o = { publishers, window: Number(values.window), rate: values.rate ? Number(values.rate) : undefined, url: values.url, workers, plugin };
  if (values.text !== 'random' && values.text !== 'words') throw new Error(`--text must be random or words, got ${values.text}`);
  const all = await loadOrSign(outDir, Number(values.events), Number(values.size), publishers, values.text);
  const speed = verificationsPerSecond(all);
  console.error(`this machine now: ${speed} BIP-340 verifications/s on one core`);
  const results: RunResult[] = [];
  for (const mode of values.url ? ['external'] : values.modes!.split(',')) {
    const events = mode === 'unbatched' ? all.slice(0, Number(values['unbatched-events'])) : all;
    console.error(`${mode}: ${events.length} events from ${publishers} publishers${o.rate ? ` at ${o.rate}/s` : `, ${o.window} in flight each`}…`);
    const r = await runMode(mode, events, o);
    if (plugin) r.mode += ' + plugin';
    results.push(r);
    console.error(`  ${Math.round(r.eventsPerSecond)} events/s accepted, OK p50 ${ms(r.ok.p50)} p95 ${ms(r.ok.p95)} p99 ${ms(r.ok.p99)} ms, mean batch ${r.meanBatch.toFixed(1)}`);
  }
  const table = [
    `${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'CPU'}) · ${o.url ? 'a relay already running' : `WORKERS=${workers}`}${plugin ? ` · WRITE_POLICY_PLUGIN=${values.plugin}` : ''} · load average ${os.loadavg()[0].toFixed(2)} at the end · ${publishers} publishers · ${values.size}-byte events, id + BIP-340 verified · ${o.rate ? `open loop at ${o.rate} events/s` : `closed loop, ${o.window} in flight per publisher`} · machine speed before the runs: ${speed.toLocaleString('en-US')} BIP-340 verifications/s on one core`,
    '',
    '| mode | events | accepted/s | OK p50 | OK p95 | OK p99 | mean batch | relay CPU (main thread) | relay µs/event (main thread) | PostgreSQL CPU | relay peak RSS | refused |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
    ...results.map((r) =>
      `| ${r.mode} | ${r.events} | ${Math.round(r.eventsPerSecond)} | ${ms(r.ok.p50)} ms | ${ms(r.ok.p95)} ms | ${ms(r.ok.p99)} ms | ${r.meanBatch.toFixed(1)} | ${Math.round(r.relayCpuPercent)} % (${Math.round(r.mainThreadCpuPercent)} %) | ${perEvent(r, r.relayCpuPercent)} (${perEvent(r, r.mainThreadCpuPercent)}) | ${Math.round(r.postgresCpuPercent)} % | ${Math.round(r.peakRssMb)} MB | ${Object.entries(r.refused).map(([k, v]) => `${k}: ${v}`).join(', ') || '–'} |`),
    '',
    'CPU is the share of one core (200 % = both cores busy); the relay\'s main thread is in brackets, the rest is mostly the signature workers.',
    ...(plugin ? [`The write-policy plugin's process used ${results.map((r) => `${Math.round(r.pluginCpuPercent)} %`).join(', ')} (counted in the relay's CPU, as its child).`] : []),
  ].join('\n');
  await writeFile(path.join(outDir, `results${o.rate ? `-rate${o.rate}` : ''}.md`), table + '\n');
  await writeFile(path.join(outDir, `results${o.rate ? `-rate${o.rate}` : ''}.json`), JSON.stringify(results, null, 2));
  console.log(table);
}

main().catch((err) => {
  console.error(`error: ${err instanceof Error ? err.stack : String(err)}`);
  process.exit(1);
});
