// The drain (SHUTDOWN_DRAIN_MS): from the moment a stop begins, /ready tells a load balancer to take
// the relay out of rotation and new connections are refused, while the clients already connected
// are served as before, until the sockets close.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let http: string;
let endDrain: AbortController;
const clients: TestClient[] = [];

beforeEach(async () => {
  relay = await startTestRelay();
  http = relay.url.replace(/^ws/, 'http');
  endDrain = new AbortController();
});

afterEach(async () => {
  clients.splice(0).forEach((c) => c.ws.terminate());
  endDrain.abort();
  await relay.close();
});

/** Begins a drain that lasts until the test ends it. */
const beginDrain = () => relay.relay.drain(600_000, endDrain.signal);

async function connect(): Promise<TestClient> {
  const client = await TestClient.connect(relay.url);
  clients.push(client);
  return client;
}

describe('the drain before a stop', () => {
  it('/ready answers 503 {"status":"stopping"} from its start, while /health still answers 200', async () => {
    expect((await fetch(`${http}/ready`)).status).toBe(200);
    void beginDrain();
    const ready = await fetch(`${http}/ready`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toEqual({ status: 'stopping' });
    expect((await fetch(`${http}/health`)).status).toBe(200);
  });

  it('refuses a new WebSocket connection with HTTP 503', async () => {
    void beginDrain();
    await expect(connect()).rejects.toThrow('Unexpected server response: 503');
  });

  it('serves a client connected before it: its event is answered OK true and delivered live to a subscriber', async () => {
    const publisher = await connect();
    const subscriber = await connect();
    const alice = newSigner();
    await subscriber.query('live', { authors: [alice.pubkey] });
    void beginDrain();
    const event = alice.sign({ content: 'published during the drain' });
    expect(await publisher.publish(event)).toEqual([true, '']);
    await subscriber.waitFor((m) => m[0] === 'EVENT' && m[1] === 'live');
    expect(subscriber.liveEvents('live')).toEqual([event]);
    expect(await publisher.fetch('back', { ids: [event.id] })).toEqual([event]);
  });

  it('ends early when told to (a second signal); the close that follows sends each client 1001', async () => {
    const client = await connect();
    const drained = beginDrain();
    endDrain.abort();
    await drained;
    expect(await client.publish(newSigner().sign({ content: 'after the drain, before the close' }))).toEqual([true, '']);
    await relay.relay.close();
    expect((await client.closed()).code).toBe(1001);
  });
});
