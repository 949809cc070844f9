import type { Config } from '../config.js';
import type { Logger } from '../log.js';

export interface CommandContext {
  config: Config;
  log: Logger;
}

export interface Command {
  name: string;
  summary: string;
  help: string;
  /** Returns the process exit code. */
  run(args: string[], ctx: CommandContext): Promise<number>;
}
