import { createProgress } from '../../ops/progress.js';
import { planRestore, restoreBackup, RestoreRefused } from '../../ops/restore.js';
import type { Command } from '../command.js';
import { formatCount, parseOptions, stopOnSignals, UsageError } from './shared.js';

export const restoreCommand: Command = {
  name: 'restore',
  help: `usage: npm run cli -- restore --from <BACKUP_DIR> --data-dir <new folder> [--to-time <ISO-8601>] [--backup <name>]

Prepares a new DATA_DIR from the backups in BACKUP_DIR: copies a base backup's data folder and
password into it and tells PostgreSQL to replay the archived WAL (BACKUP_DIR/wal) on its next start,
up to --to-time or to the end of the archive, and then to open for writes. Start the relay with
DATA_DIR set to the new folder: it replays (postgres.log there shows how far), opens, and serves.

The backup is the newest that ended before --to-time (or the newest), unless --backup names one.
Nothing is written when the folder exists and is not empty, when --to-time is not an ISO-8601 time
with its zone, is in the future, is before the oldest backup ended, or is after everything archived.
Run as root, the files belong to the postgres user, as the relay's own are.

options:
  --from DIR        the BACKUP_DIR the relay archived into and \`backup\` wrote to
  --data-dir DIR    the new DATA_DIR (created; must be missing or empty)
  --to-time TIME    stop at this moment, e.g. 2025-06-01T12:30:00Z: transactions committed after it are not replayed
  --backup NAME     restore this backup (a folder name under BACKUP_DIR/base)

examples:
  npm run cli -- restore --from /var/backups/pgrelay --data-dir /var/lib/pgrelay.restored
  npm run cli -- restore --from /var/backups/pgrelay --data-dir /var/lib/pgrelay.restored --to-time 2025-06-01T12:30:00Z
  DATA_DIR=/var/lib/pgrelay.restored npm start`,
  async run(args, { log }) {
    const { values } = parseOptions(args, {
      from: { type: 'string' },
      'data-dir': { type: 'string' },
      'to-time': { type: 'string' },
      backup: { type: 'string' },
    });
    if (!values.from || !values['data-dir']) throw new UsageError('give --from (the BACKUP_DIR) and --data-dir (a new folder)');
    let plan;
    try {
      plan = await planRestore({ from: values.from, dataDir: values['data-dir'], toTime: values['to-time'], backup: values.backup });
    } catch (err) {
      if (err instanceof RestoreRefused) throw new UsageError(err.message);
      throw err;
    }
    const stop = stopOnSignals(log);
    try {
      const result = await restoreBackup(plan, { progress: createProgress('restore', { unit: 'MiB', log }), log, signal: stop.signal });
      console.log(`restored backup ${plan.backup.name} (ended ${plan.backup.stoppedAt}) into ${plan.dataDir}: ${formatCount(result.files)} files, ${(result.bytes / 2 ** 20).toFixed(1)} MiB in ${result.seconds.toFixed(1)} s`);
      console.log(`start the relay with DATA_DIR=${plan.dataDir}: PostgreSQL replays the archive ${plan.target ? `up to ${plan.target.toISOString()}` : 'to its end'}, then opens for writes`);
      return 0;
    } finally {
      stop.dispose();
    }
  },
};
