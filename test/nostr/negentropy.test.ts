// NIP-77 Negentropy V1 core (../shared/protocol.md §11): wire format edges, malformed input, and a property test
// that our initiator and responder always converge on exactly the set differences, within the frame size limits.
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeVarint, encodeVarint, fingerprint, NEGENTROPY_V1, NegentropyError, NegentropyInitiator, NegentropySet, respond,
} from '../../src/nostr/negentropy.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');
const idOf = (...head: number[]): string => Buffer.concat([Buffer.from(head), Buffer.alloc(32 - head.length)]).toString('hex');

/** An independent fingerprint: BigInt sum of little-endian ids mod 2^256, ‖ varint(count), sha256, first 16 bytes. */
function referenceFingerprint(ids: string[]): Buffer {
  let sum = 0n;
  for (const id of ids) sum += BigInt('0x' + Buffer.from(id, 'hex').reverse().toString('hex'));
  sum %= 1n << 256n;
  const le = Buffer.from(sum.toString(16).padStart(64, '0'), 'hex').reverse();
  return createHash('sha256').update(Buffer.concat([le, encodeVarint(ids.length)])).digest().subarray(0, 16);
}

describe('varint', () => {
  it.each([
    [0, '00'], [1, '01'], [127, '7f'], [128, '8100'], [255, '817f'], [16383, 'ff7f'], [16384, '818000'],
    [2 ** 32, '9080808000'],
  ])('encodes %d as %s', (n, bytes) => {
    expect(encodeVarint(n).toString('hex')).toBe(bytes);
    expect(decodeVarint(hex(bytes), 0)).toEqual({ value: n, offset: bytes.length / 2 });
  });

  it('round-trips 2^53, a bound for the largest safe timestamp', () => {
    const encoded = encodeVarint(2 ** 53);
    expect(encoded.toString('hex')).toBe('9080808080808000');
    expect(decodeVarint(encoded, 0)).toEqual({ value: 2 ** 53, offset: encoded.length });
  });

  it('decodes from an offset and returns the offset after it', () => {
    expect(decodeVarint(hex('ff 8100 05'), 1)).toEqual({ value: 128, offset: 3 });
  });

  it('rejects a truncated varint', () => {
    expect(() => decodeVarint(hex('8180'), 0)).toThrow(NegentropyError);
  });

  it('rejects a varint beyond 2^53', () => {
    expect(() => decodeVarint(hex('9080808080808001'), 0)).toThrow(NegentropyError);
    expect(() => decodeVarint(hex('ffffffffffffffff7f'), 0)).toThrow(NegentropyError);
  });

  it('refuses to encode negative or fractional numbers', () => {
    expect(() => encodeVarint(-1)).toThrow(RangeError);
    expect(() => encodeVarint(1.5)).toThrow(RangeError);
    expect(() => encodeVarint(2 ** 53 + 2)).toThrow(RangeError);
  });
});

describe('fingerprint', () => {
  const ids = [
    'ff'.repeat(32), // the largest id: the sum carries past 2^256
    'ff'.repeat(31) + '7f',
    idOf(1),
    '0123456789abcdef'.repeat(4),
    'fe' + 'ff'.repeat(31),
  ];
  const set = NegentropySet.fromRecords(ids.map((id, i) => ({ timestamp: i, id })));

  it('of the empty range hashes 32 zero bytes and a zero count', () => {
    expect(fingerprint(set, 0, 0)).toEqual(createHash('sha256').update(Buffer.alloc(33)).digest().subarray(0, 16));
  });

  it('matches an independent BigInt computation, carries past 2^256 included', () => {
    expect(fingerprint(set, 0, set.size)).toEqual(referenceFingerprint(ids));
    expect(fingerprint(set, 1, 4)).toEqual(referenceFingerprint(ids.slice(1, 4)));
    expect(fingerprint(set, 2, 3)).toEqual(referenceFingerprint([ids[2]]));
  });

  it('keeps every carry over more than a million ids', () => {
    const n = (1 << 20) + 5; // more than one summing pass
    const many = NegentropySet.fromSorted(Array.from({ length: n }, (_, i) => i), Buffer.alloc(n * 32, 0xff));
    // n × (2^256 − 1) ≡ 2^256 − n (mod 2^256)
    const sum = Buffer.from(((1n << 256n) - BigInt(n)).toString(16).padStart(64, '0'), 'hex').reverse();
    const expected = createHash('sha256').update(Buffer.concat([sum, encodeVarint(n)])).digest().subarray(0, 16);
    expect(fingerprint(many, 0, n)).toEqual(expected);
  });

  it('rejects a range outside the set', () => {
    expect(() => fingerprint(set, 0, set.size + 1)).toThrow(RangeError);
  });
});

describe('NegentropySet', () => {
  it('sorts records by timestamp, then id, and drops exact duplicates', () => {
    const set = NegentropySet.fromRecords([
      { timestamp: 5, id: idOf(2) }, { timestamp: 3, id: idOf(9) }, { timestamp: 5, id: idOf(1) },
      { timestamp: 5, id: Buffer.from(idOf(2), 'hex') },
    ]);
    expect(set.size).toBe(3);
    expect([0, 1, 2].map((i) => [set.timestamp(i), set.idHex(i)])).toEqual([[3, idOf(9)], [5, idOf(1)], [5, idOf(2)]]);
  });

  it('hands out ids as views into the set', () => {
    const set = NegentropySet.fromRecords([{ timestamp: 1, id: idOf(7) }, { timestamp: 2, id: idOf(8) }]);
    expect(set.id(1).toString('hex')).toBe(idOf(8));
    expect(set.id(1).buffer).toBe(set.id(0).buffer);
  });

  it('accepts records already in order', () => {
    const set = NegentropySet.fromSorted([1, 1, 2], hex(idOf(1) + idOf(2) + idOf(0)));
    expect(set.idHex(2)).toBe(idOf(0));
  });

  it.each([
    ['a duplicate', [1, 1], idOf(1) + idOf(1)],
    ['ids out of order', [1, 1], idOf(2) + idOf(1)],
    ['timestamps out of order', [2, 1], idOf(1) + idOf(2)],
  ])('fromSorted rejects %s', (_, timestamps, ids) => {
    expect(() => NegentropySet.fromSorted(timestamps, hex(ids))).toThrow(RangeError);
  });

  it('rejects malformed ids and timestamps', () => {
    expect(() => NegentropySet.fromRecords([{ timestamp: 1, id: 'abc' }])).toThrow(RangeError);
    expect(() => NegentropySet.fromRecords([{ timestamp: -1, id: idOf(1) }])).toThrow(RangeError);
    expect(() => NegentropySet.fromSorted([1], Buffer.alloc(31))).toThrow(RangeError);
  });
});

describe('bound encoding', () => {
  it('sends a small set as one IdList up to infinity (ts 0, no prefix)', () => {
    const set = NegentropySet.fromRecords([{ timestamp: 9, id: idOf(2) }, { timestamp: 4, id: idOf(1) }]);
    expect(new NegentropyInitiator(set).initiate()).toEqual(hex('61 00 00 02 02' + idOf(1) + idOf(2)));
  });

  it('uses the shared id prefix + 1 between equal timestamps, no prefix between different ones', () => {
    // 32 records: 16 buckets of 2. Records 1 and 2 share timestamp 100 and the id prefix abcd; record 4 is at 101.
    const records = Array.from({ length: 32 }, (_, i) => ({ timestamp: i < 4 ? 100 : 100 + i, id: idOf(0xab, 0xcd, i * 8, 0xee) }));
    const message = new NegentropyInitiator(NegentropySet.fromRecords(records)).initiate();
    const set = NegentropySet.fromRecords(records);
    // First bucket [records 0, 1): upper bound (100, abcd10): ts 1 + (100 − 0), prefix length 3.
    expect(message.subarray(0, 7)).toEqual(hex('61 65 03 abcd10 01'));
    expect(message.subarray(7, 23)).toEqual(fingerprint(set, 0, 2));
    // Second bucket: upper bound at record 4, timestamp 104 ≠ 100: ts 1 + (104 − 100), no prefix.
    expect(message.subarray(23, 26)).toEqual(hex('05 00 01'));
    // The last bucket ends at infinity.
    expect(message.subarray(message.length - 19, message.length - 16)).toEqual(hex('00 00 01'));
  });
});

describe('version handling', () => {
  const set = NegentropySet.fromRecords([{ timestamp: 1, id: idOf(1) }]);

  it('answers a V2 message with the highest version we support', () => {
    expect(respond(set, hex('62 00 00 01' + '00'.repeat(16)))).toEqual(Buffer.from([NEGENTROPY_V1]));
  });

  it('treats a first byte outside 0x60..0x6F as malformed', () => {
    expect(() => respond(set, hex('00'))).toThrow(NegentropyError);
    expect(() => respond(set, hex('70'))).toThrow(NegentropyError);
  });

  it('rejects an empty message', () => {
    expect(() => respond(set, new Uint8Array())).toThrow(NegentropyError);
  });

  it('makes the initiator fail on a reply in another version', () => {
    const initiator = new NegentropyInitiator(set);
    initiator.initiate();
    expect(() => initiator.reconcile(hex('60'))).toThrow(NegentropyError);
  });
});

describe('malformed messages', () => {
  const set = NegentropySet.fromRecords(Array.from({ length: 40 }, (_, i) => ({ timestamp: i, id: idOf(i) })));

  it.each([
    ['a truncated varint', '61 80'],
    ['a truncated fingerprint', '61 00 00 01' + '00'.repeat(10)],
    ['an unknown mode 3', '61 00 00 03'],
    ['an id prefix of 33 bytes', '61 01 21' + 'ab'.repeat(33) + '00'],
    ['a truncated id prefix', '61 01 04 abcd'],
    ['bounds going backwards', '61 05 01 80 00  01 01 10 00'],
    ['a truncated id list', '61 00 00 02 02' + 'ab'.repeat(32)],
    ['a range after infinity', '61 00 00 00  01 00 00'],
  ])('throws NegentropyError on %s', (_, bytes) => {
    expect(() => respond(set, hex(bytes))).toThrow(NegentropyError);
    const initiator = new NegentropyInitiator(set);
    initiator.initiate();
    expect(() => initiator.reconcile(hex(bytes))).toThrow(NegentropyError);
  });

  it('refuses a frame size limit below 4096', () => {
    expect(() => respond(set, hex('61'), 4095)).toThrow(RangeError);
    expect(() => new NegentropyInitiator(set, 1000)).toThrow(RangeError);
  });
});

describe('reconciliation', () => {
  it('finishes an empty set against an empty set in one round', () => {
    const empty = NegentropySet.fromRecords([]);
    const initiator = new NegentropyInitiator(empty);
    const first = initiator.initiate();
    expect(first).toEqual(hex('61 00 00 02 00'));
    const reply = respond(empty, first);
    expect(reply).toEqual(hex('61 00 00 02 00'));
    expect(initiator.reconcile(reply)).toEqual({ next: null, have: [], need: [] });
  });

  it('answers an equal set with the version byte alone', () => {
    const set = NegentropySet.fromRecords(Array.from({ length: 500 }, (_, i) => ({ timestamp: i % 7, id: idOf(i >> 8, i & 0xff) })));
    const initiator = new NegentropyInitiator(set);
    const reply = respond(set, initiator.initiate());
    expect(reply).toEqual(hex('61'));
    expect(initiator.reconcile(reply)).toEqual({ next: null, have: [], need: [] });
  });

  it('settles an IdList in any order, with an id listed twice, into have/need', () => {
    const a = NegentropySet.fromRecords([{ timestamp: 1, id: idOf(1) }, { timestamp: 2, id: idOf(2) }]);
    const initiator = new NegentropyInitiator(a);
    initiator.initiate();
    const reply = hex('61 00 00 02 04' + idOf(3) + idOf(1) + idOf(3) + idOf(0, 9));
    const { next, have, need } = initiator.reconcile(reply);
    expect({ next, have, need: need.sort() }).toEqual({ next: null, have: [idOf(2)], need: [idOf(0, 9), idOf(3)] });
  });

  it('handles timestamps up to Number.MAX_SAFE_INTEGER', () => {
    const top = Number.MAX_SAFE_INTEGER;
    const records = Array.from({ length: 100 }, (_, i) => ({ timestamp: i < 50 ? i : top - (i % 3), id: idOf(i) }));
    const a = NegentropySet.fromRecords(records.slice(0, 90));
    const b = NegentropySet.fromRecords(records.slice(10));
    const { have, need } = reconcileAll(a, b, 0, 0);
    expect(have.sort()).toEqual(difference(a, b));
    expect(need.sort()).toEqual(difference(b, a));
  });

  it('settles small sets in one round', () => {
    const a = NegentropySet.fromRecords([{ timestamp: 1, id: idOf(1) }, { timestamp: 2, id: idOf(2) }]);
    const b = NegentropySet.fromRecords([{ timestamp: 2, id: idOf(2) }, { timestamp: 3, id: idOf(3) }]);
    const initiator = new NegentropyInitiator(a);
    expect(initiator.reconcile(respond(b, initiator.initiate()))).toEqual({ next: null, have: [idOf(1)], need: [idOf(3)] });
  });

  it('pages a large IdList reply through the frame size limit', () => {
    const many = NegentropySet.fromRecords(Array.from({ length: 3000 }, (_, i) => ({ timestamp: 1000, id: idOf(i >> 8, i & 0xff, 1) })));
    const { have, need, sizes } = reconcileAll(NegentropySet.fromRecords([]), many, 4096, 4096);
    expect(have).toEqual([]);
    expect(need.sort()).toEqual(Array.from({ length: 3000 }, (_, i) => many.idHex(i)).sort());
    expect(Math.max(...sizes)).toBeLessThanOrEqual(4096);
  });

  it.each([
    ['between two ranges', 1, 1],
    ['inside an IdList reply', 2, 2],
  ])('cuts a frame-limited reply %s, then sends a Fingerprint to infinity covering exactly what was left out', (_, round, modeBeforeCut) => {
    const random = seededRandom(round);
    const record = (): { timestamp: number; id: string } => ({ timestamp: Math.floor(random() * 20), id: randomId(random) });
    const shared = Array.from({ length: 2000 }, record);
    const a = NegentropySet.fromRecords([...shared, ...Array.from({ length: 40 }, record)]);
    const b = NegentropySet.fromRecords([...shared, ...Array.from({ length: 3000 }, record)]);
    // Round 1: 16 differing fingerprints, split into 256 (~5 kB). Round 2: IdLists answered with ~160 kB of ids.
    const initiator = new NegentropyInitiator(a);
    let message = initiator.initiate();
    if (round === 2) message = initiator.reconcile(respond(b, message)).next!;
    const reply = respond(b, message, 4096);
    expect(reply.length).toBeLessThan(respond(b, message).length);
    const ranges = decodeRanges(reply, b);
    expect(ranges.at(-1)).toMatchObject({ upper: b.size, mode: 1 });
    expect(ranges.at(-2)?.mode).toBe(modeBeforeCut);
    for (const range of ranges.filter((r) => r.mode === 1)) {
      expect(range.fingerprint).toEqual(fingerprint(b, range.lower, range.upper));
    }
  });

  it('reports each id once when a frame-limited responder re-opens ranges the initiator settled', () => {
    // The responder's IdList replies overflow 4096 bytes: its Fingerprint to infinity covers our later Skips too.
    const random = seededRandom(11); // a seed where the same ids come back several times
    const a = NegentropySet.fromRecords(Array.from({ length: 32 }, () => ({ timestamp: 0, id: randomId(random) })));
    const b = NegentropySet.fromRecords(Array.from({ length: 403 }, () => ({ timestamp: 0, id: randomId(random) })));
    const { have, need } = reconcileAll(a, b, 0, 4096);
    expect(have.sort()).toEqual(difference(a, b));
    expect(need.sort()).toEqual(difference(b, a));
  });

  it('converges on exactly the set differences, within every frame size limit (property)', () => {
    const limit = fc.constantFrom(0, 4096, 8192, 50000);
    const scenario = fc.record({
      seed: fc.integer(),
      shared: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 2500 })),
      onlyA: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 300 }), fc.integer({ min: 0, max: 2500 })),
      onlyB: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 300 }), fc.integer({ min: 0, max: 2500 })),
      timestampSpan: fc.constantFrom(1, 5, 100, 2 ** 40),
      limitA: limit,
      limitB: limit,
    });
    fc.assert(fc.property(scenario, (s) => {
      const random = seededRandom(s.seed);
      const seen = new Set<string>(); // an id has one timestamp: no id twice
      const record = (): { timestamp: number; id: string } => {
        let id = randomId(random);
        while (seen.has(id)) id = randomId(random);
        seen.add(id);
        return { timestamp: Math.floor(random() * s.timestampSpan), id };
      };
      const shared = Array.from({ length: s.shared }, record);
      const onlyA = Array.from({ length: s.onlyA }, record);
      const onlyB = Array.from({ length: s.onlyB }, record);
      const a = NegentropySet.fromRecords([...shared, ...onlyA]);
      const b = NegentropySet.fromRecords([...shared, ...onlyB]);
      const { have, need, sizes, limits } = reconcileAll(a, b, s.limitA, s.limitB);
      expect(have.sort()).toEqual(difference(a, b));
      expect(need.sort()).toEqual(difference(b, a));
      sizes.forEach((size, i) => { if (limits[i]) expect(size).toBeLessThanOrEqual(limits[i]); });
    }), { numRuns: Number(process.env.NEGENTROPY_RUNS ?? 120) });
  });
});

/** A plain decoder, independent of the module's: each range's records in `set` found by a linear scan. */
function decodeRanges(message: Buffer, set: NegentropySet) {
  const ranges: Array<{ lower: number; upper: number; mode: number; fingerprint?: Buffer }> = [];
  let offset = 1;
  let previous = 0;
  let lower = 0;
  const next = (): number => {
    const r = decodeVarint(message, offset);
    offset = r.offset;
    return r.value;
  };
  while (offset < message.length) {
    const encoded = next();
    const timestamp = encoded === 0 ? Infinity : (previous += encoded - 1);
    const length = next();
    const prefix = Buffer.concat([message.subarray(offset, offset + length), Buffer.alloc(32 - length)]);
    offset += length;
    let upper = lower;
    while (upper < set.size && (set.timestamp(upper) < timestamp || (set.timestamp(upper) === timestamp && set.id(upper).compare(prefix) < 0))) upper++;
    const mode = next();
    const range: (typeof ranges)[number] = { lower, upper, mode };
    if (mode === 1) { range.fingerprint = message.subarray(offset, offset + 16); offset += 16; }
    if (mode === 2) {
      const count = next();
      offset += 32 * count;
    }
    ranges.push(range);
    lower = upper;
  }
  return ranges;
}

/** Runs our initiator (over a) against our responder (over b) to the end; collects have/need and message sizes. */
function reconcileAll(a: NegentropySet, b: NegentropySet, limitA: number, limitB: number) {
  const initiator = new NegentropyInitiator(a, limitA);
  const have: string[] = [];
  const need: string[] = [];
  const sizes: number[] = [];
  const limits: number[] = [];
  let message: Buffer | null = initiator.initiate();
  for (let round = 0; message; round++) {
    if (round > 500) throw new Error('no convergence');
    sizes.push(message.length); limits.push(limitA);
    const reply = respond(b, message, limitB);
    sizes.push(reply.length); limits.push(limitB);
    const result = initiator.reconcile(reply);
    have.push(...result.have);
    need.push(...result.need);
    message = result.next;
  }
  return { have, need, sizes, limits };
}

function difference(x: NegentropySet, y: NegentropySet): string[] {
  const inY = new Set(Array.from({ length: y.size }, (_, i) => y.idHex(i)));
  return Array.from({ length: x.size }, (_, i) => x.idHex(i)).filter((id) => !inY.has(id)).sort();
}

/** Ids often share long prefixes, so bounds between equal timestamps need long prefixes too. */
function randomId(random: () => number): string {
  const shared = random() < 0.3 ? Math.floor(random() * 31) : 0;
  return Array.from({ length: 32 }, (_, i) => (i < shared ? 0xaa : Math.floor(random() * 256)).toString(16).padStart(2, '0')).join('');
}

/** mulberry32: a small deterministic generator, so fast-check shrinks over seeds rather than huge arrays. */
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
