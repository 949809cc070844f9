// k6 `fanout` scenario: SUBSCRIBERS connections each hold a live subscription (plus EXTRA_SUBS
// subscriptions that never match) while one publisher sends events on a fixed schedule; the metric
// is delivery latency, publish → EVENT at each subscriber.
//
// k6 VUs share no memory, so the publisher cannot tell subscribers when it sent an event. Instead
// setup() fixes T0 (after the subscribers have had WARMUP_MS to connect), every event carries its
// planned send offset in its content ("fanout <seq> <offset ms> …"), the publisher sends each at
// T0 + offset, and a subscriber measures arrival − (T0 + offset). The publisher's own lateness is
// recorded as publish_lag_ms and is included in delivery_ms, so delivery_ms is an upper bound.
//
// Scale-out: with RELAY_URLS (comma-separated relays on one database) subscriber connection i uses
// url[i % n] and the publisher url[0]; delivery_ms is then also split into delivery_same_ms (the
// publisher's relay) and delivery_other_ms (the others), with deliveries_missed_same/_other. (By
// relay, not by process: k6/websockets does not show the handshake response, so not which
// cluster worker took a connection.)
//
// Environment: RELAY_URL or RELAY_URLS, EVENTS_FILE (from `npm run load`, signed events tagged
// RUN_TAG), RUN_TAG, SUBSCRIBERS (default 1000), CONNS_PER_VU (default 20), EXTRA_SUBS (default 2),
// WARMUP_MS (default 15000), DRAIN_MS (default 5000), P95_MS.
import { check } from 'k6';
import exec from 'k6/execution';
import { SharedArray } from 'k6/data';
import { Counter, Gauge, Trend } from 'k6/metrics';
import { setTimeout } from 'k6/timers';
import { WebSocket } from 'k6/websockets';
import { RELAY_URL, SUMMARY_TREND_STATS, baseThresholds, envNumber, relayErrors, verbOf } from './lib/common.js';

const events = new SharedArray('fanout events', () => JSON.parse(open(__ENV.EVENTS_FILE || './data/fanout-events.json')));
const RELAY_URLS = (__ENV.RELAY_URLS || RELAY_URL).split(',');
const SPLIT = RELAY_URLS.length > 1;
const deliveryMs = new Trend('delivery_ms', true);
// Only with several relays: every k6 sample costs, at 10,000+ deliveries/s.
const deliveryByRelay = SPLIT ? { same: new Trend('delivery_same_ms', true), other: new Trend('delivery_other_ms', true) } : undefined;
const missedByRelay = SPLIT ? { same: new Counter('deliveries_missed_same'), other: new Counter('deliveries_missed_other') } : undefined;
const publishLagMs = new Trend('publish_lag_ms', true);
const okMs = new Trend('ok_ms', true);
const missed = new Counter('deliveries_missed');
const ready = new Counter('subscribers_ready');
// How long events were sent for: the runner's deliveries/s is delivery_ms samples ÷ this, not ÷ the
// whole run. (No separate delivery counter: every k6 sample costs, at 10,000+ deliveries/s.)
const sendWindow = new Gauge('send_window_s');

const RUN_TAG = __ENV.RUN_TAG || 'pgrelay-load';
const SUBSCRIBERS = envNumber('SUBSCRIBERS', 1000);
const CONNS_PER_VU = envNumber('CONNS_PER_VU', 20);
const EXTRA_SUBS = envNumber('EXTRA_SUBS', 2);
const WARMUP_MS = envNumber('WARMUP_MS', 15000);
const DRAIN_MS = envNumber('DRAIN_MS', 5000);
const SUB_VUS = Math.ceil(SUBSCRIBERS / CONNS_PER_VU);

/** The planned offset of an event, from its content "fanout <seq> <offset> …". */
function offsetOf(text) {
  const at = text.indexOf('"content":"fanout ') + 18;
  const rest = text.slice(at, at + 40).split(' ');
  return { seq: Number(rest[0]), offset: Number(rest[1]) };
}
const LAST_OFFSET = offsetOf(events[events.length - 1]).offset;
const maxDuration = `${Math.ceil((WARMUP_MS + LAST_OFFSET + DRAIN_MS) / 1000) + 60}s`;

export const options = {
  scenarios: {
    subscribers: { executor: 'per-vu-iterations', exec: 'subscriber', vus: SUB_VUS, iterations: 1, maxDuration },
    publisher: { executor: 'per-vu-iterations', exec: 'publisher', vus: 1, iterations: 1, maxDuration },
  },
  thresholds: baseThresholds('delivery_ms'),
  summaryTrendStats: SUMMARY_TREND_STATS,
};

export function setup() {
  return { t0: Date.now() + WARMUP_MS };
}

const hex64 = () => {
  let s = '';
  for (let i = 0; i < 64; i++) s += '0123456789abcdef'[Math.floor(Math.random() * 16)];
  return s;
};

export function subscriber(data) {
  // One iteration per VU: the scenario's iteration number says which block of connections is ours.
  const first = exec.scenario.iterationInTest * CONNS_PER_VU;
  const count = Math.max(0, Math.min(CONNS_PER_VU, SUBSCRIBERS - first));
  const end = data.t0 + LAST_OFFSET + DRAIN_MS;
  const sockets = [];
  for (let c = 0; c < count; c++) {
    // Spread this VU's connections over the first half of the warm-up.
    const index = first + c;
    const relay = index % RELAY_URLS.length === 0 ? 'same' : 'other';
    setTimeout(() => {
      const ws = new WebSocket(RELAY_URLS[index % RELAY_URLS.length]);
      let received = 0;
      ws.onerror = (e) => {
        relayErrors.add(1, { reason: 'ws-error' });
        console.error(`websocket error: ${e.error}`);
      };
      ws.onopen = () => {
        for (let s = 0; s < EXTRA_SUBS; s++)
          ws.send(JSON.stringify(['REQ', `idle${s}`, s % 2 ? { '#p': [hex64()], limit: 0 } : { kinds: [1], authors: [hex64()], limit: 0 }]));
        ws.send(JSON.stringify(['REQ', 'live', { kinds: [1], '#t': [RUN_TAG], limit: 0 }]));
      };
      ws.onmessage = (e) => {
        const verb = verbOf(e.data);
        if (verb === 'EVENT') {
          const now = Date.now();
          if (!e.data.startsWith('["EVENT","live"')) return relayErrors.add(1, { reason: 'wrong-sub' });
          const latency = now - (data.t0 + offsetOf(e.data).offset);
          deliveryMs.add(latency);
          if (deliveryByRelay) deliveryByRelay[relay].add(latency);
          received++;
        } else if (verb === 'EOSE') {
          if (!e.data.startsWith('["EOSE","live"')) return;
          const inTime = Date.now() < data.t0;
          check(null, { 'subscribed before the first event': () => inTime });
          if (inTime) ready.add(1);
        } else if (verb === 'CLOSED' || verb === 'NOTICE') {
          console.warn(e.data.slice(0, 200));
          relayErrors.add(1, { reason: verb.toLowerCase() });
        }
      };
      ws.onclose = () => {
        if (Date.now() < end) relayErrors.add(1, { reason: 'ws-close' });
      };
      sockets.push({ ws, relay, received: () => received });
    }, (c * WARMUP_MS) / 2 / Math.max(1, count));
  }
  setTimeout(() => {
    for (const s of sockets) {
      const lost = events.length - s.received();
      if (lost > 0) {
        missed.add(lost);
        if (missedByRelay) missedByRelay[s.relay].add(lost);
        relayErrors.add(lost, { reason: 'missed' });
      }
      check(null, { 'every event delivered': () => lost <= 0 });
      s.ws.onclose = null;
      s.ws.close();
    }
  }, Math.max(0, end - Date.now()));
}

export function publisher(data) {
  const ws = new WebSocket(RELAY_URLS[0]);
  const sentAt = {};
  let answered = 0;
  ws.onerror = (e) => {
    relayErrors.add(1, { reason: 'ws-error' });
    console.error(`publisher websocket error: ${e.error}`);
  };
  ws.onmessage = (e) => {
    if (verbOf(e.data) !== 'OK') return;
    const [, id, ok, reason] = JSON.parse(e.data);
    if (sentAt[id] === undefined) return;
    okMs.add(Date.now() - sentAt[id]);
    check(null, { 'EVENT answered with OK true': () => ok && !reason.startsWith('duplicate:') });
    if (!ok) {
      console.warn(`OK false: ${reason}`);
      relayErrors.add(1, { reason: 'ok-false' });
    }
    if (++answered === events.length) {
      ws.onclose = null;
      ws.close();
    }
  };
  ws.onopen = () => {
    sendWindow.add((LAST_OFFSET + LAST_OFFSET / Math.max(1, events.length - 1)) / 1000);
    let i = 0;
    const sendNext = () => {
      const message = events[i];
      const planned = data.t0 + offsetOf(message).offset;
      const now = Date.now();
      if (now < planned) return void setTimeout(sendNext, planned - now);
      publishLagMs.add(now - planned);
      sentAt[message.slice(16, 80)] = now;
      ws.send(message);
      if (++i < events.length) sendNext();
    };
    sendNext();
  };
  // Give up on missing OKs after the drain window.
  setTimeout(() => {
    if (answered < events.length) {
      relayErrors.add(events.length - answered, { reason: 'timeout' });
      ws.close();
    }
  }, Math.max(0, data.t0 + LAST_OFFSET + DRAIN_MS - Date.now()));
}
