// npm run bench:query: REQ latency through the real path (WebSocket → relay → PostgreSQL → EOSE) for
// every common filter shape, side by side with the JSONB `@>` baseline on the same data. See --help.
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import WebSocket from 'ws';
import { loadConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { parseFilter } from '../src/nostr/filter.js';
import { createPool, openDatabase } from '../src/store/database.js';
import { countToSql, readPrelude, reqToSql } from '../src/store/query.js';
import { needsPreparing, prepareSearch } from '../src/store/search.js';
import { baselineSql, createBaseline, dropBaseline } from './lib/jsonb-baseline.js';
import { loadManifest } from './lib/manifest.js';
import { startRelayProcess, waitForHotTier } from './lib/relay-process.js';
import { queryShapes, type Filter } from './lib/shapes.js';
import { ms, summarize, type Summary } from './lib/stats.js';

const HELP = `usage: npm run bench:query -- [options]

Runs each REQ shape against the relay over a WebSocket (the clock stops at EOSE) and, unless
--no-baseline, the same filters as JSONB @> SQL on a benchmark-only copy of the events (created and
dropped here). Needs a seeded database (npm run bench:seed) at DATABASE_URL or DATA_DIR.
NIP-50 shapes (search-*) have no @> baseline (JSONB containment cannot search words): '–' in the
table, and the baseline table is not built when only they run; their matching events are counted
once (the relay's COUNT SQL) for the "matches" column.

options:
  --iterations N           REQs per shape (default 50)
  --baseline-iterations N  baseline queries per shape (default 10)
  --no-baseline            skip the JSONB baseline
  --keep-baseline          keep the baseline table for another run
  --shapes a,b             only these shapes; a name ending in * is a prefix (--shapes 'search-*')
  --only-search            only the search-* shapes (same as --shapes 'search-*')
  --tier-mb N|auto|0       a second relay with the hot tier (HOT_TIER_MB) for a "tier on" column, filled
                           before timing; 0: no such column (default auto; the first relay runs with
                           HOT_TIER_MB=0, so "ours" is PostgreSQL's answer)
  --out DIR                output folder (default bench-out/query)`;

interface Row {
  shape: string;
  description: string;
  rows: number;
  ours: Summary;
  /** The same REQs to a relay with the hot tier, and how many of them memory answered. */
  tier?: Summary;
  tierFromMemory?: number;
  baseline?: Summary;
  baselineRows?: number;
  /** Search shapes: the events the representative filter matches before its limit. */
  matches?: number;
  /** REQs the relay ended with CLOSED (e.g. its statement timeout) instead of EOSE. */
  closed?: number;
  closedReason?: string;
}

const isSearchShape = (name: string) => name.startsWith('search-');

/** Shapes named by --shapes: exact names, or prefixes ending in `*`. */
function selectShapes<T extends { name: string; onlyWhenNamed?: boolean }>(all: T[], wanted: string[] | undefined): T[] {
  if (!wanted) return all.filter((s) => !s.onlyWhenNamed);
  const matches = (p: string, name: string) => (p.endsWith('*') ? name.startsWith(p.slice(0, -1)) : name === p);
  const unknown = wanted.filter((p) => !all.some((s) => matches(p, s.name)));
  if (unknown.length) throw new Error(`unknown shape ${unknown.join(', ')}; known: ${all.map((s) => s.name).join(', ')}`);
  return all.filter((s) => wanted.some((p) => matches(p, s.name)));
}

/** baseline ÷ ours: "×153", "×2.4", or "×0.31" when ours is slower. */
function speedup(baseline: number, ours: number): string {
  const r = baseline / ours;
  return '×' + (r >= 10 ? r.toFixed(0) : r >= 1 ? r.toFixed(1) : r.toFixed(2));
}

function connect(url: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

/**
 * Sends one REQ and resolves at EOSE with the elapsed milliseconds and the events received; at CLOSED
 * (e.g. the relay's statement timeout) with `closed`, the reason.
 */
function timedReq(ws: WebSocket, subId: string, filters: Filter[]): Promise<{ ms: number; events: number; closed?: string }> {
  return new Promise((resolve) => {
    let events = 0;
    const started = performance.now();
    const onMessage = (data: WebSocket.RawData) => {
      const text = data.toString();
      if (text.startsWith('["EVENT"')) events++;
      else if (text.startsWith('["EOSE"') || text.startsWith('["CLOSED"')) {
        const m = JSON.parse(text);
        if (m[1] !== subId) return;
        ws.off('message', onMessage);
        ws.send(JSON.stringify(['CLOSE', subId]));
        const elapsed = performance.now() - started;
        resolve(m[0] === 'CLOSED' ? { ms: elapsed, events, closed: String(m[2]) } : { ms: elapsed, events });
      }
    };
    ws.on('message', onMessage);
    ws.send(JSON.stringify(['REQ', subId, ...filters]));
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      iterations: { type: 'string', default: '50' },
      'baseline-iterations': { type: 'string', default: '10' },
      'no-baseline': { type: 'boolean', default: false },
      'keep-baseline': { type: 'boolean', default: false },
      shapes: { type: 'string' },
      'only-search': { type: 'boolean', default: false },
      'tier-mb': { type: 'string', default: 'auto' },
      out: { type: 'string', default: 'bench-out/query' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) return console.log(HELP);
  const iterations = Number(values.iterations);
  const baselineIterations = Number(values['baseline-iterations']);
  const outDir = path.resolve(values.out!);
  await mkdir(path.join(outDir, 'explain'), { recursive: true });

  const config = loadConfig();
  const log = createLogger('warn', 2);
  const relay = await startRelayProcess({ HOT_TIER_MB: '0' });
  const tierMb = values['tier-mb']!;
  const tierRelay = tierMb === '0' ? undefined : await startRelayProcess({ HOT_TIER_MB: tierMb });
  const db = await openDatabase(config, log, { migrate: false, ownEmbeddedServer: false });
  // Our SQL is EXPLAINed with the relay's own connection settings; the baseline is built and run with
  // PostgreSQL's defaults (parallel workers, JIT), as a JSONB relay would, and without a timeout.
  const pool = createPool(db.url, { DB_POOL_SIZE: 2, QUERY_TIMEOUT_MS: 3_600_000 }, log);
  const basePool = new pg.Pool({ connectionString: db.url, max: 2 });
  const say = (s: string) => console.error(s);
  try {
    const manifest = await loadManifest(pool);
    if (!manifest) throw new Error('no benchmark manifest in this database: run npm run bench:seed first');
    const { rows: countRows } = await pool.query('SELECT count(*)::bigint AS n FROM events');
    const eventCount = Number(countRows[0].n);
    say(`${eventCount} events; relay at ${relay.url}`);
    const wanted = values['only-search'] ? ['search-*'] : values.shapes?.split(',');
    const shapes = selectShapes(queryShapes(manifest), wanted);
    const ws = await connect(relay.url);
    let tierWs: WebSocket | undefined;
    if (tierRelay) {
      const filled = await waitForHotTier(tierRelay);
      if (filled) say(`hot tier filled: ${filled.events} events, ~${filled.megabytes} MB, window from ${filled.windowStart}, in ${filled.seconds} s`);
      tierWs = await connect(tierRelay.url);
    }
    const results: Row[] = [];
    // The @> baseline only serves shapes without search.
    const baseline = !values['no-baseline'] && shapes.some((s) => !isSearchShape(s.name));
    const loadBefore = os.loadavg();
    if (baseline) await createBaseline(basePool, say);

    for (const shape of shapes) {
      const samples: number[] = [];
      let rows = 0;
      let closed = 0;
      let closedReason: string | undefined;
      for (let i = 0; i < 3; i++) await timedReq(ws, 'warm', shape.filters()); // warm caches and the pool
      for (let i = 0; i < iterations; i++) {
        const r = await timedReq(ws, `q${i}`, shape.filters());
        samples.push(r.ms); // a CLOSED one counts with its time to CLOSED: a lower bound
        rows = Math.max(rows, r.events);
        if (r.closed !== undefined) (closed++, (closedReason ??= r.closed));
      }
      const row: Row = { shape: shape.name, description: shape.description, rows, ours: summarize(samples) };
      if (tierWs && tierRelay) {
        const fromMemory = async () => memoryAnswers(tierRelay.url);
        for (let i = 0; i < 3; i++) await timedReq(tierWs, 'warm', shape.filters());
        const before = await fromMemory();
        const tierSamples: number[] = [];
        for (let i = 0; i < iterations; i++) tierSamples.push((await timedReq(tierWs, `t${i}`, shape.filters())).ms);
        row.tier = summarize(tierSamples);
        row.tierFromMemory = (await fromMemory()) - before;
      }
      if (closed) Object.assign(row, { closed, closedReason });

      // EXPLAIN of our SQL and of the baseline, for one representative request.
      const filters = shape.filters();
      const parsed = filters.map((f) => {
        const p = parseFilter(f, { maxValuesPerArray: 10_000, defaultLimit: config.DEFAULT_LIMIT, maxLimit: config.MAX_LIMIT });
        if (!p.ok) throw new Error(`${shape.name}: ${p.reason}`);
        return p.value;
      });
      if (needsPreparing(parsed)) await prepareSearch(pool, parsed); // language:xx stems its words first
      const now = Math.floor(Date.now() / 1000);
      const prelude = await readPrelude(parsed, now, async (q) => (await pool.query(q.text, q.values)).rows[0]);
      const ours = reqToSql(parsed, now, prelude)!;
      const plan = await pool.query(`EXPLAIN (ANALYZE, BUFFERS) ${ours.text}`, ours.values);
      await writeFile(path.join(outDir, 'explain', `${shape.name}.ours.txt`), plan.rows.map((r) => r['QUERY PLAN']).join('\n') + '\n');
      if (parsed.some((f) => f.search)) {
        const count = countToSql(parsed, now);
        row.matches = count ? Number((await pool.query(count.text, count.values)).rows[0].count) : 0;
      }

      if (baseline && !isSearchShape(shape.name)) {
        const baseSamples: number[] = [];
        for (let i = 0; i < baselineIterations; i++) {
          const sql = baselineSql(shape.filters(), config.DEFAULT_LIMIT);
          const started = performance.now();
          const r = await basePool.query(sql.text, sql.values);
          baseSamples.push(performance.now() - started);
          row.baselineRows = Math.max(row.baselineRows ?? 0, r.rowCount ?? 0);
        }
        row.baseline = summarize(baseSamples);
        const sql = baselineSql(filters, config.DEFAULT_LIMIT);
        const basePlan = await basePool.query(`EXPLAIN (ANALYZE, BUFFERS) ${sql.text}`, sql.values);
        await writeFile(path.join(outDir, 'explain', `${shape.name}.baseline.txt`), basePlan.rows.map((r) => r['QUERY PLAN']).join('\n') + '\n');
      }
      results.push(row);
      const b = row.baseline;
      say(`${shape.name.padEnd(16)} rows ${String(rows).padStart(4)}${row.matches !== undefined ? ` of ${row.matches}` : ''}  ours p50 ${ms(row.ours.p50)} p95 ${ms(row.ours.p95)} p99 ${ms(row.ours.p99)} ms` +
        (row.tier ? `  |  tier p50 ${ms(row.tier.p50)} p95 ${ms(row.tier.p95)} ms (${row.tierFromMemory}/${iterations} from memory)` : '') +
        (b ? `  |  @> p50 ${ms(b.p50)} p95 ${ms(b.p95)} ms  (${speedup(b.p50, row.ours.p50)})` : '') +
        (closed ? `  |  ${closed}/${iterations} CLOSED: ${closedReason}` : ''));
    }
    ws.close();
    tierWs?.close();
    if (baseline && !values['keep-baseline']) await dropBaseline(basePool);
    const loadAfter = os.loadavg();
    const load = (l: number[]) => l.map((x) => x.toFixed(2)).join(', ');
    // A "matches" column when search shapes ran; a footnote for REQs that ended in CLOSED.
    const withMatches = results.some((r) => r.matches !== undefined);
    const withTier = results.some((r) => r.tier !== undefined);
    const matchesCell = (r: Row) => (withMatches ? ` ${r.matches ?? '–'} |` : '');
    const closedNotes = results.filter((r) => r.closed).map((r) => `${r.shape}: ${r.closed} of ${iterations} REQs ended in CLOSED (${r.closedReason}); their time to CLOSED is in the percentiles.`);

    const table = [
      `${eventCount.toLocaleString('en-US')} events · ${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'unknown CPU'}) · ${iterations} REQs per shape over one WebSocket, clock stops at EOSE; ` +
        (baseline ? `baseline: ${baselineIterations} runs of the same filters as JSONB @> SQL (GIN index), timed at the database` : 'no baseline'),
      '',
      `load average (1, 5, 15 min): ${load(loadBefore)} before, ${load(loadAfter)} after`,
      '',
      `| shape | rows |${withMatches ? ' matches |' : ''} ours p50 | ours p95 | ours p99 |${withTier ? ' tier on p50 | tier on p95 | from memory |' : ''} @> p50 | @> p95 | @> p99 | speed-up (p50) |`,
      `|---|---:|${withMatches ? '---:|' : ''}---:|---:|---:|${withTier ? '---:|---:|---:|' : ''}---:|---:|---:|---:|`,
      ...results.map((r) =>
        `| ${r.shape} | ${r.rows} |${matchesCell(r)} ${ms(r.ours.p50)} | ${ms(r.ours.p95)} | ${ms(r.ours.p99)} |${withTier ? ` ${ms(r.tier?.p50 ?? NaN)} | ${ms(r.tier?.p95 ?? NaN)} | ${r.tierFromMemory ?? '–'}/${iterations} |` : ''} ${ms(r.baseline?.p50 ?? NaN)} | ${ms(r.baseline?.p95 ?? NaN)} | ${ms(r.baseline?.p99 ?? NaN)} | ${r.baseline ? speedup(r.baseline.p50, r.ours.p50) : '–'} |`),
      '',
      'Times in milliseconds.' + (withMatches ? ' matches: events the search filter matches before its limit (search shapes only).' : ''),
      ...closedNotes.map((n) => `\n${n}`),
    ].join('\n');
    await writeFile(path.join(outDir, 'results.md'), table + '\n');
    await writeFile(path.join(outDir, 'results.json'), JSON.stringify({ events: eventCount, iterations, loadBefore, loadAfter, results }, null, 2));
    console.log(table);
    say(`\nwritten to ${outDir} (results.md, results.json, explain/)`);
  } finally {
    await pool.end();
    await basePool.end();
    await db.close();
    await tierRelay?.stop();
    await relay.stop();
  }
}

/** REQs the relay's hot tier answered from memory so far (its /metrics). */
async function memoryAnswers(relayUrl: string): Promise<number> {
  const text = await (await fetch(`${relayUrl.replace(/^ws/, 'http')}/metrics`)).text();
  return Number(/^pgrelay_hot_tier_reqs_total\{answered="memory"\} (\d+)$/m.exec(text)?.[1] ?? 0);
}

main().catch((err) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
