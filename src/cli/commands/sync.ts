import { MAX_CHUNK_EVENTS } from '../../ops/bulk-load.js';
import { importWritePlugin } from '../../ops/import-plugin.js';
import { createProgress } from '../../ops/progress.js';
import { DEFAULT_MAX_LOCAL_RECORDS, localFilter, MIN_FRAME_SIZE, SyncError, syncWithRelay, type SyncDirection, type SyncPhase, type SyncResult } from '../../ops/sync.js';
import { SignatureVerifier } from '../../nostr/verifier.js';
import type { Command } from '../command.js';
import { formatCount, formatReasons, importPolicy, intOption, openStore, parseOptions, refusalPrinter, stopOnSignals, UsageError } from './shared.js';

const UNITS: Record<SyncPhase, string> = { reconcile: 'rounds', download: 'events', upload: 'events' };

const kib = (bytes: number) => (bytes < 10 * 1024 ? `${formatCount(bytes)} B` : `${formatCount(Math.round(bytes / 1024))} KiB`);
const seconds = (s: number) => `${s.toFixed(s < 10 ? 2 : 1)} s`;

/** The summary printed after a sync (also when it stopped early). */
export function formatSyncSummary(r: SyncResult, direction: SyncDirection, dryRun: boolean): string[] {
  const c = r.reconcile;
  const remote = c.local - c.have + c.need;
  const union = c.local + c.need;
  const differing = c.have + c.need;
  const percent = union === 0 ? 0 : (differing / union) * 100;
  const lines = [
    `records:    ${formatCount(c.local)} here, ${formatCount(remote)} on the remote; ${formatCount(differing)} differ (${percent.toFixed(percent > 0 && percent < 0.1 ? 3 : 1)} %)`,
    `have:       ${formatCount(c.have)} (here, not on the remote)`,
    `need:       ${formatCount(c.need)} (on the remote, not here)`,
    `reconcile:  ${formatCount(c.rounds)} round${c.rounds === 1 ? '' : 's'}${c.resumed ? ` (resumed ${c.resumed}× after rate-limited:)` : ''}, ${kib(c.bytesSent)} sent, ${kib(c.bytesReceived)} received, ${seconds(c.seconds)} (reading our records ${seconds(c.readSeconds)}); frame size limit ${c.frameSizeLimit === 0 ? 'none' : formatCount(c.frameSizeLimit)} (${c.frameSizeFrom === 'nip11' ? "from the remote's max_message_length" : c.frameSizeFrom === 'option' ? '--frame-size' : 'default'})`,
  ];
  const d = r.download;
  if (d) {
    lines.push(
      `download:   ${formatCount(d.received)} of ${formatCount(d.requested)} received in ${formatCount(d.requests)} REQ${d.requests === 1 ? '' : 's'}, ${kib(d.bytesReceived)}, ${seconds(d.seconds)}`,
      `  stored:     ${formatCount(d.accepted)}`,
      `  duplicate:  ${formatCount(d.duplicate)}`,
      `  rejected:   ${formatCount(d.rejected)}`,
      ...(d.failed ? [`  failed:     ${formatCount(d.failed)} (the write policy plugin could not judge them)`] : []),
      ...(d.rejected + d.failed ? formatReasons(d.reasons, '    ').slice(0, 5) : []),
    );
    if (d.missing) {
      lines.push(`  never sent: ${formatCount(d.missing)} (the remote listed them but did not send them)`, ...formatReasons(d.missingReasons, '    ').slice(0, 5));
      lines.push(...d.missingIds.slice(0, 5).map((id) => `    e.g. ${id}`));
    }
    if (d.unrequested) lines.push(`  ignored:    ${formatCount(d.unrequested)} events not asked for, or sent twice`);
  } else if (!dryRun && direction !== 'up') lines.push('download:   nothing to fetch');
  else if (!dryRun && c.need > 0) lines.push(`download:   ${formatCount(c.need)} not fetched (--direction up)`);
  const u = r.upload;
  if (u) {
    lines.push(
      `upload:     ${formatCount(u.sent)} of ${formatCount(u.requested)} sent, ${kib(u.bytesSent)}, ${seconds(u.seconds)}${u.retried ? ` (${formatCount(u.retried)} sent again after rate-limited:)` : ''}`,
      `  accepted:   ${formatCount(u.accepted)}`,
      `  duplicate:  ${formatCount(u.duplicate)}`,
      `  refused:    ${formatCount(u.refused)}`,
      ...(u.refused ? formatReasons(u.reasons, '    ').slice(0, 5) : []),
    );
    if (u.gone) lines.push(`  gone here:  ${formatCount(u.gone)} (deleted, replaced or expired since the records were read)`);
    if (u.unanswered) lines.push(`  unanswered: ${formatCount(u.unanswered)} (not sent, or no OK)`);
  } else if (!dryRun && direction !== 'down') lines.push('upload:     nothing to send');
  else if (!dryRun && c.have > 0) lines.push(`upload:     ${formatCount(c.have)} not sent (--direction down)`);
  lines.push(`total:      ${seconds(r.seconds)}${r.complete ? '' : ` (incomplete: ${r.problem})`}`);
  return lines;
}

function parseFilterOption(json: string | undefined): Record<string, unknown> {
  if (json === undefined) return {};
  let input: unknown;
  try {
    input = JSON.parse(json);
  } catch {
    throw new UsageError('--filter is not valid JSON');
  }
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw new UsageError('--filter takes one filter object (negentropy reconciles one filter at a time)');
  return input as Record<string, unknown>;
}

export const syncCommand: Command = {
  name: 'sync',
  help: `usage: npm run cli -- sync <relay-url> [options]

Compares the events matching a filter (default: all) in our database with those of another relay
(strfry, khatru, another pgrelay...) by NIP-77 negentropy set reconciliation: only fingerprints and
the differing ids cross the network, in a few round trips. Then:
  down  fetches the events the remote has and we lack (REQ by ids) and stores them as "import"
        does: shape and policy checks, id and signature verification, WRITE_POLICY_PLUGIN when
        set (sourceType Sync), the relay's rules (deletions, requests to vanish, replaceable
        versions), in batches;
  up    publishes the events we have and the remote lacks (EVENT, each awaiting its OK); the remote
        applies its own rules.
Running it again finds nothing left to do (0 % difference, one round). Safe while the relay runs.

Our records are read into memory (about 40 bytes each). The remote may refuse a filter matching
more events than it reconciles at once (NEG-ERR blocked:): narrow --filter, e.g. by time with
"since"/"until", and sync the pieces in turn. No NIP-42 AUTH yet: a remote that requires it refuses
with auth-required:, which is reported. Events the remote serves only to authenticated readers
(e.g. DMs, gift wraps) are invisible to it here, so they look missing on the remote.

The command fails (exit code 1) when the remote refuses or stops answering, the connection is lost,
or the write policy plugin could not judge downloaded events (it kept failing); events refused one by
one (by our rules or the remote's) are counted, not failures.

options:
  --filter JSON        one NIP-01 filter, e.g. '{"kinds":[0,3]}' or '{"since":1735689600,"until":1738368000}'
  --direction D        down, up or both (default both: down first, then up)
  --dry-run            only reconcile: print what differs, move nothing
  --frame-size N       our largest negentropy message in bytes (default: from the remote's NIP-11
                       max_message_length, else 60000; 0 = no limit; at least ${MIN_FRAME_SIZE})
  --batch N            ids per REQ when downloading, events read per query when uploading (default 500)
  --window N           events awaiting their OK when uploading (default 200; shrinks on rate-limited:)
  --timeout S          seconds to wait for any answer from the remote (default 60)
  --max-reports N      refused events reported one by one on stderr (default 20; the counts cover all)

examples:
  npm run cli -- sync wss://relay.example.com
  npm run cli -- sync wss://relay.example.com --direction down --filter '{"kinds":[0,3,10002]}'
  npm run cli -- sync ws://127.0.0.1:7000 --dry-run`,
  async run(args, { config, log }) {
    const { values, positionals } = parseOptions(
      args,
      {
        filter: { type: 'string' },
        direction: { type: 'string', default: 'both' },
        'dry-run': { type: 'boolean', default: false },
        'frame-size': { type: 'string' },
        batch: { type: 'string' },
        window: { type: 'string' },
        timeout: { type: 'string' },
        'max-reports': { type: 'string' },
      },
      true,
    );
    if (positionals.length !== 1) throw new UsageError('sync takes one relay URL (ws:// or wss://)');
    const url = positionals[0];
    if (!/^wss?:\/\/[^\s/?#]+/i.test(url)) throw new UsageError(`not a relay URL (ws:// or wss://): ${url}`);
    const direction = values.direction as SyncDirection;
    if (!['down', 'up', 'both'].includes(direction)) throw new UsageError('--direction must be down, up or both');
    const filter = parseFilterOption(values.filter);
    try {
      localFilter(filter, DEFAULT_MAX_LOCAL_RECORDS);
    } catch (err) {
      throw new UsageError((err as Error).message);
    }
    const frameSizeLimit = values['frame-size'] === undefined ? undefined : intOption(values['frame-size'], 'frame-size', 0, 0);
    if (frameSizeLimit !== undefined && frameSizeLimit !== 0 && frameSizeLimit < MIN_FRAME_SIZE) throw new UsageError(`--frame-size must be 0 (no limit) or at least ${MIN_FRAME_SIZE}`);
    const batch = intOption(values.batch, 'batch', 1, 500);
    if (batch > MAX_CHUNK_EVENTS) throw new UsageError(`--batch must be at most ${MAX_CHUNK_EVENTS}`);
    const window = intOption(values.window, 'window', 1, 200);
    const timeoutMs = intOption(values.timeout, 'timeout', 1, 60) * 1000;
    const reports = refusalPrinter(intOption(values['max-reports'], 'max-reports', 0, 20), 'refused');

    const db = await openStore(config, log);
    const dryRun = values['dry-run'] === true;
    const verifier = dryRun || direction === 'up' ? undefined : new SignatureVerifier(config.VERIFY_THREADS);
    // Downloaded events go through WRITE_POLICY_PLUGIN too (sourceType Sync, the remote's URL).
    const plugin = dryRun || direction === 'up' ? undefined : importWritePlugin(config.WRITE_POLICY_PLUGIN, config.WRITE_POLICY_TIMEOUT_MS, log);
    const stop = stopOnSignals(log);
    try {
      const result = await syncWithRelay(db.pool, {
        url,
        filter,
        direction,
        dryRun,
        frameSizeLimit,
        batch,
        window,
        timeoutMs,
        maxMessageBytes: config.MAX_MESSAGE_BYTES,
        policy: await importPolicy(config, db),
        verifier,
        plugin,
        progress: (phase) => createProgress(`sync ${phase}`, { unit: UNITS[phase], log }),
        onRefused: (phase, id, reason) => reports.print(`${phase === 'download' ? 'by us' : 'by the remote'} ${id}`, reason),
        onWarning: (message) => process.stderr.write(`warning: ${message}\n`),
        signal: stop.signal,
      });
      reports.finish();
      for (const line of formatSyncSummary(result, direction, dryRun)) console.log(line);
      return result.complete ? 0 : 1;
    } catch (err) {
      if (!(err instanceof SyncError)) throw err;
      console.error(`sync with ${url} failed: ${err.message}`);
      return 1;
    } finally {
      stop.dispose();
      await verifier?.close();
      await plugin?.close();
      await db.close();
    }
  },
};
