// npm run bench:webhooks: webhooks end to end, then the queue on its own.
// 1. Delivery: a relay process (its own database) with one endpoint matching every event, and a
//    local receiver answering at once; really signed events published at increasing rates (open
//    loop, 8 WebSockets). Per rate: delivered / published, deliveries/s, and the latency from the
//    event's OK (sent after its commit) to its receipt, p50/p95/p99; then a receiver failing 10 % of
//    requests, and one that is down for 30 s (--down-seconds).
// 2. Queue (store/webhook-queue.ts) on its own, as PGMQ publishes its figures: rows enqueued in
//    batches of 100 (as the outbox does, one INSERT per batch), then claimed 100 at a time (FOR UPDATE
//    SKIP LOCKED, leased) and deleted, by one and by two workers at once.
// 3. Crash (--parts crash, not run by default): 2,000 acknowledged events queued, the relay process
//    SIGKILLed mid-delivery, then started again (or, second, another relay process on the database left
//    running): how long until every event is delivered, how many were not delivered within 15 s of the
//    restart (of the kill), and how many were sent twice (requests in flight at the kill).
// Fresh embedded databases in temporary folders.
import { createServer } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import * as secp from 'tiny-secp256k1';
import WebSocket from 'ws';
import { parseConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { computeEventId, type NostrEvent } from '../src/nostr/event.js';
import { openDatabase, type Database } from '../src/store/database.js';
import { changeEndpoints } from '../src/store/outbox.js';
import { claimDeliveries, completeDeliveries } from '../src/store/webhook-queue.js';
import { removeEndpoint } from '../src/store/webhook-endpoints.js';
import { startRelayProcess } from './lib/relay-process.js';
import { ms, summarize } from './lib/stats.js';
import { loadAverage, machineDescription } from './load/system.js';

const HELP = `usage: npm run bench:webhooks -- [options]

options:
  --rates a,b,…      publish rates in events/s for the delivery part (default 250,500,1000,2000)
  --seconds N        seconds per rate (default 8)
  --down-seconds N   how long the receiver is down in the last scenario (default 30)
  --rows N           rows for the queue part (default 200000)
  --batch N          queue batch size (default 100)
  --crash-events N   acknowledged events in the crash part (default 2000)
  --crash-delay-ms N how long the receiver takes per request in the crash part (default 5)
  --parts a,b,…      delivery,queue,crash (default delivery,queue)`;

const { values } = parseArgs({
  options: {
    rates: { type: 'string', default: '250,500,1000,2000' },
    seconds: { type: 'string', default: '8' },
    'down-seconds': { type: 'string', default: '30' },
    rows: { type: 'string', default: '200000' },
    batch: { type: 'string', default: '100' },
    'crash-events': { type: 'string', default: '2000' },
    'crash-delay-ms': { type: 'string', default: '5' },
    parts: { type: 'string', default: 'delivery,queue' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const parts = values.parts!.split(',');
const say = (line: string) => console.error(line);

async function freshDatabase(): Promise<{ db: Database; close(): Promise<void> }> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'pgrelay-webhooks-'));
  const db = await openDatabase(parseConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'silent', DB_POOL_SIZE: '4' }), createLogger('silent'));
  return { db, close: async () => (await db.close(), await rm(dataDir, { recursive: true, force: true })) };
}

// ---- 1. Delivery ----

/** Really signed notes from 8 keys (libsecp256k1: ~5,000 a second). */
function signNotes(count: number, salt: string): NostrEvent[] {
  const keys = Array.from({ length: 8 }, (_, i) => {
    const sk = Buffer.alloc(32);
    sk.writeUInt32BE(i + 1, 28);
    return { sk, pubkey: Buffer.from(secp.xOnlyPointFromScalar(sk)).toString('hex') };
  });
  const now = Math.floor(Date.now() / 1000);
  return Array.from({ length: count }, (_, i) => {
    const key = keys[i % keys.length];
    const unsigned = { pubkey: key.pubkey, created_at: now - (i % 600), kind: 1, tags: [], content: `webhook bench ${salt} ${i}` };
    const id = computeEventId(unsigned);
    return { id, ...unsigned, sig: Buffer.from(secp.signSchnorr(Buffer.from(id, 'hex'), key.sk, Buffer.alloc(32))).toString('hex') };
  });
}

/**
 * A local receiver: records when each event arrived (answered 2xx, `delayMs` after the request), and
 * how many times an event arrived again; `fail(n)` decides whether request n fails. While `holding`,
 * answers wait for `release()`.
 */
async function startReceiver() {
  const received = new Map<string, number>();
  let requests = 0;
  let repeats = 0;
  const state = { fail: (_n: number) => false, down: false, delayMs: 0, holding: false };
  const held: Array<() => void> = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const n = ++requests;
      if (state.down || state.fail(n)) {
        res.statusCode = 503;
        return res.end();
      }
      const answer = () => {
        const now = performance.now();
        const body = JSON.parse(Buffer.concat(chunks).toString()) as { data: NostrEvent | NostrEvent[] };
        for (const e of Array.isArray(body.data) ? body.data : [body.data]) {
          if (received.has(e.id)) repeats++;
          else received.set(e.id, now);
        }
        res.end();
      };
      const due = () => (state.holding ? held.push(answer) : answer());
      if (state.delayMs) setTimeout(due, state.delayMs);
      else due();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    received,
    state,
    get requests() {
      return requests;
    },
    get repeats() {
      return repeats;
    },
    release() {
      state.holding = false;
      for (const answer of held.splice(0)) answer();
    },
    close: () => (server.closeAllConnections(), new Promise<void>((r) => server.close(() => r()))),
  };
}
type Receiver = Awaited<ReturnType<typeof startReceiver>>;

/** Publishes `events` at `rate`/s over 8 sockets; resolves with each event's OK time. */
async function publish(url: string, events: NostrEvent[], rate: number): Promise<Map<string, number>> {
  const sockets = await Promise.all(Array.from({ length: 8 }, () => new Promise<WebSocket>((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  })));
  const ok = new Map<string, number>();
  let refused = 0;
  const done = new Promise<void>((resolve) => {
    for (const ws of sockets)
      ws.on('message', (data) => {
        const m = JSON.parse(data.toString());
        if (m[0] !== 'OK') return;
        if (m[2]) ok.set(m[1], performance.now());
        else refused++;
        if (ok.size + refused === events.length) resolve();
      });
  });
  const started = performance.now();
  let sent = 0;
  await new Promise<void>((resolve) => {
    const tick = setInterval(() => {
      const due = Math.min(events.length, Math.floor(((performance.now() - started) / 1000) * rate));
      for (; sent < due; sent++) sockets[sent % sockets.length].send(JSON.stringify(['EVENT', events[sent]]));
      if (sent === events.length) (clearInterval(tick), resolve());
    }, 5);
  });
  await done;
  for (const ws of sockets) ws.close();
  if (refused) say(`  ${refused} events refused by the relay`);
  return ok;
}

async function waitForAll(receiver: Receiver, ids: string[], timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && ids.some((id) => !receiver.received.has(id))) await new Promise((r) => setTimeout(r, 50));
}

interface DeliveryRow {
  scenario: string;
  rate: number;
  published: number;
  delivered: number;
  perSecond: number;
  p50: number;
  p95: number;
  p99: number;
  maxQueue: number;
}

async function scenario(name: string, rate: number, seconds: number, relayUrl: string, receiver: Receiver, db: Database, during?: () => Promise<void>): Promise<DeliveryRow> {
  const events = signNotes(rate * seconds, `${name}-${rate}-${Date.now()}`);
  let maxQueue = 0;
  const sampler = setInterval(async () => {
    const { rows } = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM webhook_deliveries');
    maxQueue = Math.max(maxQueue, rows[0].n);
  }, 250);
  const started = performance.now();
  const [ok] = await Promise.all([publish(relayUrl, events, rate), during?.()]);
  const ids = events.map((e) => e.id);
  await waitForAll(receiver, ids, 120_000);
  clearInterval(sampler);
  const last = Math.max(...ids.map((id) => receiver.received.get(id) ?? 0));
  const latencies = ids.filter((id) => receiver.received.has(id) && ok.has(id)).map((id) => receiver.received.get(id)! - ok.get(id)!);
  const s = summarize(latencies);
  const delivered = ids.filter((id) => receiver.received.has(id)).length;
  const row = { scenario: name, rate, published: ok.size, delivered, perSecond: delivered / ((last - started) / 1000), p50: s.p50, p95: s.p95, p99: s.p99, maxQueue };
  say(`  ${name} ${rate}/s: ${delivered}/${ok.size} delivered, ${Math.round(row.perSecond)}/s, OK → receipt p50 ${ms(s.p50)} p95 ${ms(s.p95)} p99 ${ms(s.p99)} ms, queue ≤ ${maxQueue}`);
  return row;
}

async function deliveryBench(): Promise<void> {
  const store = await freshDatabase();
  const receiver = await startReceiver();
  const relay = await startRelayProcess({ DATABASE_URL: store.db.url, RATE_LIMIT_EVENTS_PER_SECOND: '0', MAX_PENDING_EVENTS: '5000' });
  try {
    await changeEndpoints(store.db.pool, (c) => c.query('INSERT INTO webhook_endpoints (url, filters, secret) VALUES ($1, $2, $3)', [receiver.url, '[{"kinds":[1]}]', `whsec_${Buffer.alloc(24, 7).toString('base64')}`]));
    const seconds = Number(values.seconds);
    const rows: DeliveryRow[] = [];
    for (const rate of values.rates!.split(',').map(Number)) rows.push(await scenario('healthy', rate, seconds, relay.url, receiver, store.db));
    const mid = Number(values.rates!.split(',')[1] ?? 500);
    receiver.state.fail = () => Math.random() < 0.1;
    rows.push(await scenario('10 % failing', mid, seconds, relay.url, receiver, store.db));
    receiver.state.fail = () => false;
    const down = Number(values['down-seconds']);
    rows.push(
      await scenario(`down ${down} s`, mid, seconds, relay.url, receiver, store.db, async () => {
        receiver.state.down = true;
        await new Promise((r) => setTimeout(r, down * 1000));
        receiver.state.down = false;
      }),
    );
    console.log(`\nDelivery: one relay process, one endpoint (every kind 1), the receiver in the benchmark process; ${seconds} s per rate; load average after ${loadAverage().toFixed(1)}\n`);
    console.log('| scenario | rate/s | published | delivered | deliveries/s | OK → receipt p50 | p95 | p99 | queue max |');
    console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const r of rows)
      console.log(`| ${r.scenario} | ${r.rate} | ${r.published} | ${r.delivered} (${((100 * r.delivered) / r.published).toFixed(1)} %) | ${Math.round(r.perSecond)} | ${ms(r.p50)} | ${ms(r.p95)} | ${ms(r.p99)} | ${r.maxQueue} |`);
  } finally {
    await relay.stop();
    await receiver.close();
    await store.close();
  }
}

// ---- 2. Queue ----

async function queueBench(): Promise<void> {
  const rows = Number(values.rows);
  const batch = Number(values.batch);
  const { db, close } = await freshDatabase();
  const payload = JSON.stringify({ id: 'a'.repeat(64), pubkey: 'b'.repeat(64), created_at: 1_700_000_000, kind: 1, tags: [], content: 'x'.repeat(300), sig: 'c'.repeat(128) });
  const enqueue = async (endpoint: number): Promise<number> => {
    const started = performance.now();
    const ids = Array.from({ length: batch }, (_, i) => Buffer.from(i.toString(16).padStart(64, '0'), 'hex'));
    for (let done = 0; done < rows; done += batch)
      await db.pool.query('INSERT INTO webhook_deliveries (endpoint_id, event_id, payload) SELECT $1, id, $3 FROM unnest($2::bytea[]) id', [endpoint, ids, payload]);
    return rows / ((performance.now() - started) / 1000);
  };
  /** Claims and deletes until the queue is empty, with `workers` loops at once; rows/s. */
  const drain = async (workers: number): Promise<number> => {
    const started = performance.now();
    let total = 0;
    await Promise.all(
      Array.from({ length: workers }, async () => {
        for (;;) {
          const claimed = await claimDeliveries(db.pool, batch, 60_000);
          if (claimed.length === 0) return;
          await completeDeliveries(db.pool, claimed);
          total += claimed.length;
        }
      }),
    );
    if (total !== rows) throw new Error(`drained ${total} of ${rows}`);
    return rows / ((performance.now() - started) / 1000);
  };
  try {
    const endpoint = await changeEndpoints(db.pool, async (c) => (await c.query<{ id: number }>(`INSERT INTO webhook_endpoints (url, filters) VALUES ('http://127.0.0.1:1/', '[{}]') RETURNING id`)).rows[0].id);
    const results: string[] = [];
    for (const workers of [1, 2]) {
      const enqueued = await enqueue(endpoint);
      await db.pool.query('VACUUM ANALYZE webhook_deliveries');
      const drained = await drain(workers);
      results.push(`| ${workers} | ${rows.toLocaleString('en-US')} | ${Math.round(enqueued).toLocaleString('en-US')} | ${Math.round(drained).toLocaleString('en-US')} |`);
    }
    // A paused endpoint keeps its queue: the others' deliveries must not wait behind it.
    const paused = await changeEndpoints(db.pool, async (c) => (await c.query<{ id: number }>(`INSERT INTO webhook_endpoints (url, filters, paused) VALUES ('http://127.0.0.1:2/', '[{}]', true) RETURNING id`)).rows[0].id);
    await enqueue(paused);
    const enqueued = await enqueue(endpoint);
    await db.pool.query('VACUUM ANALYZE webhook_deliveries');
    const drained = await drain(1);
    results.push(`| 1, beside ${rows.toLocaleString('en-US')} rows of a paused endpoint | ${rows.toLocaleString('en-US')} | ${Math.round(enqueued).toLocaleString('en-US')} | ${Math.round(drained).toLocaleString('en-US')} |`);
    // Removing an endpoint with a long queue: how long it takes, and the longest a writer waits meanwhile
    // (a writer takes the endpoints lock shared in each batch; store/outbox.ts).
    await enqueue(paused);
    let longestWaitMs = 0;
    let removing = true;
    const writer = (async () => {
      while (removing) {
        const client = await db.pool.connect();
        try {
          const t = performance.now();
          await client.query('BEGIN');
          await client.query(`SELECT pg_advisory_xact_lock_shared(hashtextextended('pgrelay:webhook-endpoints', 0))`);
          longestWaitMs = Math.max(longestWaitMs, performance.now() - t);
          await client.query('COMMIT');
        } finally {
          client.release();
        }
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    const removeStarted = performance.now();
    const dropped = await removeEndpoint(db.pool, paused);
    const removeMs = performance.now() - removeStarted;
    removing = false;
    await writer;
    console.log(`\nRemoving an endpoint with ${dropped!.queued.toLocaleString('en-US')} queued deliveries: ${Math.round(removeMs)} ms; longest writer wait meanwhile ${longestWaitMs.toFixed(1)} ms`);
    console.log(`\nQueue: batches of ${batch}; payload ${payload.length} bytes; load average after ${loadAverage().toFixed(1)}\n`);
    console.log('| drain workers | rows | enqueued rows/s | claimed + deleted rows/s |');
    console.log('|---:|---:|---:|---:|');
    for (const r of results) console.log(r);
  } finally {
    await close();
  }
}

// ---- 3. Crash ----

interface CrashRow {
  scenario: string;
  beforeKill: number;
  notWithin15s: number;
  lastAfterKill: number;
  lastAfterStart: number | undefined;
  repeats: number;
}

/**
 * `survivor`: a second relay process runs beside the one killed, and nothing is restarted; otherwise
 * the killed relay is started again at once. Times in seconds.
 */
async function crashScenario(count: number, survivor: boolean): Promise<CrashRow> {
  const store = await freshDatabase();
  const receiver = await startReceiver();
  receiver.state.delayMs = Number(values['crash-delay-ms']);
  const env = { DATABASE_URL: store.db.url, RATE_LIMIT_EVENTS_PER_SECOND: '0', MAX_PENDING_EVENTS: '5000' };
  const victim = await startRelayProcess(env);
  const relays = [victim];
  try {
    // Queued while the endpoint is paused: every event is acknowledged before delivery starts.
    const endpoint = await changeEndpoints(store.db.pool, async (c) =>
      (await c.query<{ id: number }>('INSERT INTO webhook_endpoints (url, filters, paused) VALUES ($1, $2, true) RETURNING id', [receiver.url, '[{"kinds":[1]}]'])).rows[0].id);
    const events = signNotes(count, `crash-${survivor}-${Date.now()}`);
    const ok = await publish(victim.url, events, 2000);
    if (ok.size !== count) throw new Error(`${ok.size} of ${count} events acknowledged`);
    await changeEndpoints(store.db.pool, (c) => c.query('UPDATE webhook_endpoints SET paused = false WHERE id = $1', [endpoint]));
    // Half-way through a claim (they are of 100 rows), a quarter of the way through the events; the
    // receiver then holds its answers until the kill, so that the victim is still mid-claim when it
    // dies, however long the other process takes to start.
    while (receiver.received.size < Math.floor(count / 400) * 100 + 50) await new Promise((r) => setTimeout(r, 2));
    receiver.state.holding = true;
    if (survivor) relays.push(await startRelayProcess(env));
    const exited = new Promise((r) => victim.child.once('exit', r));
    victim.child.kill('SIGKILL');
    const killedAt = performance.now();
    await exited;
    const beforeKill = receiver.received.size;
    receiver.release(); // answers to the dead victim go nowhere: those events are sent again
    let startedAt = killedAt;
    if (!survivor) {
      relays.push(await startRelayProcess(env));
      startedAt = performance.now();
    }
    const ids = events.map((e) => e.id);
    await waitForAll(receiver, ids, 300_000);
    const times = ids.map((id) => receiver.received.get(id) ?? Infinity);
    const row = {
      scenario: survivor ? 'another process running, no restart' : 'restarted at once',
      beforeKill,
      notWithin15s: times.filter((t) => t - startedAt > 15_000).length,
      lastAfterKill: (Math.max(...times) - killedAt) / 1000,
      lastAfterStart: survivor ? undefined : (Math.max(...times) - startedAt) / 1000,
      repeats: receiver.repeats,
    };
    say(`  ${row.scenario}: ${beforeKill} delivered before the kill; every event ${row.lastAfterKill.toFixed(1)} s after it; ${row.notWithin15s} not within 15 s; ${row.repeats} sent twice`);
    return row;
  } finally {
    await Promise.all(relays.map((r) => r.stop()));
    await receiver.close();
    await store.close();
  }
}

async function crashBench(): Promise<void> {
  const count = Number(values['crash-events']);
  const rows = [await crashScenario(count, false), await crashScenario(count, true)];
  console.log(`\nCrash: ${count} acknowledged events for one endpoint, the relay SIGKILLed once a quarter was delivered (mid-claim); receiver answering in ${values['crash-delay-ms']} ms; load average after ${loadAverage().toFixed(1)}\n`);
  console.log('| scenario | delivered before the kill | every event delivered, after the kill | after the restart | not delivered within 15 s of the restart (of the kill) | sent twice |');
  console.log('|---|---:|---:|---:|---:|---:|');
  for (const r of rows)
    console.log(`| ${r.scenario} | ${r.beforeKill} | ${r.lastAfterKill.toFixed(1)} s | ${r.lastAfterStart === undefined ? '–' : `${r.lastAfterStart.toFixed(1)} s`} | ${r.notWithin15s} | ${r.repeats} |`);
}

console.log(`${machineDescription()}; load average ${loadAverage().toFixed(1)}`);
if (parts.includes('delivery')) await deliveryBench();
if (parts.includes('queue')) await queueBench();
if (parts.includes('crash')) await crashBench();
