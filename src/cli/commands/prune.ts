import { createProgress } from '../../ops/progress.js';
import { parseDuration, parseKinds, pruneEvents } from '../../store/retention.js';
import type { Command } from '../command.js';
import { formatCount, formatRate, intOption, openStore, parseOptions, stopOnSignals, UsageError } from './shared.js';

export const pruneCommand: Command = {
  name: 'prune',
  help: `usage: npm run cli -- prune [--older-than 30d] [--kinds 1,7] [options]

Deletes stored events older than an age and/or of some kinds, oldest first, in small batches (one
short transaction each) so a running relay is not held up; their tag rows go with them. Prints how
many were removed, by kind. At least one of --older-than and --kinds is required.

Kept unless asked for:
  - replaceable (0, 3, 10000-19999) and addressable (30000-39999) events: only the current version
    of each is stored, so pruning it loses the profile or list itself (--include-replaceable);
  - deletion requests (kind 5): NIP-09 asks relays to keep serving them, and they stop the deleted
    events from being published again (list 5 in --kinds to prune them).

The relay can do the same periodically: see RETENTION_OLDER_THAN in .env.example.

options:
  --older-than AGE        created_at older than AGE: 30d, 12h, 90m, 3600s, 2w
  --kinds K,K,...         only these kinds
  --include-replaceable   also replaceable and addressable events
  --dry-run               count what would be removed, by kind; remove nothing
  --batch N               events per delete transaction (default 1000)

examples:
  npm run cli -- prune --older-than 30d --dry-run
  npm run cli -- prune --older-than 30d
  npm run cli -- prune --older-than 7d --kinds 7,9735`,
  async run(args, { config, log }) {
    const { values } = parseOptions(args, {
      'older-than': { type: 'string' },
      kinds: { type: 'string' },
      'include-replaceable': { type: 'boolean', default: false },
      'dry-run': { type: 'boolean', default: false },
      batch: { type: 'string' },
    });
    let olderThanSeconds: number | undefined;
    let kinds: number[] | undefined;
    try {
      olderThanSeconds = values['older-than'] === undefined ? undefined : parseDuration(values['older-than']);
      kinds = values.kinds === undefined ? undefined : parseKinds(values.kinds);
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
    if (olderThanSeconds === undefined && !kinds) throw new UsageError('give --older-than and/or --kinds: prune never removes everything');
    const batchSize = intOption(values.batch, 'batch', 1, 1000);
    const db = await openStore(config, log);
    const stop = stopOnSignals(log);
    try {
      const result = await pruneEvents(db.pool, {
        olderThanSeconds,
        kinds,
        includeReplaceable: values['include-replaceable'],
        dryRun: values['dry-run'],
        batchSize,
        signal: stop.signal,
        progress: createProgress('prune', { unit: 'events', log }),
      });
      const verb = values['dry-run'] ? 'would remove' : 'removed';
      if (result.cutoff !== undefined) console.log(`cutoff:  created_at < ${result.cutoff} (${new Date(result.cutoff * 1000).toISOString()})`);
      console.log(`${verb}: ${values['dry-run'] ? formatCount(result.removed) + ' events' : formatRate(result.removed, result.seconds)}`);
      for (const [kind, n] of Object.entries(result.byKind).sort((a, b) => b[1] - a[1])) console.log(`  kind ${kind.padEnd(6)} ${formatCount(n).padStart(12)}`);
      if (!result.complete) console.log('stopped early: run again to go on');
      return 0;
    } finally {
      stop.dispose();
      await db.close();
    }
  },
};
