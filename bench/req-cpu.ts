// npm run bench:req-cpu: the relay's CPU per REQ, with a client that costs next to nothing. k6
// reads every EVENT message into its JavaScript runtime (~1 ms of CPU per REQ of this mix here, on
// the same two cores as the relay), so its ladder measures the relay and the client together. This
// client speaks just enough WebSocket (RFC 6455: the upgrade, masked text frames out) to send the
// k6 query mix's REQs and CLOSEs, and finds each REQ's EOSE by searching the bytes it receives,
// without decoding a frame: the relay's main thread saturates first, so REQ/s and its CPU per REQ
// are the relay's own. Not a client to copy: it trusts the relay's framing.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { packageRoot } from '../src/paths.js';
import { startRelayProcess, waitForHotTier, type RelayProcess } from './lib/relay-process.js';
import { cpuSeconds, loadAverage, machineDescription, mainThreadCpuSeconds } from './load/system.js';

const HELP = `usage: npm run bench:req-cpu -- [options]

options:
  --data-dir DIR   start a relay on this corpus (HOT_TIER_MB and the rest from the environment)
                   and wait for its hot tier to fill
  --url URL        or measure a running relay (ws://127.0.0.1:PORT) ...
  --relay-pid N    ... whose CPU is read from /proc
  --conns LIST     concurrent connections per step, each one REQ at a time (default 10,50,200)
  --seconds N      measured seconds per step, after 3 s of warm-up (default 15)
  --mix FILE       the REQ mix (default load/data/query-mix.json, which \`npm run load -- --scenario
                   query\` writes for its corpus)`;

const { values } = parseArgs({
  options: {
    'data-dir': { type: 'string' },
    url: { type: 'string' },
    'relay-pid': { type: 'string' },
    conns: { type: 'string', default: '10,50,200' },
    seconds: { type: 'string', default: '15' },
    mix: { type: 'string', default: path.join(packageRoot(), 'load/data/query-mix.json') },
    help: { type: 'boolean', default: false },
  },
});
if (values.help || (!values['data-dir'] && !(values.url && values['relay-pid']))) {
  console.log(HELP);
  process.exit(values.help ? 0 : 2);
}

const mix = (JSON.parse(readFileSync(values.mix, 'utf8')) as Array<{ filters: string }>).map((e) => e.filters);

/** A client text frame: FIN + opcode 1, masked (RFC 6455 §5.3; the mask is fixed, which the relay cannot tell). */
function frame(text: string): Buffer {
  const payload = Buffer.from(text, 'utf8');
  const n = payload.length;
  const head = n < 126 ? Buffer.from([0x81, 0x80 | n]) : n < 65536 ? Buffer.from([0x81, 0x80 | 126, n >> 8, n & 255]) : Buffer.from([0x81, 0x80 | 127, 0, 0, 0, 0, (n >>> 24) & 255, (n >> 16) & 255, (n >> 8) & 255, n & 255]);
  const mask = [0x12, 0x34, 0x56, 0x78];
  for (let i = 0; i < n; i++) payload[i] ^= mask[i & 3]!;
  return Buffer.concat([head, Buffer.from(mask), payload]);
}

interface Counts {
  done: number;
  failed: number;
}

/** One connection sending REQs from the mix until `until()` says stop; each ends at its EOSE (or CLOSED, counted as failed). */
function connection(url: URL, counts: Counts, until: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    const socket = net.connect(Number(url.port), url.hostname);
    socket.setNoDelay(true);
    let upgraded = false;
    let tail: Buffer = Buffer.alloc(0);
    let sub = '';
    let eose = Buffer.alloc(0);
    let closed = Buffer.alloc(0);
    let serial = 0;
    const id = randomBytes(4).toString('hex');
    const send = () => {
      sub = `c${id}-${serial++}`;
      eose = Buffer.from(`["EOSE","${sub}"]`);
      closed = Buffer.from(`["CLOSED","${sub}"`);
      socket.write(frame(`["REQ","${sub}",${mix[Math.floor(Math.random() * mix.length)]}]`));
    };
    socket.on('connect', () =>
      socket.write(
        `GET ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
      ),
    );
    socket.on('data', (data: Buffer) => {
      if (!upgraded) {
        const end = data.indexOf('\r\n\r\n');
        if (end < 0) return;
        if (!data.subarray(0, 12).toString().includes('101')) throw new Error(`upgrade refused: ${data.subarray(0, end).toString()}`);
        upgraded = true;
        data = data.subarray(end + 4);
        send();
      }
      // The end of the last chunk is kept: a marker may straddle two reads.
      const bytes: Buffer = tail.length ? Buffer.concat([tail, data]) : data;
      const ended = bytes.indexOf(eose) >= 0 ? 'eose' : bytes.indexOf(closed) >= 0 ? 'closed' : undefined;
      if (!ended) {
        tail = bytes.subarray(Math.max(0, bytes.length - 80));
        return;
      }
      tail = Buffer.alloc(0);
      if (ended === 'eose') counts.done++;
      else counts.failed++;
      socket.write(frame(`["CLOSE","${sub}"]`));
      if (until()) send();
      else socket.end(resolve);
    });
    socket.on('error', (err) => {
      console.error(`connection: ${err.message}`);
      counts.failed++;
      resolve();
    });
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function step(url: URL, pid: number, conns: number, seconds: number): Promise<string> {
  const counts: Counts = { done: 0, failed: 0 };
  const stopAt = Date.now() + (3 + seconds) * 1000;
  const all = Array.from({ length: conns }, () => connection(url, counts, () => Date.now() < stopAt));
  await sleep(3000);
  const before = { done: counts.done, cpu: cpuSeconds(pid) ?? NaN, main: mainThreadCpuSeconds(pid) ?? NaN, client: process.cpuUsage(), at: Date.now() };
  await sleep(seconds * 1000);
  const wall = (Date.now() - before.at) / 1000;
  const reqs = counts.done - before.done;
  const cpu = (cpuSeconds(pid) ?? NaN) - before.cpu;
  const main = (mainThreadCpuSeconds(pid) ?? NaN) - before.main;
  const client = process.cpuUsage(before.client);
  await Promise.all(all);
  const per = (seconds: number) => ((1000 * seconds) / reqs).toFixed(3);
  return `| ${conns} | ${(reqs / wall).toFixed(1)} | ${(cpu / wall).toFixed(2)} | ${per(cpu)} | ${per(main)} | ${per((client.user + client.system) / 1e6)} | ${counts.failed} |`;
}

async function main(): Promise<void> {
  let relay: RelayProcess | undefined;
  let url: URL;
  let pid: number;
  if (values['data-dir']) {
    relay = await startRelayProcess({ DATA_DIR: values['data-dir'] });
    const filled = await waitForHotTier(relay);
    if (filled) console.log(`hot tier filled: ${filled.events} events`);
    url = new URL(relay.url);
    pid = relay.pid;
  } else {
    url = new URL(values.url!);
    pid = Number(values['relay-pid']);
  }
  try {
    console.log(`\`npm run bench:req-cpu\` — ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC; ${machineDescription()}; load average ${loadAverage()} at the start`);
    console.log('| connections | REQ/s | relay CPU (cores) | relay ms CPU per REQ | of it, main thread | client ms per REQ | failed |');
    console.log('|---:|---:|---:|---:|---:|---:|---:|');
    for (const conns of values.conns.split(',').map(Number)) console.log(await step(url, pid, conns, Number(values.seconds)));
    console.log(`load average ${loadAverage()} at the end`);
  } finally {
    await relay?.stop();
  }
}

await main();
