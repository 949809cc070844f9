// The hot tier on disk: a stopping relay writes what its tier holds (HOT_TIER_SNAPSHOT), and the next
// start reads it back in a fraction of the fill's time (no database to read, no JSON to parse, the
// lists built in their final order) and then has it checked against the database (restore.ts).
//
// The file: 8 bytes of magic, a 4-byte length and a JSON header, then sections of fixed-width columns
// (one value per event, per indexed tag or per string) and the events' raw JSON, in the tier's list
// order (oldest first). Strings an event shares with others (its author, its tags' values, an
// addressable event's key) are stored once and shared again once read. Written to a temporary name,
// synced, then renamed: a file under the final name is whole. A CRC-32 of everything after the header
// ends the file: a byte changed on disk since (in an event's content, where no column repeats it)
// fails the read, and the relay fills from the database instead of serving it.
import { closeSync, fstatSync, fsyncSync, openSync, readSync, renameSync, writeSync } from 'node:fs';
import { crc32 } from 'node:zlib';
import { isReplaceable } from '../../nostr/kinds.js';
import { CREATED_AT_AT, ID_AT, PUBKEY_AT } from './fill.js';
import { HeldEvent } from './held-event.js';
import { BucketPrints, type BucketPrint } from './restore.js';
import { heldBytes, type TierImage } from './tier.js';

const MAGIC = Buffer.from('PGRHOT1\n', 'latin1');
const FORMAT = 'pgrelay-hot-tier';
const VERSION = 2;
/** Events per bucket of the check at start (restore.ts): a bucket that differs is read again whole. */
export const BUCKET_EVENTS = 8192;
/** Raw JSON bytes read (or written) at a time. */
const CHUNK_BYTES = 64 * 2 ** 20;

/**
 * Events' JSON is cut from texts of whole events of up to this many bytes (SnapshotReader.read).
 * Below Node's ~1 MB threshold for strings made from a Buffer: a longer one is an external string,
 * whose memory counts as external, and a million events' texts then started a full collection of
 * the growing heap every ~60 MB read (9 instead of 3, a fifth of the read's time).
 */
const TEXT_BYTES = 2 ** 19;
/** Where the digits of the non-negative integer `n` at raw[at..] end, or -1 when they are not exactly n's. */
function integerEnd(raw: string, at: number, n: number): number {
  let value = 0;
  let i = at;
  for (let c = raw.charCodeAt(i); c >= 48 && c <= 57 && i - at < 16; c = raw.charCodeAt(++i)) value = value * 10 + (c - 48);
  return i > at && value === n ? i : -1;
}

/**
 * The event's columns say what its canonical JSON says (nostr/event.ts,
 * `{"id":"<64>","pubkey":"<64>","created_at":N,"kind":N,…`): the quotes around id and pubkey in
 * their places, and the digits of created_at and kind. (Character by character: startsWith on a
 * slice cost ~0.5 s a million. Not the pubkey's 64 digits: comparing them waits on memory for each
 * event, and a file that is whole, as the rename makes it, has them right.)
 */
function fieldsMatch(raw: string, pubkey: string, createdAt: number, kind: number): boolean {
  if (
    pubkey.length !== 64 ||
    raw.charCodeAt(ID_AT - 1) !== QUOTE ||
    raw.charCodeAt(ID_AT + 64) !== QUOTE ||
    raw.charCodeAt(PUBKEY_AT - 1) !== QUOTE ||
    raw.charCodeAt(PUBKEY_AT + 64) !== QUOTE ||
    raw.charCodeAt(CREATED_AT_AT - 1) !== COLON
  )
    return false;
  const kindAt = integerEnd(raw, CREATED_AT_AT, createdAt);
  return kindAt > 0 && raw.charCodeAt(kindAt + 7) === COLON && integerEnd(raw, kindAt + 8, kind) > 0;
}

const QUOTE = 34;
const COLON = 58;

export interface SnapshotHeader {
  format: typeof FORMAT;
  version: typeof VERSION;
  /** The tier's window (null: -Infinity, the whole store). */
  windowStart: number | null;
  replaceableComplete: boolean;
  events: number;
  strings: number;
  stringBytes: number;
  pairs: number;
  rawBytes: number;
  /** heldBytes (tier.ts) of what was written. */
  heldBytes: number;
  /** Ascending created_at thresholds that cut the events into buckets of about BUCKET_EVENTS (width_bucket's). */
  bounds: number[];
}

/** A character a Latin-1 byte cannot hold. */
const WIDE = /[^\u0000-\u00ff]/;

/** One array for every event without indexed tags (as tier.ts has); never added to. */
const NO_TAG_PAIRS: string[] = Object.freeze([]) as unknown as string[];

/** The columns, in file order, as their element sizes: events (N), pairs (P), strings (S). */
interface Columns {
  stringEnd: Uint32Array; // S
  stringWide: Uint8Array; // S, 1: stored as UTF-16 (a character above U+00FF), else Latin-1
  createdAt: Float64Array; // N
  kind: Uint32Array; // N
  expiresAt: Float64Array; // N, NaN: none
  author: Uint32Array; // N, a string
  key: Int32Array; // N, a string or -1
  pairEnd: Uint32Array; // N
  pairName: Uint8Array; // P, the tag name's character code
  pairValue: Uint32Array; // P, a string
  rawEnd: Float64Array; // N
  ascii: Uint8Array; // N, 1: raw is ASCII (one byte per character)
}

function writeAll(fd: number, bytes: ArrayBufferView): void {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let at = 0; at < buf.length; ) at += writeSync(fd, buf, at, buf.length - at);
}

/**
 * Writes the events (oldest first in list order, as HotTier.image gives them) to `file`, through a
 * temporary file renamed once synced, cut into buckets of about `bucketEvents` (restore.ts). Returns
 * the bytes written.
 */
export function writeSnapshot(file: string, image: { windowStart: number; replaceableComplete: boolean; events: HeldEvent[] }, bucketEvents = BUCKET_EVENTS): number {
  const { events } = image;
  const n = events.length;
  const strings = new Map<string, number>();
  const stringList: string[] = [];
  const intern = (s: string): number => {
    let i = strings.get(s);
    if (i === undefined) {
      strings.set(s, (i = stringList.length));
      stringList.push(s);
    }
    return i;
  };
  let pairs = 0;
  for (const e of events) pairs += e.tagPairs.length / 2;
  const c: Columns = {
    stringEnd: new Uint32Array(0),
    stringWide: new Uint8Array(0),
    createdAt: new Float64Array(n),
    kind: new Uint32Array(n),
    expiresAt: new Float64Array(n),
    author: new Uint32Array(n),
    key: new Int32Array(n),
    pairEnd: new Uint32Array(n),
    pairName: new Uint8Array(pairs),
    pairValue: new Uint32Array(pairs),
    rawEnd: new Float64Array(n),
    ascii: new Uint8Array(n),
  };
  const bounds: number[] = [];
  let p = 0;
  let rawBytes = 0;
  let held = 0;
  let inBucket = 0;
  for (let i = 0; i < n; i++) {
    const e = events[i]!;
    // A bucket ends once it has bucketEvents events, at the next second (a second is never cut).
    if (++inBucket > bucketEvents && e.created_at > events[i - 1]!.created_at) {
      bounds.push(e.created_at);
      inBucket = 1;
    }
    c.createdAt[i] = e.created_at;
    c.kind[i] = e.kind;
    c.expiresAt[i] = e.expiresAt ?? NaN;
    c.author[i] = intern(e.pubkey);
    c.key[i] = e.key === null ? -1 : intern(e.key);
    const tp = e.tagPairs;
    for (let t = 0; t < tp.length; t += 2, p++) {
      c.pairName[p] = tp[t]!.charCodeAt(0);
      c.pairValue[p] = intern(tp[t + 1]!);
    }
    c.pairEnd[i] = p;
    rawBytes += e.rawBytes;
    held += heldBytes(e.raw, tp.length / 2, e.rawBytes);
    c.rawEnd[i] = rawBytes;
    c.ascii[i] = e.rawBytes === e.raw.length ? 1 : 0;
  }
  // Each string as V8 holds it, one byte or two per character (read back alike), and every code unit
  // kept: UTF-8 would turn a lone surrogate into U+FFFD.
  c.stringEnd = new Uint32Array(stringList.length);
  c.stringWide = new Uint8Array(stringList.length);
  let stringBytes = 0;
  for (let i = 0; i < stringList.length; i++) {
    const wide = WIDE.test(stringList[i]!);
    c.stringWide[i] = wide ? 1 : 0;
    c.stringEnd[i] = stringBytes += (wide ? 2 : 1) * stringList[i]!.length;
  }
  const stringText = Buffer.allocUnsafe(stringBytes);
  for (let i = 0, at = 0; i < stringList.length; i++) at += stringText.write(stringList[i]!, at, c.stringWide[i] ? 'utf16le' : 'latin1');
  const header: SnapshotHeader = {
    format: FORMAT,
    version: VERSION,
    windowStart: image.windowStart === -Infinity ? null : image.windowStart,
    replaceableComplete: image.replaceableComplete,
    events: n,
    strings: stringList.length,
    stringBytes: stringText.length,
    pairs,
    rawBytes,
    heldBytes: held,
    bounds,
  };
  const head = Buffer.from(JSON.stringify(header), 'utf8');
  const length = Buffer.alloc(4);
  length.writeUInt32LE(head.length);

  const temporary = `${file}.${process.pid}.tmp`;
  const fd = openSync(temporary, 'w', 0o600);
  let written = 0;
  let sum = 0;
  /** Writes a part of the file; what follows the header is summed into the trailing CRC-32. */
  const put = (part: NodeJS.ArrayBufferView, summed = true) => {
    writeAll(fd, part);
    written += part.byteLength;
    if (summed) sum = crc32(part, sum);
  };
  try {
    for (const part of [MAGIC, length, head]) put(part, false);
    for (const part of [c.stringEnd, c.stringWide, stringText, c.createdAt, c.kind, c.expiresAt, c.author, c.key, c.pairEnd, c.pairName, c.pairValue, c.rawEnd, c.ascii]) put(part);
    const chunk = Buffer.allocUnsafe(CHUNK_BYTES);
    let used = 0;
    for (const e of events) {
      if (used + e.rawBytes > chunk.length) {
        put(chunk.subarray(0, used));
        used = 0;
      }
      if (e.rawBytes > chunk.length) put(Buffer.from(e.raw, 'utf8'));
      else used += chunk.write(e.raw, used, 'utf8');
    }
    put(chunk.subarray(0, used));
    const trailer = Buffer.alloc(4);
    trailer.writeUInt32LE(sum >>> 0);
    put(trailer, false);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temporary, file);
  return written;
}

/** A snapshot being read: its header, then its events (readEvents). */
export class SnapshotReader {
  /** CRC-32 of what bytes() has read so far. */
  private sum = 0;

  private constructor(
    private readonly fd: number,
    readonly header: SnapshotHeader,
    private at: number,
    private readonly size: number,
  ) {}

  /** Opens `file` and checks its header; throws if it is not a whole snapshot of this version. */
  static open(file: string): SnapshotReader {
    const fd = openSync(file, 'r');
    try {
      const size = fstatSync(fd).size;
      const start = Buffer.alloc(12);
      if (readSync(fd, start, 0, 12, 0) !== 12 || !start.subarray(0, 8).equals(MAGIC)) throw new Error('not a hot tier snapshot');
      const headLength = start.readUInt32LE(8);
      if (headLength > 64 * 2 ** 20 || 12 + headLength > size) throw new Error('snapshot header cut short');
      const head = Buffer.alloc(headLength);
      readSync(fd, head, 0, headLength, 12);
      const header = JSON.parse(head.toString('utf8')) as SnapshotHeader;
      if (header.format !== FORMAT || header.version !== VERSION) throw new Error(`snapshot format ${String(header.format)} ${String(header.version)}, not ${FORMAT} ${VERSION}`);
      const { events: n, strings: s, pairs: p } = header;
      for (const count of [n, s, p, header.stringBytes, header.rawBytes, header.heldBytes])
        if (!Number.isSafeInteger(count) || count < 0) throw new Error('snapshot header is not valid');
      const expected = 12 + headLength + 5 * s + header.stringBytes + n * (8 + 4 + 8 + 4 + 4 + 4 + 8 + 1) + p * 5 + header.rawBytes + 4;
      if (size !== expected) throw new Error(`snapshot is ${size} bytes, its header says ${expected}`);
      return new SnapshotReader(fd, header, 12 + headLength, size);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /**
   * The next `bytes` of the file, in `into` when it is large enough (the raw JSON's chunks reuse one
   * buffer), summed into the CRC-32 of what follows the header (read() reads it all once, in order).
   */
  private bytes(bytes: number, into?: Buffer): Buffer {
    const buf = into && into.length >= bytes ? into.subarray(0, bytes) : Buffer.allocUnsafe(bytes);
    for (let got = 0; got < bytes; ) {
      const n = readSync(this.fd, buf, got, bytes - got, this.at + got);
      if (n === 0) throw new Error('snapshot cut short');
      got += n;
    }
    this.sum = crc32(buf, this.sum);
    this.at += bytes;
    return buf;
  }

  /** The next `length` values of a column, read into memory of its own (aligned for the type). */
  private column<T>(Type: { new (buffer: ArrayBuffer, offset: number, length: number): T; BYTES_PER_ELEMENT: number }, length: number): T {
    const own = new ArrayBuffer(length * Type.BYTES_PER_ELEMENT);
    this.bytes(own.byteLength, Buffer.from(own));
    return new Type(own, 0, length);
  }

  /**
   * The events, oldest first, each handed to `onEvent` as it is read (HotTier.restoreEvent, with its
   * heldBytes), and how they group (HotTier.restoreLists), awaiting `turn` every `batchEvents`
   * events (the caller decides whether the event loop turns then: Slices). Each event's fixed fields
   * are checked against its raw JSON (id, pubkey, created_at, kind), and the whole against the
   * file's CRC-32: a damaged file throws rather than serve wrong rows. With them, each bucket's
   * figures (restore.ts), summed while the JSON is at hand.
   */
  async read(turn: () => Promise<void>, onEvent: (e: HeldEvent, heldBytes: number) => void, batchEvents = 500): Promise<{ image: TierImage; prints: Map<number, BucketPrint> }> {
    const { events: n, strings: s, pairs: p } = this.header;
    const stringEnd = this.column(Uint32Array, s);
    const stringWide = this.column(Uint8Array, s);
    const stringText = this.bytes(this.header.stringBytes);
    await turn();
    const strings = new Array<string>(s);
    for (let i = 0, start = 0; i < s; i++) {
      const end = stringEnd[i]!;
      if (end < start || end > stringText.length || (stringWide[i] && (end - start) % 2 !== 0)) throw new Error('snapshot strings are not valid');
      strings[i] = stringText.toString(stringWide[i] ? 'utf16le' : 'latin1', start, end);
      start = end;
      if (i % (4 * batchEvents) === 4 * batchEvents - 1) await turn();
    }
    const first = {
      createdAt: this.column(Float64Array, n),
      kind: this.column(Uint32Array, n),
      expiresAt: this.column(Float64Array, n),
      author: this.column(Uint32Array, n),
      key: this.column(Int32Array, n),
      pairEnd: this.column(Uint32Array, n),
    };
    await turn();
    const c = { ...first, pairName: this.column(Uint8Array, p), pairValue: this.column(Uint32Array, p), rawEnd: this.column(Float64Array, n), ascii: this.column(Uint8Array, n) };
    await turn();
    for (const column of [c.author, c.pairValue]) for (let i = 0; i < column.length; i++) if (column[i]! >= s) throw new Error('snapshot refers to a string it does not have');
    for (let i = 0; i < n; i++) if (c.key[i]! >= s || c.key[i]! < -1) throw new Error('snapshot refers to a string it does not have');
    const names = new Array<string>(256);
    for (let code = 0; code < 256; code++) names[code] = String.fromCharCode(code);
    const prints = new BucketPrints(this.header.bounds);
    const rawsStart = this.at;
    const reused = Buffer.allocUnsafeSlow(Math.min(CHUNK_BYTES, this.header.rawBytes));
    let chunk: Buffer = Buffer.alloc(0);
    let chunkStart = 0; // raw offset of chunk[0]
    let text = '';
    let textStart = 0;
    let textEnd = 0;
    const events = new Array<HeldEvent>(n);
    let pair = 0;
    let rawStart = 0;
    for (let i = 0; i < n; i++) {
      const rawEnd = c.rawEnd[i]!;
      if (!(rawEnd > rawStart) || rawEnd > this.header.rawBytes) throw new Error('snapshot raw offsets are not valid');
      if (rawEnd - chunkStart > chunk.length) {
        // The next chunk: from this event on, whole events up to CHUNK_BYTES (or this one alone).
        let last = i;
        while (last + 1 < n && c.rawEnd[last + 1]! - rawStart <= CHUNK_BYTES) last++;
        this.at = rawsStart + rawStart;
        chunk = this.bytes(c.rawEnd[last]! - rawStart, reused);
        chunkStart = rawStart;
        textEnd = 0;
      }
      const createdAt = c.createdAt[i]!;
      const kind = c.kind[i]!;
      let raw: string;
      if (c.ascii[i] && !isReplaceable(kind)) {
        // A slice of a text of whole events (one string of up to TEXT_BYTES, no young-generation
        // copies of each event's JSON); a replaceable version, which may be held for as long as it
        // is current, has a string of its own rather than keep a whole text alive.
        if (rawEnd > textEnd) {
          let last = i;
          while (last + 1 < n && c.rawEnd[last + 1]! - rawStart <= TEXT_BYTES && c.rawEnd[last + 1]! - chunkStart <= chunk.length) last++;
          textStart = rawStart;
          textEnd = c.rawEnd[last]!;
          text = chunk.toString('latin1', textStart - chunkStart, textEnd - chunkStart);
        }
        raw = text.slice(rawStart - textStart, rawEnd - textStart);
      } else raw = chunk.toString(c.ascii[i] ? 'latin1' : 'utf8', rawStart - chunkStart, rawEnd - chunkStart);
      const pubkey = strings[c.author[i]!]!;
      if (!fieldsMatch(raw, pubkey, createdAt, kind))
        throw new Error('snapshot event does not match its JSON');
      const end = c.pairEnd[i]!;
      if (end < pair || end > p) throw new Error('snapshot tag offsets are not valid');
      const tagPairs = end === pair ? NO_TAG_PAIRS : new Array<string>(2 * (end - pair));
      for (let t = 0; pair < end; pair++, t += 2) {
        tagPairs[t] = names[c.pairName[pair]!]!;
        tagPairs[t + 1] = strings[c.pairValue[pair]!]!;
      }
      const keyAt = c.key[i]!;
      const expiresAt = c.expiresAt[i]!;
      const e = new HeldEvent(raw.slice(ID_AT, ID_AT + 64), pubkey, createdAt, kind, raw, tagPairs, Number.isNaN(expiresAt) ? null : expiresAt, keyAt < 0 ? null : strings[keyAt]!, rawEnd - rawStart);
      events[i] = e;
      onEvent(e, heldBytes(raw, tagPairs.length / 2, e.rawBytes));
      prints.add(createdAt, raw, ID_AT);
      if (i > 0 && createdAt < c.createdAt[i - 1]!) throw new Error('snapshot events are not in order');
      rawStart = rawEnd;
      if (i % batchEvents === batchEvents - 1) await turn();
    }
    if (rawStart !== this.header.rawBytes) throw new Error('snapshot raw offsets are not valid');
    const trailer = Buffer.alloc(4);
    if (readSync(this.fd, trailer, 0, 4, this.at) !== 4 || trailer.readUInt32LE(0) !== this.sum >>> 0) throw new Error('snapshot checksum does not match: the file changed after it was written');
    const { windowStart, replaceableComplete } = this.header;
    const image = { windowStart: windowStart ?? -Infinity, replaceableComplete, events, kind: c.kind, createdAt: c.createdAt, author: c.author, pairEnd: c.pairEnd, pairName: c.pairName, pairValue: c.pairValue, strings };
    return { image, prints: prints.byBucket };
  }

  close(): void {
    closeSync(this.fd);
  }
}
