// PostgreSQL's binary COPY format, both ways: a header, then per row a 16-bit field count and each
// field as a 32-bit length (-1 for NULL) and its bytes, then a count of -1. Ids and keys travel as
// their 32 raw bytes, numbers as integers and text as UTF-8, so neither side escapes, hex-encodes
// or scans for delimiters, and the rows are built in (and read from) Buffers, outside the JS heap:
// with a million events in flight, strings and row objects that outlive a batch were most of the
// import's garbage-collection time.

import { BinaryFields } from '../store/binary-array.js';

const SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');
/** Signature, flags (none), header extension length (none). */
const HEADER = Buffer.concat([SIGNATURE, Buffer.alloc(8)]);
const TWO_32 = 2 ** 32;

/** Builds the data of one `COPY … FROM STDIN (FORMAT binary)`: call row() then the field writers. */
export class BinaryCopyWriter extends BinaryFields {
  constructor(sizeHint = 1 << 16) {
    super(sizeHint, HEADER.length);
    HEADER.copy(this.buf);
  }

  row(fields: number): this {
    this.room(2);
    this.at = this.buf.writeInt16BE(fields, this.at);
    return this;
  }

  /** The data, trailer included; the writer is not to be used again. */
  finish(): Buffer {
    this.room(2);
    this.at = this.buf.writeInt16BE(-1, this.at);
    return this.buf.subarray(0, this.at);
  }
}

/** Rows of a binary COPY stream: the bytes they arrived in, and where each row's first field starts. */
export interface CopyRows {
  data: Buffer;
  starts: number[];
}

/**
 * The rows of one `COPY … TO STDOUT (FORMAT binary)`, kept as the bytes that arrived: push() the
 * stream's chunks as they come (a row may span chunks), take() the complete rows so far (without
 * decoding them), and read their fields with a BinaryCopyCursor.
 */
export class BinaryCopyReader {
  private readonly ready: CopyRows[] = [];
  private carry: Buffer = Buffer.alloc(0);
  private headerDone = false;
  /** Complete rows pushed and not taken yet. */
  rows = 0;
  /** The trailer has arrived: every row is here. */
  ended = false;

  constructor(private readonly fields: number) {}

  push(chunk: Buffer): void {
    const data = this.carry.length ? Buffer.concat([this.carry, chunk]) : chunk;
    let at = 0;
    if (!this.headerDone) {
      if (data.length < HEADER.length || data.length < HEADER.length + data.readInt32BE(15)) {
        this.carry = data;
        return;
      }
      if (!data.subarray(0, SIGNATURE.length).equals(SIGNATURE)) throw new Error('not a binary COPY stream');
      at = HEADER.length + data.readInt32BE(15); // the header extension, if any
      this.headerDone = true;
    }
    const starts: number[] = [];
    while (!this.ended && data.length >= at + 2) {
      const count = data.readInt16BE(at);
      if (count === -1) {
        this.ended = true;
        at += 2;
        break;
      }
      if (count !== this.fields) throw new Error(`a binary COPY row with ${count} fields, expected ${this.fields}`);
      let end = at + 2;
      for (let i = 0; i < count && end !== -1; i++) end = data.length < end + 4 ? -1 : end + 4 + Math.max(data.readInt32BE(end), 0);
      if (end === -1 || end > data.length) break; // the rest of the row is in the next chunk
      starts.push(at + 2);
      at = end;
    }
    if (starts.length) {
      this.ready.push({ data, starts });
      this.rows += starts.length;
    }
    this.carry = data.subarray(at);
  }

  /** Up to `max` of the complete rows (all of them without `max`), in order. */
  take(max = Infinity): CopyRows[] {
    const out: CopyRows[] = [];
    for (let want = max; want > 0 && this.ready.length; ) {
      const first = this.ready[0];
      if (first.starts.length <= want) {
        out.push(first);
        this.ready.shift();
        want -= first.starts.length;
      } else {
        out.push({ data: first.data, starts: first.starts.slice(0, want) });
        first.starts = first.starts.slice(want);
        want = 0;
      }
    }
    for (const rows of out) this.rows -= rows.starts.length;
    return out;
  }

  /** Every row, once the stream is over. */
  finish(): CopyRows[] {
    if (!this.ended) throw new Error('the binary COPY stream ended early');
    return this.take();
  }
}

/** Reads one row's fields in order (NULL is null). */
export class BinaryCopyCursor {
  constructor(
    private readonly data: Buffer,
    private at: number,
  ) {}

  /** The next field's bounds, or undefined for NULL. */
  private next(): [number, number] | undefined {
    const length = this.data.readInt32BE(this.at);
    const start = this.at + 4;
    this.at = start + Math.max(length, 0);
    return length < 0 ? undefined : [start, this.at];
  }

  hex(): string | null {
    const f = this.next();
    return f ? this.data.toString('hex', f[0], f[1]) : null;
  }

  int8(): number | null {
    const f = this.next();
    return f ? this.data.readInt32BE(f[0]) * TWO_32 + this.data.readUInt32BE(f[0] + 4) : null;
  }

  text(): string | null {
    const f = this.next();
    return f ? this.data.toString('utf8', f[0], f[1]) : null;
  }

  bool(): boolean | null {
    const f = this.next();
    return f ? this.data[f[0]] === 1 : null;
  }
}
