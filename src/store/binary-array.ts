// Array parameters in PostgreSQL's binary format (array_recv): a header (dimensions, a has-nulls
// flag, the element type's OID, the length and lower bound of the one dimension), then each element
// as a 32-bit length (-1 for NULL) and its bytes. node-pg sends a Buffer parameter as binary, so the
// writer's arrays of ids, JSON and search words cross without escaping on either side: node-pg
// would otherwise build an array literal (quoting and escaping every element on the main thread)
// that PostgreSQL then parses back, character by character.

/** Element type OIDs (pg_type). */
export const OID = { bytea: 17, int8: 20, int4: 23, text: 25, tsvector: 3614 } as const;

const TWO_32 = 2 ** 32;

/**
 * Fields of PostgreSQL's binary formats, each a 32-bit length (-1 for NULL) and its bytes, written
 * into a growing Buffer from `start` on: the elements of a binary array here, the fields of a binary
 * COPY's rows in ops/binary-copy.ts. `fields` counts them.
 */
export class BinaryFields {
  protected buf: Buffer;
  protected at: number;
  protected fields = 0;
  protected nulls = false;

  constructor(sizeHint: number, start: number) {
    this.buf = Buffer.allocUnsafe(Math.max(sizeHint, start + 64));
    this.at = start;
  }

  protected room(bytes: number): void {
    if (this.at + bytes <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.at + bytes));
    this.buf.copy(bigger, 0, 0, this.at);
    this.buf = bigger;
  }

  null(): this {
    this.room(4);
    this.at = this.buf.writeInt32BE(-1, this.at);
    this.nulls = true;
    this.fields++;
    return this;
  }

  /** A text field (UTF-8), or NULL. */
  text(value: string | null): this {
    if (value === null) return this.null();
    this.room(4 + value.length * 3); // at most 3 bytes per UTF-16 unit
    const length = this.buf.write(value, this.at + 4, 'utf8');
    this.buf.writeInt32BE(length, this.at);
    this.at += 4 + length;
    this.fields++;
    return this;
  }

  /** A bytea field from hex (lowercase or uppercase; anything else ends it). */
  hex(value: string): this {
    this.room(4 + (value.length >>> 1));
    const length = this.buf.write(value, this.at + 4, 'hex');
    this.buf.writeInt32BE(length, this.at);
    this.at += 4 + length;
    this.fields++;
    return this;
  }

  /** A bytea (or any binary-format) field, or NULL. */
  bytes(value: Uint8Array | null): this {
    if (value === null) return this.null();
    this.room(4 + value.length);
    this.at = this.buf.writeInt32BE(value.length, this.at);
    this.buf.set(value, this.at);
    this.at += value.length;
    this.fields++;
    return this;
  }

  int4(value: number): this {
    this.room(8);
    this.at = this.buf.writeInt32BE(4, this.at);
    this.at = this.buf.writeInt32BE(value, this.at);
    this.fields++;
    return this;
  }

  /** An int8 field from a safe integer, or NULL. */
  int8(value: number | null): this {
    if (value === null) return this.null();
    this.room(12);
    const high = Math.floor(value / TWO_32);
    this.at = this.buf.writeInt32BE(8, this.at);
    this.at = this.buf.writeInt32BE(high, this.at);
    this.at = this.buf.writeUInt32BE(value - high * TWO_32, this.at);
    this.fields++;
    return this;
  }
}

/** A one-dimensional array parameter of element type `oid`: its elements, then done(). */
export class BinaryArray extends BinaryFields {
  constructor(
    private readonly oid: number,
    sizeHint = 1024,
  ) {
    super(sizeHint, 20);
  }

  /** The parameter: the header written in front of the elements. */
  done(): Buffer {
    if (this.fields === 0) {
      // No dimensions at all: PostgreSQL's empty array.
      const empty = Buffer.alloc(12);
      empty.writeInt32BE(this.oid, 8);
      return empty;
    }
    this.buf.writeInt32BE(1, 0);
    this.buf.writeInt32BE(this.nulls ? 1 : 0, 4);
    this.buf.writeInt32BE(this.oid, 8);
    this.buf.writeInt32BE(this.fields, 12);
    this.buf.writeInt32BE(1, 16);
    return this.buf.subarray(0, this.at);
  }
}

/** Each value of `items` as one element of a binary array of type `oid`. */
export function binaryArray<T>(oid: number, items: readonly T[], add: (array: BinaryArray, item: T) => void, bytesEach = 16): Buffer {
  const array = new BinaryArray(oid, 20 + items.length * bytesEach);
  for (const item of items) add(array, item);
  return array.done();
}
