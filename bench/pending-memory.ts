// npm run bench:pending-memory: the heap that events awaiting their OK hold, sent from one address
// with every limit at its default (or as the environment sets it). Starts a relay in this process on
// DATABASE_URL or DATA_DIR's embedded server (as bench:seed), holds the events table with a lock from
// another session so that nothing is written and every event the relay takes stays unanswered, sends
// --events EVENT messages of one --shape over --connections connections, and compares the heap in
// use after a full collection before and after (Node runs with --expose-gc). Then it lets the writes
// go, counts what it stored (what was held) and deletes it.
import { createHash } from 'node:crypto';
import { parseArgs } from 'node:util';
import pg from 'pg';
import * as secp from 'tiny-secp256k1';
import WebSocket from 'ws';
import { loadConfig, parseConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { computeEventId } from '../src/nostr/event.js';
import { startRelay } from '../src/relay/server.js';
import { openDatabase } from '../src/store/database.js';
import { purgePubkey } from '../src/store/moderation.js';
import { loadAverage, machineDescription } from './load/system.js';

const SHAPES: Record<string, { kind: number; what: string; content: (i: number) => string }> = {
  // ~100 KB: MAX_CONTENT_LENGTH (102,400 code points) is reached before MAX_MESSAGE_BYTES.
  ascii: { kind: 1, what: 'a kind 1 of one word repeated, ~100 KB', content: (i) => `${i} ` + 'a '.repeat(51_000) },
  // ~129 KB: one character outside Latin-1 and JavaScript holds the whole text in two bytes a character.
  cyrillic: { kind: 1, what: 'a kind 1 of Cyrillic words, ~129 KB', content: (i) => `${i} ` + 'ж '.repeat(43_000) },
  // ~100 KB of different words in a searchable kind: the search document holds one entry per word.
  words: { kind: 1, what: 'a kind 1 of ~17,000 different words, ~100 KB', content: (i) => distinctWords(i, 102_000) },
};

const { values } = parseArgs({
  options: {
    shape: { type: 'string', default: 'ascii' },
    events: { type: 'string', default: '1000' },
    connections: { type: 'string', default: '1' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help || !SHAPES[values.shape!]) {
  console.log(`usage: npm run bench:pending-memory -- [--shape ${Object.keys(SHAPES).join('|')}] [--events 1000] [--connections 1]
  needs a database as bench:seed does (DATABASE_URL, or DATA_DIR's embedded server); the relay's limits come from the environment`);
  process.exit(values.help ? 0 : 2);
}
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc (npm run bench:pending-memory does)');

function distinctWords(salt: number, chars: number): string {
  const words = [String(salt)];
  for (let n = 0, length = 0; length < chars; n++) {
    const word = 'w' + n.toString(36);
    words.push(word);
    length += word.length + 1;
  }
  return words.join(' ');
}

function heapAfterGc(): number {
  for (let i = 0; i < 3; i++) gc!();
  return process.memoryUsage().heapUsed;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const mb = (bytes: number) => (bytes / 2 ** 20).toFixed(1);

async function main(): Promise<void> {
  const shape = SHAPES[values.shape!]!;
  const count = Number(values.events);
  const connections = Number(values.connections);
  loadConfig(); // reads .env into the environment, as the relay would
  // The relay's own settings as configured; a port of its own, and no hot tier to fill while measuring.
  const config = parseConfig({ ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'warn', HOT_TIER_MB: '0', HOT_TIER_SNAPSHOT: 'false', QUERY_TIMEOUT_MS: '600000' });
  const log = createLogger(config.LOG_LEVEL);
  const db = await openDatabase(config, log);
  const relay = await startRelay(config, db, log);
  const secret = createHash('sha256').update(`bench-pending-memory:${Date.now()}`).digest();
  const pubkey = Buffer.from(secp.xOnlyPointFromScalar(secret)).toString('hex');
  const blocker = new pg.Client({ connectionString: db.url });
  const sockets: WebSocket[] = [];
  let largest = 0;
  let heap = 0;
  let refused = 0;
  let closed = 0;
  try {
    await blocker.connect();
    let answered = 0;
    for (let c = 0; c < connections; c++) {
      const ws = new WebSocket(relay.url);
      ws.on('message', (data) => {
        if (String(data).startsWith('["OK"')) answered++;
      });
      await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
      sockets.push(ws);
    }
    const before = heapAfterGc();
    await blocker.query('BEGIN');
    await blocker.query('LOCK TABLE events IN ACCESS EXCLUSIVE MODE');
    for (let i = 0; i < count; i++) {
      const unsigned = { pubkey, created_at: Math.floor(Date.now() / 1000), kind: shape.kind, tags: [], content: shape.content(i) };
      const id = computeEventId(unsigned);
      const sig = Buffer.from(secp.signSchnorr(Buffer.from(id, 'hex'), secret, new Uint8Array(32))).toString('hex');
      const message = JSON.stringify(['EVENT', { id, ...unsigned, sig }]);
      largest = Math.max(largest, Buffer.byteLength(message));
      sockets[i % connections]!.send(message);
      if (i % 50 === 49) await sleep(1); // let the sockets drain as a client's would
    }
    // Settled: everything sent was read, and each event is either answered (refused) or held.
    const { verifier } = relay.context;
    for (let quiet = 0, last = -1; quiet < 20; ) {
      await sleep(100);
      const busy = sockets.some((ws) => ws.readyState === WebSocket.OPEN && ws.bufferedAmount > 0) || verifier.queued > 0 || answered !== last;
      quiet = busy ? 0 : quiet + 1;
      last = answered;
    }
    heap = heapAfterGc() - before;
    refused = answered;
    // A connection closed for its refusals (RATE_LIMIT_DISCONNECT_AFTER) left the rest of its events unread.
    closed = sockets.filter((ws) => ws.readyState !== WebSocket.OPEN).length;
  } finally {
    await blocker.query('ROLLBACK').catch(() => undefined);
    await blocker.end().catch(() => undefined);
    await relay.context.writer.drain(); // every held event written
    for (const ws of sockets) ws.close();
    await relay.close();
  }
  // What was held is what got stored once the table was free.
  const held = await purgePubkey(db.pool, pubkey);
  await db.close();
  console.log(`npm run bench:pending-memory -- --shape ${values.shape} --events ${count} --connections ${connections}   ${machineDescription()}; load average ${loadAverage().toFixed(2)}`);
  console.log(`limits: MAX_PENDING_EVENTS=${config.MAX_PENDING_EVENTS} MAX_PENDING_BYTES_PER_ADDRESS=${config.MAX_PENDING_BYTES_PER_ADDRESS} RATE_LIMIT_EVENTS_BURST=${config.RATE_LIMIT_EVENTS_BURST} MAX_CONNECTIONS_PER_ADDRESS=${config.MAX_CONNECTIONS_PER_ADDRESS} MAX_MESSAGE_BYTES=${config.MAX_MESSAGE_BYTES}`);
  console.log(`${shape.what}: messages of ${largest} bytes; ${held} held awaiting OK (stored, then deleted), ${refused} refused at once${closed ? `, ${closed} connections closed for their refusals` : ''}`);
  console.log(`heap: +${mb(heap)} MB, ${held ? Math.round(heap / held / 1024) : 0} KiB per held event (${held ? (heap / held / largest).toFixed(1) : 0}× its message)`);
}

main().catch((err) => {
  console.error(`error: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
