import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { importSource } from '../../admission/source.js';
import { MAX_CHUNK_EVENTS } from '../../ops/bulk-load.js';
import { importJsonl, type ImportJsonlResult } from '../../ops/import-jsonl.js';
import { importWritePlugin } from '../../ops/import-plugin.js';
import { createProgress } from '../../ops/progress.js';
import { SignatureVerifier } from '../../nostr/verifier.js';
import type { Command } from '../command.js';
import { formatCount, importPolicy, formatRate, formatReasons, intOption, openStore, parseOptions, refusalPrinter, stopOnSignals, UsageError } from './shared.js';

export function formatImportSummary(r: Omit<ImportJsonlResult, 'lines' | 'complete' | 'seconds'>): string[] {
  return [
    `accepted:   ${formatCount(r.accepted)}${r.replaced ? ` (${formatCount(r.replaced)} replaced an earlier version)` : ''}`,
    `duplicate:  ${formatCount(r.duplicate)}`,
    `invalid:    ${formatCount(r.invalid)}`,
    `rejected:   ${formatCount(r.rejected)}`,
    ...(r.failed ? [`failed:     ${formatCount(r.failed)} (the write policy plugin could not judge them: not imported; run the import again for them)`] : []),
    ...(r.invalid + r.rejected + r.failed ? ['reasons:', ...formatReasons(r.reasons)] : []),
  ];
}

export const importCommand: Command = {
  name: 'import',
  help: `usage: npm run cli -- import [options] <file.jsonl | ->

Reads one event JSON per line (strfry's import/export format; "-" reads stdin) and stores the
events as if published to the relay: shape and policy checks (the relay's configured limits), id
and signature verification on worker threads, then the relay's rules (replaceable/addressable
versions, NIP-09 deletions, duplicates) and locks, in batches of one transaction each, the rows
streamed by COPY. Lines are taken in order, so a deletion and its target, or two versions of one
event, end as published in that order. Safe while the relay runs. With WRITE_POLICY_PLUGIN set,
every event that passed the checks goes through the plugin too (sourceType Import).

A bad line never stops the import: each refused line is reported on stderr with its number and
reason, and counted. Importing the same file again is harmless (everything is a duplicate). An event
the write policy plugin could not judge (it kept failing or timing out, after a few tries) is
reported and counted as failed, and the command then exits with code 1: import the file again.

options:
  --no-verify        skip the signature check (for a trusted dump; ids are still recomputed)
  --batch N          events per write transaction (default 5000, at most 10000)
  --max-reports N    refused lines reported one by one (default 100; the counts cover all)

examples:
  npm run cli -- import events.jsonl
  strfry export | npm run cli -- import -
  zcat archive.jsonl.gz | npm run cli -- import --no-verify -`,
  async run(args, { config, log }) {
    const { values, positionals } = parseOptions(
      args,
      {
        'no-verify': { type: 'boolean', default: false },
        batch: { type: 'string' },
        'max-reports': { type: 'string' },
      },
      true,
    );
    if (positionals.length !== 1) throw new UsageError('import takes one file name, or - for stdin');
    const file = positionals[0];
    const batchSize = intOption(values.batch, 'batch', 1, 5000);
    if (batchSize > MAX_CHUNK_EVENTS) throw new UsageError(`--batch must be at most ${MAX_CHUNK_EVENTS} (each event holds a lock while its batch is written)`);
    const reports = refusalPrinter(intOption(values['max-reports'], 'max-reports', 0, 100), 'line');
    let input: Readable;
    let totalBytes: number | undefined;
    if (file === '-') input = process.stdin;
    else {
      try {
        totalBytes = (await stat(file)).size;
      } catch (err) {
        throw new UsageError(`cannot read ${file}: ${(err as Error).message}`);
      }
      input = createReadStream(file);
    }
    const db = await openStore(config, log);
    const verifier = values['no-verify'] ? undefined : new SignatureVerifier(config.VERIFY_THREADS);
    const plugin = importWritePlugin(config.WRITE_POLICY_PLUGIN, config.WRITE_POLICY_TIMEOUT_MS, log);
    const stop = stopOnSignals(log);
    try {
      const result = await importJsonl(db.pool, input, {
        policy: await importPolicy(config, db),
        verifier,
        source: importSource(verifier ? 'verify' : 'trust'),
        plugin,
        batchSize,
        totalBytes,
        onRefused: (line, reason) => reports.print(line, reason),
        progress: createProgress('import', { unit: totalBytes ? 'bytes' : 'events', log }),
        signal: stop.signal,
      });
      reports.finish();
      console.log(`lines:      ${formatRate(result.lines, result.seconds, 'lines')}${verifier ? '' : ' (signatures not verified)'}`);
      for (const line of formatImportSummary(result)) console.log(line);
      if (!result.complete) console.log('stopped early: the lines after the last batch were not imported');
      return result.failed > 0 ? 1 : 0;
    } finally {
      stop.dispose();
      await verifier?.close();
      await plugin?.close();
      await db.close();
    }
  },
};
