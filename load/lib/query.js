// Shared by the two `query` scenarios (query.js reads with k6/ws, query-native.js with k6/x/nostr):
// the REQ mix, the settings, the k6 options and the metrics, so both measure the same thing.
import { SharedArray } from 'k6/data';
import { Counter, Trend } from 'k6/metrics';
import { SUMMARY_TREND_STATS, baseThresholds, envNumber } from './common.js';

/** [{shape, filters}]: filters is the REQ's filter list as JSON text without brackets. */
export const mix = new SharedArray('query mix', () => JSON.parse(open(__ENV.QUERY_MIX || '../data/query-mix.json')));

export const VUS = envNumber('VUS', 10);
export const DURATION = __ENV.DURATION || '30s';
/** Open loop (constant-arrival-rate, one connection per REQ) when set: REQs per second. */
export const RATE = envNumber('RATE', 0);
export const TIMEOUT_MS = envNumber('REQ_TIMEOUT_MS', 30000);
const SHAPES = (__ENV.SHAPES || '').split(',').filter(Boolean);

const eoseMs = new Trend('eose_ms', true);
const reqsDone = new Counter('reqs'); // its rate is the throughput (REQs answered with EOSE per second)
const reqEvents = new Counter('req_events');
const reqEventsPerReq = new Trend('req_events_per_req');

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

/** A REQ answered with EOSE: `ms` from REQ to EOSE, `events` the EVENTs before it. */
export function answered(ms, events, tags) {
  eoseMs.add(ms, tags);
  reqsDone.add(1, tags);
  reqEvents.add(events, tags);
  reqEventsPerReq.add(events, tags);
}
