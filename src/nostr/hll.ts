// NIP-45 HyperLogLog (protocol.md §7): a COUNT reply may carry 256 one-byte registers, so a client can
// merge the counts of several relays without counting an author twice. The registers are computed in
// SQL from the matching events' pubkeys (store/query.ts); this file holds the two rules a client must
// share with us: which byte of the pubkey picks the register (the offset), and the reply's encoding.
import { createHash } from 'node:crypto';
import type { Filter } from './filter.js';

export const HLL_REGISTERS = 256;
const HEX64 = /^[0-9a-f]{64}$/;

/**
 * The offset for a filter whose first `#tag` key's first value is `value`: taken from the value when it
 * is a 64-hex id or pubkey, from the pubkey of an address `kind:pubkey:d`, else from its sha256; hex
 * character 32 as 0..15, plus 8 (so 8..23).
 */
export function hllOffset(value: string): number {
  let hex = value;
  if (!HEX64.test(hex)) {
    const parts = value.split(':');
    hex = parts.length === 3 && HEX64.test(parts[1]) ? parts[1] : createHash('sha256').update(value, 'utf8').digest('hex');
  }
  return parseInt(hex[32], 16) + 8;
}

/**
 * The offset of a COUNT's filters: the one they all agree on, or none (a filter without a tag key has
 * no rule, and registers fed at two offsets would merge into nonsense).
 */
export function hllOffsetOf(filters: readonly Filter[]): number | undefined {
  const offsets = new Set(filters.map((f) => (f.firstTagValue === undefined ? undefined : hllOffset(f.firstTagValue))));
  const [offset] = offsets;
  return offsets.size === 1 ? offset : undefined;
}

/** The reply's `hll`: 512 lowercase hex characters, register 0 first; registers not given are 0. */
export function hllHex(registers: Iterable<[register: number, value: number]>): string {
  const bytes = Buffer.alloc(HLL_REGISTERS);
  for (const [r, v] of registers) bytes[r] = Math.max(bytes[r], v);
  return bytes.toString('hex');
}
