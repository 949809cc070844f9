// npm run bench:sync -- --events N --diff P: NIP-77 sync (src/ops/sync.ts) between two relays, each a
// separate process on its own embedded PostgreSQL (DATA_DIR). Both databases get N events, the same
// ones but for P %: each side holds P/2 % of N that the other lacks. The sync runs from A's database
// (this process is the `sync` client) against B's URL in both directions, then once more, when both
// hold the same events (0 %). Reports reconciliation time, rounds and bytes, and the download/upload.
//
// Seeding: the events both sides share come from the seed corpus (bench/lib/corpus.ts, random
// signatures) and are COPYed into both databases; reconciliation reads only (created_at, id), and no
// shared event ever crosses the network, so none is verified. The differing events, the only ones
// downloaded (verified by our import path) and uploaded (verified by relay B), are really signed.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type pg from 'pg';
import * as secp from 'tiny-secp256k1';
import { parseConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { computeEventId, type NostrEvent } from '../src/nostr/event.js';
import { SignatureVerifier } from '../src/nostr/verifier.js';
import { copyRows, EventRows } from '../src/ops/bulk-load.js';
import { syncWithRelay, type SyncResult } from '../src/ops/sync.js';
import { policyFrom } from '../src/policy/policy.js';
import { openDatabase, type Database } from '../src/store/database.js';
import { prepareEvent } from '../src/store/prepared-event.js';
import { withTransaction } from '../src/store/write.js';
import { generateCorpus, type Manifest } from './lib/corpus.js';
import { prng } from './lib/random.js';
import { startRelayProcess, type RelayProcess } from './lib/relay-process.js';
import { loadAverage, machineDescription } from './load/system.js';

const HELP = `usage: npm run bench:sync -- [options]

options:
  --events N    events in each database (default 1000000)
  --diff P      percent of N that differs: each side holds P/2 % the other lacks (default 1)
  --days N      time span of the events (default 10: several events share a second)
  --batch N     events per seeding COPY transaction (default 10000)
  --remote-frame-size N
                relay B's NEGENTROPY_FRAME_SIZE_LIMIT (default 60000, the relay's default); its
                MAX_MESSAGE_BYTES is raised to fit frames that large, and ours follow (NIP-11)
  --keep        keep both data directories (printed) instead of removing them`;

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '1000000' },
    diff: { type: 'string', default: '1' },
    days: { type: 'string', default: '10' },
    batch: { type: 'string', default: '10000' },
    'remote-frame-size': { type: 'string' },
    keep: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const n = Number(values.events);
const diff = Number(values.diff);
const days = Number(values.days);
const batchSize = Number(values.batch);
const remoteFrameSize = values['remote-frame-size'] === undefined ? undefined : Number(values['remote-frame-size']);
if (!(Number.isInteger(n) && n > 0) || !(diff >= 0 && diff <= 100) || !(days > 0)) {
  console.error(HELP);
  process.exit(2);
}
const uniquePerSide = Math.round((n * diff) / 200);
const shared = n - uniquePerSide;
const end = Math.floor(Date.now() / 1000) - 3600; // in the past: the relays refuse events from the future
const start = end - days * 86_400;

const secs = (ms: number) => ms / 1000;
const log = createLogger('silent');

/** Really signed notes, spread at random over the corpus' time span: the events only one side holds. */
function signedNotes(count: number, seed: number): NostrEvent[] {
  const random = prng(seed);
  const keys = Array.from({ length: 50 }, (_, i) => {
    const secret = Buffer.alloc(32);
    secret.writeUInt32BE(seed * 1000 + i + 1, 28);
    return { secret, pubkey: Buffer.from(secp.xOnlyPointFromScalar(secret)).toString('hex') };
  });
  const aux = Buffer.alloc(32);
  return Array.from({ length: count }, (_, i) => {
    const key = keys[i % keys.length];
    const unsigned = {
      pubkey: key.pubkey,
      created_at: start + Math.floor(random() * (end - start)),
      kind: 1,
      tags: [['t', 'sync-bench']],
      content: `only on side ${seed}: note ${i} ${random().toString(36).slice(2)}`,
    };
    const id = computeEventId(unsigned);
    return { id, ...unsigned, sig: Buffer.from(secp.signSchnorr(Buffer.from(id, 'hex'), key.secret, aux)).toString('hex') };
  });
}

/** One COPY transaction of events (and their tag rows) into one database. */
async function copyBatch(pool: pg.Pool, events: NostrEvent[]): Promise<void> {
  const rows = new EventRows(events.length);
  for (const e of events) rows.add(prepareEvent(e));
  const encoded = rows.finish();
  await withTransaction(pool, (client) => copyRows(client, encoded));
}

async function openPool(dataDir: string): Promise<Database> {
  // No statement timeout: seeding and VACUUM on a busy machine take longer than a REQ may.
  const config = { ...parseConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'silent', DB_POOL_SIZE: '6' }), QUERY_TIMEOUT_MS: 0 };
  return openDatabase(config, log, { ownEmbeddedServer: false });
}

/** A fingerprint of a database's whole id set, to check that both hold exactly the same events. */
async function idSetDigest(pool: pg.Pool): Promise<{ count: number; digest: string }> {
  const { rows } = await pool.query<{ count: number; digest: string }>(
    `SELECT count(*)::int AS count, md5(string_agg(id, ''::bytea ORDER BY id)) AS digest FROM events`,
  );
  return rows[0];
}

const dirs = await Promise.all([mkdtemp(path.join(tmpdir(), 'pgrelay-sync-a-')), mkdtemp(path.join(tmpdir(), 'pgrelay-sync-b-'))]);
const relays: RelayProcess[] = [];
const dbs: Database[] = [];
const verifier = new SignatureVerifier('auto');
try {
  console.log(`${machineDescription()}; load average ${loadAverage().toFixed(1)}`);
  console.log(`${n.toLocaleString('en-US')} events on each side, ${diff} % differing: ${uniquePerSide.toLocaleString('en-US')} only on A, ${uniquePerSide.toLocaleString('en-US')} only on B`);
  const env = { NEGENTROPY_MAX_RECORDS: String(Math.max(1_000_000, 2 * n)), NEGENTROPY_MAX_TOTAL_RECORDS: String(Math.max(4_000_000, 4 * n)) };
  const remoteEnv: Record<string, string> = remoteFrameSize === undefined ? {} : {
    NEGENTROPY_FRAME_SIZE_LIMIT: String(remoteFrameSize),
    MAX_MESSAGE_BYTES: String(Math.max(131_072, 2 * remoteFrameSize + 1024)),
  };
  relays.push(...(await Promise.all(dirs.map((DATA_DIR, i) => startRelayProcess({ ...env, ...(i === 1 ? remoteEnv : {}), DATA_DIR })))));
  dbs.push(...(await Promise.all(dirs.map(openPool))));
  const [a, b] = dbs;

  let started = performance.now();
  const manifest: Manifest = { seed: 3, events: shared, authors: [], hashtags: [], popularNotes: [], articles: [], sampleIds: [], start: 0, end: 0 };
  const authors = Math.max(100, Math.min(100_000, Math.floor(shared / 10)));
  let batch: NostrEvent[] = [];
  let written = 0;
  let lastReport = started;
  const flush = async () => {
    await Promise.all(dbs.map((db) => copyBatch(db.pool, batch)));
    written += batch.length;
    batch = [];
    if (performance.now() - lastReport > 10_000) {
      lastReport = performance.now();
      console.error(`seeded ${written.toLocaleString('en-US')}/${shared.toLocaleString('en-US')} shared events into both (${Math.round(written / secs(lastReport - started))}/s)`);
    }
  };
  // Over a short span the corpus repeats an event now and then (the same reaction in the same second):
  // generate a few more than needed and skip repeats.
  const seen = new Set<string>();
  for (const e of generateCorpus({ events: Math.ceil(shared * 1.02) + 100, seed: 3, authors, days, end }, manifest)) {
    if (written + batch.length >= shared) break;
    if (seen.has(e.id)) continue;
    seen.add(e.id);
    batch.push(e);
    if (batch.length >= batchSize) await flush();
  }
  seen.clear();
  if (batch.length) await flush();
  const seedShared = secs(performance.now() - started);
  started = performance.now();
  const onlyA = signedNotes(uniquePerSide, 1);
  const onlyB = signedNotes(uniquePerSide, 2);
  const signing = secs(performance.now() - started);
  for (let i = 0; i < uniquePerSide; i += batchSize) {
    await Promise.all([copyBatch(a.pool, onlyA.slice(i, i + batchSize)), copyBatch(b.pool, onlyB.slice(i, i + batchSize))]);
  }
  started = performance.now();
  await Promise.all(dbs.map((db) => db.pool.query('VACUUM ANALYZE events')));
  await Promise.all(dbs.map((db) => db.pool.query('VACUUM ANALYZE event_tags')));
  console.log(
    `seeded: ${shared.toLocaleString('en-US')} shared events into both in ${seedShared.toFixed(1)} s; ` +
      `${(2 * uniquePerSide).toLocaleString('en-US')} signed in ${signing.toFixed(1)} s; VACUUM ANALYZE ${secs(performance.now() - started).toFixed(1)} s`,
  );

  const policy = policyFrom(parseConfig({ LOG_LEVEL: 'silent' }));
  const run = async (): Promise<{ result: SyncResult; wallSeconds: number; load: number }> => {
    const load = loadAverage();
    const t0 = performance.now();
    const result = await syncWithRelay(a.pool, { url: relays[1].url, direction: 'both', policy, verifier, timeoutMs: 300_000 });
    return { result, wallSeconds: secs(performance.now() - t0), load };
  };
  const first = await run();
  const [digestA, digestB] = await Promise.all([idSetDigest(a.pool), idSetDigest(b.pool)]);
  const second = await run();
  const same = digestA.count === digestB.count && digestA.digest === digestB.digest;
  console.log(`after the sync: A holds ${digestA.count.toLocaleString('en-US')} events, B ${digestB.count.toLocaleString('en-US')}; id sets ${same ? 'identical' : 'DIFFER'} (expected ${(n + uniquePerSide).toLocaleString('en-US')})`);

  const kib = (bytes: number) => (bytes < 10_240 ? `${bytes} B` : `${(bytes / 1024).toFixed(1)} KiB`);
  const row = (label: string, { result: r, wallSeconds, load }: Awaited<ReturnType<typeof run>>) => {
    const c = r.reconcile;
    const d = r.download;
    const u = r.upload;
    return [
      label,
      c.local.toLocaleString('en-US'),
      `${c.have.toLocaleString('en-US')} / ${c.need.toLocaleString('en-US')}`,
      String(c.rounds),
      `${kib(c.bytesSent)} / ${kib(c.bytesReceived)}`,
      c.readSeconds.toFixed(2),
      c.seconds.toFixed(2),
      d ? `${d.seconds.toFixed(2)} (${d.accepted} stored, ${d.rejected} rejected, ${d.missing} missing)` : '–',
      u ? `${u.seconds.toFixed(2)} (${u.accepted} accepted, ${u.refused} refused)` : '–',
      wallSeconds.toFixed(2),
      load.toFixed(1),
    ];
  };
  const table = [
    ['case', 'records (A)', 'have / need', 'rounds', 'sent / received', 'read A s', 'reconcile s', 'download s', 'upload s', 'total s', 'load'],
    row(`${diff} % differ`, first),
    row('0 % (again)', second),
  ];
  const widths = table[0].map((_, col) => Math.max(...table.map((r) => r[col].length)));
  console.log('');
  for (const [i, r] of table.entries()) {
    console.log(r.map((cell, col) => cell.padEnd(widths[col])).join('  '));
    if (i === 0) console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  }
  console.log(`\nour frame size limit ${first.result.reconcile.frameSizeLimit} (${first.result.reconcile.frameSizeFrom}); B answers in frames of at most ${remoteFrameSize ?? 60_000} bytes (NEGENTROPY_FRAME_SIZE_LIMIT)`);
  console.log(`load average now ${loadAverage().toFixed(1)}`);
  if (!same || !first.result.complete) process.exitCode = 1;
} finally {
  await verifier.close();
  await Promise.all(dbs.map((db) => db.close()));
  await Promise.all(relays.map((r) => r.stop()));
  if (values.keep) console.log(`data directories kept: ${dirs.join(' ')}`);
  else await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
}
