import { BACKFILL_CHECKPOINT, backfillTags } from '../../ops/backfill-tags.js';
import { createProgress } from '../../ops/progress.js';
import type { Command } from '../command.js';
import { formatCount, formatRate, intOption, openStore, parseOptions, stopOnSignals } from './shared.js';

export const backfillTagsCommand: Command = {
  name: 'backfill-tags',
  help: `usage: npm run cli -- backfill-tags [options]

Derives the event_tags rows of the stored events from their tags, with the relay's tag rule
(single-letter names, first value), in batches of consecutive heap blocks of the events table (read
sequentially, in storage order), each one INSERT … SELECT in PostgreSQL. Rows already there are
kept, so a run only adds what is missing: after a change of the tag rule, or after loading raw rows
into events. Each batch is a short transaction that locks only its own events (against a concurrent
delete), so the relay can keep serving; it writes the tags of new events itself.

The position (the next heap block) is saved after every batch (table ops_checkpoints): after
Ctrl-C, a crash or a reboot, the same command resumes where it stopped. A completed run clears it.

options:
  --only-missing     only events that have no event_tags row at all (fast after importing raw
                     rows; misses events that have some rows but lack others)
  --restart          ignore a saved checkpoint and start from the first block
  --batch N          about N events per batch, by the table's events per block (default 5000)
  --batch-blocks N   exactly N heap blocks per batch (instead of --batch)
  --concurrency N    batches at once, on separate connections (default 2)
  --max-batches N    stop after N batches, keeping the checkpoint (a trial run)

examples:
  npm run cli -- backfill-tags
  npm run cli -- backfill-tags --only-missing --concurrency 1`,
  async run(args, { config, log }) {
    const { values } = parseOptions(args, {
      'only-missing': { type: 'boolean', default: false },
      restart: { type: 'boolean', default: false },
      batch: { type: 'string' },
      'batch-blocks': { type: 'string' },
      concurrency: { type: 'string' },
      'max-batches': { type: 'string' },
    });
    const batchSize = intOption(values.batch, 'batch', 1, 5000);
    const batchBlocks = values['batch-blocks'] === undefined ? undefined : intOption(values['batch-blocks'], 'batch-blocks', 1, 1);
    const concurrency = intOption(values.concurrency, 'concurrency', 1, 2);
    const maxBatches = values['max-batches'] === undefined ? undefined : intOption(values['max-batches'], 'max-batches', 1, 1);
    const db = await openStore(config, log);
    const stop = stopOnSignals(log);
    try {
      const result = await backfillTags(db.pool, {
        batchSize,
        batchBlocks,
        concurrency,
        maxBatches,
        onlyMissing: values['only-missing'],
        restart: values.restart,
        signal: stop.signal,
        progress: createProgress('backfill-tags', { unit: 'events', log }),
        log,
      });
      const resumed = result.resumedAtBlock !== undefined;
      if (resumed) console.log(`resumed at heap block ${formatCount(result.resumedAtBlock!)} of ${formatCount(result.blocks)}`);
      console.log(`this run: ${formatRate(result.eventsThisRun, result.seconds)}`);
      console.log(`events:   ${formatCount(result.events)}${resumed ? ' (with the earlier runs)' : ''}`);
      console.log(`tag rows: ${formatCount(result.tagRows)} added`);
      if (!result.complete) console.log(`stopped early: run again to resume (checkpoint "${BACKFILL_CHECKPOINT}")`);
      else console.log('complete');
      return 0;
    } finally {
      stop.dispose();
      await db.close();
    }
  },
};
