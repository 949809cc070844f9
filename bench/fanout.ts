// npm run bench:fanout: live delivery latency with a light Node client. One process holds every
// subscriber and the publisher, so publish → OK and publish → EVENT at each subscriber are timed on
// one clock, without k6's per-message cost (the k6 `fanout` scenario spends ~2.5× the relay's CPU
// per delivered message, on the same two cores). It also reports the relay's CPU per delivery.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import WebSocket from 'ws';
import { cpuSeconds, loadAverage, machineDescription } from './load/system.js';
import { fanoutMessages } from './load/data.js';
import { startRelayProcess, type RelayProcess } from './lib/relay-process.js';
import { ms, summarize, type Summary } from './lib/stats.js';

const HELP = `usage: npm run bench:fanout -- [options]

Starts the relay on a fresh embedded database (or uses --url), opens the subscribers, each with one
live subscription that matches the published events and two that never match, then publishes
signed kind-1 events at a fixed rate and times OK and every delivery.

options:
  --subscribers N   subscriber connections (default 1000)
  --events N        events to publish (default 200)
  --rate R          events per second (default 10)
  --url ws://…      a relay already running (then no relay CPU figure)
  --out DIR         output folder for results.md (default bench-out/fanout)`;

interface Result {
  ok: Summary;
  delivery: Summary;
  missed: number;
  relayCpuUsPerDelivery: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function openSubscribers(url: string, count: number, tag: string, onEvent: (id: string) => void): Promise<WebSocket[]> {
  const sockets: WebSocket[] = [];
  let live = 0;
  for (let i = 0; i < count; i++) {
    const ws = new WebSocket(url);
    ws.on('open', () => {
      ws.send(JSON.stringify(['REQ', 'idle0', { kinds: [1], authors: ['f'.repeat(63) + (i % 10)], limit: 0 }]));
      ws.send(JSON.stringify(['REQ', 'idle1', { '#p': ['e'.repeat(63) + (i % 10)], limit: 0 }]));
      ws.send(JSON.stringify(['REQ', `live${i}`, { kinds: [1], '#t': [tag], limit: 0 }]));
    });
    ws.on('message', (data: Buffer) => {
      const text = data.toString();
      if (text.startsWith('["EOSE","live')) live++;
      else if (text.startsWith('["EVENT","live')) onEvent(text.slice(text.indexOf('"id":"') + 6).slice(0, 64));
    });
    ws.on('error', (err) => console.error(`subscriber ${i}: ${err.message}`));
    sockets.push(ws);
    if (i % 100 === 99) await sleep(20); // do not flood the accept queue
  }
  for (let waited = 0; live < count; waited += 50) {
    if (waited > 60_000) throw new Error(`only ${live} of ${count} subscriptions went live`);
    await sleep(50);
  }
  return sockets;
}

async function run(url: string, relay: RelayProcess | undefined, o: { subscribers: number; events: number; rate: number }): Promise<Result> {
  const tag = `bench-fanout-${Date.now().toString(36)}`;
  const messages = fanoutMessages(tag, o.rate, o.events / o.rate);
  const sentAt = new Map<string, number>();
  const okMs: number[] = [];
  const deliveryMs: number[] = [];
  const subscribers = await openSubscribers(url, o.subscribers, tag, (id) => {
    const t = sentAt.get(id);
    if (t !== undefined) deliveryMs.push(performance.now() - t);
  });
  const publisher = new WebSocket(url);
  await new Promise((resolve, reject) => publisher.once('open', resolve).once('error', reject));
  publisher.on('message', (data: Buffer) => {
    const [verb, id, accepted, reason] = JSON.parse(data.toString());
    if (verb !== 'OK') return;
    okMs.push(performance.now() - sentAt.get(id)!);
    if (!accepted) console.error(`OK false: ${reason}`);
  });
  const cpu0 = relay ? (cpuSeconds(relay.pid) ?? NaN) : NaN;
  const start = performance.now();
  for (let i = 0; i < messages.length; i++) {
    const wait = start + (i * 1000) / o.rate - performance.now();
    if (wait > 0) await sleep(wait);
    sentAt.set(messages[i].slice(16, 80), performance.now());
    publisher.send(messages[i]);
  }
  const expected = messages.length * o.subscribers;
  for (let waited = 0; (deliveryMs.length < expected || okMs.length < messages.length) && waited < 10_000; waited += 50) await sleep(50);
  const cpu = relay ? (cpuSeconds(relay.pid) ?? NaN) - cpu0 : NaN;
  for (const ws of [...subscribers, publisher]) ws.terminate();
  return {
    ok: summarize(okMs),
    delivery: summarize(deliveryMs),
    missed: expected - deliveryMs.length,
    relayCpuUsPerDelivery: (cpu / Math.max(1, deliveryMs.length)) * 1e6,
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      subscribers: { type: 'string', default: '1000' },
      events: { type: 'string', default: '200' },
      rate: { type: 'string', default: '10' },
      url: { type: 'string' },
      out: { type: 'string', default: 'bench-out/fanout' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) return console.log(HELP);
  const o = { subscribers: Number(values.subscribers), events: Number(values.events), rate: Number(values.rate) };
  const dataDir = values.url ? undefined : await mkdtemp(path.join(tmpdir(), 'pgrelay-fanout-'));
  const relay = dataDir ? await startRelayProcess({ DATA_DIR: dataDir }) : undefined;
  try {
    const load = loadAverage();
    const r = await run(values.url ?? relay!.url, relay, o);
    const lines = [
      `${machineDescription()}; load average ${load.toFixed(1)} at the start`,
      `${o.subscribers} subscribers, ${o.events} events at ${o.rate}/s (${o.subscribers * o.rate} deliveries/s)\n`,
      '| | n | p50 | p95 | p99 | max |\n|---|---:|---:|---:|---:|---:|',
      ...([['publish → OK (ms)', r.ok], ['publish → EVENT at subscriber (ms)', r.delivery]] as const).map(
        ([name, s]) => `| ${name} | ${s.n} | ${ms(s.p50)} | ${ms(s.p95)} | ${ms(s.p99)} | ${ms(s.max)} |`,
      ),
      `\nmissed deliveries: ${r.missed}`,
      ...(relay ? [`relay CPU per delivery: ${r.relayCpuUsPerDelivery.toFixed(1)} µs (the whole relay process over the run)`] : []),
    ];
    console.log(lines.join('\n'));
    const outDir = path.resolve(values.out!);
    await mkdir(outDir, { recursive: true });
    await writeFile(path.join(outDir, 'results.md'), lines.join('\n') + '\n');
    if (r.missed > 0) process.exitCode = 1;
  } finally {
    await relay?.stop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  }
}

await main();
