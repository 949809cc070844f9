// Webhook deliveries claimed by a relay process that dies come back within one lease
// (WEBHOOK_LEASE_MS, src/relay/webhooks.ts): to the next start, or to another relay process still
// running. Real relay processes killed with SIGKILL, a real receiver holding requests open, a real
// database. No wall-clock bounds: each wait is generous (60 s for the 4 s lease used here), so a
// loaded machine passes, while claims hidden for as long as a claim might take at worst (minutes)
// fail.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startRelayProcess, type RelayProcess } from '../../bench/lib/relay-process.js';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { WebhookWorker } from '../../src/relay/webhooks.js';
import { changeEndpoints } from '../../src/store/outbox.js';
import { claimDeliveries, renewLeases } from '../../src/store/webhook-queue.js';
import { TestClient } from '../support/client.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { until } from '../support/wait.js';

const CONCURRENCY = 8; // WEBHOOK_CONCURRENCY's default: requests in flight per relay process
const EVENTS = 150;
const ANSWERED = 50; // requests the receiver answers before it holds the next ones open
const REDELIVERY_WAIT_MS = 60_000;

/**
 * A local receiver that answers the first `answerFirst` requests and holds the next ones open (as a
 * stalled receiver would), until `release()`. Records every request's events, what it answered 2xx,
 * and the held requests whose connection went away unanswered (their sender died).
 */
class HoldingReceiver {
  readonly arrived = new Map<string, number>(); // event id → requests that carried it
  readonly delivered = new Map<string, number>(); // event id → 2xx answers
  readonly held: Array<{ events: string[]; res: ServerResponse; answer: () => void }> = [];
  readonly cut = new Set<string>(); // events of held requests whose sender died
  private holding = true;
  private requests = 0;
  private server!: Server;

  constructor(private readonly answerFirst: number) {}

  async start(): Promise<string> {
    this.server = createServer((req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const body = JSON.parse(Buffer.concat(chunks).toString()) as { data: NostrEvent | NostrEvent[] };
        const events = (Array.isArray(body.data) ? body.data : [body.data]).map((e) => e.id);
        for (const id of events) this.arrived.set(id, (this.arrived.get(id) ?? 0) + 1);
        const answer = () => {
          for (const id of events) this.delivered.set(id, (this.delivered.get(id) ?? 0) + 1);
          res.end('ok');
        };
        if (++this.requests <= this.answerFirst || !this.holding) return answer();
        this.held.push({ events, res, answer });
        res.on('close', () => {
          if (!res.writableEnded) for (const id of events) this.cut.add(id);
        });
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`;
  }

  /** Answers every request from now on, and the held ones whose sender is still there. */
  release(): void {
    this.holding = false;
    for (const h of this.held) if (!h.res.destroyed && !h.res.writableEnded) h.answer();
  }

  /** Events that arrived more than once. */
  repeated(): string[] {
    return [...this.arrived].filter(([, n]) => n > 1).map(([id]) => id);
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }
}

/** Queues `count` events for one endpoint, paused meanwhile, so that resuming it lets full claims go at once. */
async function queueEvents(pool: pg.Pool, relay: RelayProcess, receiverUrl: string, count: number): Promise<string[]> {
  const author = newSigner();
  const endpoint = await changeEndpoints(pool, async (c) =>
    (await c.query<{ id: number }>('INSERT INTO webhook_endpoints (url, filters, paused) VALUES ($1, $2, true) RETURNING id', [receiverUrl, JSON.stringify([{ authors: [author.pubkey] }])])).rows[0].id);
  const client = await TestClient.connect(relay.url);
  const acknowledged: string[] = [];
  for (let i = 0; i < count; i++) {
    const event = author.sign({ content: `hooked ${i}` });
    expect(await client.publish(event)).toEqual([true, '']);
    acknowledged.push(event.id);
  }
  client.close();
  await changeEndpoints(pool, (c) => c.query('UPDATE webhook_endpoints SET paused = false WHERE id = $1', [endpoint]));
  return acknowledged;
}

async function kill(relay: RelayProcess): Promise<void> {
  const exited = new Promise((r) => relay.child.once('exit', r));
  relay.child.kill('SIGKILL');
  await exited;
}

/**
 * Waits until the relay has recorded the answers it got (their rows deleted), so that what is in flight at
 * the kill is exactly the held requests: a request answered but not yet recorded is in flight too, and may
 * be sent again.
 */
async function untilAnsweredRecorded(pool: pg.Pool): Promise<void> {
  await until(async () => (await queueLength(pool)) === EVENTS - ANSWERED, 'the answered deliveries recorded');
}

const queueLength = async (pool: pg.Pool) => (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM webhook_deliveries')).rows[0].n;

/**
 * Every acknowledged event answered 2xx exactly once (none lost, none duplicated), and sent twice only
 * if its request was in flight at the kill: the receiver never answered those, so they are sent again.
 */
function expectDeliveredOnce(receiver: HoldingReceiver, acknowledged: string[]): void {
  expect(acknowledged.filter((id) => !receiver.delivered.has(id))).toEqual([]);
  expect([...receiver.delivered.values()].every((n) => n === 1)).toBe(true);
  expect(receiver.repeated().sort()).toEqual([...receiver.cut].sort());
}

describe('webhook deliveries of a relay process killed mid-delivery', () => {
  const relays: RelayProcess[] = [];
  let receiver: HoldingReceiver | undefined;
  let pool: pg.Pool | undefined;
  afterEach(async () => {
    await Promise.all(relays.splice(0).map((r) => r.stop()));
    await receiver?.close();
    await pool?.end();
    [receiver, pool] = [undefined, undefined];
  });

  // A held request stays open until the kill, however slow the machine: no timeout turns it into a failure first.
  // A 4 s lease rather than the default 10 s: the same mechanism, less waiting; still renewed every 1.3 s,
  // so a machine with both cores busy does not let a claim lapse while its process is alive.
  const env = async () => ({ DATABASE_URL: await createTestDatabase(), LOG_LEVEL: 'silent', WEBHOOK_TIMEOUT_MS: '30000', WEBHOOK_CONCURRENCY: String(CONCURRENCY), WEBHOOK_LEASE_MS: '4000' });

  it('are all delivered after a restart: none lost, and sent twice only if their request was in flight at the kill', async () => {
    const config = await env();
    pool = new pg.Pool({ connectionString: config.DATABASE_URL, max: 2 });
    receiver = new HoldingReceiver(ANSWERED);
    const url = await receiver.start();
    const first = await startRelayProcess(config); // migrates the database
    relays.push(first);
    const acknowledged = await queueEvents(pool, first, url, EVENTS);
    // A claim of 100: 50 answered, CONCURRENCY requests held open, the rest waiting behind them.
    await until(() => receiver!.held.length === CONCURRENCY, 'requests in flight', 30_000);
    await untilAnsweredRecorded(pool);
    await kill(first);
    await until(() => receiver!.cut.size === CONCURRENCY, 'the killed relay\'s connections closed');
    receiver.release();

    relays.push(await startRelayProcess(config));
    await until(() => acknowledged.every((id) => receiver!.delivered.has(id)), 'every acknowledged event delivered', REDELIVERY_WAIT_MS);
    await until(async () => (await queueLength(pool!)) === 0, 'an empty queue');
    expectDeliveredOnce(receiver, acknowledged);
  }, 150_000);

  it('are delivered by another relay process still running, without a restart', async () => {
    const config = await env();
    pool = new pg.Pool({ connectionString: config.DATABASE_URL, max: 2 });
    receiver = new HoldingReceiver(ANSWERED);
    const url = await receiver.start();
    const doomed = await startRelayProcess(config);
    const survivor = await startRelayProcess(config);
    relays.push(doomed, survivor);
    const acknowledged = await queueEvents(pool, doomed, url, EVENTS);
    // Each process claims 100 and has CONCURRENCY requests held open.
    await until(() => receiver!.held.length === 2 * CONCURRENCY, 'requests in flight from both processes', 30_000);
    await untilAnsweredRecorded(pool);
    await kill(doomed);
    await until(() => receiver!.cut.size === CONCURRENCY, 'the killed relay\'s connections closed');
    receiver.release(); // the survivor's held requests are answered now

    await until(() => acknowledged.every((id) => receiver!.delivered.has(id)), 'every acknowledged event delivered', REDELIVERY_WAIT_MS);
    await until(async () => (await queueLength(pool!)) === 0, 'an empty queue');
    expectDeliveredOnce(receiver, acknowledged);
  }, 150_000);
});

describe('webhook claim leases', () => {
  let relay: TestRelay;
  beforeAll(async () => {
    relay = await startTestRelay({ WEBHOOK_DELIVERY: 'false' }); // the workers here are the test's own
  });
  afterAll(async () => {
    await relay?.close();
  });
  const pool = () => relay.db.pool;

  async function queueRows(url: string, count: number): Promise<number> {
    const endpoint = await changeEndpoints(pool(), async (c) => (await c.query<{ id: number }>(`INSERT INTO webhook_endpoints (url, filters) VALUES ($1, '[{"kinds":[40002]}]') RETURNING id`, [url])).rows[0].id);
    await pool().query(
      `INSERT INTO webhook_deliveries (endpoint_id, event_id, payload)
       SELECT $1, decode(lpad(to_hex(i), 64, '0'), 'hex'), format('{"id":"%s"}', lpad(to_hex(i), 64, '0')) FROM generate_series(1, $2::int) i`,
      [endpoint, count],
    );
    return endpoint;
  }

  it('a renewal extends only the rows still at the attempt its claim counted', async () => {
    await pool().query('DELETE FROM webhook_deliveries');
    const endpoint = await queueRows('http://127.0.0.1:1/', 3);
    const first = await claimDeliveries(pool(), 10, 60_000);
    expect(first.length).toBe(3);
    // The first row's lease lapses and another worker claims it: attempt 2 is that worker's.
    await pool().query("UPDATE webhook_deliveries SET visible_at = now() - interval '1 second' WHERE id = $1", [first[0].id]);
    const second = await claimDeliveries(pool(), 10, 60_000);
    expect(second.map((d) => [d.id, d.attempts])).toEqual([[first[0].id, 2]]);

    expect(await renewLeases(pool(), first, 3_600_000)).toBe(2);
    const { rows } = await pool().query<{ id: string; hidden: number }>(
      'SELECT id::text AS id, extract(epoch FROM visible_at - now())::float8 AS hidden FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id',
      [endpoint],
    );
    expect(rows[0].hidden).toBeLessThanOrEqual(60); // still the second claim's lease
    expect(rows.slice(1).every((r) => r.hidden > 3000)).toBe(true);
  });

  it('a worker renews the lease of a request that outlives it, so no other worker sends it meanwhile; its outcome ends the renewals', async () => {
    await pool().query('DELETE FROM webhook_deliveries');
    let requests = 0;
    let answered = false;
    // Held for two and a half leases, then refused with a long Retry-After.
    const server = createServer((req, res) => {
      requests++;
      req.resume();
      setTimeout(() => {
        res.statusCode = 503;
        res.setHeader('Retry-After', '3600');
        res.end();
        answered = true;
      }, 7500);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const settings = { concurrency: 2, timeoutMs: 30_000, maxAgeMs: 3_600_000, leaseMs: 3000, pollMs: 100 };
    const workers = [1, 2].map(() => new WebhookWorker(pool(), createLogger('silent'), settings).start());
    try {
      await queueRows(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, 1);
      await until(() => answered, 'the held request answered');
      await until(async () => (await pool().query('SELECT 1 FROM webhook_deliveries WHERE last_error IS NOT NULL')).rowCount === 1, 'the failure recorded');
      await new Promise((r) => setTimeout(r, 1500)); // past the next renewal tick
      expect(requests).toBe(1);
      const { rows } = await pool().query<{ attempts: number; hidden: number }>('SELECT attempts, extract(epoch FROM visible_at - now())::float8 AS hidden FROM webhook_deliveries');
      expect(rows).toEqual([{ attempts: 1, hidden: expect.any(Number) }]);
      expect(rows[0].hidden).toBeGreaterThan(3000); // Retry-After stands: no renewal after the outcome
      expect(workers.reduce((n, w) => n + w.stats.renewed, 0)).toBeGreaterThanOrEqual(1);
    } finally {
      await Promise.all(workers.map((w) => w.stop()));
      server.closeAllConnections();
      server.close();
    }
  }, 30_000);
});
