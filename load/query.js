// k6 `query` scenario: every VU holds one WebSocket and sends REQs drawn from a realistic mix
// (the query benchmark's shapes), timing each from REQ to EOSE. Closed loop by default: a VU sends
// its next REQ as soon as the last one ended, so latency ≈ VUs ÷ throughput (see
// docs/load-testing.md). With RATE set it is an open loop instead: constant-arrival-rate, one
// connection per request, and the clock still runs from REQ to EOSE.
//
// Run by `npm run load -- --scenario query`, which writes the mix; by hand:
//   k6 run -e RELAY_URL=ws://127.0.0.1:8008 -e QUERY_MIX=load/data/query-mix.json -e VUS=10 -e DURATION=30s load/query.js
// Environment: RELAY_URL, QUERY_MIX (JSON file: [{shape, filters}] where filters is the REQ's filter
// list as JSON text without brackets), VUS, DURATION, RATE (open loop, REQs/s), P95_MS,
// REQ_TIMEOUT_MS (default 30000), SHAPES (comma list, for per-shape summaries).
import { check } from 'k6';
import exec from 'k6/execution';
import { SharedArray } from 'k6/data';
import { Counter, Trend } from 'k6/metrics';
import { setTimeout, clearTimeout } from 'k6/timers';
import { WebSocket } from 'k6/websockets';
import { RELAY_URL, SUMMARY_TREND_STATS, baseThresholds, durationMs, envNumber, relayErrors, verbOf } from './lib/common.js';

const mix = new SharedArray('query mix', () => JSON.parse(open(__ENV.QUERY_MIX || './data/query-mix.json')));
const eoseMs = new Trend('eose_ms', true);
const reqsDone = new Counter('reqs'); // its rate is the throughput (REQs answered with EOSE per second)
const reqEvents = new Counter('req_events');
const reqEventsPerReq = new Trend('req_events_per_req');

const VUS = envNumber('VUS', 10);
const DURATION = __ENV.DURATION || '30s';
const RATE = envNumber('RATE', 0);
const TIMEOUT_MS = envNumber('REQ_TIMEOUT_MS', 30000);
const SHAPES = (__ENV.SHAPES || '').split(',').filter(Boolean);

const thresholds = baseThresholds('eose_ms');
// A threshold on each shape's sub-metric makes k6 report it in the summary (the runner's per-shape table).
for (const s of SHAPES) thresholds[`eose_ms{shape:${s}}`] = ['max>=0'];

export const options = {
  scenarios: {
    query: RATE > 0
      ? { executor: 'constant-arrival-rate', rate: RATE, timeUnit: '1s', duration: DURATION, preAllocatedVUs: VUS, maxVUs: VUS, gracefulStop: '30s' }
      : { executor: 'constant-vus', vus: VUS, duration: DURATION, gracefulStop: '60s' },
  },
  thresholds,
  summaryTrendStats: SUMMARY_TREND_STATS,
};

let counter = 0;

/**
 * Sends one REQ on an open socket and calls `done` at EOSE, CLOSED or timeout. The handler is
 * installed per request; an EVENT for another sub id cannot occur (one REQ in flight per socket).
 */
function timedReq(ws, done) {
  const entry = mix[Math.floor(Math.random() * mix.length)];
  const subId = `q${exec.vu.idInTest}-${counter++}`;
  const tags = { shape: entry.shape };
  let events = 0;
  let finished = false;
  const started = Date.now();
  const finish = (ok, reason) => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    if (ok) {
      eoseMs.add(Date.now() - started, tags);
      reqsDone.add(1, tags);
      reqEvents.add(events, tags);
      reqEventsPerReq.add(events, tags);
    } else relayErrors.add(1, { reason, shape: entry.shape });
    check(null, { 'REQ answered with EOSE': () => ok });
    if (ok || reason !== 'ws-close') ws.send(`["CLOSE","${subId}"]`);
    done();
  };
  const timer = setTimeout(() => finish(false, 'timeout'), TIMEOUT_MS);
  ws.onmessage = (e) => {
    const verb = verbOf(e.data);
    if (verb === 'EVENT') events++;
    else if (verb === 'EOSE') finish(true);
    else if (verb === 'CLOSED') {
      console.warn(`CLOSED ${entry.shape}: ${e.data.slice(0, 200)}`);
      finish(false, 'closed');
    } else if (verb === 'NOTICE') {
      console.warn(`NOTICE: ${e.data.slice(0, 200)}`);
      finish(false, 'notice');
    }
  };
  ws.onclose = () => finish(false, 'ws-close');
  ws.send(`["REQ","${subId}",${entry.filters}]`);
}

export default function () {
  const deadline = RATE > 0 ? 0 : exec.scenario.startTime + durationMs(DURATION);
  const ws = new WebSocket(RELAY_URL);
  ws.onerror = (e) => {
    relayErrors.add(1, { reason: 'ws-error' });
    console.error(`websocket error: ${e.error}`);
  };
  ws.onopen = () => {
    const next = () => {
      if (RATE > 0 || Date.now() >= deadline) {
        ws.onclose = null;
        ws.close();
        return;
      }
      timedReq(ws, next);
    };
    if (RATE > 0) timedReq(ws, next);
    else next();
  };
}
