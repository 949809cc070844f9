import { pino, type Logger } from 'pino';

export type { Logger };

/**
 * JSON logs (pipe through `npx pino-pretty` to read them in a terminal). The relay logs to stdout;
 * operator commands log to stderr (fd 2) so their output can be piped.
 */
export function createLogger(level: string, fd: 1 | 2 = 1): Logger {
  return pino({ level, base: { service: 'pgrelay' } }, pino.destination({ fd, sync: fd === 2 }));
}
