// Stored events are framed by the relay itself (relay/frames.ts), not by ws: the frames must be
// what ws's own Receiver reads as the same text messages, at every payload-length encoding (7, 16 and
// 64 bits) and with non-ASCII text; and a REQ's answer over a real socket must arrive intact.
import { createRequire } from 'node:module';
import type { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventFrames, eventPrefix } from '../../src/relay/frames.js';
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
});

describe('a REQ answer framed by the relay', () => {
  let relay: TestRelay;
  let client: TestClient;
  beforeAll(async () => {
    relay = await startTestRelay();
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
  });
});
