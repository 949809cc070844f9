// Errors that stop the relay (or a command) from starting: each says what is wrong and what to do,
// in one line, for the person at the terminal. Thrown where the cause is known (the database's
// connection, DATA_DIR, the TLS files, a migration); describeStartupError covers what only the
// caller can name (the port) and anything else.

/** A start-up failure whose message already says what is wrong and what to do. */
export class FatalError extends Error {
  constructor(what: string, todo: string) {
    super(`${what}: ${todo}`);
    this.name = 'FatalError';
  }
}

interface SystemError extends Error {
  code?: string;
  syscall?: string;
  address?: string;
  port?: number;
}

/** One line for a start-up failure; `settings` says which variables chose the address. */
export function describeStartupError(err: unknown, settings: { PORT: number; HOST: string }): string {
  if (err instanceof FatalError) return err.message;
  const e = err as SystemError;
  if (e?.syscall === 'listen') {
    const where = `${settings.HOST}:${e.port ?? settings.PORT}`;
    if (e.code === 'EADDRINUSE') return `port ${e.port ?? settings.PORT} is in use (${where}): stop the other process (another relay?) or set PORT to a free port`;
    if (e.code === 'EACCES') return `not allowed to listen on ${where} (ports below 1024 need privileges): set PORT to 1024 or above, or put a reverse proxy in front`;
    if (e.code === 'EADDRNOTAVAIL') return `HOST ${settings.HOST} is not an address of this machine: set HOST to one of its addresses, or 0.0.0.0 for all`;
  }
  const message = err instanceof Error ? err.message : String(err);
  return `could not start: ${message}`;
}
