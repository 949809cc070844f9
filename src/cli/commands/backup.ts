import { pruneBackups, takeBackup } from '../../ops/backup.js';
import { createProgress } from '../../ops/progress.js';
import { walFolder } from '../../store/archive.js';
import { openDatabase } from '../../store/database.js';
import type { Command } from '../command.js';
import { formatCount, intOption, parseOptions, stopOnSignals } from './shared.js';

export const backupCommand: Command = {
  name: 'backup',
  help: `usage: npm run cli -- backup [--keep N]

Takes a base backup of the embedded PostgreSQL into BACKUP_DIR/base/<UTC start time>/ while the
relay serves (or, with the relay stopped, starts the server for the copy): the data folder copied
file by file between pg_backup_start and pg_backup_stop, the server's password, and manifest.json
(start and stop time and WAL position, the WAL segments it needs, its size). It returns once the
WAL the copy needs is archived in BACKUP_DIR/wal. With the WAL archived after it, a backup restores
to any moment from its end on: see \`restore\`.

Needs BACKUP_DIR, set for the relay too: the relay's server archives its WAL there continuously.
Run it from cron or a timer, e.g. daily with --keep 7.

options:
  --keep N    then keep the newest N backups: remove older ones and the archived WAL only they need

examples:
  BACKUP_DIR=/var/backups/pgrelay npm run cli -- backup
  npm run cli -- backup --keep 7`,
  async run(args, { config, log }) {
    const { values } = parseOptions(args, { keep: { type: 'string' } });
    const keep = values.keep === undefined ? undefined : intOption(values.keep, 'keep', 1, 1);
    if (config.DATABASE_URL)
      throw new Error('backup copies the embedded PostgreSQL, and DATABASE_URL points at another server: back that one up with its own tools (pgBackRest: docs/operations.md)');
    if (!config.BACKUP_DIR) throw new Error('BACKUP_DIR is not set: set it (for the relay too, which archives its WAL there) and restart the relay, then back up');
    const db = await openDatabase(config, log, { migrate: false, ownEmbeddedServer: false });
    const stop = stopOnSignals(log);
    try {
      const result = await takeBackup({
        url: db.url,
        dataDir: config.DATA_DIR,
        backupDir: config.BACKUP_DIR,
        progress: createProgress('backup', { unit: 'MiB', log }),
        log,
        signal: stop.signal,
      });
      const { manifest } = result;
      console.log(`backup ${manifest.name}: ${formatCount(manifest.files)} files, ${(manifest.bytes / 2 ** 20).toFixed(1)} MiB in ${result.seconds.toFixed(1)} s`);
      console.log(`  in ${result.folder}; needs WAL ${manifest.walFiles[0]}…${manifest.walFiles.at(-1)} (from ${walFolder(config.BACKUP_DIR)})`);
      if (keep !== undefined) {
        const pruned = await pruneBackups(config.BACKUP_DIR, keep);
        console.log(`kept the newest ${keep}: removed ${pruned.removedBackups.length} backup(s)${pruned.removedBackups.length ? ` (${pruned.removedBackups.join(', ')})` : ''} and ${formatCount(pruned.removedWalFiles)} archived WAL file(s)`);
      }
      return 0;
    } finally {
      stop.dispose();
      await db.close();
    }
  },
};
