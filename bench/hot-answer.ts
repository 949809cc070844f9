// npm run bench:hot-answer: the hot tier's time to answer each REQ shape of the k6 query mix from
// memory, in one process, with no sockets, PostgreSQL or client around it: the part of a REQ's CPU
// that the tier's data structures decide. Reads the newest --events events of the seeded database
// (DATABASE_URL or DATA_DIR, as bench:seed), holds them in a HotTier (store/hot/tier.ts), and
// answers the mix's filters (load/data/query-mix.json, written by `npm run load -- --scenario
// query`) in rounds. With --compare DIR it holds the same events in a second tier from another
// build's dist/ (a git worktree of an earlier commit, built) in the same process, checks that both
// give the same answers, and alternates the two round by round: machines like the 2-core bench
// machine change speed from minute to minute and from one process start to the next, so builds
// compare best side by side in one process.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { parseFilter, type Filter } from '../src/nostr/filter.js';
import { packageRoot } from '../src/paths.js';
import { limitsFrom } from '../src/policy/limits.js';
import { createPool, openDatabase } from '../src/store/database.js';
import { readNewestFirst } from '../src/store/hot/fill.js';
import { loadAverage } from './load/system.js';

const HELP = `usage: npm run bench:hot-answer -- [options]   (needs a seeded database, see bench:seed)

options:
  --events N      at most this many events held (default: all the store's)
  --rounds N      rounds of the whole mix per build (default 6)
  --shapes LIST   the mix's shapes to answer (default seed-150p,feed-300,thread,profiles-100,global)
  --mix FILE      the REQ mix (default load/data/query-mix.json)
  --compare DIR   another build's root (its dist/ built), held and answered alongside this one`;

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: 'all' },
    rounds: { type: 'string', default: '6' },
    shapes: { type: 'string', default: 'seed-150p,feed-300,thread,profiles-100,global' },
    mix: { type: 'string', default: path.join(packageRoot(), 'load/data/query-mix.json') },
    compare: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}

interface Tier {
  answer(filter: Filter, now: number): Array<{ id: string }> | undefined;
  addOlder(page: unknown[], end: boolean): void;
  readonly size: number;
}
interface Build {
  name: string;
  tier: Tier;
  prepare: (raw: string) => unknown;
}

/** An empty tier of the build under `root` (its dist/src/store/hot/), and that build's prepareHeld. */
async function buildAt(name: string, root: string): Promise<Build> {
  const dist = (file: string) => import(pathToFileURL(path.join(root, 'dist/src/store/hot', file)).href);
  const { HotTier } = (await dist('tier.js')) as { HotTier: new (o: { budgetBytes: number }) => Tier };
  const { prepareHeld } = (await dist('fill.js')) as { prepareHeld: (raw: string) => unknown };
  return { name, tier: new HotTier({ budgetBytes: Infinity }), prepare: prepareHeld };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

async function main(): Promise<void> {
  const wanted = values.events === 'all' ? Infinity : Number(values.events);
  const shapes = values.shapes.split(',');
  const drawFirst = `draw it with \`npm run load -- --scenario query --shapes ${values.shapes} --data-dir …\` (the REQs of the k6 ladder)`;
  if (!existsSync(values.mix)) throw new Error(`no REQ mix at ${values.mix}: ${drawFirst}`);
  const mix = JSON.parse(readFileSync(values.mix, 'utf8')) as Array<{ shape: string; filters: string }>;
  const config = loadConfig();
  const limits = limitsFrom(config); // the relay's own: a filter without `limit` gets DEFAULT_LIMIT
  const byShape = new Map<string, Filter[]>(shapes.map((s) => [s, []]));
  for (const { shape, filters } of mix)
    for (const input of JSON.parse(`[${filters}]`) as unknown[]) {
      const parsed = parseFilter(input, limits);
      if (parsed.ok) byShape.get(shape)?.push(parsed.value);
    }
  for (const [shape, filters] of byShape) if (filters.length === 0) throw new Error(`no REQs of shape ${shape} in ${values.mix}: ${drawFirst}`);

  const log = createLogger('warn', 2);
  const db = await openDatabase(config, log, { ownEmbeddedServer: false });
  const pool = createPool(db.url, { DB_POOL_SIZE: 1, QUERY_TIMEOUT_MS: 0 }, log);
  const builds = [await buildAt('this build', packageRoot())];
  if (values.compare) builds.push(await buildAt(path.basename(values.compare), values.compare));
  // The builds hold each batch in turn, as the fill reads it: their events lie side by side in the
  // heap, and neither gets the better of where memory happens to be (a tier filled after another
  // answered 10-15 % faster than the same build's filled first).
  let held = 0;
  try {
    const end = await readNewestFirst(pool, (batch) => {
      const page = batch.slice(0, wanted - held);
      for (const b of builds) b.tier.addOlder(page.map(b.prepare), false);
      held += page.length;
      return held < wanted;
    });
    if (end) for (const b of builds) b.tier.addOlder([], true); // the whole store: every filter is answered from memory
  } finally {
    await pool.end();
    await db.close();
  }

  const now = Math.floor(Date.now() / 1000);
  let differ = 0;
  let fromMemory = 0;
  for (const filters of byShape.values())
    for (const f of filters) {
      const answers = builds.map((b) => b.tier.answer(f, now)?.map((r) => r.id).join());
      if (answers[0] !== undefined) fromMemory++;
      if (answers.some((a) => a !== answers[0])) differ++;
    }
  const load = loadAverage();
  const times = new Map<string, number[]>();
  const rounds = Number(values.rounds);
  for (let round = 0; round < rounds; round++) {
    for (const b of round % 2 ? [...builds].reverse() : builds) {
      for (const [shape, filters] of byShape) {
        const started = performance.now();
        for (const f of filters) b.tier.answer(f, now);
        const key = `${b.name}\t${shape}`;
        if (!times.has(key)) times.set(key, []);
        times.get(key)!.push(((performance.now() - started) * 1000) / filters.length);
      }
    }
  }
  console.log(`npm run bench:hot-answer -- --events ${values.events} --rounds ${rounds}${values.compare ? ` --compare ${values.compare}` : ''}   (load average ${load.toFixed(2)} at start, ${loadAverage().toFixed(2)} at end)`);
  console.log(`${builds[0]!.tier.size} events held; ${fromMemory} filters answered from memory${builds.length > 1 ? `, ${differ} with different answers in the two builds` : ''}`);
  console.log('');
  console.log(`| shape | REQs | ${builds.map((b) => `${b.name}: µs per answer, median (range)`).join(' | ')} |`);
  console.log(`|---|---:|${builds.map(() => '---:').join('|')}|`);
  for (const [shape, filters] of byShape) {
    const cells = builds.map((b) => {
      const xs = times.get(`${b.name}\t${shape}`)!;
      return `${median(xs).toFixed(0)} (${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)})`;
    });
    console.log(`| ${shape} | ${filters.length} | ${cells.join(' | ')} |`);
  }
  if (differ > 0) process.exitCode = 1;
}

main().catch((err) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
