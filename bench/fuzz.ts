// npm run fuzz -- --messages N: the structure-aware fuzzer (bench/lib/fuzz.ts) against a relay process
// on a fresh database (an embedded PostgreSQL in a temporary folder, or a new database on the server
// at DATABASE_URL). Prints the seed first (--seed reproduces the same messages), then the summary;
// exits 1 when a check fails: the relay died or logged an error; left a message unanswered, answered
// it malformed or without a prefix; delivered an event altered, not matching its subscription, or
// after its CLOSE; made the well-behaved client wait over a second; or, once every client had gone,
// still held a connection, subscription or negentropy session, or heap well above its baseline.
import { randomBytes, randomInt } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { parseConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { ensureDatabase, openDatabase, withDatabaseName, type Database } from '../src/store/database.js';
import { collectGarbageAt, formatReport, freePort, inspectorOption, runFuzz } from './lib/fuzz.js';
import { startRelayProcess, type RelayProcess } from './lib/relay-process.js';
import { loadAverage, machineDescription } from './load/system.js';

const HELP = `usage: npm run fuzz -- [options]

options:
  --messages N      fuzzed messages to send (default 100000)
  --seed N          reproduce a run's messages (default: random, printed); what they take from the
                    clock (created_at, since) and from the events the relay accepted may differ
  --connections N   fuzzing connections at once (default 4)
  --batch N         messages per segment, each checked before the next (default 50)
  --settle N        seconds to wait for the relay's heap to come back near baseline (default 30;
                    the heap is measured after a full GC, through the relay's inspector on loopback)
  --keep            keep the data directory (printed) instead of removing it

The relay runs as a separate process with its default limits (the fuzzer reads MAX_MESSAGE_BYTES from
its NIP-11 document); the fuzzing connections come from loopback, which is exempt from the rate limits
(RATE_LIMIT_EXEMPT). Other relay settings can be given in the environment (e.g. MAX_MESSAGE_BYTES=16384).
With DATABASE_URL set, a fresh database is created on that server instead of an embedded one.`;

const { values } = parseArgs({
  options: {
    messages: { type: 'string', default: '100000' },
    seed: { type: 'string' },
    connections: { type: 'string', default: '4' },
    batch: { type: 'string', default: '50' },
    settle: { type: 'string', default: '30' },
    keep: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const messages = Number(values.messages);
const seed = values.seed === undefined ? randomInt(0, 2 ** 31 - 1) : Number(values.seed);
const connections = Number(values.connections);
const batch = Number(values.batch);
const settle = Number(values.settle);
if (![messages, connections, batch].every((v) => Number.isInteger(v) && v > 0) || !Number.isInteger(seed) || !(settle >= 0)) {
  console.error(HELP);
  process.exit(2);
}
const say = (line: string) => console.error(line);

/** A fresh, empty database: on the DATABASE_URL server, or an embedded one in a temporary folder. */
async function freshDatabase(): Promise<{ url: string; dataDir?: string; db?: Database }> {
  const server = process.env.DATABASE_URL;
  if (server) {
    const name = `pgrelay_fuzz_${randomBytes(4).toString('hex')}`;
    await ensureDatabase(server, name);
    return { url: withDatabaseName(server, name) };
  }
  const dataDir = await mkdtemp(path.join(tmpdir(), 'pgrelay-fuzz-'));
  const db = await openDatabase(parseConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'silent', DB_POOL_SIZE: '2' }), createLogger('silent'));
  return { url: db.url, dataDir, db };
}

console.log(`${machineDescription()}; load average ${loadAverage().toFixed(1)}`);
console.log(`fuzz seed ${seed} (npm run fuzz -- --messages ${messages} --seed ${seed} --connections ${connections} --batch ${batch} reproduces the messages)`);
const store = await freshDatabase();
let relay: RelayProcess | undefined;
let exited = false;
let stopping = false;
try {
  // Its inspector (loopback) lets the fuzzer collect its garbage before measuring the heap.
  const inspector = await freePort();
  relay = await startRelayProcess({ DATABASE_URL: store.url, NODE_OPTIONS: inspectorOption(inspector) });
  relay.child.once('exit', (code, signal) => {
    exited = true;
    if (!stopping) say(`the relay process exited (code ${code}, signal ${signal})`);
  });
  const report = await runFuzz({
    relay: { url: relay.url, alive: () => !exited, logs: relay.logs, collectGarbage: () => collectGarbageAt(inspector) },
    messages,
    seed,
    connections,
    batch,
    settleMs: settle * 1000,
    wellBehavedBoundMs: 1000,
    progress: say,
  });
  console.log(formatReport(report));
  console.log(`load average now ${loadAverage().toFixed(1)}`);
  if (report.failures.length) process.exitCode = 1;
} finally {
  // Not once it has exited: stop() waits for an exit event that has already been (a relay killed by
  // a signal would leave this process waiting, and the database below running).
  stopping = true;
  if (relay && !exited) await relay.stop();
  await store.db?.close();
  if (store.dataDir && values.keep) say(`data directory kept: ${store.dataDir}`);
  else if (store.dataDir) await rm(store.dataDir, { recursive: true, force: true });
}
