// A REQ answered from the hot tier sees what another process committed before the REQ arrived, also
// when that commit's notification is still on its way: two relay processes on one database, started
// as operators run them; a client publishes to B and, the moment B answers OK true, asks A for that
// event. A holds a tier and answers from memory (the test checks it did); B holds none. Other
// clients publish to both meanwhile, so A's feed is sometimes behind and sometimes not when a probe
// arrives.
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRelayProcess, waitForHotTier, type RelayProcess } from '../../bench/lib/relay-process.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, type Signer } from '../support/keys.js';

const PROBES = 200;
/** Probes under way at once, each on its own pair of connections. */
const LANES = 4;
/** Publishers of the other traffic, each sending its next event when the last is answered. */
const LOADERS = 6;

let a: RelayProcess;
let b: RelayProcess;
const sockets: WebSocket[] = [];

beforeAll(async () => {
  const databaseUrl = await createTestDatabase();
  [a, b] = await Promise.all([
    startRelayProcess({ DATABASE_URL: databaseUrl, HOT_TIER_MB: '64', HOT_TIER_SNAPSHOT: 'false' }),
    startRelayProcess({ DATABASE_URL: databaseUrl, HOT_TIER_MB: '0' }),
  ]);
  await waitForHotTier(a, 60_000);
});

afterAll(async () => {
  sockets.forEach((s) => s.terminate());
  await Promise.all([a?.stop(), b?.stop()]);
});

async function open(url: string): Promise<WebSocket> {
  const ws = new WebSocket(url);
  sockets.push(ws);
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  return ws;
}

/** A counter's value in A's /metrics (0 while it has none). */
async function counterA(series: string): Promise<number> {
  const text = await (await fetch(`${a.url.replace('ws', 'http')}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return Number(line?.slice(series.length + 1) ?? 0);
}

/** Publishes to `url` without pause, each event once the last is answered, until stopped. */
async function load(url: string, signer: Signer, stopped: () => boolean): Promise<number> {
  const ws = await open(url);
  let sent = 0;
  await new Promise<void>((resolve) => {
    const next = () => {
      if (stopped()) return resolve();
      ws.send(JSON.stringify(['EVENT', signer.sign({ content: `load ${sent++}` })]));
    };
    ws.on('message', (data) => {
      if (JSON.parse(String(data))[0] === 'OK') next();
    });
    next();
  });
  return sent;
}

/**
 * One lane: an event published to B and, in the same turn as its OK true arrives, a REQ for it to
 * A; then the next. Returns the ids A did not return.
 */
async function probe(lane: number, count: number, signer: Signer): Promise<string[]> {
  const [toB, toA] = await Promise.all([open(b.url), open(a.url)]);
  const missed: string[] = [];
  for (let i = 0; i < count; i++) {
    const event: NostrEvent = signer.sign({ content: `probe ${lane}.${i}`, tags: [['t', `lane${lane}`]] });
    const found = await new Promise<boolean>((resolve, reject) => {
      const seen: string[] = [];
      const onA = (data: WebSocket.RawData) => {
        const m = JSON.parse(String(data));
        if (m[1] !== event.id) return;
        if (m[0] === 'EVENT') seen.push(m[2].id);
        if (m[0] === 'EOSE' || m[0] === 'CLOSED') {
          toA.off('message', onA);
          toA.send(JSON.stringify(['CLOSE', event.id]));
          resolve(seen.includes(event.id));
        }
      };
      const onB = (data: WebSocket.RawData) => {
        const m = JSON.parse(String(data));
        if (m[0] !== 'OK' || m[1] !== event.id) return;
        toB.off('message', onB);
        if (m[2] !== true) return reject(new Error(`B refused the probe: ${m[3]}`));
        toA.send(JSON.stringify(['REQ', event.id, { ids: [event.id] }]));
      };
      toA.on('message', onA);
      toB.on('message', onB);
      toB.send(JSON.stringify(['EVENT', event]));
    });
    if (!found) missed.push(event.id);
  }
  return missed;
}

describe('a REQ to one process right after another process acknowledged an event', () => {
  it(`finds the event every time (${PROBES} probes, with other writes to both processes meanwhile)`, async () => {
    const fromMemory = 'pgrelay_hot_tier_reqs_total{answered="memory"}';
    const before = await counterA(fromMemory);
    let done = false;
    const loaders = Array.from({ length: LOADERS }, (_, i) => load(i % 2 ? a.url : b.url, newSigner(), () => done));
    const probes = Array.from({ length: LANES }, (_, lane) => probe(lane, PROBES / LANES, newSigner()));
    const missed = (await Promise.all(probes)).flat();
    done = true;
    const loaded = await Promise.all(loaders);
    expect(missed).toEqual([]);
    expect(loaded.every((n) => n > 0)).toBe(true);
    // Answered from A's memory, not by PostgreSQL (which would find them whatever the tier knew).
    expect((await counterA(fromMemory)) - before).toBeGreaterThanOrEqual(PROBES);
  }, 180_000);
});
