import { formatStats, storeStats } from '../../ops/stats.js';
import type { Command } from '../command.js';
import { openStore, parseOptions } from './shared.js';

export const statsCommand: Command = {
  name: 'stats',
  help: `usage: npm run cli -- stats [--json]

Counts the stored events (in total, by kind, and those expired but not yet swept), the event_tags
rows, and reports the size on disk of each table (heap, TOAST, indexes) and of each index.
Counting reads every row: on tens of millions of events it takes some seconds.

options:
  --json    one JSON object instead of the text report`,
  async run(args, { config, log }) {
    const { values } = parseOptions(args, { json: { type: 'boolean', default: false } });
    const db = await openStore(config, log);
    try {
      const stats = await storeStats(db.pool);
      console.log(values.json ? JSON.stringify(stats, null, 2) : formatStats(stats));
      return 0;
    } finally {
      await db.close();
    }
  },
};
