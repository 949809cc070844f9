// k6 `publish` scenario: every VU holds one WebSocket and publishes pre-signed events (k6 cannot
// sign BIP-340: `npm run load` signs and caches them), timing each EVENT → OK. Closed loop: the
// next EVENT goes out when the last OK arrived. With RATE set: open loop, constant-arrival-rate,
// one connection per event.
//
// Environment: RELAY_URL, EVENTS_FILE (JSON array of complete ["EVENT",{"id":…}] messages, id
// first), START (first index to use, so ladder steps never resend an event), VUS, DURATION, RATE,
// P95_MS, OK_TIMEOUT_MS (default 30000).
import { check } from 'k6';
import exec from 'k6/execution';
import { SharedArray } from 'k6/data';
import { Counter, Gauge, Trend } from 'k6/metrics';
import { setTimeout, clearTimeout } from 'k6/timers';
import { WebSocket } from 'k6/websockets';
import { RELAY_URL, SUMMARY_TREND_STATS, baseThresholds, durationMs, envNumber, relayErrors, verbOf } from './lib/common.js';

const events = new SharedArray('signed events', () => JSON.parse(open(__ENV.EVENTS_FILE || './data/publish-events.json')));
const okMs = new Trend('ok_ms', true);
const accepted = new Counter('events_accepted');
const duplicates = new Counter('events_duplicate');
const reused = new Counter('events_reused');
// The highest index used, so the runner starts the next step after it.
const lastIndex = new Gauge('event_index');

const VUS = envNumber('VUS', 10);
const DURATION = __ENV.DURATION || '30s';
const RATE = envNumber('RATE', 0);
const START = envNumber('START', 0);
const TIMEOUT_MS = envNumber('OK_TIMEOUT_MS', 30000);

export const options = {
  scenarios: {
    publish: RATE > 0
      ? { executor: 'constant-arrival-rate', rate: RATE, timeUnit: '1s', duration: DURATION, preAllocatedVUs: VUS, maxVUs: VUS, gracefulStop: '30s' }
      : { executor: 'constant-vus', vus: VUS, duration: DURATION, gracefulStop: '60s' },
  },
  thresholds: baseThresholds('ok_ms'),
  summaryTrendStats: SUMMARY_TREND_STATS,
};

/** Sends event `index` and calls `done` when its OK (or a failure) arrived. */
function publishOne(ws, index, done) {
  if (index >= events.length) reused.add(1); // out of fresh events: the relay will answer "duplicate:"
  const message = events[index % events.length];
  const id = message.slice(16, 80); // ["EVENT",{"id":"<64 hex>"
  lastIndex.add(index);
  let finished = false;
  const started = Date.now();
  const finish = (ok, reason) => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    if (ok) okMs.add(Date.now() - started);
    else relayErrors.add(1, { reason });
    check(null, { 'EVENT answered with OK true': () => ok });
    done();
  };
  const timer = setTimeout(() => finish(false, 'timeout'), TIMEOUT_MS);
  ws.onmessage = (e) => {
    const verb = verbOf(e.data);
    if (verb === 'OK') {
      const [, okId, ok, reason] = JSON.parse(e.data);
      if (okId !== id) return;
      if (ok && reason.startsWith('duplicate:')) duplicates.add(1);
      else if (ok) accepted.add(1);
      else console.warn(`OK false: ${reason}`);
      finish(ok, 'ok-false');
    } else if (verb === 'NOTICE') {
      console.warn(`NOTICE: ${e.data.slice(0, 200)}`);
      finish(false, 'notice');
    }
  };
  ws.onclose = () => finish(false, 'ws-close');
  ws.send(message);
}

export default function () {
  const ws = new WebSocket(RELAY_URL);
  ws.onerror = (e) => {
    relayErrors.add(1, { reason: 'ws-error' });
    console.error(`websocket error: ${e.error}`);
  };
  const end = () => {
    ws.onclose = null;
    ws.close();
  };
  if (RATE > 0) {
    ws.onopen = () => publishOne(ws, START + exec.scenario.iterationInTest, end);
    return;
  }
  // Closed loop: VU k sends events START + k-1, START + k-1 + VUS, … so no two VUs share one.
  const deadline = exec.scenario.startTime + durationMs(DURATION);
  let n = 0;
  const next = () => {
    if (Date.now() >= deadline) return end();
    publishOne(ws, START + exec.vu.idInTest - 1 + VUS * n++, next);
  };
  ws.onopen = next;
}
