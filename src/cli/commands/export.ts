import { exportEvents, parseExportFilters } from '../../ops/export.js';
import { createProgress } from '../../ops/progress.js';
import type { Command } from '../command.js';
import { formatRate, intOption, openStore, parseOptions, stopOnSignals, UsageError } from './shared.js';

export const exportCommand: Command = {
  name: 'export',
  help: `usage: npm run cli -- export [--filter '<NIP-01 filter JSON>'] > events.jsonl

Writes every stored, unexpired event as one JSON per line to stdout, exactly as stored (the
canonical form the relay serves), streamed through a cursor: memory use does not grow with the
database. The export is one consistent snapshot, even while the relay keeps writing. Progress and
the summary go to stderr.

Without --filter the events come in storage order (the fastest scan); with it, newest first. A
filter's "limit" is honoured when given, and only then: the relay's default and maximum limits
apply to REQs, not to exports. --filter takes one filter object or an array of them (ORed).

options:
  --filter JSON      a NIP-01 filter, e.g. '{"kinds":[0,3]}' or '[{"authors":["<hex>"]},{"#p":["<hex>"]}]'
  --batch N          rows per cursor read (default 2000)

examples:
  npm run cli -- export > all.jsonl
  npm run cli -- export --filter '{"kinds":[1],"since":1735689600}' | gzip > notes-2025.jsonl.gz
  npm run cli -- export | DATABASE_URL=postgres://…/other npm run cli -- import --no-verify -`,
  async run(args, { config, log }) {
    const { values } = parseOptions(args, { filter: { type: 'string' }, batch: { type: 'string' } });
    let filters;
    try {
      filters = values.filter === undefined ? undefined : parseExportFilters(values.filter);
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
    const batchSize = intOption(values.batch, 'batch', 1, 2000);
    const db = await openStore(config, log);
    const stop = stopOnSignals(log);
    // A closed pipe (`export | head`) ends the export quietly instead of crashing on EPIPE.
    const pipeClosed = new AbortController();
    process.stdout.on('error', () => pipeClosed.abort());
    try {
      const result = await exportEvents(db.pool, process.stdout, {
        filters,
        batchSize,
        signal: AbortSignal.any([stop.signal, pipeClosed.signal]),
        progress: createProgress('export', { unit: 'events', log }),
      });
      process.stderr.write(`exported ${formatRate(result.events, result.seconds)}, ${(result.bytes / 1048576).toFixed(1)} MiB${result.complete ? '' : ' (stopped early)'}\n`);
      return 0;
    } catch (err) {
      if (pipeClosed.signal.aborted) return 0;
      throw err;
    } finally {
      stop.dispose();
      await db.close();
    }
  },
};
