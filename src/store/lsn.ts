// PostgreSQL WAL positions ("16/B374D848"): as bigints, so they compare.

/** The position as a number; 0n for null or malformed text (nothing known). */
export function lsnValue(text: string | null | undefined): bigint {
  const m = text ? /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(text) : null;
  return m ? (BigInt('0x' + m[1]) << 32n) | BigInt('0x' + m[2]) : 0n;
}
