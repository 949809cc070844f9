// Webhook delivery against real relays, a real database and a real local HTTP receiver:
// every matching event arrives, signed so that the `standardwebhooks` package verifies it, and no
// other; a receiver that fails or stalls still gets everything; batches, Retry-After, the dead state;
// two relay processes on one database deliver each event once.
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { changeEndpoints } from '../../src/store/outbox.js';
import { TestClient } from '../support/client.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { until } from '../support/wait.js';

const SECRET = `whsec_${randomBytes(24).toString('base64')}`;

/** A local receiver; `answer` decides each response. Records every verified request. */
class Receiver {
  readonly received: Array<{ id: string; body: { type: string; data: NostrEvent | NostrEvent[] } }> = [];
  readonly refused: string[] = [];
  requests = 0;
  private server!: Server;
  answer: (req: IncomingMessage, res: ServerResponse, n: number) => void = (_, res) => res.end('ok');
  private readonly verifier = new Webhook(SECRET);

  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const n = ++this.requests;
        const text = Buffer.concat(chunks).toString();
        try {
          this.verifier.verify(text, req.headers as Record<string, string>);
        } catch (err) {
          this.refused.push((err as Error).message);
          res.statusCode = 400;
          return res.end();
        }
        // What a receiver keeps is what it answered 2xx to.
        res.on('finish', () => {
          if (res.statusCode >= 200 && res.statusCode < 300) this.received.push({ id: req.headers['webhook-id'] as string, body: JSON.parse(text) });
        });
        this.answer(req, res, n);
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`;
  }

  events(): string[] {
    return this.received.flatMap((r) => (Array.isArray(r.body.data) ? r.body.data : [r.body.data])).map((e) => e.id);
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }
}

async function addEndpoint(relay: TestRelay, url: string, filters: object[], batchSize = 1): Promise<number> {
  return changeEndpoints(relay.db.pool, async (c) =>
    (await c.query<{ id: number }>('INSERT INTO webhook_endpoints (url, filters, secret, batch_size) VALUES ($1, $2, $3, $4) RETURNING id', [url, JSON.stringify(filters), SECRET, batchSize])).rows[0].id);
}
async function publishAll(client: TestClient, events: NostrEvent[]): Promise<void> {
  for (const e of events) expect(await client.publish(e)).toEqual([true, '']);
}
const sortedIds = (events: NostrEvent[]) => events.map((e) => e.id).sort();

describe('webhook delivery', () => {
  let relay: TestRelay;
  let client: TestClient;
  beforeAll(async () => {
    relay = await startTestRelay({ WEBHOOK_TIMEOUT_MS: '500' });
    client = await TestClient.connect(relay.url);
  });
  afterAll(async () => {
    client?.close();
    await relay?.close();
  });

  it('delivers every matching event, signed (verified with standardwebhooks), and no other', async () => {
    const receiver = new Receiver();
    const url = await receiver.start();
    try {
      const alice = newSigner();
      await addEndpoint(relay, url, [{ authors: [alice.pubkey], kinds: [1] }]);
      const matching = Array.from({ length: 20 }, (_, i) => alice.sign({ content: `hook ${i}` }));
      const other = [alice.sign({ kind: 7, content: '+' }), newSigner().sign({ content: 'not hers' })];
      await publishAll(client, [...matching, ...other]);
      await until(() => receiver.received.length >= 20, 'every delivery');
      await new Promise((r) => setTimeout(r, 300));
      expect(receiver.events().sort()).toEqual(sortedIds(matching));
      expect(receiver.refused).toEqual([]);
      expect(receiver.received[0].body.type).toBe('event');
      expect(matching).toContainEqual(receiver.received[0].body.data);
      // Delivered rows leave the queue.
      await until(async () => (await relay.db.pool.query('SELECT 1 FROM webhook_deliveries')).rowCount === 0, 'an empty queue');
      const metrics = await (await fetch(`${relay.url.replace('ws', 'http')}/metrics`)).text();
      expect(Number(/^pgrelay_webhook_deliveries_total\{outcome="delivered"\} (\d+)$/m.exec(metrics)?.[1])).toBe(20);
      expect(metrics).toMatch(/^pgrelay_webhook_queue_deliveries \d+$/m);
    } finally {
      await receiver.close();
    }
  });

  it('still delivers everything to a receiver that fails 30 % of requests and stalls others', async () => {
    const receiver = new Receiver();
    const url = await receiver.start();
    receiver.answer = (_, res, n) => {
      if (n % 10 < 3) {
        res.statusCode = 500;
        return res.end('flaky');
      }
      if (n % 10 === 5) return setTimeout(() => res.end('late'), 1500); // past WEBHOOK_TIMEOUT_MS: a failure
      res.end('ok');
    };
    try {
      const bob = newSigner();
      await addEndpoint(relay, url, [{ authors: [bob.pubkey] }]);
      const events = Array.from({ length: 30 }, (_, i) => bob.sign({ content: `flaky ${i}` }));
      await publishAll(client, events);
      await until(() => new Set(receiver.events()).size >= 30, 'every event despite failures', 25_000);
      expect([...new Set(receiver.events())].sort()).toEqual(sortedIds(events));
      // A retried delivery keeps its webhook-id, so the receiver can tell a repeat.
      const ids = new Map<string, string>();
      for (const r of receiver.received) {
        const event = (r.body.data as NostrEvent).id;
        expect(ids.get(event) ?? r.id).toBe(r.id);
        ids.set(event, r.id);
      }
    } finally {
      await receiver.close();
    }
  }, 40_000);

  it('sends batches as one JSON array when the endpoint has a batch size', async () => {
    const receiver = new Receiver();
    const url = await receiver.start();
    try {
      const carol = newSigner();
      const id = await addEndpoint(relay, url, [{ authors: [carol.pubkey] }], 10);
      await changeEndpoints(relay.db.pool, async (c) => c.query('UPDATE webhook_endpoints SET paused = true WHERE id = $1', [id]));
      const events = Array.from({ length: 25 }, (_, i) => carol.sign({ content: `batch ${i}` }));
      await publishAll(client, events); // queued while paused, so they leave together
      await changeEndpoints(relay.db.pool, async (c) => c.query('UPDATE webhook_endpoints SET paused = false WHERE id = $1', [id]));
      await until(() => receiver.events().length >= 25, 'the batches');
      expect(receiver.received.map((r) => (r.body.data as NostrEvent[]).length)).toEqual([10, 10, 5]);
      expect(receiver.received.every((r) => r.body.type === 'events')).toBe(true);
      expect(receiver.events().sort()).toEqual(sortedIds(events));
    } finally {
      await receiver.close();
    }
  });

  it('delivers ephemeral events and deletion requests that match, like any event', async () => {
    const receiver = new Receiver();
    const url = await receiver.start();
    try {
      const gus = newSigner();
      await addEndpoint(relay, url, [{ authors: [gus.pubkey], kinds: [5, 20001] }]);
      const note = gus.sign({ content: 'to be deleted' }); // kind 1: not for this endpoint
      await publishAll(client, [note]); // this batch also loads the new endpoint
      const ephemeral = gus.sign({ kind: 20001, content: 'typing…' });
      const deletion = gus.sign({ kind: 5, tags: [['e', note.id]] });
      await publishAll(client, [ephemeral, deletion]);
      await until(() => receiver.received.length >= 2, 'both deliveries');
      expect(receiver.events().sort()).toEqual(sortedIds([ephemeral, deletion]));
    } finally {
      await receiver.close();
    }
  });

  it('waits as long as Retry-After says', async () => {
    const receiver = new Receiver();
    const url = await receiver.start();
    const times: number[] = [];
    receiver.answer = (_, res, n) => {
      times.push(Date.now());
      if (n === 1) {
        res.statusCode = 503;
        res.setHeader('Retry-After', '2');
      }
      res.end();
    };
    try {
      const dan = newSigner();
      await addEndpoint(relay, url, [{ authors: [dan.pubkey] }]);
      await publishAll(client, [dan.sign({ content: 'later' })]);
      await until(() => receiver.received.length === 1, 'the retried delivery', 10_000);
      expect(times[1] - times[0]).toBeGreaterThanOrEqual(1900);
    } finally {
      await receiver.close();
    }
  });
});

describe('webhook delivery limits', () => {
  it('marks a delivery dead once older than WEBHOOK_MAX_AGE_SECONDS', async () => {
    const relay = await startTestRelay({ WEBHOOK_MAX_AGE_SECONDS: '1' });
    const client = await TestClient.connect(relay.url);
    const receiver = new Receiver();
    const url = await receiver.start();
    receiver.answer = (_, res) => {
      res.statusCode = 500;
      res.end();
    };
    try {
      const erin = newSigner();
      await addEndpoint(relay, url, [{ authors: [erin.pubkey] }]);
      await publishAll(client, [erin.sign({ content: 'never taken' })]);
      await until(async () => (await relay.db.pool.query('SELECT 1 FROM webhook_deliveries WHERE dead')).rowCount === 1, 'a dead delivery', 15_000);
      const { rows } = await relay.db.pool.query('SELECT last_error, attempts FROM webhook_deliveries');
      expect(rows[0].last_error).toBe('HTTP 500');
      expect(rows[0].attempts).toBeGreaterThanOrEqual(2);
    } finally {
      client.close();
      await receiver.close();
      await relay.close();
    }
  }, 30_000);

  it('sends nothing to an endpoint for 5 s after 10 failures in a row, while the others are served, then delivers everything', async () => {
    const relay = await startTestRelay();
    const client = await TestClient.connect(relay.url);
    const [down, up] = [new Receiver(), new Receiver()];
    const [downUrl, upUrl] = [await down.start(), await up.start()];
    let failing = true;
    down.answer = (_, res) => {
      if (failing) res.statusCode = 503;
      res.end();
    };
    try {
      const [gina, hal] = [newSigner(), newSigner()];
      await addEndpoint(relay, downUrl, [{ authors: [gina.pubkey] }]);
      await addEndpoint(relay, upUrl, [{ authors: [hal.pubkey] }]);
      const refused = Array.from({ length: 12 }, (_, i) => gina.sign({ content: `down ${i}` }));
      await publishAll(client, refused);
      await until(() => down.requests >= 10, 'ten failed attempts');
      const opened = Date.now();
      await new Promise((r) => setTimeout(r, 200));
      const requests = down.requests;
      // Without the circuit, the retries (due after 0.5–1 s, then 1–2 s) would reach the receiver now.
      const served = Array.from({ length: 5 }, (_, i) => hal.sign({ content: `up ${i}` }));
      await publishAll(client, served);
      await until(() => up.received.length === 5, 'the healthy endpoint, served meanwhile');
      await new Promise((r) => setTimeout(r, 3000 - (Date.now() - opened)));
      expect(down.requests).toBe(requests);
      // Postponed, not attempted: the attempts held back are not counted.
      const { rows } = await relay.db.pool.query<{ attempts: number }>('SELECT max(attempts)::int AS attempts FROM webhook_deliveries');
      expect(rows[0].attempts).toBeLessThanOrEqual(2);
      failing = false;
      await until(() => down.received.length === 12, 'every delivery once the circuit lets them through', 15_000);
      expect(Date.now() - opened).toBeGreaterThanOrEqual(4000);
      expect(down.events().sort()).toEqual(sortedIds(refused));
    } finally {
      client.close();
      await Promise.all([down.close(), up.close()]);
      await relay.close();
    }
  }, 30_000);

  it('two relay processes on one database deliver each event once', async () => {
    const a = await startTestRelay();
    const b = await startTestRelay({}, a.config.DATABASE_URL);
    const [ca, cb] = [await TestClient.connect(a.url), await TestClient.connect(b.url)];
    const receiver = new Receiver();
    const url = await receiver.start();
    try {
      const frank = newSigner();
      await addEndpoint(a, url, [{ authors: [frank.pubkey] }]);
      const events = Array.from({ length: 200 }, (_, i) => frank.sign({ content: `both ${i}` }));
      await Promise.all([publishAll(ca, events.slice(0, 100)), publishAll(cb, events.slice(100))]);
      await until(() => receiver.received.length >= 200, 'every delivery');
      await new Promise((r) => setTimeout(r, 500));
      expect(receiver.events().sort()).toEqual(sortedIds(events)); // each once: no row claimed twice
      expect(receiver.requests).toBe(200);
    } finally {
      ca.close();
      cb.close();
      await receiver.close();
      await b.close();
      await a.close();
    }
  });
});
