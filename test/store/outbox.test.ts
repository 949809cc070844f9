// Webhooks' outbox and queue against the real relay and database: a delivery
// is enqueued with the event that matches an endpoint, in the event's transaction, once per endpoint;
// endpoint changes take effect for the next batch; deliveries are claimed without overlap, come back
// after their visibility timeout, and stay away once delivered, delayed, dead or paused.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { changeEndpoints, parseEndpointFilters } from '../../src/store/outbox.js';
import { removeEndpoint } from '../../src/store/webhook-endpoints.js';
import { claimDeliveries, completeDeliveries, failDeliveries } from '../../src/store/webhook-queue.js';
import { TestClient } from '../support/client.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let client: TestClient;
beforeAll(async () => {
  relay = await startTestRelay({ WEBHOOK_DELIVERY: 'false' }); // the queue is examined, not emptied
  client = await TestClient.connect(relay.url);
});
afterAll(async () => {
  client?.close();
  await relay?.close();
});

const pool = () => relay.db.pool;
async function addEndpoint(filters: object[], paused = false): Promise<number> {
  return changeEndpoints(pool(), async (c) => (await c.query<{ id: number }>('INSERT INTO webhook_endpoints (url, filters, paused) VALUES ($1, $2, $3) RETURNING id', ['http://127.0.0.1:1/hook', JSON.stringify(filters), paused])).rows[0].id);
}
async function queued(endpoint: number): Promise<Array<{ event: string; payload: string }>> {
  const { rows } = await pool().query<{ event: string; payload: string }>("SELECT encode(event_id, 'hex') AS event, payload FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id", [endpoint]);
  return rows;
}
async function publishAll(...events: NostrEvent[]): Promise<void> {
  for (const e of events) expect(await client.publish(e)).toEqual([true, '']);
}

describe('webhook outbox', () => {
  const alice = newSigner();
  const bob = newSigner();

  it('enqueues each stored event once per endpoint whose filters match it, with the event as stored', async () => {
    const notes = await addEndpoint([{ kinds: [1], authors: [alice.pubkey] }]);
    const tagged = await addEndpoint([{ '#t': ['hook'] }, { kinds: [7] }]);
    const a = alice.sign({ content: 'to the notes hook' });
    const both = alice.sign({ content: 'both', tags: [['t', 'hook']] });
    const reaction = bob.sign({ kind: 7, content: '+' });
    const neither = bob.sign({ content: 'nobody listens' });
    await publishAll(a, both, reaction, neither);
    expect(await client.publish(a)).toEqual([true, 'duplicate: already have this event']); // stored once, enqueued once
    expect((await queued(notes)).map((r) => r.event)).toEqual([a.id, both.id]);
    expect((await queued(tagged)).map((r) => r.event)).toEqual([both.id, reaction.id]);
    expect(JSON.parse((await queued(notes))[0].payload)).toEqual(a);
  });

  it('uses an endpoint from the first batch after it was added, and none after it was removed', async () => {
    const carol = newSigner();
    const before = carol.sign({ content: 'before' });
    await publishAll(before);
    const id = await addEndpoint([{ authors: [carol.pubkey] }]);
    const after = carol.sign({ content: 'after' });
    await publishAll(after);
    expect((await queued(id)).map((r) => r.event)).toEqual([after.id]);
    await changeEndpoints(pool(), (c) => c.query('DELETE FROM webhook_endpoints WHERE id = $1', [id]));
    await publishAll(carol.sign({ content: 'removed' }));
    expect(await queued(id)).toEqual([]);
  });

  it('refuses endpoint filters that are not NIP-01 filters', () => {
    expect(parseEndpointFilters([{ kinds: 'x' }])).toEqual({ ok: false, reason: 'invalid: "kinds" must be an array' });
    expect(parseEndpointFilters([])).toMatchObject({ ok: false });
    expect(parseEndpointFilters({ kinds: [1] })).toMatchObject({ ok: false });
  });
});

describe('webhook queue', () => {
  it('claims in batches without overlap, hides claims until their visibility timeout, and deletes what was delivered', async () => {
    await pool().query('DELETE FROM webhook_deliveries');
    const dave = newSigner();
    const id = await addEndpoint([{ authors: [dave.pubkey] }]);
    const events = Array.from({ length: 60 }, (_, i) => dave.sign({ content: `q${i}` }));
    await publishAll(...events);
    const [x, y] = await Promise.all([claimDeliveries(pool(), 40, 60_000), claimDeliveries(pool(), 40, 60_000)]);
    const claimed = [...x, ...y].map((d) => d.eventId);
    expect(claimed.length).toBe(60);
    expect(new Set(claimed).size).toBe(60); // no row claimed twice
    expect(await claimDeliveries(pool(), 100, 60_000)).toEqual([]); // all hidden
    await completeDeliveries(pool(), x);
    // A claim that is not completed comes back after its visibility timeout, one attempt later.
    await pool().query("UPDATE webhook_deliveries SET visible_at = now() - interval '1 second' WHERE endpoint_id = $1", [id]);
    const again = await claimDeliveries(pool(), 100, 60_000);
    expect(again.map((d) => d.id).sort()).toEqual(y.map((d) => d.id).sort());
    expect(again.every((d) => d.attempts === 2)).toBe(true);
    // The first claim's worker finishing late (after the second claim) changes nothing.
    await completeDeliveries(pool(), y);
    expect((await queued(id)).length).toBe(again.length);
    await completeDeliveries(pool(), again);
    expect(await queued(id)).toEqual([]);
  });

  it('delays a failed delivery, never claims a dead one, and keeps a paused endpoint\'s queue', async () => {
    await pool().query('DELETE FROM webhook_deliveries');
    const erin = newSigner();
    const live = await addEndpoint([{ authors: [erin.pubkey] }]);
    const paused = await addEndpoint([{ authors: [erin.pubkey] }], true);
    await publishAll(erin.sign({ content: 'one' }), erin.sign({ content: 'two' }));
    expect((await queued(paused)).length).toBe(2); // queued while paused, delivered once resumed
    const [first, second] = await claimDeliveries(pool(), 10, 60_000);
    expect([first.endpointId, second.endpointId]).toEqual([live, live]);
    await failDeliveries(pool(), [first], 'HTTP 500', 60_000);
    await failDeliveries(pool(), [second], 'gone', 0, true);
    await pool().query("UPDATE webhook_deliveries SET visible_at = now() - interval '1 second' WHERE endpoint_id = $1 AND NOT dead AND id <> $2", [live, first.id]);
    expect(await claimDeliveries(pool(), 10, 60_000)).toEqual([]);
    const { rows } = await pool().query('SELECT last_error, dead FROM webhook_deliveries WHERE id = ANY($1::bigint[]) ORDER BY id', [[first.id, second.id]]);
    expect(rows).toEqual([{ last_error: 'HTTP 500', dead: false }, { last_error: 'gone', dead: true }]);
    await changeEndpoints(pool(), (c) => c.query('UPDATE webhook_endpoints SET paused = false WHERE id = $1', [paused]));
    expect((await claimDeliveries(pool(), 10, 60_000)).map((d) => d.endpointId)).toEqual([paused, paused]);
  });

  it('claims the deliveries visible longest first, across endpoints', async () => {
    await pool().query('DELETE FROM webhook_deliveries');
    const [a, b] = [await addEndpoint([{ kinds: [40001] }]), await addEndpoint([{ kinds: [40001] }])];
    // Visible 1…6 s ago, alternating endpoints: a claim of 4 takes the 4 oldest, 2 of each.
    await pool().query(
      `INSERT INTO webhook_deliveries (endpoint_id, event_id, payload, visible_at)
       SELECT CASE WHEN i % 2 = 0 THEN $1::int ELSE $2::int END, decode(lpad(to_hex(i), 64, '0'), 'hex'), '{}', now() - i * interval '1 second'
         FROM generate_series(1, 6) i`,
      [a, b],
    );
    const claimed = await claimDeliveries(pool(), 4, 60_000);
    expect(claimed.map((d) => parseInt(d.eventId, 16)).sort()).toEqual([3, 4, 5, 6]);
    expect(claimed.filter((d) => d.endpointId === a).length).toBe(2);
  });

  it('removes an endpoint with a queue longer than one batch, counting each delivery dropped, while the writer goes on queueing for it', async () => {
    await pool().query('DELETE FROM webhook_deliveries');
    // Statistics taken while the queue was empty, as autovacuum leaves a quiet queue that then backs up:
    // with them, a batch written as `id IN (SELECT … LIMIT n)` ran past the statement timeout.
    await pool().query('ANALYZE webhook_deliveries');
    const frank = newSigner();
    const id = await addEndpoint([{ authors: [frank.pubkey] }]);
    await pool().query(
      `INSERT INTO webhook_deliveries (endpoint_id, event_id, payload, dead)
       SELECT $1, decode(lpad(to_hex(i), 64, '0'), 'hex'), '{}', i <= 1500 FROM generate_series(1, 25000) i`,
      [id],
    );
    const publishing = Promise.all(Array.from({ length: 30 }, (_, i) => client.publish(frank.sign({ content: `during removal ${i}` }))));
    const dropped = await removeEndpoint(pool(), id);
    const published = await publishing;
    expect(published.every(([ok]) => ok)).toBe(true);
    expect(dropped!.dead).toBe(1500);
    expect(dropped!.queued).toBeGreaterThanOrEqual(23500);
    expect(dropped!.queued).toBeLessThanOrEqual(23500 + 30);
    expect(await queued(id)).toEqual([]);
    expect((await pool().query('SELECT 1 FROM webhook_endpoints WHERE id = $1', [id])).rowCount).toBe(0);
    expect(await removeEndpoint(pool(), id)).toBeUndefined();
    // The writer stores the next events for nobody.
    expect(await client.publish(frank.sign({ content: 'after removal' }))).toEqual([true, '']);
    expect(await queued(id)).toEqual([]);
  });
});
