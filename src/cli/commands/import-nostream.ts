import pg from 'pg';
import { MAX_CHUNK_EVENTS } from '../../ops/bulk-load.js';
import { importNostream, nostreamCheckpointName } from '../../ops/nostream/import-nostream.js';
import { importWritePlugin } from '../../ops/import-plugin.js';
import { createProgress } from '../../ops/progress.js';
import { SignatureVerifier } from '../../nostr/verifier.js';
import type { Command } from '../command.js';
import { formatImportSummary } from './import.js';
import { formatCount, importPolicy, formatRate, intOption, openStore, parseOptions, refusalPrinter, stopOnSignals, UsageError } from './shared.js';

export const importNostreamCommand: Command = {
  name: 'import-nostream',
  help: `usage: npm run cli -- import-nostream --from postgres://user:password@host:5432/nostream [options]

Reads nostream's events table in event_id order, in batches, and stores the events with the
relay's rules (replaceable/addressable versions, NIP-09 deletions, duplicates) and its locks, each
batch in one transaction with the rows streamed by COPY (two batches in flight), and with the
relay's policy checks (configured limits). Each event is rebuilt from nostream's columns and its id
recomputed; a row that does not hash to its event_id is counted invalid. Safe while the relay runs.

  - soft-deleted rows (deleted_at set) are not imported, and removed from this store if present;
  - expired rows (expires_at or an expiration tag in the past) are skipped;
  - signatures are not re-checked unless --verify (nostream verified them on arrival);
  - with WRITE_POLICY_PLUGIN set, every event that passed the checks goes through the plugin too
    (sourceType Import); an event it could not judge (it kept failing) is counted as failed, and
    the command exits with code 1.

The position is saved after every batch (table ops_checkpoints, one per source): after Ctrl-C or a
crash the same command resumes where it stopped, and the final counts cover the whole import. After
a failed event the position stays before its batch, so running the command again retries it.

--empty-target is for moving to a new relay before it opens: the store must be EMPTY and the relay
MUST NOT be running (the tables are locked exclusively while the events are loaded). The same rows,
checked the same way, end as the same stored rows, with about half the CPU time:
  1. every event no other event bears on but a deletion (regular events, and replaceable or
     addressable ones that are the only row of their address) is loaded in one transaction, the
     secondary indexes dropped and built again at the end: all or nothing (Ctrl-C or a crash rolls
     it back; run the command again);
  2. the rest (deletions, gift wraps, vanish requests, addresses with several versions) is then
     written in order with the relay's rules, as above, and resumes from its checkpoint.

options:
  --from URL         the nostream database (required)
  --empty-target     load an empty store, the relay stopped (see above)
  --verify           verify every signature too (about 10x slower)
  --restart          ignore a saved checkpoint and start from the first row
  --batch N          rows per batch and write transaction (default 5000, at most 10000)
  --max-batches N    stop after N batches written in order, keeping the checkpoint (a trial run)
  --max-reports N    refused rows reported one by one (default 100; the counts cover all)

examples:
  npm run cli -- import-nostream --from postgres://nostream:secret@127.0.0.1:5432/nostream
  npm run cli -- import-nostream --empty-target --from postgres://nostream:secret@127.0.0.1:5432/nostream`,
  async run(args, { config, log }) {
    const { values } = parseOptions(args, {
      from: { type: 'string' },
      verify: { type: 'boolean', default: false },
      restart: { type: 'boolean', default: false },
      'empty-target': { type: 'boolean', default: false },
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
    const plugin = importWritePlugin(config.WRITE_POLICY_PLUGIN, config.WRITE_POLICY_TIMEOUT_MS, log);
    const stop = stopOnSignals(log);
    try {
      const result = await importNostream(source, db.pool, nostreamCheckpointName(values.from), {
        policy: await importPolicy(config, db),
        verifier,
        plugin,
        batchSize,
        emptyTarget: values['empty-target'],
        maxBatches,
        restart: values.restart,
        signal: stop.signal,
        onRefused: (id, reason) => reports.print(id, reason),
        progress: createProgress('import-nostream', { unit: 'rows', log }),
        log,
      });
      reports.finish();
      if (result.resumedAfter) console.log(`resumed after event_id ${result.resumedAfter} (counts include the earlier runs)`);
      const load = result.emptyTargetLoad;
      if (load) {
        console.log(`phase 1:    ${formatRate(load.read, load.seconds, 'rows')}, ${formatCount(load.loaded)} events loaded, indexes built in ${load.indexSeconds.toFixed(1)} s${load.complete ? '' : ' (stopped: rolled back, the store is empty)'}`);
      } else if (values['empty-target']) {
        console.log('phase 1 was done by an earlier run; this run wrote the rest in order (counts include the earlier runs)');
      }
      console.log(`this run:   ${formatRate(result.readThisRun, result.seconds, 'rows')}${verifier ? '' : ' (signatures not re-verified)'}`);
      console.log(`rows read:  ${formatCount(result.read)}`);
      console.log(`soft-deleted (not imported): ${formatCount(result.softDeleted)}${result.removed ? `, ${formatCount(result.removed)} removed from this store` : ''}`);
      console.log(`expired (not imported):      ${formatCount(result.expired)}`);
      for (const line of formatImportSummary(result)) console.log(line);
      if (result.failed > 0) {
        console.log(`not complete: ${formatCount(result.failed)} events were not imported (the write policy plugin could not judge them); run again to retry them`);
        return 1;
      }
      if (result.complete) console.log('complete');
      else console.log(load && !load.complete ? 'stopped early: run again to start over' : 'stopped early: run again to resume');
      return 0;
    } finally {
      stop.dispose();
      await verifier?.close();
      await plugin?.close();
      await db.close();
      await source.end();
    }
  },
};
