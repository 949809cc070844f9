// PostgreSQL errors the relay tells apart, by SQLSTATE (PostgreSQL manual, appendix A), and the one
// pg pool error that is not a server error. Named here once instead of literals at each site.

export const SQLSTATE = {
  /** statement_timeout (or a cancel request) ended the query. */
  queryCanceled: '57014',
  /** NOWAIT or lock_timeout could not take a lock. */
  lockNotAvailable: '55P03',
  deadlockDetected: '40P01',
  serializationFailure: '40001',
  uniqueViolation: '23505',
  /** The table does not exist (e.g. before the first migration). */
  undefinedTable: '42P01',
  /** A `\u0000` (or another escape the database encoding cannot hold) in JSON text. */
  unsupportedUnicodeEscape: '22P05',
  /** Connecting: wrong password, a user the server does not know or pg_hba refusing, no such database. */
  invalidPassword: '28P01',
  invalidAuthorization: '28000',
  invalidCatalogName: '3D000',
} as const;

/** The SQLSTATE of a database error, or '' for anything else. */
export function sqlState(err: unknown): string {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : '';
}

export function hasSqlState(err: unknown, ...codes: string[]): boolean {
  return codes.includes(sqlState(err));
}

/** True when the error's SQLSTATE is in one of these two-character classes ('22' data exception, '23' integrity). */
export function inSqlStateClass(err: unknown, ...classes: string[]): boolean {
  return classes.includes(sqlState(err).slice(0, 2));
}

/** pg's pool gave up waiting for a free connection: every connection is busy with other queries. */
export function isPoolExhausted(err: unknown): boolean {
  return /timeout exceeded when trying to connect/.test((err as Error | null)?.message ?? '');
}

/**
 * The database was unavailable rather than the statement wrong: the server is gone, restarting,
 * in recovery, a standby now, or refusing connections for a moment. The same statement can succeed
 * on a retry (on the same server once it is back, or on the new primary after a failover).
 */
export function isUnavailable(err: unknown): boolean {
  const code = sqlState(err);
  // 08: connection exception; 57P01-57P03: admin/crash shutdown, cannot connect now; 25006: a
  // read-only transaction (a standby); 53300: too many connections; 40001/40P01 are safe to retry.
  if (/^08/.test(code) || ['57P01', '57P02', '57P03', '25006', '53300', '40001', '40P01'].includes(code)) return true;
  // Socket-level failures from node (ECONNREFUSED, ECONNRESET …) and pg's own messages for them.
  if (/^E[A-Z]+$/.test(code)) return true;
  const message = (err as Error | null)?.message ?? '';
  return code === '' && /Connection terminated|connection timeout|timeout expired|Client has encountered a connection error|not queryable|no database server|Query read timeout|socket/i.test(message);
}
