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
//
// The socket is k6's `k6/ws` module, not `k6/websockets`: k6 spends about half as much CPU per
// received message with it (against bench:stub-relay, 264 events per REQ, 10 VUs: 1,580 REQ/s
// against 771), and at ~270 events per REQ, with k6 on the relay's two cores, the client's cost
// per message is what limits a run.
import { check } from 'k6';
import exec from 'k6/execution';
import ws from 'k6/ws';
import { RELAY_URL, durationMs, relayErrors, verbOf } from './lib/common.js';
import { DURATION, RATE, TIMEOUT_MS, answered, mix } from './lib/query.js';

export { options } from './lib/query.js';

let counter = 0;
const EVENT_FROM = '["EVENT"';
const EVENT_TO = '["EVENT#';

/**
 * REQs on one open socket, one at a time (an EVENT for another sub id cannot occur), each ended by
 * EOSE, CLOSED, NOTICE, a timeout or the socket closing; `more()` says whether to send another.
 */
function requests(socket, more) {
  let current;
  const finish = (ok, reason) => {
    const r = current;
    if (!r) return;
    current = undefined;
    if (ok) answered(Date.now() - r.started, r.events, r.tags);
    else relayErrors.add(1, { reason, shape: r.tags.shape });
    check(null, { 'REQ answered with EOSE': () => ok });
    if (reason === 'ws-close') return;
    socket.send(`["CLOSE","${r.subId}"]`);
    if (more()) send();
    else socket.close();
  };
  const send = () => {
    const entry = mix[Math.floor(Math.random() * mix.length)];
    current = { subId: `q${exec.vu.idInTest}-${counter++}`, tags: { shape: entry.shape }, events: 0, started: Date.now() };
    socket.send(`["REQ","${current.subId}",${entry.filters}]`);
  };
  socket.on('open', () => {
    // One timer per socket: k6/ws timers cannot be cancelled, and one per REQ would pile up.
    socket.setInterval(() => current && Date.now() - current.started > TIMEOUT_MS && finish(false, 'timeout'), Math.min(1000, TIMEOUT_MS));
    send();
  });
  socket.on('message', (data) => {
    if (!current) return;
    // Most messages are EVENTs, told by comparison alone: a string that starts with `["EVENT"` sorts
    // from `["EVENT"` up to, not including, `["EVENT#` (`#` follows `"`). k6 hands the script each
    // message as a Go string, and a method call on it (charCodeAt, startsWith) first scans and
    // converts all of it, while `<` compares the Go bytes as they are: a tenth of k6's CPU per message.
    if (!(data < EVENT_FROM) && data < EVENT_TO) return void current.events++;
    const verb = verbOf(data);
    if (verb === 'EOSE') finish(true);
    else if (verb === 'CLOSED') {
      console.warn(`CLOSED ${current.tags.shape}: ${data.slice(0, 200)}`);
      finish(false, 'closed');
    } else if (verb === 'NOTICE') {
      console.warn(`NOTICE: ${data.slice(0, 200)}`);
      finish(false, 'notice');
    }
  });
  socket.on('close', () => finish(false, 'ws-close'));
  socket.on('error', (e) => {
    relayErrors.add(1, { reason: 'ws-error' });
    console.error(`websocket error: ${e.error()}`);
  });
}

export default function () {
  // Closed loop: one socket per VU for the whole run. Open loop (RATE): one REQ per connection.
  const deadline = RATE > 0 ? 0 : exec.scenario.startTime + durationMs(DURATION);
  const response = ws.connect(RELAY_URL, null, (socket) => requests(socket, () => RATE === 0 && Date.now() < deadline));
  if (!response || response.status !== 101) {
    relayErrors.add(1, { reason: 'ws-error' });
    console.error(`websocket upgrade failed: ${response && response.status} ${response && response.error}`);
  }
}
