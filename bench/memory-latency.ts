// npm run bench:memory-latency: how long this machine takes to read memory that is not in the CPU
// cache, and how steady that is. The hot tier waits on such reads (index lookups, the merge, framing
// events), so a relay's REQ/s moves with this figure: check it before comparing two runs. Follows
// one random cycle through an Int32Array (each read gives the next index, so the reads cannot
// overlap) and prints the nanoseconds per read, round after round.
import { parseArgs } from 'node:util';
import { loadAverage, machineDescription } from './load/system.js';

const { values } = parseArgs({
  options: {
    mb: { type: 'string', default: '512' },
    rounds: { type: 'string', default: '10' },
    'pause-ms': { type: 'string', default: '3000' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log('usage: npm run bench:memory-latency -- [--mb 512] [--rounds 10] [--pause-ms 3000]   (start it several times: placement differs per process)');
  process.exit(0);
}

const n = (Number(values.mb) * 2 ** 20) / 4;
const READS = 10_000_000;

/** One cycle through every index in random order (Sattolo's algorithm), as next[i] = the index after i. */
function randomCycle(size: number): Int32Array {
  const order = new Int32Array(size);
  for (let i = 0; i < size; i++) order[i] = i;
  let seed = 0x2545f491;
  for (let i = size - 1; i > 0; i--) {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    const j = Math.floor((seed / 2 ** 32) * i);
    const t = order[i]!;
    order[i] = order[j]!;
    order[j] = t;
  }
  const next = new Int32Array(size);
  for (let i = 0; i < size; i++) next[order[i]!] = order[(i + 1) % size]!;
  return next;
}

async function main(): Promise<void> {
  console.log(`npm run bench:memory-latency -- --mb ${values.mb}   ${machineDescription()}; load average ${loadAverage().toFixed(2)}`);
  const next = randomCycle(n);
  let at = 0;
  const all: number[] = [];
  for (let round = 0; round < Number(values.rounds); round++) {
    const started = process.hrtime.bigint();
    for (let i = 0; i < READS; i++) at = next[at]!;
    const ns = Number(process.hrtime.bigint() - started) / READS;
    all.push(ns);
    console.log(`${new Date().toISOString().slice(11, 19)}  ${ns.toFixed(1)} ns per read`);
    await new Promise((resolve) => setTimeout(resolve, Number(values['pause-ms'])));
  }
  all.sort((a, b) => a - b);
  console.log(`median ${all[all.length >> 1]!.toFixed(1)} ns, range ${all[0]!.toFixed(1)}–${all[all.length - 1]!.toFixed(1)} ns (${at >= 0 ? 'cycle followed' : ''})`);
}

main().catch((err) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
