// k6 `connections` scenario: CONNECTIONS mostly idle WebSockets, each with SUBS_PER_CONN live
// subscriptions (notifications, DMs, a small follow list: `limit: 0`, random pubkeys, so nothing
// matches and no subscription touches the database), opened evenly over RAMP_MS and held for
// HOLD_MS. Reports connections opened, held to the end, failed and dropped; the runner samples the
// relay's RSS meanwhile (RSS per connection).
//
// Environment: RELAY_URL, CONNECTIONS (default 10000), CONNS_PER_VU (default 200), SUBS_PER_CONN
// (default 3), RAMP_MS (default 20000), HOLD_MS (default 30000), P95_MS (on connect_ms).
// Needs `ulimit -n` above CONNECTIONS for k6 and for the relay.
import { check } from 'k6';
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';
import { setTimeout } from 'k6/timers';
import { WebSocket } from 'k6/websockets';
import { RELAY_URL, SUMMARY_TREND_STATS, baseThresholds, envNumber, relayErrors, verbOf } from './lib/common.js';

const CONNECTIONS = envNumber('CONNECTIONS', 10000);
const CONNS_PER_VU = envNumber('CONNS_PER_VU', 200);
const SUBS_PER_CONN = envNumber('SUBS_PER_CONN', 3);
const RAMP_MS = envNumber('RAMP_MS', 20000);
const HOLD_MS = envNumber('HOLD_MS', 30000);

const connectMs = new Trend('connect_ms', true);
const eoseMs = new Trend('eose_ms', true);
const opened = new Counter('connections_opened');
const held = new Counter('connections_held');
const dropped = new Counter('connections_dropped');
const failed = new Counter('connections_failed');
const subscribed = new Counter('subscriptions_open');

export const options = {
  scenarios: {
    connections: {
      executor: 'per-vu-iterations',
      vus: Math.ceil(CONNECTIONS / CONNS_PER_VU),
      iterations: 1,
      maxDuration: `${Math.ceil((RAMP_MS + HOLD_MS) / 1000) + 120}s`,
    },
  },
  thresholds: { ...baseThresholds('connect_ms'), connections_failed: ['count==0'], connections_dropped: ['count==0'] },
  summaryTrendStats: SUMMARY_TREND_STATS,
};

export function setup() {
  return { t0: Date.now() + 1000 };
}

const hex64 = () => {
  let s = '';
  for (let i = 0; i < 64; i++) s += '0123456789abcdef'[Math.floor(Math.random() * 16)];
  return s;
};

/** A mostly idle client's subscriptions: its mentions, its DMs, its follows' notes. */
function subscriptions(n) {
  const me = hex64();
  const shapes = [
    { '#p': [me], kinds: [1, 6, 7, 9735], limit: 0 },
    { '#p': [me], kinds: [4], limit: 0 },
    { authors: Array.from({ length: 10 }, hex64), kinds: [1, 6], limit: 0 },
  ];
  return Array.from({ length: n }, (_, i) => ['REQ', `s${i}`, shapes[i % shapes.length]]);
}

export default function (data) {
  const first = exec.scenario.iterationInTest * CONNS_PER_VU;
  const count = Math.max(0, Math.min(CONNS_PER_VU, CONNECTIONS - first));
  const holdEnd = data.t0 + RAMP_MS + HOLD_MS;
  const sockets = [];
  for (let c = 0; c < count; c++) {
    const at = data.t0 + ((first + c) * RAMP_MS) / CONNECTIONS; // the whole test opens connections evenly
    setTimeout(() => {
      const started = Date.now();
      const ws = new WebSocket(RELAY_URL);
      const state = { ws, open: false, eose: 0 };
      sockets.push(state);
      ws.onerror = (e) => {
        if (!state.open) failed.add(1);
        relayErrors.add(1, { reason: 'ws-error' });
        console.error(`websocket error: ${e.error}`);
      };
      ws.onopen = () => {
        state.open = true;
        opened.add(1);
        connectMs.add(Date.now() - started);
        const sentAt = Date.now();
        for (const req of subscriptions(SUBS_PER_CONN)) ws.send(JSON.stringify(req));
        ws.onmessage = (e) => {
          const verb = verbOf(e.data);
          if (verb === 'EOSE') {
            eoseMs.add(Date.now() - sentAt);
            subscribed.add(1);
            state.eose++;
          } else {
            console.warn(e.data.slice(0, 200));
            relayErrors.add(1, { reason: verb.toLowerCase() });
          }
        };
      };
      ws.onclose = () => {
        if (state.open && Date.now() < holdEnd) {
          dropped.add(1);
          relayErrors.add(1, { reason: 'ws-close' });
        }
        state.open = false;
      };
    }, Math.max(0, at - Date.now()));
  }
  setTimeout(() => {
    for (const s of sockets) {
      const ok = s.open && s.eose === SUBS_PER_CONN;
      check(null, { 'connection held with its subscriptions': () => ok });
      if (ok) held.add(1);
      s.ws.onclose = null;
      s.ws.close();
    }
  }, Math.max(0, holdEnd - Date.now()));
}
