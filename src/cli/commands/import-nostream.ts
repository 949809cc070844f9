import pg from 'pg';
import { MAX_CHUNK_EVENTS } from '../../ops/bulk-load.js';
import { importNostream, nostreamCheckpointName } from '../../ops/import-nostream.js';
import { createProgress } from '../../ops/progress.js';
import { limitsFrom } from '../../relay/limits.js';
import { SignatureVerifier } from '../../relay/verifier.js';
import type { Command } from '../command.js';
import { formatImportSummary } from './import.js';
import { formatCount, formatRate, intOption, openStore, parseOptions, refusalPrinter, stopOnSignals, UsageError } from './shared.js';

export const importNostreamCommand: Command = {
  name: 'import-nostream',
  summary: 'import a nostream database (resumable; soft-deleted and expired rows stay out)',
  help: `usage: npm run cli -- import-nostream --from postgres://user:password@host:5432/nostream [options]

Reads nostream's events table in event_id order, in batches, and stores the events with the
relay's rules (replaceable/addressable versions, NIP-09 deletions, duplicates) and its locks, each
batch in one transaction with the rows streamed by COPY (two batches in flight), and with the
relay's policy checks (configured limits). Each event is rebuilt from nostream's columns and its id
recomputed; a row that does not hash to its event_id is counted invalid. Safe while the relay runs.

  - soft-deleted rows (deleted_at set) are not imported, and removed from this store if present;
  - expired rows (expires_at or an expiration tag in the past) are skipped;
  - signatures are not re-checked unless --verify (nostream verified them on arrival).

The position is saved after every batch (table ops_checkpoints, one per source): after Ctrl-C or a
crash the same command resumes where it stopped, and the final counts cover the whole import.

options:
  --from URL         the nostream database (required)
  --verify           verify every signature too (about 10x slower)
  --restart          ignore a saved checkpoint and start from the first row
  --batch N          rows per batch and write transaction (default 5000, at most 10000)
  --max-batches N    stop after N batches, keeping the checkpoint (a trial run)
  --max-reports N    refused rows reported one by one (default 100; the counts cover all)

example:
  npm run cli -- import-nostream --from postgres://nostream:secret@127.0.0.1:5432/nostream`,
  async run(args, { config, log }) {
    const { values } = parseOptions(args, {
      from: { type: 'string' },
      verify: { type: 'boolean', default: false },
      restart: { type: 'boolean', default: false },
      batch: { type: 'string' },
      'max-batches': { type: 'string' },
      'max-reports': { type: 'string' },
    });
    if (!values.from || !/^postgres(ql)?:\/\//.test(values.from)) throw new UsageError('--from postgres://… (the nostream database) is required');
    const batchSize = intOption(values.batch, 'batch', 1, 5000);
    if (batchSize > MAX_CHUNK_EVENTS) throw new UsageError(`--batch must be at most ${MAX_CHUNK_EVENTS} (each event holds a lock while its batch is written)`);
    const maxBatches = values['max-batches'] === undefined ? undefined : intOption(values['max-batches'], 'max-batches', 1, 1);
    const reports = refusalPrinter(intOption(values['max-reports'], 'max-reports', 0, 100), 'event');
    const source = new pg.Pool({ connectionString: values.from, max: 2, application_name: 'pgrelay import-nostream' });
    source.on('error', (err) => log.warn({ err: err.message }, 'source connection lost'));
    const db = await openStore(config, log);
    const verifier = values.verify ? new SignatureVerifier(config.VERIFY_THREADS) : undefined;
    const stop = stopOnSignals(log);
    try {
      const result = await importNostream(source, db.pool, nostreamCheckpointName(values.from), {
        limits: limitsFrom(config),
        verifier,
        batchSize,
        maxBatches,
        restart: values.restart,
        signal: stop.signal,
        onRefused: (id, reason) => reports.print(id, reason),
        progress: createProgress('import-nostream', { unit: 'rows', log }),
        log,
      });
      reports.finish();
      if (result.resumedAfter) console.log(`resumed after event_id ${result.resumedAfter} (counts include the earlier runs)`);
      console.log(`this run:   ${formatRate(result.readThisRun, result.seconds, 'rows')}${verifier ? '' : ' (signatures not re-verified)'}`);
      console.log(`rows read:  ${formatCount(result.read)}`);
      console.log(`soft-deleted (not imported): ${formatCount(result.softDeleted)}${result.removed ? `, ${formatCount(result.removed)} removed from this store` : ''}`);
      console.log(`expired (not imported):      ${formatCount(result.expired)}`);
      for (const line of formatImportSummary(result)) console.log(line);
      console.log(result.complete ? 'complete' : 'stopped early: run again to resume');
      return 0;
    } finally {
      stop.dispose();
      await verifier?.close();
      await db.close();
      await source.end();
    }
  },
};
