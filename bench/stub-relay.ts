// npm run bench:stub-relay: what the load client itself can read on this machine. A WebSocket
// server that answers every REQ, whatever its filters, with the same N EVENT messages of a given
// size and an EOSE, framed the way the relay frames an answer from memory (src/relay/frames.ts),
// with no query, no index and no database. Point the k6 query scenario at it (`npm run load -- --scenario
// query --url ws://127.0.0.1:PORT --data-dir <corpus>`): the REQ/s it reaches is the ceiling the
// client and the machine put on any relay measured with that mix on the same machine.
import { parseArgs } from 'node:util';
import { WebSocketServer } from 'ws';
import { eventPrefix, textFrame, writeEventFrames } from '../src/relay/frames.js';

const HELP = `usage: npm run bench:stub-relay -- [options]

options:
  --port N          port on 127.0.0.1 (default 8112)
  --events N        EVENT messages per REQ (default 264: the query mix's mean on the 1M corpus)
  --event-bytes N   bytes of each event's JSON (default 640: that corpus's mean EVENT message is ~660 bytes)`;

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '8112' },
    events: { type: 'string', default: '264' },
    'event-bytes': { type: 'string', default: '640' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const count = Number(values.events);
const eventBytes = Number(values['event-bytes']);

/** Event JSON of exactly `bytes` bytes, shaped like a kind-1 note (hex fields of the right lengths). */
function fakeEvent(i: number, bytes: number): string {
  const hex = (n: number) => (i.toString(16) + 'ab').repeat(n).slice(0, n);
  const shell = (content: string) =>
    JSON.stringify({ id: hex(64), pubkey: hex(64), created_at: 1_700_000_000 + i, kind: 1, tags: [['p', hex(64)]], content, sig: hex(128) });
  return shell('x'.repeat(Math.max(0, bytes - Buffer.byteLength(shell('')))));
}
const rows = Array.from({ length: count }, (_, i) => ({ raw: fakeEvent(i, eventBytes) }));

const wss = new WebSocketServer({ host: '127.0.0.1', port: Number(values.port), perMessageDeflate: false });
wss.on('connection', (ws, req) => {
  const socket = req.socket;
  ws.on('error', () => ws.terminate()); // a client gone mid-answer (k6 closes its sockets at the end of a step)
  ws.on('message', (data) => {
    if (ws.readyState !== ws.OPEN) return;
    const text = data.toString();
    if (!text.startsWith('["REQ",')) return; // CLOSE and the rest need no answer here
    const subId = JSON.parse(text)[1] as string;
    const prefix = eventPrefix(subId);
    const eose = textFrame(JSON.stringify(['EOSE', subId])); // in the last chunk's write, as the relay sends an answer from memory
    for (let i = 0; i < rows.length; ) i = writeEventFrames(socket, prefix, rows, i, eose);
  });
});
wss.on('listening', () => console.log(`stub relay on ws://127.0.0.1:${values.port}: ${count} events of ${eventBytes} bytes per REQ`));
process.on('SIGINT', () => process.exit(0));
process.on('SIGTERM', () => process.exit(0));
