// k6 `query` scenario with the k6/x/nostr reader (load/k6-nostr): the same mix, metrics, thresholds
// and loops as query.js, but each REQ's answer is read in Go, up to its EOSE, and only the count of
// EVENTs and the time come back to the script. It needs the k6 built by `npm run load:build-k6-nostr`
// (load/bin/k6-nostr); `npm run load -- --scenario query --client native` runs it.
//
// Why a second reader: k6/ws (query.js) spends ~1 ms of CPU per REQ of this mix handing each of its
// ~270 messages to the script, and on one machine with the relay that is most of the CPU a ladder
// has (docs/load-testing.md). This reader costs a small fraction of that, so the ladder shows more of
// the relay and less of the client. Both readers count an EVENT by its first bytes and never parse it.
//
// Environment: as query.js (RELAY_URL, QUERY_MIX, VUS, DURATION, RATE, P95_MS, REQ_TIMEOUT_MS, SHAPES).
import { check } from 'k6';
import exec from 'k6/execution';
import { connect } from 'k6/x/nostr';
import { RELAY_URL, relayErrors } from './lib/common.js';
import { RATE, TIMEOUT_MS, answered, mix } from './lib/query.js';

export { options } from './lib/query.js';

let conn;
let counter = 0;

/** This VU's connection: one for the whole run (closed loop), a new one per REQ (open loop, RATE). */
function connection() {
  if (conn && !conn.broken()) return conn;
  try {
    conn = connect(RELAY_URL);
    return conn;
  } catch (e) {
    conn = undefined;
    relayErrors.add(1, { reason: 'ws-error' });
    console.error(`websocket connect failed: ${e}`);
    return undefined;
  }
}

// One iteration is one REQ, timed from REQ to EOSE.
export default function () {
  const socket = connection();
  if (!socket) return void check(null, { 'REQ answered with EOSE': () => false });
  const entry = mix[Math.floor(Math.random() * mix.length)];
  const subId = `q${exec.vu.idInTest}-${counter++}`;
  const tags = { shape: entry.shape };
  const r = socket.req(subId, entry.filters, TIMEOUT_MS);
  if (r.ok) {
    answered(r.ms, r.events, tags);
  } else {
    relayErrors.add(1, { reason: r.reason, shape: entry.shape });
    if (r.reason === 'closed' || r.reason === 'notice') console.warn(`${r.reason.toUpperCase()} ${entry.shape}: ${r.message.slice(0, 200)}`);
    else console.error(`REQ ${entry.shape} ended: ${r.reason} ${r.message}`);
  }
  check(null, { 'REQ answered with EOSE': () => r.ok });
  if (RATE > 0) {
    socket.close();
    conn = undefined;
  } else if (!socket.broken()) {
    socket.send(`["CLOSE","${subId}"]`);
  }
}
