import { pino, type Logger } from 'pino';

export type { Logger };

/** JSON logs on stderr-free stdout; pipe through `npx pino-pretty` to read them in a terminal. */
export function createLogger(level: string): Logger {
  return pino({ level, base: { service: 'pgrelay' } });
}
