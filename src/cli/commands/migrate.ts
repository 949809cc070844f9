import { openDatabase } from '../../store/database.js';
import { migrateLatest, migrateRollback, migrationStatus } from '../../store/migrate.js';
import type { Command } from '../command.js';

export const migrate: Command = {
  name: 'migrate',
  help: `usage: npm run cli -- migrate [latest|rollback|status]

  latest    apply every pending migration (the default; the relay also does this at start)
  rollback  undo the last batch of migrations
  status    list applied and pending migrations`,
  async run(args, { config, log }) {
    const action = args[0] ?? 'latest';
    if (!['latest', 'rollback', 'status'].includes(action)) {
      console.error(`unknown migrate action "${action}" (latest, rollback or status)`);
      return 2;
    }
    const db = await openDatabase(config, log, { migrate: false, ownEmbeddedServer: false });
    try {
      if (action === 'latest') {
        const applied = await migrateLatest(await db.knex());
        console.log(applied.length ? `applied: ${applied.join(', ')}` : 'already up to date');
      } else if (action === 'rollback') {
        const undone = await migrateRollback(await db.knex());
        console.log(undone.length ? `rolled back: ${undone.join(', ')}` : 'nothing to roll back');
      } else {
        const { applied, pending } = await migrationStatus(await db.knex());
        for (const name of applied) console.log(`applied  ${name}`);
        for (const name of pending) console.log(`pending  ${name}`);
      }
      return 0;
    } finally {
      await db.close();
    }
  },
};
