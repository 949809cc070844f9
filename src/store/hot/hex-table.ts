// The hot tier's tables keyed by 64 hex digits (event ids, authors' pubkeys): open-addressing hash
// tables whose keys are 56 bits of the hex digits, kept in a typed array. A Map keyed by the string
// hashes each of the 64 characters and follows three pointers per probe (bucket, entry, key
// string), each a wait on memory in a table of a million entries; here an insert or a miss reads
// one slot of an Int32Array, and only a slot whose 56 bits match is checked against the value's key
// (ids are SHA-256 hashes, pubkeys points on a curve; keys made to share 56 bits cost a longer
// probe, never a wrong answer). Sized for what it holds: a million entries cost 16-32 bytes each,
// as a Map's do.
import { hexBits } from '../../nostr/event.js';
import type { HeldEvent } from './held-event.js';

/** The table grows (twice as large) when more than this fraction of its slots is used. */
const MAX_LOAD = 0.5;

export abstract class HexTable<V> {
  /** Two 28-bit halves of each slot's key, 0 and 0 for an empty slot. */
  private keys: Int32Array;
  private values: Array<V | undefined>;
  private mask: number;
  /** 32 - log2(capacity). */
  private shift: number;
  private count = 0;

  constructor(expected = 1024) {
    let capacity = 1024;
    while (capacity * MAX_LOAD < expected) capacity *= 2;
    this.keys = new Int32Array(2 * capacity);
    this.values = new Array<V | undefined>(capacity).fill(undefined);
    this.mask = capacity - 1;
    this.shift = 32 - Math.log2(capacity);
  }

  /** The key a value is held under. */
  protected abstract keyOf(value: V): string;

  get size(): number {
    return this.count;
  }

  get(key: string): V | undefined {
    const h1 = hexBits(key, 0, 7);
    const h2 = hexBits(key, 7, 7) || 1;
    const { keys, mask } = this;
    for (let i = this.home(h1, h2); ; i = (i + 1) & mask) {
      const k1 = keys[2 * i]!;
      const k2 = keys[2 * i + 1]!;
      if (k2 === 0) return undefined;
      if (k1 === h1 && k2 === h2) {
        const value = this.values[i]!;
        if (this.keyOf(value) === key) return value;
      }
    }
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  /** Holds `value` under its key; the caller has checked that nothing is held under it. */
  set(value: V): void {
    if (this.count + 1 > (this.mask + 1) * MAX_LOAD) this.grow();
    const key = this.keyOf(value);
    this.place(hexBits(key, 0, 7), hexBits(key, 7, 7) || 1, value);
    this.count++;
  }

  delete(key: string): boolean {
    const h1 = hexBits(key, 0, 7);
    const h2 = hexBits(key, 7, 7) || 1;
    const { keys, mask } = this;
    let i = this.home(h1, h2);
    for (; ; i = (i + 1) & mask) {
      const k2 = keys[2 * i + 1]!;
      if (k2 === 0) return false;
      if (keys[2 * i] === h1 && k2 === h2 && this.keyOf(this.values[i]!) === key) break;
    }
    // Backward-shift deletion: later entries of the run that may sit at i move up, so no probe
    // stops early at the hole.
    for (let j = (i + 1) & mask; ; j = (j + 1) & mask) {
      const k1 = keys[2 * j]!;
      const k2 = keys[2 * j + 1]!;
      if (k2 === 0) break;
      const home = this.home(k1, k2);
      // The entry at j may move to i when i lies on its way from home to j (cyclically).
      if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
        keys[2 * i] = k1;
        keys[2 * i + 1] = k2;
        this.values[i] = this.values[j];
        i = j;
      }
    }
    keys[2 * i] = 0;
    keys[2 * i + 1] = 0;
    this.values[i] = undefined;
    this.count--;
    return true;
  }

  /** The slot a key's probe starts at: both halves mixed (multiplicative hashing, the product's top bits). */
  private home(h1: number, h2: number): number {
    return Math.imul(h1 ^ Math.imul(h2, 0x27d4eb2d), 0x9e3779b1) >>> this.shift;
  }

  private place(h1: number, h2: number, value: V): void {
    const { keys, mask } = this;
    let i = this.home(h1, h2);
    while (keys[2 * i + 1] !== 0) i = (i + 1) & mask;
    keys[2 * i] = h1;
    keys[2 * i + 1] = h2;
    this.values[i] = value;
  }

  private grow(): void {
    const { keys, values } = this;
    const capacity = 2 * (this.mask + 1);
    this.keys = new Int32Array(2 * capacity);
    this.values = new Array<V | undefined>(capacity).fill(undefined);
    this.mask = capacity - 1;
    this.shift = 32 - Math.log2(capacity);
    for (let i = 0; i < values.length; i++) if (keys[2 * i + 1] !== 0) this.place(keys[2 * i]!, keys[2 * i + 1]!, values[i]!);
  }
}

/** Held events by id. */
export class IdIndex extends HexTable<HeldEvent> {
  protected keyOf(e: HeldEvent): string {
    return e.id;
  }
}
