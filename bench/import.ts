// npm run bench:import -- --file events.jsonl [--strfry PATH]: `import` of a JSONL file into a fresh
// embedded PostgreSQL, as an operator runs it (the CLI in a process of its own, signatures verified
// unless --no-verify), and strfry's `import` of the same file into a fresh LMDB database beside it.
// Each run reports events/s and where the CPU went: the import's main thread, its other threads
// (the verifier's, libuv's, the garbage collector's), PostgreSQL's processes. Make the file with
// `node dist/bench/signed-events.js --events 1000000 > events.jsonl` (really signed events).
import { spawn } from 'node:child_process';
import { createReadStream, existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type pg from 'pg';
import { parseConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { packageRoot } from '../src/paths.js';
import { openDatabase } from '../src/store/database.js';
import { cpuSeconds, cpuTracker, loadAverage, machineDescription, mainThreadCpuSeconds, postgresPids } from './load/system.js';

const HELP = `usage: npm run bench:import -- --file events.jsonl [options]

options:
  --file F          the JSONL file to import (required)
  --runs N          runs of each (default 1), alternating
  --relays LIST     pgrelay and/or strfry (default pgrelay,strfry)
  --no-verify       both without signature checks (pgrelay --no-verify, strfry --no-verify)
  --pgrelay DIR     the pgrelay checkout whose build runs the import (default this one), to compare builds
  --strfry PATH     strfry binary (default $STRFRY_BIN, else strfry on PATH, else load/bin/strfry)
  --node-flags S    extra flags for the import's node process, e.g. "--cpu-prof --cpu-prof-dir=prof"`;

const { values } = parseArgs({
  options: {
    file: { type: 'string' },
    runs: { type: 'string', default: '1' },
    relays: { type: 'string', default: 'pgrelay,strfry' },
    'no-verify': { type: 'boolean', default: false },
    pgrelay: { type: 'string' },
    strfry: { type: 'string' },
    'node-flags': { type: 'string', default: '' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help || !values.file) {
  console.log(HELP);
  process.exit(values.help ? 0 : 2);
}
const file = path.resolve(values.file);
const relays = values.relays.split(',');
const verify = !values['no-verify'];
const pgrelayRoot = path.resolve(values.pgrelay ?? packageRoot());
const log = createLogger('silent');
const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

function findStrfry(): string {
  const bin = values.strfry ?? process.env.STRFRY_BIN;
  if (bin) return bin;
  for (const dir of (process.env.PATH ?? '').split(':')) if (dir && existsSync(path.join(dir, 'strfry'))) return path.join(dir, 'strfry');
  const installed = path.join(packageRoot(), 'load', 'bin', 'strfry');
  if (existsSync(installed)) return installed;
  throw new Error('strfry not found: give --strfry PATH, set STRFRY_BIN, or unpack a build with npm run interop:install-strfry');
}

interface Run {
  relay: string;
  events: number;
  seconds: number;
  /** CPU seconds by part, in the order of `parts`. */
  cpu: number[];
  parts: string[];
  load: [number, number];
  note?: string;
}

/** WAL written and checkpoints so far, server-wide (the server is this run's alone). */
async function walStats(pool: pg.Pool): Promise<{ bytes: number; fpi: number; checkpoints: number }> {
  const { rows } = await pool.query<{ bytes: string; fpi: string; checkpoints: string }>(
    `SELECT w.wal_bytes::text AS bytes, w.wal_fpi::text AS fpi, (c.num_timed + c.num_requested)::text AS checkpoints FROM pg_stat_wal w, pg_stat_checkpointer c`,
  );
  return { bytes: Number(rows[0].bytes), fpi: Number(rows[0].fpi), checkpoints: Number(rows[0].checkpoints) };
}

/** Runs a child to its end, sampling `sample` every 100 ms meanwhile; resolves with its stdout and stderr. */
function runChild(command: string, args: string[], options: { env?: NodeJS.ProcessEnv; stdin?: string }, sample: (pid: number) => void) {
  const child = spawn(command, args, { env: options.env ?? process.env, stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
  if (options.stdin) createReadStream(options.stdin).pipe(child.stdin!);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr!.on('data', (b: Buffer) => (stderr = (stderr + b.toString()).slice(-8000)));
  const timer = setInterval(() => sample(child.pid!), 100);
  return new Promise<{ stdout: string; stderr: string }>((resolve, reject) => {
    child.once('exit', (code) => {
      clearInterval(timer);
      if (code === 0) resolve({ stdout, stderr });
      else reject(new Error(`${path.basename(command)} exited with ${code}: ${stderr.slice(-2000)}`));
    });
  });
}

async function pgrelayRun(): Promise<Run> {
  const dir = await mkdtemp(path.join(tmpdir(), 'pgrelay-import-bench-'));
  await chmod(dir, 0o755); // the embedded server runs as postgres when we are root
  try {
    const DATA_DIR = path.join(dir, 'data');
    // The server started (and migrated) here, so the import joins it and its start-up is not timed.
    const db = await openDatabase(parseConfig({ DATA_DIR, LOG_LEVEL: 'silent', DB_POOL_SIZE: '2' }), log);
    try {
      await db.pool.query('CHECKPOINT');
      const wal0 = await walStats(db.pool);
      const postgres = cpuTracker(() => postgresPids(DATA_DIR));
      let main = 0;
      let all = 0;
      const load0 = loadAverage();
      const nodeFlags = values['node-flags'].split(' ').filter(Boolean);
      const args = [...nodeFlags, path.join(pgrelayRoot, 'dist/src/cli/main.js'), 'import', ...(verify ? [] : ['--no-verify']), file];
      const { stdout } = await runChild(process.execPath, args, { env: { ...process.env, DATA_DIR, LOG_LEVEL: 'warn' } }, (pid) => {
        main = mainThreadCpuSeconds(pid) ?? main;
        all = cpuSeconds(pid) ?? all;
        postgres.sample();
      });
      const m = /lines:\s+([\d,]+) lines in ([\d.]+) s/.exec(stdout);
      const accepted = /accepted:\s+([\d,]+)/.exec(stdout);
      if (!m || !accepted) throw new Error(`unexpected output: ${stdout}`);
      const wal1 = await walStats(db.pool);
      const stored = (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0].n;
      if (stored !== Number(accepted[1].replaceAll(',', ''))) throw new Error(`${accepted[1]} accepted but ${stored} stored`);
      return {
        relay: 'pgrelay',
        events: stored,
        seconds: Number(m[2]),
        cpu: [main, all - main, postgres.seconds() ?? 0],
        parts: ['main thread', 'other threads', 'PostgreSQL'],
        load: [load0, loadAverage()],
        note: `WAL ${fmt((wal1.bytes - wal0.bytes) / 2 ** 20)} MiB (${fmt(wal1.fpi - wal0.fpi)} full-page images), ${wal1.checkpoints - wal0.checkpoints} checkpoints`,
      };
    } finally {
      await db.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function strfryRun(): Promise<Run> {
  const bin = findStrfry();
  const dir = await mkdtemp(path.join(tmpdir(), 'strfry-import-bench-'));
  try {
    await mkdir(path.join(dir, 'db'));
    const conf = path.join(dir, 'strfry.conf');
    await writeFile(conf, `db = "${path.join(dir, 'db')}/"\nrelay {\n  bind = "127.0.0.1"\n  port = 0\n  nofiles = 0\n}\n`);
    let main = 0;
    let all = 0;
    const load0 = loadAverage();
    const started = performance.now();
    const { stderr } = await runChild(bin, [`--config=${conf}`, 'import', ...(verify ? [] : ['--no-verify'])], { stdin: file }, (pid) => {
      main = mainThreadCpuSeconds(pid) ?? main;
      all = cpuSeconds(pid) ?? all;
    });
    const seconds = (performance.now() - started) / 1000;
    const m = /Done\. Processed \d+ lines\. (\d+) added/.exec(stderr);
    if (!m) throw new Error(`unexpected output: ${stderr.slice(-2000)}`);
    const events = Number(m[1]);
    return { relay: 'strfry', events, seconds, cpu: [main, all - main], parts: ['main thread', 'other threads'], load: [load0, loadAverage()] };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

console.log(`${machineDescription()}; load average ${loadAverage().toFixed(1)}`);
console.log(`${file}, signatures ${verify ? 'verified' : 'not verified'}; pgrelay from ${pgrelayRoot}`);
const runs = Number(values.runs);
for (let i = 0; i < runs; i++) {
  for (const relay of relays) {
    const r = relay === 'strfry' ? await strfryRun() : await pgrelayRun();
    const cpu = r.parts.map((p, j) => `${p} ${r.cpu[j].toFixed(1)}`).join(', ');
    console.log(
      `${r.relay.padEnd(7)}  ${fmt(r.events)} events in ${r.seconds.toFixed(1)} s: ${fmt(r.events / r.seconds)}/s; CPU s: ${cpu}; load ${r.load[0].toFixed(1)} → ${r.load[1].toFixed(1)}${r.note ? `; ${r.note}` : ''}`,
    );
  }
}
