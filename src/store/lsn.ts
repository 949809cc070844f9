// PostgreSQL WAL positions ("16/B374D848"): as bigints, so they compare.

/** The position as a number; 0n for null or malformed text (nothing known). */
export function lsnValue(text: string | null | undefined): bigint {
  const m = text ? /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(text) : null;
  return m ? (BigInt('0x' + m[1]) << 32n) | BigInt('0x' + m[2]) : 0n;
}

/** WAL page size (PostgreSQL's default XLOG_BLCKSZ) and its page headers' sizes (short, and long at a segment's start). */
const WAL_PAGE = 8192n;

/**
 * The position as a replica reports it once it has replayed everything before `lsn`: an insert
 * position just past a page header (the last record ended on the page boundary) means the boundary,
 * where a replica's replay position stops. Otherwise an idle replica would never look caught up.
 */
export function settledLsn(lsn: bigint): bigint {
  const offset = lsn % WAL_PAGE;
  return offset === 24n || offset === 40n ? lsn - offset : lsn;
}
