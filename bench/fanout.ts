// npm run bench:fanout: live delivery latency with a light Node client. One process holds every
// subscriber and the publisher, so publish → OK and publish → EVENT at each subscriber are timed on
// one clock, without k6's per-message cost (the k6 `fanout` scenario spends ~2.5× the relay's CPU
// per delivered message, on the same two cores). It also reports the relay's CPU per delivery.
// With --relays N (N relay processes on one database) or --workers N (a relay's cluster workers),
// deliveries to subscribers on the publisher's process and on another process are reported apart.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { loadAverage, machineDescription } from './load/system.js';
import { fanoutMessages } from './load/data.js';
import { relaysCpuSeconds, startRelays, type RelayGroup } from './lib/relays.js';
import { ms, summarize, type Summary } from './lib/stats.js';

const HELP = `usage: npm run bench:fanout -- [options]

Starts the relay on a fresh embedded database (or uses --url), opens the subscribers, each with one
live subscription that matches the published events and two that never match, then publishes
signed kind-1 events at a fixed rate and times OK and every delivery.

options:
  --subscribers N   subscriber connections (default 1000)
  --events N        events to publish (default 200)
  --rate R          events per second (default 10)
  --relays N        relay processes on one embedded database (default 1); subscribers are spread
                    round-robin over them, the publisher publishes to the first
  --workers N|auto  WORKERS for each relay process (default 1)
  --url ws://…[,…]  relays already running (then no relay CPU figure), used as --relays would
  --out DIR         output folder for results.md (default bench-out/fanout)`;

interface Group {
  subscribers: number;
  delivery: Summary;
  missed: number;
}

interface Result {
  ok: Summary;
  delivery: Summary;
  missed: number;
  /** When subscribers landed on more than one process: those on the publisher's process and the others. */
  split?: { same: Group; other: Group };
  relayCpuUsPerDelivery: number;
}

interface Subscriber {
  ws: WebSocket;
  /** The relay process holding the connection: its X-Relay-Process header, else its URL (one process per URL). */
  process: string;
  latencies: number[];
}

const processOf = (res: IncomingMessage, url: string) => String(res.headers['x-relay-process'] ?? url);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function openSubscribers(urls: string[], count: number, tag: string, sentAt: Map<string, number>): Promise<Subscriber[]> {
  const subscribers: Subscriber[] = [];
  let live = 0;
  for (let i = 0; i < count; i++) {
    const url = urls[i % urls.length];
    const ws = new WebSocket(url);
    const s: Subscriber = { ws, process: url, latencies: [] };
    ws.once('upgrade', (res) => (s.process = processOf(res, url)));
    ws.on('open', () => {
      ws.send(JSON.stringify(['REQ', 'idle0', { kinds: [1], authors: ['f'.repeat(63) + (i % 10)], limit: 0 }]));
      ws.send(JSON.stringify(['REQ', 'idle1', { '#p': ['e'.repeat(63) + (i % 10)], limit: 0 }]));
      ws.send(JSON.stringify(['REQ', `live${i}`, { kinds: [1], '#t': [tag], limit: 0 }]));
    });
    ws.on('message', (data: Buffer) => {
      const text = data.toString();
      if (text.startsWith('["EOSE","live')) live++;
      else if (text.startsWith('["EVENT","live')) {
        const t = sentAt.get(text.slice(text.indexOf('"id":"') + 6).slice(0, 64));
        if (t !== undefined) s.latencies.push(performance.now() - t);
      }
    });
    ws.on('error', (err) => console.error(`subscriber ${i}: ${err.message}`));
    subscribers.push(s);
    if (i % 100 === 99) await sleep(20); // do not flood the accept queue
  }
  for (let waited = 0; live < count; waited += 50) {
    if (waited > 60_000) throw new Error(`only ${live} of ${count} subscriptions went live`);
    await sleep(50);
  }
  return subscribers;
}

/** Deliveries to a set of subscribers: latency and how many of `events` × subscribers never arrived. */
function group(subscribers: Subscriber[], events: number): Group {
  const latencies = subscribers.flatMap((s) => s.latencies);
  return { subscribers: subscribers.length, delivery: summarize(latencies), missed: events * subscribers.length - latencies.length };
}

async function run(urls: string[], relays: RelayGroup | undefined, o: { subscribers: number; events: number; rate: number }): Promise<Result> {
  const tag = `bench-fanout-${Date.now().toString(36)}`;
  const messages = fanoutMessages(tag, o.rate, o.events / o.rate);
  const sentAt = new Map<string, number>();
  const okMs: number[] = [];
  const subscribers = await openSubscribers(urls, o.subscribers, tag, sentAt);
  const publisher = new WebSocket(urls[0]);
  let publisherProcess = urls[0];
  publisher.once('upgrade', (res) => (publisherProcess = processOf(res, urls[0])));
  await new Promise((resolve, reject) => publisher.once('open', resolve).once('error', reject));
  publisher.on('message', (data: Buffer) => {
    const [verb, id, accepted, reason] = JSON.parse(data.toString());
    if (verb !== 'OK') return;
    okMs.push(performance.now() - sentAt.get(id)!);
    if (!accepted) console.error(`OK false: ${reason}`);
  });
  const pids = relays?.relays.map((r) => r.pid) ?? [];
  const cpu0 = relays ? relaysCpuSeconds(pids) : NaN;
  const start = performance.now();
  for (let i = 0; i < messages.length; i++) {
    const wait = start + (i * 1000) / o.rate - performance.now();
    if (wait > 0) await sleep(wait);
    sentAt.set(messages[i].slice(16, 80), performance.now());
    publisher.send(messages[i]);
  }
  const expected = messages.length * o.subscribers;
  const delivered = () => subscribers.reduce((sum, s) => sum + s.latencies.length, 0);
  for (let waited = 0; (delivered() < expected || okMs.length < messages.length) && waited < 10_000; waited += 50) await sleep(50);
  const cpu = relays ? relaysCpuSeconds(pids) - cpu0 : NaN;
  for (const ws of [...subscribers.map((s) => s.ws), publisher]) ws.terminate();
  const all = group(subscribers, messages.length);
  const same = subscribers.filter((s) => s.process === publisherProcess);
  const other = subscribers.filter((s) => s.process !== publisherProcess);
  return {
    ok: summarize(okMs),
    delivery: all.delivery,
    missed: all.missed,
    split: other.length ? { same: group(same, messages.length), other: group(other, messages.length) } : undefined,
    relayCpuUsPerDelivery: (cpu / Math.max(1, all.delivery.n)) * 1e6,
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      subscribers: { type: 'string', default: '1000' },
      events: { type: 'string', default: '200' },
      rate: { type: 'string', default: '10' },
      relays: { type: 'string', default: '1' },
      workers: { type: 'string', default: '1' },
      url: { type: 'string' },
      out: { type: 'string', default: 'bench-out/fanout' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) return console.log(HELP);
  const o = { subscribers: Number(values.subscribers), events: Number(values.events), rate: Number(values.rate) };
  const workers = values.workers!;
  if (!/^(auto|[1-9]\d*)$/.test(workers)) throw new Error(`--workers must be a positive number or auto, got ${workers}`);
  const count = Number(values.relays);
  if (!(Number.isInteger(count) && count >= 1)) throw new Error(`--relays must be a positive integer, got ${values.relays}`);
  if (values.url && count > 1) throw new Error('--relays starts relays: give relays already running as --url ws://…,ws://…');
  const dataDir = values.url ? undefined : await mkdtemp(path.join(tmpdir(), 'pgrelay-fanout-'));
  const relays = dataDir ? await startRelays(count, { dataDir, env: { WORKERS: workers } }) : undefined;
  const urls = values.url?.split(',') ?? relays!.relays.map((r) => r.url);
  try {
    const load = loadAverage();
    const r = await run(urls, relays, o);
    const row = (name: string, s: Summary) => `| ${name} | ${s.n} | ${ms(s.p50)} | ${ms(s.p95)} | ${ms(s.p99)} | ${ms(s.max)} |`;
    const setup = [
      ...(urls.length > 1 ? [`${urls.length} relay processes on one database, subscribers round-robin over them, publisher on the first`] : []),
      ...(workers !== '1' ? [`WORKERS=${workers}`] : []),
    ];
    const lines = [
      `${machineDescription()}; load average ${load.toFixed(1)} at the start`,
      `${o.subscribers} subscribers, ${o.events} events at ${o.rate}/s (${o.subscribers * o.rate} deliveries/s)${setup.map((x) => `; ${x}`).join('')}\n`,
      '| | n | p50 | p95 | p99 | max |\n|---|---:|---:|---:|---:|---:|',
      row('publish → OK (ms)', r.ok),
      row('publish → EVENT at subscriber (ms)', r.delivery),
      ...(r.split
        ? [
            row(`… on the publisher's process: ${r.split.same.subscribers} subscribers (ms)`, r.split.same.delivery),
            row(`… on another process: ${r.split.other.subscribers} subscribers (ms)`, r.split.other.delivery),
          ]
        : []),
      `\nmissed deliveries: ${r.missed}` +
        (r.split ? ` (publisher's process: ${r.split.same.missed}; another process: ${r.split.other.missed})` : ''),
      ...(relays
        ? [
            `relay CPU per delivery: ${r.relayCpuUsPerDelivery.toFixed(1)} µs (` +
              (count > 1 ? `the ${count} relay processes` : 'the whole relay process') +
              (workers === '1' ? '' : count > 1 ? ' with their cluster workers' : ' with its cluster workers') +
              ' over the run)',
          ]
        : []),
    ];
    console.log(lines.join('\n'));
    const outDir = path.resolve(values.out!);
    await mkdir(outDir, { recursive: true });
    await writeFile(path.join(outDir, 'results.md'), lines.join('\n') + '\n');
    if (r.missed > 0) process.exitCode = 1;
  } finally {
    await relays?.stop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  }
}

await main();
