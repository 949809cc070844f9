import { BACKFILL_SEARCH_CHECKPOINT, backfillSearch } from '../../ops/backfill-search.js';
import { createProgress } from '../../ops/progress.js';
import type { Command } from '../command.js';
import { formatCount, formatRate, intOption, openStore, parseOptions, stopOnSignals } from './shared.js';

export const backfillSearchCommand: Command = {
  name: 'backfill-search',
  help: `usage: npm run cli -- backfill-search [options]

Fills in the search words (events.search, NIP-50) of the stored events of searchable kinds that have
none: run it once after upgrading a database that predates search, or after loading raw rows into
events. The relay indexes every event it stores itself, so new events need nothing from this.

The words are computed by the relay's own tokenizer, in batches of consecutive heap blocks of the
events table (read sequentially, in storage order), each written by one UPDATE in a short
transaction. Only rows still without words are touched, so the relay can keep serving meanwhile and
a second run changes nothing. Events with no words to index (an empty note) are left as they are.

The position (the next heap block) is saved after every batch (table ops_checkpoints): after
Ctrl-C, a crash or a reboot, the same command resumes where it stopped. A completed run clears it.

Every updated row is written as a new row version, so the events table grows by about the size of
the rows updated: once done, run VACUUM (ANALYZE) events to make the old versions' room reusable by
new events (autovacuum does it too, in its own time; neither shrinks the table's files).

options:
  --restart          ignore a saved checkpoint and start from the first block
  --batch N          about N events per batch, by the table's events per block (default 5000)
  --max-batches N    stop after N batches, keeping the checkpoint (a trial run)

examples:
  npm run cli -- backfill-search
  npm run cli -- backfill-search --max-batches 10`,
  async run(args, { config, log }) {
    const { values } = parseOptions(args, {
      restart: { type: 'boolean', default: false },
      batch: { type: 'string' },
      'max-batches': { type: 'string' },
    });
    const batchSize = intOption(values.batch, 'batch', 1, 5000);
    const maxBatches = values['max-batches'] === undefined ? undefined : intOption(values['max-batches'], 'max-batches', 1, 1);
    const db = await openStore(config, log);
    const stop = stopOnSignals(log);
    try {
      const result = await backfillSearch(db.pool, {
        batchSize,
        maxBatches,
        restart: values.restart,
        signal: stop.signal,
        progress: createProgress('backfill-search', { unit: 'events', log }),
        log,
      });
      const resumed = result.resumedAtBlock !== undefined;
      const earlier = resumed ? ' (with the earlier runs)' : '';
      if (resumed) console.log(`resumed at heap block ${formatCount(result.resumedAtBlock!)} of ${formatCount(result.blocks)}`);
      console.log(`this run: ${formatRate(result.updatedThisRun, result.seconds, 'events updated')}`);
      console.log(`updated:  ${formatCount(result.updated)} events${earlier}`);
      console.log(`no words: ${formatCount(result.withoutWords)} events (nothing to index, left as they are)`);
      if (result.unreadable) console.log(`unreadable: ${formatCount(result.unreadable)} events (stored JSON not an event, see the log)`);
      if (!result.complete) console.log(`stopped early: run again to resume (checkpoint "${BACKFILL_SEARCH_CHECKPOINT}")`);
      else console.log('complete');
      // Each UPDATE leaves the row's old version behind, until a vacuum reclaims it.
      if (result.updated > 0) {
        const when = result.complete ? 'now' : 'once the backfill is complete';
        console.log(`each updated event left an old row version: run VACUUM (ANALYZE) events ${when} to reclaim them`);
      }
      return 0;
    } finally {
      stop.dispose();
      await db.close();
    }
  },
};
