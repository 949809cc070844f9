// npm run bench:failover: the relay through the loss of its PostgreSQL primary. A Patroni cluster on
// loopback (bench/lib/patroni-cluster.ts: etcd, three PostgreSQL 15 nodes, synchronous replication),
// two relay processes on its multi-host URL, steady signed publishing, a live subscriber on each
// relay and a REQ every 200 ms on each; then, in order, the scenarios: the primary's host killed, a
// planned switchover, the primary frozen for 30 s. Each is measured over its own window, from the
// fault until 60 s after it (for the freeze, until 30 s after it ends).
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { missingHaPeers, PATRONI_TIMING, startPatroniCluster, type PatroniCluster } from './lib/patroni-cluster.js';
import { Publisher, ReqProber, Subscriber } from './lib/failover-traffic.js';
import { startRelayProcess, type RelayProcess } from './lib/relay-process.js';
import { loadAverage, machineDescription } from './load/system.js';

const SCENARIOS = ['host-kill', 'switchover', 'freeze'] as const;
type Scenario = (typeof SCENARIOS)[number];

const HELP = `usage: npm run bench:failover -- [options]

Starts etcd and three Patroni nodes (PostgreSQL 15) on loopback, two relay processes on the
cluster's multi-host DATABASE_URL, publishers (signed events at --rate from --publishers
connections, each event sent again after a reconnect until it gets an OK), a live subscriber and a
REQ every 200 ms on each relay, then runs the scenarios in order:
  host-kill   SIGKILL of the primary's Patroni and PostgreSQL together (the node is started
              again afterwards and rejoins, so the next scenario has three nodes)
  switchover  a planned switchover through Patroni's REST API
  freeze      SIGSTOP of the primary's Patroni and PostgreSQL for --freeze-seconds
Needs etcd, Patroni and PostgreSQL 15 (npm run ha:install).

options:
  --scenario NAME     run only this one (host-kill, switchover, freeze)
  --rate N            events per second, all publishers together (default 50)
  --publishers N      publisher connections (default 4)
  --window-seconds N  measured window after the fault (default 60; for freeze, after it ends: half)
  --freeze-seconds N  how long the freeze lasts (default 30)
  --single-host       give the relays the single-host URL of the first primary instead of the
                      multi-host one (what a relay without multi-host support can use)
  --json              print the results as JSON on the last line`;

const { values } = parseArgs({
  options: {
    scenario: { type: 'string' },
    rate: { type: 'string', default: '50' },
    publishers: { type: 'string', default: '4' },
    'window-seconds': { type: 'string', default: '60' },
    'freeze-seconds': { type: 'string', default: '30' },
    'single-host': { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
if (values.scenario !== undefined && !SCENARIOS.includes(values.scenario as Scenario)) {
  console.error(`unknown scenario ${values.scenario}: one of ${SCENARIOS.join(', ')}`);
  process.exit(2);
}
const scenarios: Scenario[] = values.scenario ? [values.scenario as Scenario] : [...SCENARIOS];
const RATE = Number(values.rate);
const PUBLISHERS = Number(values.publishers);
const WINDOW_MS = Number(values['window-seconds']) * 1000;
const FREEZE_MS = Number(values['freeze-seconds']) * 1000;
/** Traffic before each fault, so every scenario starts from steady writes and a filled hot tier. */
const BASELINE_MS = 10_000;
/** After a window, time for REQs to time out and deliveries in flight to arrive before counting. */
const SETTLE_MS = 6_000;
const REQ_INTERVAL_MS = 200;

interface Result {
  scenario: Scenario;
  /** Seconds from the fault until Patroni reported a new primary. */
  failoverSeconds: number | null;
  acked: number;
  /** Events answered OK false in the window. */
  refused: number;
  lost: number;
  duplicates: number;
  writeGapSeconds: number;
  /** Whether an OK true came once the new primary was in place, within the window. */
  writesResumed: boolean;
  reqSuccessRate: number;
  reqs: number;
  longestReqOutageSeconds: number;
  missedDeliveries: number;
  /** Client reconnects during the scenario (publishers, subscribers), and relay error lines. */
  reconnects: number;
  relayErrors: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const round = (n: number, digits = 1) => Math.round(n * 10 ** digits) / 10 ** digits;

interface Traffic {
  relays: RelayProcess[];
  publishers: Publisher[];
  subscribers: Subscriber[];
  probers: ReqProber[];
}

/** Ids of `ids` present in the events table of the current primary. */
async function storedOnPrimary(cluster: PatroniCluster, ids: string[]): Promise<Set<string>> {
  const primary = await cluster.waitForPrimary();
  const client = new pg.Client({ connectionString: cluster.nodeUrl(primary), connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    const found = new Set<string>();
    for (let i = 0; i < ids.length; i += 5_000) {
      const chunk = ids.slice(i, i + 5_000).map((id) => Buffer.from(id, 'hex'));
      const { rows } = await client.query<{ id: string }>(`SELECT encode(id, 'hex') AS id FROM events WHERE id = ANY($1::bytea[])`, [chunk]);
      rows.forEach((r) => found.add(r.id));
    }
    return found;
  } finally {
    await client.end();
  }
}

/** The longest time between consecutive OK true in [from, to], counting from the last one before `from`, and up to `to` after the last. */
function longestWriteGap(ackTimes: number[], from: number, to: number): number {
  const sorted = ackTimes.filter((t) => t <= to).sort((a, b) => a - b);
  const before = sorted.filter((t) => t <= from);
  let previous = before.length ? before[before.length - 1] : from;
  let gap = 0;
  for (const t of sorted.filter((t) => t > from)) {
    gap = Math.max(gap, t - previous);
    previous = t;
  }
  return Math.max(gap, to - previous);
}

/** How many OK true arrived in each second of [from, to). */
function acksPerSecond(ackTimes: number[], from: number, to: number): number[] {
  const counts = new Array<number>(Math.ceil((to - from) / 1000)).fill(0);
  for (const t of ackTimes) if (t >= from && t < to) counts[Math.floor((t - from) / 1000)]++;
  return counts;
}

/** The most frequent OK false reasons, with their counts. */
function topReasons(reasons: string[], count = 2): string {
  const counts = new Map<string, number>();
  reasons.forEach((r) => counts.set(r, (counts.get(r) ?? 0) + 1));
  return [...counts].sort((a, b) => b[1] - a[1]).slice(0, count).map(([r, n]) => `${n}× ${JSON.stringify(r)}`).join(', ');
}

/** Per prober, the longest run of failed REQs: from the first failure's send to the next success's send (or `to`). */
function longestReqOutage(probers: ReqProber[], from: number, to: number): number {
  let longest = 0;
  for (const prober of probers) {
    let failingSince: number | undefined;
    for (const r of prober.reqs.filter((r) => r.sentAt >= from && r.sentAt <= to)) {
      if (r.ok) {
        if (failingSince !== undefined) longest = Math.max(longest, r.sentAt - failingSince);
        failingSince = undefined;
      } else failingSince ??= r.sentAt;
    }
    if (failingSince !== undefined) longest = Math.max(longest, to - failingSince);
  }
  return longest;
}

async function runScenario(scenario: Scenario, cluster: PatroniCluster, traffic: Traffic): Promise<Result> {
  const reconnectsBefore = reconnectCount(traffic);
  const errorsBefore = errorLines(traffic.relays);
  const start = Date.now();
  await sleep(BASELINE_MS);
  const old = await cluster.waitForPrimary();
  const faultAt = Date.now();
  let newPrimaryAt: number | undefined;
  let windowEnd = faultAt + WINDOW_MS;
  log(`${scenario}: primary ${old}`);
  try {
    if (scenario === 'host-kill') {
      await cluster.killHost(old);
      await cluster.waitForPrimary({ not: old, timeoutMs: WINDOW_MS });
      newPrimaryAt = Date.now();
    } else if (scenario === 'switchover') {
      await cluster.switchover();
      newPrimaryAt = Date.now();
    } else {
      windowEnd = faultAt + FREEZE_MS + WINDOW_MS / 2;
      const thawed = cluster.freeze(old, FREEZE_MS);
      const promoted = cluster.waitForPrimary({ not: old, timeoutMs: FREEZE_MS + WINDOW_MS / 2 }).then(() => (newPrimaryAt = Date.now()), () => undefined);
      await thawed;
      await promoted;
    }
  } catch (error) {
    log(`${scenario}: ${(error as Error).message.split('\n')[0]}`);
  }
  log(`${scenario}: ${newPrimaryAt ? `new primary ${await cluster.primary()} after ${round((newPrimaryAt - faultAt) / 1000)} s` : 'no new primary'}`);
  await sleep(Math.max(0, windowEnd - Date.now()) + SETTLE_MS);

  const records = traffic.publishers.flatMap((p) => [...p.records.entries()]);
  const inWindow = records.filter(([, r]) => r.ackedAt !== undefined && r.ackedAt >= start && r.ackedAt <= windowEnd);
  const ackedIds = inWindow.map(([id]) => id);
  const stored = await storedOnPrimary(cluster, ackedIds).catch((error) => {
    log(`${scenario}: could not read the primary (${(error as Error).message}); lost not counted`);
    return undefined;
  });
  const afterFailover = newPrimaryAt === undefined ? [] : inWindow.filter(([, r]) => r.ackedAt! >= newPrimaryAt!).map(([id]) => id);
  const deliveriesOf = (s: Subscriber, id: string) => s.deliveries.get(id) ?? [];
  const gapMs = longestWriteGap(records.flatMap(([, r]) => (r.ackedAt === undefined ? [] : [r.ackedAt])), faultAt, windowEnd);
  log(`${scenario}: OK true per second from the fault on: ${acksPerSecond(records.flatMap(([, r]) => (r.ackedAt === undefined ? [] : [r.ackedAt])), faultAt, windowEnd).join(' ')}`);
  const refused = records.filter(([, r]) => r.refused !== undefined && r.firstSentAt >= start && r.firstSentAt <= windowEnd).map(([, r]) => r.refused!);
  if (refused.length) log(`${scenario}: OK false: ${topReasons(refused)}`);
  const reqs = traffic.probers.flatMap((p) => p.reqs.filter((r) => r.sentAt >= faultAt && r.sentAt <= windowEnd));
  const failedReqs = reqs.filter((r) => !r.ok).map((r) => r.failure ?? 'unanswered');
  if (failedReqs.length) log(`${scenario}: failed REQs: ${topReasons(failedReqs)}`);
  const result: Result = {
    scenario,
    failoverSeconds: newPrimaryAt === undefined ? null : round((newPrimaryAt - faultAt) / 1000),
    acked: ackedIds.length,
    refused: refused.length,
    lost: stored ? ackedIds.filter((id) => !stored.has(id)).length : NaN,
    duplicates: traffic.subscribers.reduce((n, s) => n + ackedIds.filter((id) => deliveriesOf(s, id).filter((d) => d.live).length > 1).length, 0),
    writeGapSeconds: round(gapMs / 1000),
    writesResumed: afterFailover.length > 0,
    reqSuccessRate: reqs.length ? round(reqs.filter((r) => r.ok).length / reqs.length, 3) : NaN,
    reqs: reqs.length,
    longestReqOutageSeconds: round(longestReqOutage(traffic.probers, faultAt, windowEnd) / 1000),
    missedDeliveries: traffic.subscribers.reduce((n, s) => n + afterFailover.filter((id) => deliveriesOf(s, id).length === 0).length, 0),
    reconnects: reconnectCount(traffic) - reconnectsBefore,
    relayErrors: errorLines(traffic.relays) - errorsBefore,
  };

  // The next scenario starts from three healthy nodes.
  if (scenario === 'host-kill') await cluster.restart(old);
  await cluster.waitHealthy().catch((error) => log(`${scenario}: the cluster did not recover: ${(error as Error).message.split('\n')[0]}`));
  return result;
}

const reconnectCount = (t: Traffic) => [...t.publishers, ...t.subscribers].reduce((n, c) => n + c.reconnects, 0);
const errorLines = (relays: RelayProcess[]) => relays.reduce((n, r) => n + r.logs.filter((l) => Number(l.level) >= 50).length, 0);

const began = performance.now();
const log = (line: string) => console.error(`[${((performance.now() - began) / 1000).toFixed(1)} s] ${line}`);

function printTable(results: Result[]): void {
  const cell = (n: number | null) => (n === null || Number.isNaN(n) ? '–' : String(n));
  console.log('\n| scenario | new primary after s | acked | refused | lost | duplicates | write gap s | REQ success | longest REQ outage s | missed deliveries | reconnects | relay error lines |');
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of results) {
    const gap = `${r.writeGapSeconds}${r.writesResumed ? '' : ' (not resumed)'}`;
    const reqs = `${Number.isNaN(r.reqSuccessRate) ? '–' : `${round(r.reqSuccessRate * 100)} %`} of ${r.reqs}`;
    console.log(`| ${r.scenario} | ${cell(r.failoverSeconds)} | ${r.acked} | ${r.refused} | ${cell(r.lost)} | ${r.duplicates} | ${gap} | ${reqs} | ${r.longestReqOutageSeconds} | ${r.missedDeliveries} | ${r.reconnects} | ${r.relayErrors} |`);
  }
}

async function main(): Promise<void> {
  const missing = missingHaPeers();
  if (missing.length) {
    console.error(`bench:failover needs a Patroni cluster on this machine; missing:\n- ${missing.join('\n- ')}\nInstall them with: npm run ha:install`);
    process.exit(1);
  }
  console.log(`npm run bench:failover -- ${process.argv.slice(2).join(' ')}`.trim());
  console.log(`${machineDescription()}; load average ${loadAverage().toFixed(2)} at the start`);
  console.log(`Patroni: ttl ${PATRONI_TIMING.ttl} s, loop_wait ${PATRONI_TIMING.loop_wait} s, retry_timeout ${PATRONI_TIMING.retry_timeout} s, synchronous_mode on`);

  let cluster: PatroniCluster | undefined;
  const traffic: Traffic = { relays: [], publishers: [], subscribers: [], probers: [] };
  const stopAll = async () => {
    [...traffic.publishers, ...traffic.subscribers, ...traffic.probers].forEach((c) => c.stop());
    await Promise.all(traffic.relays.map((r) => r.stop()));
    await cluster?.stop();
  };
  process.once('SIGINT', () => void stopAll().finally(() => process.exit(130)));
  const results: Result[] = [];
  try {
    cluster = await startPatroniCluster();
    const first = await cluster.waitForPrimary();
    const url = values['single-host'] ? cluster.nodeUrl(first) : cluster.url;
    log(`cluster up, primary ${first}; relays on ${values['single-host'] ? `${first} only (single-host URL)` : 'the multi-host URL'}`);
    // One after the other: the first applies the migrations.
    for (let i = 0; i < 2; i++) {
      const relay = await startRelayProcess({ DATABASE_URL: url, HOT_TIER_SNAPSHOT: 'false' }, { echoErrors: false }).catch((error: Error) => {
        const hint = values['single-host'] ? '' : ' (a relay that does not take a multi-host DATABASE_URL yet: try --single-host)';
        throw new Error(`${error.message}${hint}`);
      });
      traffic.relays.push(relay);
    }
    const urls = traffic.relays.map((r) => r.url);
    for (let i = 0; i < PUBLISHERS; i++) traffic.publishers.push(new Publisher(urls[i % urls.length], (1000 * PUBLISHERS) / RATE, `p${i}`));
    const authors = traffic.publishers.map((p) => p.key.pubkey);
    traffic.subscribers.push(...urls.map((u) => new Subscriber(u, authors)));
    traffic.probers.push(...urls.map((u) => new ReqProber(u, () => authors, REQ_INTERVAL_MS)));
    while (!traffic.subscribers.every((s) => s.ready)) await sleep(50);
    log(`relays ${urls.join(', ')}; ${PUBLISHERS} publishers at ${RATE} events/s in all`);

    for (const scenario of scenarios) {
      const result = await runScenario(scenario, cluster, traffic);
      results.push(result);
      log(`${scenario}: ${JSON.stringify(result)}`);
    }
  } finally {
    await stopAll();
  }
  console.log(`load average ${loadAverage().toFixed(2)} at the end`);
  printTable(results);
  if (values.json) {
    const headline = results.find((r) => r.scenario === 'host-kill') ?? results[0];
    const { acked, lost, duplicates, writeGapSeconds, reqSuccessRate, missedDeliveries, scenario } = headline;
    console.log(JSON.stringify({ acked, lost, duplicates, writeGapSeconds, reqSuccessRate, missedDeliveries, scenario, scenarios: results }));
  }
}

await main();
