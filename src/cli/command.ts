import type { Config } from '../config.js';
import type { Logger } from '../log.js';

export interface CommandContext {
  config: Config;
  log: Logger;
}

/** A bad command line: main prints the message and the command's help hint, and exits with 2. */
export class UsageError extends Error {}

/** One operator command. Its one-line summary is in main.ts, so listing the commands loads none of them. */
export interface Command {
  name: string;
  help: string;
  /** Returns the process exit code. */
  run(args: string[], ctx: CommandContext): Promise<number>;
}
