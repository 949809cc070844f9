#!/usr/bin/env node
// Operator commands: `npm run cli -- <command> [options]`, or the `pgrelay` bin. Each command is a
// module in ./commands, sharing the relay's configuration (environment / .env) and store code. A
// command's module (and the configuration, the logger, the database driver) is loaded only when that
// command runs, so listing them or asking one for --help starts at once.
import { UsageError, type Command } from './command.js';

interface Listed {
  name: string;
  summary: string;
  load(): Promise<Command>;
}

const commands: Listed[] = [
  { name: 'migrate', summary: 'apply, roll back or list database migrations (latest | rollback | status)', load: async () => (await import('./commands/migrate.js')).migrate },
  { name: 'backfill-tags', summary: 'derive event_tags rows from the stored events (resumable, safe while the relay runs)', load: async () => (await import('./commands/backfill-tags.js')).backfillTagsCommand },
  { name: 'backfill-search', summary: 'index the words of stored events for NIP-50 search (resumable, safe while the relay runs)', load: async () => (await import('./commands/backfill-search.js')).backfillSearchCommand },
  { name: 'import-nostream', summary: 'import a nostream database (resumable; soft-deleted and expired rows stay out; --empty-target for a new store)', load: async () => (await import('./commands/import-nostream.js')).importNostreamCommand },
  { name: 'import', summary: 'import events from a JSONL file or stdin (strfry format), with every relay rule', load: async () => (await import('./commands/import.js')).importCommand },
  { name: 'export', summary: 'write stored events to stdout as JSONL (strfry format), optionally filtered', load: async () => (await import('./commands/export.js')).exportCommand },
  { name: 'router', summary: "stream events to and from other relays, with strfry's router config; no gaps (positions, catch-up)", load: async () => (await import('./commands/router.js')).routerCommand },
  { name: 'sync', summary: 'reconcile with another relay (NIP-77 negentropy) and fetch/publish what differs', load: async () => (await import('./commands/sync.js')).syncCommand },
  { name: 'prune', summary: 'delete events by age and/or kind (retention), in short batches', load: async () => (await import('./commands/prune.js')).pruneCommand },
  { name: 'backup', summary: 'take a base backup of the embedded PostgreSQL into BACKUP_DIR while the relay serves (--keep N prunes)', load: async () => (await import('./commands/backup.js')).backupCommand },
  { name: 'restore', summary: 'prepare a new DATA_DIR from BACKUP_DIR, to the end of the archive or to a moment (--to-time)', load: async () => (await import('./commands/restore.js')).restoreCommand },
  { name: 'stats', summary: 'event counts by kind, tag rows, table and index sizes', load: async () => (await import('./commands/stats.js')).statsCommand },
  { name: 'ban', summary: 'ban a pubkey, an event or an IP address (NIP-86 banpubkey, banevent, blockip)', load: async () => (await import('./commands/moderation.js')).banCommand },
  { name: 'unban', summary: 'lift a ban on a pubkey, an event or an IP address', load: async () => (await import('./commands/moderation.js')).unbanCommand },
  { name: 'allow', summary: 'add a pubkey or a kind to an allow list (a private relay; --days for a membership that ends; NIP-86 allowpubkey, allowkind)', load: async () => (await import('./commands/moderation.js')).allowCommand },
  { name: 'disallow', summary: 'remove a pubkey or a kind from its allow list (NIP-86 unallowpubkey, disallowkind)', load: async () => (await import('./commands/moderation.js')).disallowCommand },
  { name: 'list', summary: 'show the bans and allow lists', load: async () => (await import('./commands/moderation.js')).listCommand },
  { name: 'moderation', summary: 'the queue of reported events and pubkeys (NIP-56 reports): list it, keep an entry (NIP-86 allowevent)', load: async () => (await import('./commands/moderation.js')).moderationCommand },
  { name: 'webhook', summary: 'add, list, pause, remove webhook endpoints; inspect, replay and redeliver their queues', load: async () => (await import('./commands/webhook.js')).webhookCommand },
];

function usage(): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  return [
    'usage: npm run cli -- <command> [options]',
    '',
    'commands:',
    ...commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    'Configuration comes from the environment and .env, as for the relay (see docs/configuration.md).',
    'Run a command with --help for its options.',
  ].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(usage());
    return name ? 0 : 2;
  }
  const listed = commands.find((c) => c.name === name);
  if (!listed) {
    console.error(`unknown command "${name}"\n\n${usage()}`);
    return 2;
  }
  const command = await listed.load();
  if (args.includes('--help') || args.includes('-h')) {
    console.log(command.help);
    return 0;
  }
  const [{ loadConfig }, { createLogger }] = await Promise.all([import('../config.js'), import('../log.js')]);
  const config = loadConfig();
  // Logs go to stderr so a command's output (e.g. JSONL) can be piped.
  const log = createLogger(config.LOG_LEVEL, 2);
  return command.run(args, { config, log });
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  async (err) => {
    if (err instanceof UsageError) {
      console.error(`${err.message}\n(run with --help for the options)`);
      process.exit(2);
    }
    const { ConfigError } = await import('../config.js');
    console.error(err instanceof ConfigError ? err.message : `error: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(err instanceof ConfigError ? 2 : 1);
  },
);
