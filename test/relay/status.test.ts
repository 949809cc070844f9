// The status page's server side: the page for a browser (NIP-11 still for Nostr clients), its
// files, a snapshot as JSON whose counters move with traffic, and the live stream (a snapshot,
// then a tick a second). The page itself is checked in a real browser by npm run check:status-page.
import { get } from 'node:http';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { unique } from '../support/events.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let http: string;
beforeAll(async () => {
  relay = await startTestRelay({ RELAY_NAME: 'status test relay' });
  http = relay.url.replace(/^ws/, 'http');
});
afterAll(() => relay.close());

type Snapshot = {
  relay: { name: string };
  connections: number;
  totals: { eventsIn: number; eventsOut: number; reqs: number };
  kinds: Array<{ kind: number; count: number }>;
  history: { t: number[]; eventsIn: number[] };
  latency: { ok: { n: number; p50: number | null }; req: { n: number } };
};

/** Reads Server-Sent Events from the stream until `count` have arrived. */
async function readEvents(count: number): Promise<Array<{ event: string; data: unknown }>> {
  const controller = new AbortController();
  const res = await fetch(`${http}/status/stream`, { signal: controller.signal });
  expect(res.headers.get('content-type')).toBe('text/event-stream');
  const decoder = new TextDecoder();
  let text = '';
  const events: Array<{ event: string; data: unknown }> = [];
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    text += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = text.indexOf('\n\n')) >= 0) {
      const block = text.slice(0, end);
      text = text.slice(end + 2);
      const event = /^event: (.*)$/m.exec(block)?.[1] ?? 'message';
      events.push({ event, data: JSON.parse(/^data: (.*)$/m.exec(block)![1]) });
    }
    if (events.length >= count) break;
  }
  controller.abort();
  return events;
}

describe('status page', () => {
  it('serves the page to a browser and the NIP-11 document to a Nostr client at the same URL', async () => {
    const page = await fetch(http, { headers: { Accept: 'text/html,application/xhtml+xml' } });
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(await page.text()).toMatch(/<html/i);
    const info = await fetch(http, { headers: { Accept: 'application/nostr+json' } });
    expect(((await info.json()) as { name: string }).name).toBe('status test relay');
  });

  it('serves uPlot from node_modules and the page\'s own files', async () => {
    const uplot = await fetch(`${http}/status/vendor/uPlot.iife.min.js`);
    expect(uplot.status).toBe(200);
    expect(await uplot.text()).toMatch(/uPlot/);
    expect((await fetch(`${http}/status/status.js`)).status).toBe(200);
    // Only the folder's own files have routes: a request never names a path on disk.
    for (const path of ['/status/index.html.bak', '/status/%2e%2e/package.json', '/status/vendor/../../package.json']) {
      const body = await new Promise<string>((resolve, reject) => {
        get({ host: '127.0.0.1', port: relay.relay.port, path, headers: { Accept: '*/*' } }, (res) => {
          let text = '';
          res.on('data', (d) => (text += d));
          res.on('end', () => resolve(text));
        }).once('error', reject);
      });
      expect(body).not.toMatch(/devDependencies|<html/);
    }
  });

  it('gives a snapshot whose counters move as clients publish and query', async () => {
    const before = (await (await fetch(`${http}/status.json`)).json()) as Snapshot;
    expect(before.relay.name).toBe('status test relay');
    const alice = newSigner();
    const c = await TestClient.connect(relay.url);
    for (let i = 0; i < 3; i++) expect(await c.publish(alice.sign({ content: unique('s') }))).toEqual([true, '']);
    expect(await c.fetch('q', { authors: [alice.pubkey] })).toHaveLength(3);
    await new Promise((r) => setTimeout(r, 1100)); // one sample
    const after = (await (await fetch(`${http}/status.json`)).json()) as Snapshot;
    expect(after.totals.eventsIn - before.totals.eventsIn).toBe(3);
    expect(after.totals.eventsOut - before.totals.eventsOut).toBe(3);
    expect(after.totals.reqs - before.totals.reqs).toBe(1);
    expect(after.connections).toBe(1);
    expect(after.kinds).toContainEqual({ kind: 1, count: expect.any(Number) });
    expect(after.latency.ok.n).toBeGreaterThanOrEqual(3);
    expect(after.latency.ok.p50).toBeGreaterThanOrEqual(0);
    expect(after.latency.req.n).toBeGreaterThanOrEqual(1);
    expect(after.history.t.length).toBeGreaterThanOrEqual(1);
    expect(after.history.eventsIn.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(3);
    c.close();
  });

  it('streams a snapshot, then a tick every second with the last second\'s sample', async () => {
    const events = await readEvents(2);
    expect(events[0].event).toBe('snapshot');
    expect(events[0].data).toMatchObject({ relay: { name: 'status test relay' }, history: { t: expect.any(Array) } });
    expect(events[1].event).toBe('tick');
    expect(events[1].data).toMatchObject({ sample: { t: expect.any(Number), eventsIn: expect.any(Number), eventsOut: expect.any(Number), reqs: expect.any(Number) } });
  });

  it('tells clients to connect to RELAY_URL, or to the page\'s own host, never to the path the page was opened at', async () => {
    // The page's own code, as the browser gets it, run on the inputs a browser would give it.
    const page = await (await fetch(`${http}/status`, { headers: { Accept: 'text/html' } })).text();
    expect(page).toContain('src="/status/connect-url.js"');
    const code = await (await fetch(`${http}/status/connect-url.js`)).text();
    const connectUrl = (relayUrl: unknown, location: object): string => {
      const scope: { relayConnectUrl?: (u: unknown, l: object) => string } = {};
      runInNewContext(code, { window: scope });
      return scope.relayConnectUrl!(relayUrl, location);
    };
    const opened = { protocol: 'http:', host: '127.0.0.1:8008', pathname: '/status' };
    expect(connectUrl(null, opened)).toBe('ws://127.0.0.1:8008');
    expect(connectUrl(null, { protocol: 'https:', host: 'relay.example.com', pathname: '/' })).toBe('wss://relay.example.com');
    expect(connectUrl('wss://relay.example.com/nostr', opened)).toBe('wss://relay.example.com/nostr');
    expect(connectUrl('https://relay.example.com', opened)).toBe('wss://relay.example.com');

    // The snapshot carries RELAY_URL when the operator set it, and null otherwise.
    expect(((await (await fetch(`${http}/status.json`)).json()) as { relayUrl: unknown }).relayUrl).toBeNull();
    const named = await startTestRelay({ RELAY_URL: 'wss://relay.example.com' });
    try {
      const snapshot = (await (await fetch(`${named.url.replace(/^ws/, 'http')}/status.json`)).json()) as { relayUrl: unknown };
      expect(snapshot.relayUrl).toBe('wss://relay.example.com');
      expect(connectUrl(snapshot.relayUrl, opened)).toBe('wss://relay.example.com');
    } finally {
      await named.close();
    }
  });

  it('is not served with STATUS_PAGE=false: a browser gets the plain text page', async () => {
    const off = await startTestRelay({ STATUS_PAGE: 'false' });
    try {
      const base = off.url.replace(/^ws/, 'http');
      const page = await fetch(base, { headers: { Accept: 'text/html' } });
      expect(page.headers.get('content-type')).toMatch(/^text\/plain/);
      expect((await fetch(`${base}/status.json`)).headers.get('content-type')).not.toMatch(/json/);
    } finally {
      await off.close();
    }
  });
});
