// NIP-77 Negentropy V1: the pure protocol core (no I/O). Set reconciliation over (timestamp, id) records;
// the wire format is specified in ../shared/protocol.md §11. The relay answers with `respond` (stateless: every
// message carries its own context), the `sync` command drives a `NegentropyInitiator`.
import { createHash } from 'node:crypto';

export const NEGENTROPY_V1 = 0x61;

const ID_SIZE = 32;
const FINGERPRINT_SIZE = 16;
const MODE_SKIP = 0;
const MODE_FINGERPRINT = 1;
const MODE_ID_LIST = 2;
/** A differing range is split into this many Fingerprint buckets, or into one IdList below twice as many records. */
const BUCKETS = 16;
/** Room kept free under a frame size limit for the closing Skip + Fingerprint-to-infinity (at most ~61 bytes). */
const FRAME_MARGIN = 200;
const MIN_FRAME_SIZE_LIMIT = 4096;
/** Largest Bound + mode + count header: ts varint (≤ 8 bytes below 2^53), len, 32-byte prefix, mode, count. */
const RANGE_HEADER_MAX = 8 + 1 + ID_SIZE + 1 + 8;
/** Ids summed per pass before carrying: each 32-bit column then stays below 2^52, exact in a double. */
const SUM_CHUNK = 1 << 20;
/** Largest varint we handle: 2^53 (exact in a double) is 1 + the largest safe timestamp, as a bound encodes it. */
const VARINT_MAX = 2 ** 53;
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const EMPTY = Buffer.alloc(0);

/** Malformed negentropy input: bad varint, truncated message, out-of-order bounds, unknown mode, ... */
export class NegentropyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NegentropyError';
  }
}

/** A range's upper bound: a timestamp (Infinity stands for the reserved 2^64-1) and an id prefix, zero-padded. */
interface Bound {
  ts: number;
  prefix: Uint8Array;
}

const ZERO_BOUND: Bound = { ts: 0, prefix: EMPTY };
const INFINITY_BOUND: Bound = { ts: Infinity, prefix: EMPTY };

/** A sorted, immutable snapshot of records, columnar for memory: 1,000,000 records must fit comfortably (no per-record objects). */
export class NegentropySet {
  readonly size: number;
  /** The same ids as 32-bit little-endian limbs, eight per id, for the fingerprint sum. */
  private readonly words: Uint32Array;

  private constructor(private readonly timestamps: Float64Array, private readonly ids: Buffer) {
    this.size = timestamps.length;
    if (LITTLE_ENDIAN && ids.byteOffset % 4 === 0) {
      this.words = new Uint32Array(ids.buffer, ids.byteOffset, this.size * 8);
    } else {
      this.words = new Uint32Array(this.size * 8);
      for (let i = 0; i < this.words.length; i++) this.words[i] = ids.readUInt32LE(i * 4);
    }
  }

  /** Records already in protocol order; takes ownership of `ids` (n × 32 bytes). Throws on duplicates or disorder. */
  static fromSorted(timestamps: ArrayLike<number>, ids: Buffer): NegentropySet {
    const n = timestamps.length;
    if (ids.length !== n * ID_SIZE) throw new RangeError(`expected ${n * ID_SIZE} bytes of ids, got ${ids.length}`);
    const ts = Float64Array.from(timestamps);
    for (let i = 0; i < n; i++) {
      checkTimestamp(ts[i]);
      if (i > 0 && !(ts[i] > ts[i - 1] || (ts[i] === ts[i - 1] && compareIds(ids, i - 1, ids, i) < 0))) {
        throw new RangeError(`records are not in strictly ascending order at index ${i}`);
      }
    }
    // A misaligned view (a pooled Buffer) cannot back the Uint32Array used for sums: copy it once.
    const owned = ids.byteOffset % 4 === 0 ? ids : Buffer.from(ids);
    return new NegentropySet(ts, owned);
  }

  /** Records in any order: sorts them and drops exact duplicates. Ids are 64 hex digits or 32 bytes. */
  static fromRecords(records: Iterable<{ timestamp: number; id: string | Uint8Array }>): NegentropySet {
    const list = Array.from(records);
    const n = list.length;
    const ts = new Float64Array(n);
    const ids = Buffer.allocUnsafeSlow(n * ID_SIZE);
    for (let i = 0; i < n; i++) {
      const { timestamp, id } = list[i];
      checkTimestamp(timestamp);
      ts[i] = timestamp;
      if (typeof id === 'string') {
        if (!/^[0-9a-fA-F]{64}$/.test(id)) throw new RangeError(`an id must be 64 hex digits: ${JSON.stringify(id)}`);
        ids.write(id, i * ID_SIZE, 'hex');
      } else {
        if (id.length !== ID_SIZE) throw new RangeError(`an id must be ${ID_SIZE} bytes, got ${id.length}`);
        ids.set(id, i * ID_SIZE);
      }
    }
    // Compare the first four id bytes as one number before falling back to a full compare (fast for 1M records).
    const head = new Uint32Array(n);
    for (let i = 0; i < n; i++) head[i] = ids.readUInt32BE(i * ID_SIZE);
    const order = new Uint32Array(n);
    for (let i = 0; i < n; i++) order[i] = i;
    order.sort((a, b) => ts[a] - ts[b] || head[a] - head[b] || compareIds(ids, a, ids, b));
    const sortedTs: number[] = [];
    const sortedIds = Buffer.allocUnsafeSlow(n * ID_SIZE);
    for (const i of order) {
      const k = sortedTs.length;
      if (k > 0 && sortedTs[k - 1] === ts[i] && compareIds(sortedIds, k - 1, ids, i) === 0) continue;
      sortedTs.push(ts[i]);
      // A byte loop: Buffer#copy costs more than this for 32 bytes.
      for (let b = 0, from = i * ID_SIZE, to = k * ID_SIZE; b < ID_SIZE; b++) sortedIds[to + b] = ids[from + b];
    }
    return new NegentropySet(Float64Array.from(sortedTs), sortedIds.subarray(0, sortedTs.length * ID_SIZE));
  }

  timestamp(i: number): number {
    return this.timestamps[i];
  }

  /** A view into the set, no copy. */
  id(i: number): Buffer {
    return this.ids.subarray(i * ID_SIZE, (i + 1) * ID_SIZE);
  }

  idHex(i: number): string {
    return this.ids.toString('hex', i * ID_SIZE, (i + 1) * ID_SIZE);
  }

  /** @internal The first index in [lo, hi) whose record is ≥ bound (binary search). */
  lowerBound(bound: Bound, lo: number, hi: number): number {
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.isBelow(mid, bound)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private isBelow(i: number, bound: Bound): boolean {
    const t = this.timestamps[i];
    if (t !== bound.ts) return t < bound.ts;
    // Same timestamp: the id is below iff its first bytes are below the prefix (the zero padding is below any id).
    const start = i * ID_SIZE;
    const len = bound.prefix.length;
    return this.ids.compare(bound.prefix, 0, len, start, start + len) < 0;
  }

  /**
   * @internal The shortest bound separating record i-1 from record i (NIP-77 "minimal bound"): i's timestamp,
   * and no id prefix when the timestamps differ, else the ids' shared prefix plus i's next byte.
   */
  minimalBound(i: number): Bound {
    const ts = this.timestamps[i];
    if (this.timestamps[i - 1] !== ts) return { ts, prefix: EMPTY };
    const prev = (i - 1) * ID_SIZE;
    const curr = i * ID_SIZE;
    let shared = 0;
    while (shared < ID_SIZE - 1 && this.ids[prev + shared] === this.ids[curr + shared]) shared++;
    return { ts, prefix: this.ids.subarray(curr, curr + shared + 1) };
  }

  /** @internal The ids [begin, end) summed as 256-bit little-endian integers mod 2^256, as eight 32-bit limbs. */
  sumIds(begin: number, end: number): number[] {
    const sum = [0, 0, 0, 0, 0, 0, 0, 0];
    const w = this.words;
    for (let start = begin; start < end; start += SUM_CHUNK) {
      const stop = Math.min(end, start + SUM_CHUNK);
      let a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
      for (let j = start * 8, e = stop * 8; j < e; j += 8) {
        a0 += w[j]; a1 += w[j + 1]; a2 += w[j + 2]; a3 += w[j + 3];
        a4 += w[j + 4]; a5 += w[j + 5]; a6 += w[j + 6]; a7 += w[j + 7];
      }
      const columns = [a0, a1, a2, a3, a4, a5, a6, a7];
      let carry = 0;
      for (let k = 0; k < 8; k++) {
        const total = sum[k] + columns[k] + carry; // < 2^53: exact
        sum[k] = total % 0x1_0000_0000;
        carry = Math.floor(total / 0x1_0000_0000);
      }
      // The carry out of the top limb is dropped: the sum is mod 2^256.
    }
    return sum;
  }

  /** @internal The ids [begin, end), concatenated (a view). */
  idRange(begin: number, end: number): Buffer {
    return this.ids.subarray(begin * ID_SIZE, end * ID_SIZE);
  }
}

function checkTimestamp(t: number): void {
  if (!Number.isSafeInteger(t) || t < 0) throw new RangeError(`a timestamp must be a non-negative safe integer: ${t}`);
}

/** Bytewise order of id i of `a` against id j of `b`. */
function compareIds(a: Buffer, i: number, b: Buffer, j: number): number {
  return a.compare(b, j * ID_SIZE, (j + 1) * ID_SIZE, i * ID_SIZE, (i + 1) * ID_SIZE);
}

function compareBounds(a: Bound, b: Bound): number {
  if (a.ts !== b.ts) return a.ts < b.ts ? -1 : 1;
  const n = Math.max(a.prefix.length, b.prefix.length);
  for (let i = 0; i < n; i++) {
    const x = i < a.prefix.length ? a.prefix[i] : 0; // missing prefix bytes are zero
    const y = i < b.prefix.length ? b.prefix[i] : 0;
    if (x !== y) return x - y;
  }
  return 0;
}

// --- Varint (NIP-77): base 128, most significant digit first, 0x80 on every byte but the last ---

function varintLength(n: number): number {
  let len = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    len++;
  }
  return len;
}

function writeVarint(target: Uint8Array, offset: number, n: number): number {
  if (!Number.isInteger(n) || n < 0 || n > VARINT_MAX) throw new RangeError(`a varint must be an integer in 0..2^53: ${n}`);
  const len = varintLength(n);
  for (let i = len - 1; i >= 0; i--) {
    target[offset + i] = (n % 128) | (i === len - 1 ? 0 : 0x80);
    n = Math.floor(n / 128);
  }
  return offset + len;
}

export function encodeVarint(n: number): Buffer {
  const out = Buffer.alloc(varintLength(n));
  writeVarint(out, 0, n);
  return out;
}

/** Accepts redundant leading 0x80 digits; values beyond 2^53 are an error. */
export function decodeVarint(buf: Uint8Array, offset: number): { value: number; offset: number } {
  let value = 0;
  for (;;) {
    if (offset >= buf.length) throw new NegentropyError('truncated varint');
    const byte = buf[offset++];
    // Checked before computing: past 2^53 a double would round the result instead of exceeding the limit.
    if (value > (VARINT_MAX - (byte & 0x7f)) / 128) throw new NegentropyError('varint too large');
    value = value * 128 + (byte & 0x7f);
    if ((byte & 0x80) === 0) return { value, offset };
  }
}

// --- Fingerprint (NIP-77): sha256(sum of ids mod 2^256, little-endian ‖ varint(count)), first 16 bytes ---

export function fingerprint(set: NegentropySet, begin: number, end: number): Buffer {
  if (!(0 <= begin && begin <= end && end <= set.size)) throw new RangeError(`bad range [${begin}, ${end})`);
  const limbs = set.sumIds(begin, end);
  const input = Buffer.alloc(ID_SIZE + varintLength(end - begin));
  for (let k = 0; k < 8; k++) input.writeUInt32LE(limbs[k], k * 4);
  writeVarint(input, ID_SIZE, end - begin);
  return createHash('sha256').update(input).digest().subarray(0, FINGERPRINT_SIZE);
}

// --- Messages ---

/** Reads one message's ranges. Bound timestamps are deltas from the previous bound of the same message. */
class MessageReader {
  offset = 1; // after the version byte
  private lastTimestamp = 0;

  constructor(private readonly buf: Buffer) {}

  get done(): boolean {
    return this.offset >= this.buf.length;
  }

  varint(): number {
    const { value, offset } = decodeVarint(this.buf, this.offset);
    this.offset = offset;
    return value;
  }

  bytes(n: number): Buffer {
    if (n > this.buf.length - this.offset) throw new NegentropyError('truncated message');
    const out = this.buf.subarray(this.offset, this.offset + n);
    this.offset += n;
    return out;
  }

  bound(): Bound {
    if (this.lastTimestamp === Infinity) throw new NegentropyError('a range follows the infinity bound');
    const encoded = this.varint();
    let ts = Infinity; // 0 encodes infinity
    if (encoded !== 0) {
      ts = this.lastTimestamp + encoded - 1;
      if (ts > Number.MAX_SAFE_INTEGER) throw new NegentropyError('bound timestamp too large');
    }
    this.lastTimestamp = ts;
    const len = this.varint();
    if (len > ID_SIZE) throw new NegentropyError(`id prefix of ${len} bytes (at most ${ID_SIZE})`);
    return { ts, prefix: this.bytes(len) };
  }
}

/** Builds one message. `mark`/`rollback` undo a range that would overflow the frame size limit. */
class MessageWriter {
  private buf = Buffer.allocUnsafe(1024);
  length = 0;
  private lastTimestamp = 0;

  private reserve(n: number): void {
    if (this.length + n <= this.buf.length) return;
    const grown = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.length + n));
    this.buf.copy(grown, 0, 0, this.length);
    this.buf = grown;
  }

  byte(b: number): void {
    this.reserve(1);
    this.buf[this.length++] = b;
  }

  bytes(src: Uint8Array): void {
    this.reserve(src.length);
    this.buf.set(src, this.length);
    this.length += src.length;
  }

  varint(n: number): void {
    this.reserve(varintLength(n));
    this.length = writeVarint(this.buf, this.length, n);
  }

  bound(b: Bound): void {
    if (b.ts === Infinity) {
      this.varint(0);
    } else {
      this.varint(1 + b.ts - this.lastTimestamp);
      this.lastTimestamp = b.ts;
    }
    this.varint(b.prefix.length);
    this.bytes(b.prefix);
  }

  mark(): { length: number; lastTimestamp: number } {
    return { length: this.length, lastTimestamp: this.lastTimestamp };
  }

  rollback(mark: { length: number; lastTimestamp: number }): void {
    this.length = mark.length;
    this.lastTimestamp = mark.lastTimestamp;
  }

  toBuffer(): Buffer {
    return Buffer.from(this.buf.subarray(0, this.length));
  }
}

function checkFrameSizeLimit(limit: number): void {
  if (limit !== 0 && !(Number.isSafeInteger(limit) && limit >= MIN_FRAME_SIZE_LIMIT)) {
    throw new RangeError(`frameSizeLimit must be 0 (none) or at least ${MIN_FRAME_SIZE_LIMIT}: ${limit}`);
  }
}

/** A range whose fingerprints differ: one IdList if small, else 16 near-equal Fingerprint buckets (NIP-77). */
function splitRange(set: NegentropySet, lower: number, upper: number, upperBound: Bound, out: MessageWriter): void {
  const n = upper - lower;
  if (n < 2 * BUCKETS) {
    out.bound(upperBound);
    out.varint(MODE_ID_LIST);
    out.varint(n);
    out.bytes(set.idRange(lower, upper));
    return;
  }
  const perBucket = Math.floor(n / BUCKETS);
  const withExtra = n % BUCKETS; // the first buckets take one record more
  let end = lower;
  for (let b = 0; b < BUCKETS; b++) {
    const begin = end;
    end += perBucket + (b < withExtra ? 1 : 0);
    out.bound(end === upper ? upperBound : set.minimalBound(end));
    out.varint(MODE_FINGERPRINT);
    out.bytes(fingerprint(set, begin, end));
  }
}

/**
 * The initiator's answer to an IdList: our ids in the range against theirs. Ids within a range are not in id
 * order (records sort by timestamp first), so both lists are sorted by a numeric key from the ids' first bytes,
 * then merged; only the ids that differ become hex strings.
 */
function diffIds(set: NegentropySet, lower: number, upper: number, theirs: Buffer, have: string[], need: string[]): void {
  const ourIds = set.idRange(lower, upper);
  const ours = sortById(ourIds);
  const their = sortById(theirs);
  let i = 0;
  let j = 0;
  while (i < ours.order.length || j < their.order.length) {
    const c = i === ours.order.length ? 1 : j === their.order.length ? -1 : compareSorted(ours, i, their, j);
    if (c < 0) have.push(hexAt(ourIds, ours.order[i++]));
    else if (c > 0) need.push(hexAt(theirs, their.order[j++]));
    else { i++; j++; }
    // A peer listing an id twice: the copy is neither have nor need.
    while (j > 0 && j < their.order.length && compareSorted(their, j - 1, their, j) === 0) j++;
  }
}

interface SortedIds { ids: Buffer; keys: Float64Array; order: Uint32Array }

/** Orders ids by (53-bit key from their first 7 bytes, then all bytes): a numeric compare almost always decides. */
function sortById(ids: Buffer): SortedIds {
  const count = ids.length / ID_SIZE;
  const keys = new Float64Array(count);
  const order = new Uint32Array(count);
  for (let k = 0; k < count; k++) {
    keys[k] = ids.readUInt32LE(k * ID_SIZE) * 2 ** 21 + (ids.readUInt32LE(k * ID_SIZE + 4) >>> 11);
    order[k] = k;
  }
  order.sort((a, b) => keys[a] - keys[b] || compareIds(ids, a, ids, b));
  return { ids, keys, order };
}

function compareSorted(x: SortedIds, i: number, y: SortedIds, j: number): number {
  const a = x.order[i];
  const b = y.order[j];
  return x.keys[a] - y.keys[b] || compareIds(x.ids, a, y.ids, b);
}

function hexAt(ids: Buffer, k: number): string {
  return ids.toString('hex', k * ID_SIZE, (k + 1) * ID_SIZE);
}

type Role = 'initiator' | 'responder';

/**
 * One round of NIP-77 for either side: walk the peer's ranges against our set and build the reply. Equal
 * fingerprints and settled ranges become Skips (merged, a trailing one dropped); a responder answers an
 * IdList with all its ids in that range, the initiator settles it into have/need.
 */
function reconcileMessage(
  set: NegentropySet, message: Uint8Array, frameSizeLimit: number, role: Role, have: string[], need: string[],
): Buffer {
  const input = new MessageReader(Buffer.from(message.buffer, message.byteOffset, message.byteLength));
  const out = new MessageWriter();
  out.byte(NEGENTROPY_V1);
  const budget = frameSizeLimit === 0 ? Infinity : frameSizeLimit - FRAME_MARGIN;

  let prevBound = ZERO_BOUND;
  let prevIndex = 0;
  let skipPending = false;
  const flushSkip = (): void => {
    if (!skipPending) return;
    out.bound(prevBound);
    out.varint(MODE_SKIP);
    skipPending = false;
  };
  // Frame size limit: everything from `from` on becomes one Fingerprint to infinity, for the next round.
  const finishWithRemainder = (from: number): void => {
    flushSkip();
    out.bound(INFINITY_BOUND);
    out.varint(MODE_FINGERPRINT);
    out.bytes(fingerprint(set, from, set.size));
  };

  while (!input.done) {
    const bound = input.bound();
    if (compareBounds(bound, prevBound) < 0) throw new NegentropyError('range bounds out of order');
    const mode = input.varint();
    const lower = prevIndex;
    const upper = set.lowerBound(bound, lower, set.size);
    const mark = out.mark();
    const skipWasPending = skipPending;
    let overflow = false;

    if (mode === MODE_SKIP) {
      skipPending = true;
    } else if (mode === MODE_FINGERPRINT) {
      const theirs = input.bytes(FINGERPRINT_SIZE);
      if (fingerprint(set, lower, upper).equals(theirs)) {
        skipPending = true;
      } else {
        flushSkip();
        splitRange(set, lower, upper, bound, out);
      }
    } else if (mode === MODE_ID_LIST) {
      const count = input.varint();
      if (count > (message.length - input.offset) / ID_SIZE) throw new NegentropyError('truncated id list');
      const theirs = input.bytes(count * ID_SIZE);
      if (role === 'initiator') {
        // Writes nothing, so it never overflows the frame: have/need can be settled right away.
        diffIds(set, lower, upper, theirs, have, need);
        skipPending = true;
      } else {
        flushSkip();
        const room = Math.floor((budget - out.length - RANGE_HEADER_MAX) / ID_SIZE);
        if (upper - lower <= room) {
          out.bound(bound);
          out.varint(MODE_ID_LIST);
          out.varint(upper - lower);
          out.bytes(set.idRange(lower, upper));
        } else if (room > 0) {
          // Too many ids for the frame: send the first ones, up to a minimal bound, and leave the rest for later.
          const cut = lower + room;
          out.bound(set.minimalBound(cut));
          out.varint(MODE_ID_LIST);
          out.varint(room);
          out.bytes(set.idRange(lower, cut));
          finishWithRemainder(cut);
          break;
        } else {
          overflow = true;
        }
      }
    } else {
      throw new NegentropyError(`unknown range mode ${mode}`);
    }

    if (overflow || out.length > budget) {
      out.rollback(mark);
      skipPending = skipWasPending;
      finishWithRemainder(lower);
      break;
    }
    prevBound = bound;
    prevIndex = upper;
  }
  return out.toBuffer();
}

/** The relay (responder) side: one incoming message → the reply. Unsupported version → Buffer.from([0x61]). Throws NegentropyError on malformed input. */
export function respond(set: NegentropySet, message: Uint8Array, frameSizeLimit = 0): Buffer {
  checkFrameSizeLimit(frameSizeLimit);
  if (message.length === 0) throw new NegentropyError('empty message');
  const version = message[0];
  if (version !== NEGENTROPY_V1) {
    // NIP-77: answer a version we cannot handle with the highest we support; 0x60..0x6F are the version bytes.
    if (version >= 0x60 && version <= 0x6f) return Buffer.from([NEGENTROPY_V1]);
    throw new NegentropyError(`not a negentropy message (first byte 0x${version.toString(16).padStart(2, '0')})`);
  }
  return reconcileMessage(set, message, frameSizeLimit, 'responder', [], []);
}

/** The client (initiator) side, used by our `sync` command. */
export class NegentropyInitiator {
  private initiated = false;
  /**
   * Ids already reported in have/need. A frame-limited peer folds everything after its cut into one Fingerprint
   * to infinity, Skips we sent included, so a range we settled may come back and be settled again.
   */
  private readonly reported = new Set<string>();

  constructor(private readonly set: NegentropySet, private readonly frameSizeLimit = 0) {
    checkFrameSizeLimit(frameSizeLimit);
  }

  /** The first message: our whole set as one range to infinity, split as a differing range would be. */
  initiate(): Buffer {
    if (this.initiated) throw new Error('negentropy: initiate() was already called');
    this.initiated = true;
    const out = new MessageWriter();
    out.byte(NEGENTROPY_V1);
    // At most 16 fingerprints or 31 ids: always far below the smallest frame size limit.
    splitRange(this.set, 0, this.set.size, INFINITY_BOUND, out);
    return out.toBuffer();
  }

  /** next: the message to send, or null when reconciliation is complete. have: ids (hex) we hold that the other side lacks; need: ids (hex) the other side holds that we lack, for the ranges settled by this round (each id once per session). */
  reconcile(message: Uint8Array): { next: Buffer | null; have: string[]; need: string[] } {
    if (!this.initiated) throw new Error('negentropy: call initiate() before reconcile()');
    if (message.length === 0) throw new NegentropyError('empty message');
    if (message[0] !== NEGENTROPY_V1) {
      throw new NegentropyError(`unsupported negentropy version 0x${message[0].toString(16).padStart(2, '0')}`);
    }
    const have: string[] = [];
    const need: string[] = [];
    const out = reconcileMessage(this.set, message, this.frameSizeLimit, 'initiator', have, need);
    return { next: out.length === 1 ? null : out, have: this.firstTime(have), need: this.firstTime(need) };
  }

  private firstTime(ids: string[]): string[] {
    const fresh = ids.filter((id) => !this.reported.has(id));
    for (const id of fresh) this.reported.add(id);
    return fresh;
  }
}
