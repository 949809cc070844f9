// NIP-77 interop: our Negentropy V1 core against an independent implementation, @nostr-dev-kit/sync, in both
// roles and byte for byte. One known difference, checked explicitly: NDK re-encodes a bound it echoes from the
// incoming message (a range's upper bound, infinity included) with its id prefix padded to all 32 bytes, where
// we send the prefix as received. Both decode to the same bound; everything else is byte-identical.
import { Negentropy, NegentropyStorage } from '@nostr-dev-kit/sync';
import { describe, expect, it } from 'vitest';
import { decodeVarint, encodeVarint, NegentropyInitiator, NegentropySet, respond } from '../../src/nostr/negentropy.js';

interface Rec { timestamp: number; id: string }
interface Pair { a: Rec[]; b: Rec[]; onlyA: string[]; onlyB: string[] }

const hexOf = (ids: Uint8Array[]): string[] => ids.map((id) => Buffer.from(id).toString('hex'));
const sorted = (ids: Iterable<string>): string[] => [...ids].sort();

/** Two overlapping record sets from a seed; timestamps drawn from `span` values, so equal timestamps are common. */
function makePair(seed: number, shared: number, onlyA: number, onlyB: number, span: number): Pair {
  const random = seededRandom(seed);
  const seen = new Set<string>();
  const record = (): Rec => {
    let id: string;
    do {
      const common = random() < 0.3 ? Math.floor(random() * 31) : 0; // long shared prefixes need long bounds
      id = Array.from({ length: 32 }, (_, i) => (i < common ? 0x5a : Math.floor(random() * 256)).toString(16).padStart(2, '0')).join('');
    } while (seen.has(id));
    seen.add(id);
    return { timestamp: 1_700_000_000 + Math.floor(random() * span), id };
  };
  const both = Array.from({ length: shared }, record);
  const a = Array.from({ length: onlyA }, record);
  const b = Array.from({ length: onlyB }, record);
  return { a: [...both, ...a], b: [...both, ...b], onlyA: sorted(a.map((r) => r.id)), onlyB: sorted(b.map((r) => r.id)) };
}

function storageOf(records: Rec[]): NegentropyStorage {
  const storage = new NegentropyStorage();
  for (const r of records) storage.insert(r.timestamp, r.id);
  storage.seal();
  return storage;
}

/** A message with every bound's id prefix re-encoded without trailing zero bytes: undoes NDK's padding. */
function trimBoundPadding(message: Uint8Array): string {
  const m = Buffer.from(message);
  const parts: Buffer[] = [m.subarray(0, 1)];
  let offset = 1;
  while (offset < m.length) {
    let r = decodeVarint(m, offset); // timestamp
    parts.push(m.subarray(offset, r.offset));
    r = decodeVarint(m, r.offset); // prefix length
    const prefix = m.subarray(r.offset, r.offset + r.value);
    let len = prefix.length;
    while (len > 0 && prefix[len - 1] === 0) len--;
    parts.push(encodeVarint(len), prefix.subarray(0, len));
    const modeStart = r.offset + r.value;
    r = decodeVarint(m, modeStart);
    offset = r.offset;
    if (r.value === 1) offset += 16;
    if (r.value === 2) {
      r = decodeVarint(m, offset);
      offset = r.offset + 32 * r.value;
    }
    parts.push(m.subarray(modeStart, offset));
  }
  return Buffer.concat(parts).toString('hex');
}

const scenarios: Array<[string, Pair]> = [
  ['both empty', makePair(1, 0, 0, 0, 10)],
  ['we are empty', makePair(2, 0, 0, 700, 10)],
  ['they are empty', makePair(3, 0, 700, 0, 10)],
  ['small sets', makePair(4, 20, 3, 5, 1000)],
  ['equal sets', makePair(5, 3000, 0, 0, 100)],
  ['one timestamp', makePair(6, 2000, 40, 60, 1)],
  ['5,000 records, 2 % apart', makePair(7, 5000, 100, 120, 50)],
  ['10,000 records, spread out', makePair(8, 10_000, 250, 200, 1_000_000)],
  ['disjoint', makePair(9, 0, 1500, 1800, 200)],
];

describe('NDK initiator against our respond', () => {
  it.each(scenarios)('%s: converges on exactly the differences', async (_, pair) => {
    for (const limit of [0, 4096, 50_000]) {
      const theirs = new Negentropy(storageOf(pair.a), 0);
      const ours = NegentropySet.fromRecords(pair.b);
      const have = new Set<string>();
      const need = new Set<string>();
      let message: Uint8Array | undefined = await theirs.initiate();
      for (let round = 0; message; round++) {
        expect(round).toBeLessThan(300);
        const reply = respond(ours, message, limit);
        if (limit) expect(reply.length).toBeLessThanOrEqual(limit);
        const result = await theirs.reconcile(reply);
        // A set: NDK may settle a range twice when our frame limit re-opens it (see NegentropyInitiator.reported).
        hexOf(result.have).forEach((id) => have.add(id));
        hexOf(result.need).forEach((id) => need.add(id));
        message = result.nextMessage;
      }
      expect(sorted(have)).toEqual(pair.onlyA);
      expect(sorted(need)).toEqual(pair.onlyB);
    }
  });
});

describe('our NegentropyInitiator against the NDK responder', () => {
  it.each(scenarios)('%s: converges on exactly the differences', async (_, pair) => {
    for (const limit of [0, 4096, 50_000]) {
      const ours = new NegentropyInitiator(NegentropySet.fromRecords(pair.a), limit);
      const theirs = new Negentropy(storageOf(pair.b), 0);
      const have: string[] = [];
      const need: string[] = [];
      let message: Buffer | null = ours.initiate();
      for (let round = 0; message; round++) {
        expect(round).toBeLessThan(300);
        if (limit) expect(message.length).toBeLessThanOrEqual(limit);
        const reply = (await theirs.reconcile(message)).nextMessage;
        const result = ours.reconcile(reply ?? Buffer.from([0x61]));
        have.push(...result.have);
        need.push(...result.need);
        message = result.next;
      }
      expect(sorted(have)).toEqual(pair.onlyA);
      expect(sorted(need)).toEqual(pair.onlyB);
    }
  });
});

describe('byte for byte with NDK', () => {
  it.each(scenarios)('%s: the same first message', async (_, pair) => {
    const ours = new NegentropyInitiator(NegentropySet.fromRecords(pair.a)).initiate();
    const theirs = await new Negentropy(storageOf(pair.a), 0).initiate();
    expect(ours.toString('hex')).toBe(Buffer.from(theirs).toString('hex'));
  });

  it.each(scenarios)('%s: the same replies all the way, apart from NDK padding echoed bounds', async (_, pair) => {
    const a = NegentropySet.fromRecords(pair.a);
    const b = NegentropySet.fromRecords(pair.b);
    const ourInitiator = new NegentropyInitiator(a);
    const theirInitiator = new Negentropy(storageOf(pair.a), 0);
    const theirResponder = new Negentropy(storageOf(pair.b), 0);
    let message: Buffer | null = ourInitiator.initiate();
    await theirInitiator.initiate();
    for (let round = 0; message; round++) {
      expect(round).toBeLessThan(50);
      const reply = respond(b, message);
      const theirReply = (await theirResponder.reconcile(message)).nextMessage;
      // Ours is already minimal: trimming changes nothing, and matches NDK's once NDK's padding is trimmed.
      expect(trimBoundPadding(reply)).toBe(reply.toString('hex'));
      expect(reply.toString('hex')).toBe(trimBoundPadding(theirReply ?? Buffer.from([0x61])));

      const next: Buffer | null = ourInitiator.reconcile(reply).next;
      const theirNext = (await theirInitiator.reconcile(reply)).nextMessage;
      expect(next === null).toBe(theirNext === undefined);
      if (next && theirNext) {
        expect(trimBoundPadding(next)).toBe(next.toString('hex'));
        expect(next.toString('hex')).toBe(trimBoundPadding(theirNext));
      }
      message = next;
    }
  });
});

/** mulberry32: a small deterministic generator. */
function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
