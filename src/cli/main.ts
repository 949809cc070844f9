#!/usr/bin/env node
// Operator commands: `npm run cli -- <command> [options]`, or the `pgrelay` bin. Each command is a
// module in ./commands, sharing the relay's configuration (environment / .env) and store code.
import { ConfigError, loadConfig } from '../config.js';
import { createLogger } from '../log.js';
import type { Command } from './command.js';
import { backfillSearchCommand } from './commands/backfill-search.js';
import { backfillTagsCommand } from './commands/backfill-tags.js';
import { exportCommand } from './commands/export.js';
import { importNostreamCommand } from './commands/import-nostream.js';
import { importCommand } from './commands/import.js';
import { migrate } from './commands/migrate.js';
import { allowCommand, banCommand, disallowCommand, listCommand, unbanCommand } from './commands/moderation.js';
import { pruneCommand } from './commands/prune.js';
import { UsageError } from './commands/shared.js';
import { statsCommand } from './commands/stats.js';
import { syncCommand } from './commands/sync.js';
import { webhookCommand } from './commands/webhook.js';

const commands: Command[] = [
  migrate, backfillTagsCommand, backfillSearchCommand, importNostreamCommand, importCommand, exportCommand, syncCommand, pruneCommand, statsCommand,
  banCommand, unbanCommand, allowCommand, disallowCommand, listCommand, webhookCommand,
];

function usage(): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  return [
    'usage: npm run cli -- <command> [options]',
    '',
    'commands:',
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    'Configuration comes from the environment and .env, as for the relay (see .env.example).',
    'Run a command with --help for its options.',
  ].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(usage());
    return name ? 0 : 2;
  }
  const command = commands.find((c) => c.name === name);
  if (!command) {
    console.error(`unknown command "${name}"\n\n${usage()}`);
    return 2;
  }
  if (args.includes('--help') || args.includes('-h')) {
    console.log(command.help);
    return 0;
  }
  const config = loadConfig();
  // Logs go to stderr so a command's output (e.g. JSONL) can be piped.
  const log = createLogger(config.LOG_LEVEL, 2);
  return command.run(args, { config, log });
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    if (err instanceof UsageError) {
      console.error(`${err.message}\n(run with --help for the options)`);
      process.exit(2);
    }
    console.error(err instanceof ConfigError ? err.message : `error: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(err instanceof ConfigError ? 2 : 1);
  },
);
