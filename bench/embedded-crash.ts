// npm run bench:embedded-crash: what a crash of the embedded PostgreSQL costs a running relay. Starts
// the relay (its own process, as operators run it) on a fresh DATA_DIR, publishes signed events at a
// steady rate on one connection and sends a REQ for recent events every 100 ms, then SIGKILLs the
// postmaster --runs times. Per kill: seconds until the relay had its server back ("started again"),
// until the first OK true of an event sent after the kill, the longest gap between two OK true, the
// REQs answered in the 15 s after the kill, and, at the end, acknowledged events missing (lost).
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import WebSocket from 'ws';
import { startRelayProcess } from './lib/relay-process.js';
import { loadAverage, machineDescription } from './load/system.js';

const HELP = `usage: npm run bench:embedded-crash -- [--runs N] [--rate EVENTS_PER_S] [--json]

Starts a relay on a fresh DATA_DIR (removed afterwards) and kills its embedded PostgreSQL --runs times
(default 3), 20 s apart, while publishing --rate events/s (default 50) and sending a REQ every 100 ms.`;

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    rate: { type: 'string', default: '50' },
    json: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const RUNS = Number(values.runs);
const RATE = Number(values.rate);
const REQ_WINDOW_MS = 15_000;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const dir = await mkdtemp(path.join(tmpdir(), 'pgrelay-crash-'));
await chmod(dir, 0o755);
const relay = await startRelayProcess({ DATA_DIR: dir, DATABASE_URL: '', HOT_TIER_SNAPSHOT: 'false', WRITE_TIMEOUT_MS: '30000' });
const secretKey = generateSecretKey();
const pubkey = getPublicKey(secretKey);

const ws = new WebSocket(relay.url);
await new Promise((r) => ws.once('open', r));
const acked = new Map<string, number>(); // id → when its OK true came
const reqs: Array<{ at: number; answered?: boolean }> = [];
const pendingReqs = new Map<string, { at: number; answered?: boolean }>();
let finalIds: Set<string> | undefined;
let finalDone: (() => void) | undefined;
ws.on('message', (data) => {
  const m = JSON.parse(data.toString()) as [string, ...unknown[]];
  if (m[0] === 'OK' && m[2] === true) acked.set(m[1] as string, performance.now());
  else if (m[0] === 'EVENT' && m[1] === 'final') finalIds!.add((m[2] as { id: string }).id);
  else if ((m[0] === 'EOSE' || m[0] === 'CLOSED') && m[1] === 'final') finalDone?.();
  else if (m[0] === 'EOSE' || m[0] === 'CLOSED') {
    const r = pendingReqs.get(m[1] as string);
    if (r) {
      r.answered = m[0] === 'EOSE';
      pendingReqs.delete(m[1] as string);
      ws.send(JSON.stringify(['CLOSE', m[1]]));
    }
  }
});

let sent = 0;
const publisher = setInterval(() => {
  const event = finalizeEvent({ kind: 1, created_at: Math.floor(Date.now() / 1000), tags: [], content: `crash bench ${sent++}` }, secretKey);
  ws.send(JSON.stringify(['EVENT', event]));
}, 1000 / RATE);
let reqNo = 0;
const requester = setInterval(() => {
  const id = `r${reqNo++}`;
  const r = { at: performance.now() };
  reqs.push(r);
  pendingReqs.set(id, r);
  ws.send(JSON.stringify(['REQ', id, { authors: [pubkey], limit: 20 }]));
}, 100);

const postmasterPid = async () => Number((await readFile(path.join(dir, 'pg', 'postmaster.pid'), 'utf8')).split('\n')[0]);
const results: Array<Record<string, number>> = [];
await sleep(5000);
for (let run = 0; run < RUNS; run++) {
  const restartsBefore = relay.logs.filter((l) => l.msg === 'embedded PostgreSQL started again').length;
  const load = loadAverage();
  const killedAt = performance.now();
  process.kill(await postmasterPid(), 'SIGKILL');
  while (relay.logs.filter((l) => l.msg === 'embedded PostgreSQL started again').length === restartsBefore) await sleep(20);
  const restartedAt = performance.now();
  await sleep(REQ_WINDOW_MS);
  const oks = [...acked.values()].sort((a, b) => a - b);
  const firstAfter = oks.find((t) => t > killedAt)!;
  const around = oks.filter((t) => t > killedAt - 5000 && t < killedAt + REQ_WINDOW_MS);
  let gap = 0;
  for (let i = 1; i < around.length; i++) gap = Math.max(gap, around[i] - around[i - 1]);
  const window = reqs.filter((r) => r.at >= killedAt && r.at < killedAt + REQ_WINDOW_MS - 2000);
  results.push({
    run: run + 1,
    serverBackSeconds: (restartedAt - killedAt) / 1000,
    firstOkAfterKillSeconds: (firstAfter - killedAt) / 1000,
    writeGapSeconds: gap / 1000,
    reqsSent: window.length,
    reqsAnswered: window.filter((r) => r.answered).length,
    load,
  });
  await sleep(5000);
}
clearInterval(publisher);
clearInterval(requester);
await sleep(3000);
finalIds = new Set();
await new Promise<void>((resolve) => {
  finalDone = resolve;
  ws.send(JSON.stringify(['REQ', 'final', { authors: [pubkey], limit: 1_000_000 }]));
});
const lost = [...acked.keys()].filter((id) => !finalIds!.has(id)).length;
ws.close();
await relay.stop();
await rm(dir, { recursive: true, force: true });

console.log(`embedded PostgreSQL SIGKILLed under a relay (${machineDescription()}; ${RATE} events/s, a REQ every 100 ms)`);
console.log('run | server back s | first OK after kill s | longest OK gap s | REQs answered (15 s) | load');
for (const r of results)
  console.log(
    `${r.run} | ${r.serverBackSeconds.toFixed(2)} | ${r.firstOkAfterKillSeconds.toFixed(2)} | ${r.writeGapSeconds.toFixed(2)} | ${r.reqsAnswered}/${r.reqsSent} | ${r.load.toFixed(2)}`,
  );
console.log(`acknowledged ${acked.size}, lost ${lost}`);
if (values.json) console.log(JSON.stringify({ acked: acked.size, lost, runs: results }));
