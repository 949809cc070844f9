// npm run bench:wot: computing the web of trust (WOT_ROOTS, store/web-of-trust.ts) over a large follow
// graph. Builds N pubkeys, each with one follow list (kind 3) of ~F pubkeys, into an embedded
// database of its own (written once through the importers' empty-store load, ops/nostream/
// empty-target-load.ts, and reused by later runs with the same options), then computes the web from
// one root at each depth: time, members, the heap and RSS the snapshot holds, and what PostgreSQL
// read (buffers, rows, temporary files) as pg_stat_database counts it. --recursive times a recursive
// CTE over the same graph beside it, the alternative store/web-of-trust.ts explains it does not use.
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type pg from 'pg';
import { parseConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import type { NostrEvent } from '../src/nostr/event.js';
import { KIND_CONTACTS } from '../src/nostr/kinds.js';
import { EventRows } from '../src/ops/bulk-load.js';
import { EmptyTargetLoad } from '../src/ops/nostream/empty-target-load.js';
import type { WebOfTrustSettings, WebSnapshot } from '../src/policy/web-of-trust.js';
import { createPool, openDatabase } from '../src/store/database.js';
import { prepareEvent } from '../src/store/prepared-event.js';
import { computeWebOfTrust } from '../src/store/web-of-trust.js';
import { loadAverage, machineDescription } from './load/system.js';
import { intBetween, prng, zipf } from './lib/random.js';

const HELP = `usage: npm run bench:wot -- [options]

Builds a follow graph (one kind 3 per pubkey, follows drawn from a power law: some pubkeys are
followed by many) in an embedded database of its own, then computes the web of trust from one root
at each depth, twice (the second run finds more of the tables in memory).

options:
  --pubkeys N        pubkeys, each with one follow list (default 100000)
  --follows N        mean follows per list, ±50 (default 300)
  --seed N           random seed (default 1)
  --depths LIST      depths to compute (default 1,2,3)
  --min-followers N  WOT_MIN_FOLLOWERS for a second series (default 3; 0: none)
  --recursive        also time a recursive CTE reaching the same pubkeys
  --data-dir DIR     the database's folder (default: one in the system's temporary folder named
                     after --pubkeys, --follows and --seed, reused when it holds that graph)`;

const { values } = parseArgs({
  options: {
    pubkeys: { type: 'string', default: '100000' },
    follows: { type: 'string', default: '300' },
    seed: { type: 'string', default: '1' },
    depths: { type: 'string', default: '1,2,3' },
    'min-followers': { type: 'string', default: '3' },
    recursive: { type: 'boolean', default: false },
    'data-dir': { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc (npm run bench:wot does)');

const n = Number(values.pubkeys);
const meanFollows = Number(values.follows);
const seed = Number(values.seed);
const depths = values.depths.split(',').map(Number);
const minFollowers = Number(values['min-followers']);
const dataDir = values['data-dir'] ?? path.join(tmpdir(), `pgrelay-wot-${n}x${meanFollows}-${seed}`);
const T0 = 1_700_000_000;

const hex32 = (text: string) => createHash('sha256').update(text).digest('hex');
const pubkeyOf = (i: number) => hex32(`wot-bench:${seed}:pubkey:${i}`);
/** The root: a pubkey of middling popularity (rank N/2), not the most followed one. */
const ROOT = Math.floor(n / 2);

/** Pubkey i's follow list, ~meanFollows distinct pubkeys drawn from a power law over popularity ranks. */
function followList(i: number, random: () => number, rank: () => number, pubkeys: string[]): NostrEvent {
  const wanted = intBetween(random, Math.max(1, meanFollows - 50), meanFollows + 50);
  const followed = new Set<number>();
  while (followed.size < Math.min(wanted, n - 1)) {
    const j = rank();
    if (j !== i) followed.add(j);
  }
  return {
    id: hex32(`wot-bench:${seed}:event:${i}`),
    pubkey: pubkeys[i],
    created_at: T0 + i,
    kind: KIND_CONTACTS,
    tags: [...followed].map((j) => ['p', pubkeys[j]]),
    content: '',
    sig: 'c'.repeat(128),
  };
}

async function seedGraph(pool: pg.Pool): Promise<void> {
  const started = performance.now();
  const pubkeys = Array.from({ length: n }, (_, i) => pubkeyOf(i));
  const random = prng(seed);
  const rank = zipf(n, 0.8, random);
  // In id order: the load keeps the primary keys while it copies, and appending to them is cheapest.
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => (hex32(`wot-bench:${seed}:event:${a}`) < hex32(`wot-bench:${seed}:event:${b}`) ? -1 : 1));
  const load = await EmptyTargetLoad.begin(pool);
  let tagRows = 0;
  try {
    for (let from = 0; from < n; from += 2000) {
      const rows = new EventRows(2000);
      for (const i of order.slice(from, from + 2000)) rows.add(prepareEvent(followList(i, random, rank, pubkeys)));
      const encoded = rows.finish();
      tagRows += encoded.tagRows;
      await load.write(encoded);
      if ((from / 2000) % 10 === 9) process.stderr.write(`seeded ${from + 2000} follow lists (${Math.round((performance.now() - started) / 1000)} s)\n`);
    }
    process.stderr.write('building the indexes…\n');
    await load.finish();
  } catch (err) {
    await load.abort();
    throw err;
  }
  await pool.query('VACUUM ANALYZE events');
  await pool.query('VACUUM ANALYZE event_tags');
  console.log(`seeded ${thousands(n)} follow lists, ${thousands(tagRows)} tag rows, in ${Math.round((performance.now() - started) / 1000)} s`);
}

interface Counters {
  hit: number;
  read: number;
  returned: number;
  fetched: number;
  tempBytes: number;
}

/** The database's counters, once this (only) connection has flushed its own (pg_stat_force_next_flush, PostgreSQL 15+). */
async function counters(pool: pg.Pool): Promise<Counters> {
  await pool.query('SELECT pg_stat_force_next_flush()');
  const { rows } = await pool.query(
    'SELECT blks_hit AS hit, blks_read AS read, tup_returned AS returned, tup_fetched AS fetched, temp_bytes AS "tempBytes" FROM pg_stat_database WHERE datname = current_database()',
  );
  return Object.fromEntries(Object.entries(rows[0]).map(([k, v]) => [k, Number(v)])) as unknown as Counters;
}

function heapAfterGc(): number {
  for (let i = 0; i < 3; i++) gc!();
  return process.memoryUsage().heapUsed;
}

const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MB`;
const thousands = (v: number) => v.toLocaleString('en-US');

/**
 * The same pubkeys as computeWebOfTrust without a threshold, as one recursive CTE. It decodes every
 * tag value unchecked (this corpus has only pubkeys), which favours it: the relay must check them.
 */
const RECURSIVE = `
  WITH RECURSIVE web (pubkey, hop) AS (
    SELECT decode(r, 'hex'), 0 FROM unnest($1::text[]) r
    UNION
    SELECT decode(t.value, 'hex'), w.hop + 1
      FROM web w
      JOIN events e ON e.pubkey = w.pubkey AND e.kind = 3 AND e.d_tag = ''
      JOIN event_tags t ON t.event_id = e.id AND t.name = 'p'
     WHERE w.hop < $2
  )
  SELECT count(DISTINCT pubkey)::int AS members FROM web`;

async function measure(pool: pg.Pool, settings: WebOfTrustSettings, label: string): Promise<void> {
  // Declared out here and emptied before each run: a variable of the loop's body would keep the
  // previous run's web alive in the suspended async frame while the next baseline is taken.
  let web: WebSnapshot | undefined;
  for (const run of ['first', 'second']) {
    web = undefined;
    const before = await counters(pool);
    const heap = heapAfterGc();
    const rss = process.memoryUsage().rss;
    const started = performance.now();
    web = await computeWebOfTrust(pool, settings);
    const ms = performance.now() - started;
    const after = await counters(pool);
    const held = heapAfterGc() - heap;
    console.log(
      `${label} ${run}: ${thousands(Math.round(ms))} ms, ${thousands(web.members.size)} members (${thousands(web.extending.size)} whose follows count); ` +
        `heap +${mb(held)}, RSS +${mb(process.memoryUsage().rss - rss)}; PostgreSQL: ${thousands(after.hit - before.hit)} buffers hit, ${thousands(after.read - before.read)} read, ` +
        `${thousands(after.returned - before.returned + after.fetched - before.fetched)} rows, temp ${mb(after.tempBytes - before.tempBytes)}`,
    );
    if (web.members.size === 0) throw new Error('empty web');
  }
}

async function main(): Promise<void> {
  const log = createLogger('warn', 2);
  const db = await openDatabase(parseConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'warn', DB_POOL_SIZE: '2' }), log);
  // One connection: the counters read are the computation's own (and those of the counting queries).
  const pool = createPool(db.url, { DB_POOL_SIZE: 1, QUERY_TIMEOUT_MS: 0 }, log);
  try {
    console.log(`${machineDescription()}; load average ${loadAverage().toFixed(1)}`);
    const stored = Number((await pool.query('SELECT count(*) FROM events WHERE kind = 3')).rows[0].count);
    if (stored === 0) await seedGraph(pool);
    else if (stored !== n) throw new Error(`${dataDir} holds ${stored} follow lists, not ${n}: remove it or pass another --data-dir`);
    else console.log(`reusing the ${thousands(n)} follow lists in ${dataDir}`);
    const { rows } = await pool.query("SELECT pg_size_pretty(pg_total_relation_size('event_tags')) AS tags, (SELECT count(*) FROM event_tags) AS rows");
    console.log(`event_tags: ${thousands(Number(rows[0].rows))} rows, ${rows[0].tags} with its indexes; root: pubkey #${ROOT} (${pubkeyOf(ROOT).slice(0, 12)}…)`);
    const roots = [pubkeyOf(ROOT)];
    for (const depth of depths) await measure(pool, { roots, depth, minFollowers: 0 }, `depth ${depth}`);
    if (minFollowers > 1) for (const depth of depths.filter((d) => d >= 2)) await measure(pool, { roots, depth, minFollowers }, `depth ${depth}, WOT_MIN_FOLLOWERS=${minFollowers}`);
    if (values.recursive)
      for (const depth of depths) {
        const started = performance.now();
        const result = await pool.query(RECURSIVE, [roots, depth]);
        console.log(`depth ${depth}, recursive CTE: ${thousands(Math.round(performance.now() - started))} ms, ${thousands(result.rows[0].members)} members`);
      }
  } finally {
    await pool.end();
    await db.close();
  }
}

main().catch((err) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
