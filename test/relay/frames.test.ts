// Stored events are framed by the relay itself (relay/frames.ts), not by ws: the frames must be
// what ws's own Receiver reads as the same text messages, at every payload-length encoding (7, 16 and
// 64 bits) and with non-ASCII text; and a REQ's answer over a real socket must arrive intact.
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import type { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventFrames, eventPrefix, textFrame, writeEventFrames } from '../../src/relay/frames.js';
import { TestClient } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

// ws's frame parser; exported by the package, not declared by its types.
const { Receiver } = createRequire(import.meta.url)('ws') as { Receiver: new (options: { isServer: boolean }) => Writable };

/** The text messages ws reads from these bytes, as a client would. */
function read(bytes: Buffer[]): Array<{ text: string; binary: boolean }> {
  const receiver = new Receiver({ isServer: false });
  const out: Array<{ text: string; binary: boolean }> = [];
  receiver.on('message', (data: Buffer, binary: boolean) => out.push({ text: data.toString('utf8'), binary }));
  receiver.on('error', (err: Error) => {
    throw err;
  });
  for (const b of bytes) receiver.write(b);
  return out;
}

const message = (subId: string, raw: string) => `["EVENT",${JSON.stringify(subId)},${raw}]`;

/** A raw event whose whole EVENT message for `subId` is exactly `bytes` long (ASCII filler). */
function rawOfMessageBytes(subId: string, bytes: number, filler = 'x'): string {
  const shell = (content: string) => JSON.stringify({ c: content });
  const overhead = Buffer.byteLength(message(subId, shell('')));
  const unit = Buffer.byteLength(filler);
  const raw = shell(filler.repeat(Math.floor((bytes - overhead) / unit)) + 'y'.repeat((bytes - overhead) % unit));
  expect(Buffer.byteLength(message(subId, raw))).toBe(bytes);
  return raw;
}

describe('eventFrames', () => {
  const subId = 'sub "ü" 1';
  const prefix = eventPrefix(subId);

  it('frames each event as one text message at every length encoding, with non-ASCII text', () => {
    const rows = [125, 126, 127, 65535, 65536, 70000, 1].map((n) => ({ raw: rawOfMessageBytes(subId, Math.max(n, 40)) }));
    rows.push({ raw: JSON.stringify({ content: 'héllo wörld 日本語 🎉 \u2028', tags: [['t', 'ñ']] }) });
    rows.push({ raw: rawOfMessageBytes(subId, 65536, '🎉') });
    const { frames, next } = eventFrames(prefix, rows, 0, Infinity);
    expect(next).toBe(rows.length);
    expect(read([frames])).toEqual(rows.map((r) => ({ text: message(subId, r.raw), binary: false })));
  });

  it('cuts the events into chunks that end with the event reaching chunkBytes, nothing lost or repeated', () => {
    const rows = [40, 300, 5000, 200, 200, 200, 90000, 50].map((n) => ({ raw: rawOfMessageBytes(subId, Math.max(n, 40)) }));
    const chunks: Buffer[] = [];
    const ends: number[] = [];
    for (let i = 0; i < rows.length; ) {
      const { frames, next } = eventFrames(prefix, rows, i, 1000);
      expect(next).toBeGreaterThan(i);
      chunks.push(frames);
      ends.push(next);
      i = next;
    }
    expect(ends).toEqual([3, 7, 8]); // 40 + 300 < 1000, + 5000 reaches it; 3 × 200 < 1000, + 90000; 50
    expect(read(chunks).map((m) => m.text)).toEqual(rows.map((r) => message(subId, r.raw)));
  });

  it('puts the trailer (EOSE) after the last event, in the chunk that reaches it and no other', () => {
    const rows = [40, 300, 5000, 200, 90000, 50].map((n) => ({ raw: rawOfMessageBytes(subId, Math.max(n, 40)) }));
    const eose = JSON.stringify(['EOSE', subId]);
    const trailer = textFrame(eose);
    const chunks: Buffer[] = [];
    for (let i = 0; i < rows.length; ) {
      const { frames, next } = eventFrames(prefix, rows, i, 1000, undefined, trailer);
      chunks.push(frames);
      i = next;
    }
    const perChunk = chunks.map((c) => read([c]).map((m) => m.text));
    expect(perChunk.slice(0, -1).flat()).not.toContain(eose);
    expect(perChunk.at(-1)).toEqual([message(subId, rows[5]!.raw), eose]);
    expect(read(chunks)).toEqual([...rows.map((r) => ({ text: message(subId, r.raw), binary: false })), { text: eose, binary: false }]);
  });

  it('frames any text whole, at every length encoding', () => {
    for (const n of [0, 125, 126, 65535, 65536, 70000]) {
      const text = 'ü'.repeat(Math.floor(n / 2)) + 'x'.repeat(n % 2);
      expect(read([textFrame(text)])).toEqual([{ text, binary: false }]);
    }
  });
});

describe('eventFrames with known lengths, into a given buffer', () => {
  const subId = 's';
  const prefix = eventPrefix(subId);

  it('frames ASCII (copied as Latin-1) and non-ASCII events whose UTF-8 length is given', () => {
    const raws = ['{"a":1}', JSON.stringify({ c: 'ñ 日本語 🎉' }), rawOfMessageBytes(subId, 70000), JSON.stringify({ c: 'é'.repeat(40000) })];
    const rows = raws.map((raw) => ({ raw, rawBytes: Buffer.byteLength(raw, 'utf8') }));
    const into = Buffer.alloc(1 << 20, 0xee);
    const { frames, next } = eventFrames(prefix, rows, 0, Infinity, into);
    expect(next).toBe(rows.length);
    expect(frames.buffer).toBe(into.buffer); // encoded in place
    expect(read([frames]).map((m) => m.text)).toEqual(raws.map((raw) => message(subId, raw)));
  });

  it('allocates its own buffer when the given one is too small', () => {
    const rows = [{ raw: rawOfMessageBytes(subId, 5000) }];
    const into = Buffer.alloc(100);
    const { frames } = eventFrames(prefix, rows, 0, Infinity, into);
    expect(frames.buffer).not.toBe(into.buffer);
    expect(read([frames]).map((m) => m.text)).toEqual([message(subId, rows[0]!.raw)]);
  });
});

describe('writeEventFrames', () => {
  const subId = 'w';
  const prefix = eventPrefix(subId);

  /** A connected TCP pair on loopback; the server side collects what it reads. */
  async function pair(): Promise<{ client: net.Socket; server: net.Socket; received: Buffer[]; close: () => void }> {
    const listener = net.createServer();
    listener.listen(0, '127.0.0.1');
    await once(listener, 'listening');
    const accepted = once(listener, 'connection') as Promise<[net.Socket]>;
    const client = net.connect((listener.address() as net.AddressInfo).port, '127.0.0.1');
    await once(client, 'connect');
    const [server] = await accepted;
    const received: Buffer[] = [];
    server.on('data', (b: Buffer) => received.push(b));
    return { client, server, received, close: () => (client.destroy(), server.destroy(), listener.close()) };
  }

  /** Writes every row, as the relay does, chunk after chunk in one turn; resolves with what the other end read. */
  async function writeAll(rows: Array<{ raw: string; rawBytes?: number }>, readerPaused: boolean): Promise<string[]> {
    const { client, server, received, close } = await pair();
    try {
      if (readerPaused) server.pause();
      for (let i = 0; i < rows.length; ) i = writeEventFrames(client, prefix, rows, i);
      const total = rows.reduce((n, r) => n + Buffer.byteLength(message(subId, r.raw)), 0);
      if (readerPaused) {
        expect(client.writableLength).toBeGreaterThan(0); // the kernel did not take it all: writes were left pending
        server.resume();
      }
      // Each frame's header is 2, 4 or 10 bytes: wait for at least the payloads.
      while (received.reduce((n, b) => n + b.length, 0) < total + 2 * rows.length) await new Promise((r) => setTimeout(r, 10));
      await new Promise((r) => setTimeout(r, 50));
      return read(received).map((m) => m.text);
    } finally {
      close();
    }
  }

  // Distinct events, so a chunk encoded over another still waiting to be sent would show.
  const rows = Array.from({ length: 4000 }, (_, i) => {
    const raw = JSON.stringify({ n: i, c: (i % 7 === 0 ? 'ü' : 'x').repeat(1000 + (i % 300)) });
    return { raw, rawBytes: Buffer.byteLength(raw, 'utf8') };
  });

  it('leaves a buffer to the write still holding it: every event arrives intact when the reader lags (~4 MB queued)', async () => {
    expect(await writeAll(rows, true)).toEqual(rows.map((r) => message(subId, r.raw)));
  });

  it('arrives intact when the reader keeps up (the buffer is reused chunk after chunk)', async () => {
    const few = rows.slice(0, 300);
    expect(await writeAll(few, false)).toEqual(few.map((r) => message(subId, r.raw)));
  });
});

// From memory the whole answer is framed at once and EOSE leaves in the last chunk's write; from
// PostgreSQL it comes in batches and EOSE after them.
describe.each([
  ['from the hot tier', '64'],
  ['from PostgreSQL', '0'],
])('a REQ answer framed by the relay, %s', (_, tierMb) => {
  let relay: TestRelay;
  let client: TestClient;
  beforeAll(async () => {
    relay = await startTestRelay({ HOT_TIER_MB: tierMb });
    client = await TestClient.connect(relay.url);
  });
  afterAll(async () => {
    client.close();
    await relay.close();
  });

  it('arrives intact over a real socket, large and non-ASCII events included, then EOSE', async () => {
    const author = newSigner();
    const T = now() - 100;
    const contents = ['', 'a'.repeat(40), 'é'.repeat(70), '日本語'.repeat(2000), '🎉'.repeat(15000), 'x'.repeat(65000)];
    const events = contents.map((content, i) => author.sign({ kind: 1, created_at: T + i, content }));
    for (const e of events) expect(await client.publish(e)).toEqual([true, '']);
    const mark = client.mark;
    const got = await client.fetch('big', { authors: [author.pubkey] });
    expect(got).toEqual([...events].reverse());
    // Nothing else arrived on the way: the EVENTs, then EOSE, in that order.
    expect(client.messages.slice(mark, mark + events.length + 1).map((m) => m[0])).toEqual([...events.map(() => 'EVENT'), 'EOSE']);
    const text = await (await fetch(`${relay.url.replace('ws', 'http')}/metrics`)).text();
    const fromMemory = Number(/^pgrelay_hot_tier_reqs_total\{answered="memory"\} (\d+)$/m.exec(text)?.[1] ?? 0);
    expect(fromMemory).toBe(tierMb === '0' ? 0 : 1);
  });
});

describe('client frames', () => {
  it('are unmasked by bufferutil\'s native code where it ships a binary for the platform (ws falls back to a JavaScript loop)', () => {
    const require = createRequire(import.meta.url);
    const prebuilds = path.join(path.dirname(require.resolve('bufferutil')), 'prebuilds', `${process.platform}-${process.arch}`);
    if (!existsSync(prebuilds)) return console.warn(`bufferutil ships no binary for ${process.platform}-${process.arch}: ws unmasks in JavaScript`);
    expect(require('bufferutil').unmask).not.toBe(require('bufferutil/fallback').unmask);
  });
});
