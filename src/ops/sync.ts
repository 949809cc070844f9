// sync: our database as a NIP-77 negentropy client of another relay (strfry, khatru, another pgrelay).
// The local records matching one filter are read into a NegentropySet (store/negentropy.ts), the
// rounds run over one WebSocket until the initiator settles every range, then what differs is moved:
// down, the ids the remote holds and we lack are fetched with REQ {ids} (a few REQs in flight) and
// imported like `import` does (shape, policy, id and signature, the relay's rules, bulk COPY); up,
// the raw JSON of the ids we hold and the remote lacks is read from `events` and published with
// EVENT (publisher.ts, shared with the router: a window awaiting their OK that shrinks and pauses on
// rate-limited:, which is sent again a few times). A reconciliation the remote rate-limits (NEG-ERR
// rate-limited:) goes on after a pause in a new session, from the last message (the responder keeps
// no state between messages). Every wait has a timeout. No NIP-42 AUTH:
// a remote that requires it answers auth-required:, which ends the command. The connection, the
// negentropy rounds and fetching by id live in relay-client.ts, also shared with the router.
import { PassThrough } from 'node:stream';
import type pg from 'pg';
import { syncSource } from '../admission/source.js';
import { DEFAULT_MAX_MESSAGE_BYTES } from '../config.js';
import { parseFilter, type Filter } from '../nostr/filter.js';
import type { SignatureVerifier } from '../nostr/verifier.js';
import type { Policy } from '../policy/policy.js';
import type { WritePlugin } from '../policy/write-plugin.js';
import { readNegentropySet } from '../store/negentropy.js';
import { needsPreparing, prepareSearch } from '../store/search.js';
import { importJsonl } from './import-jsonl.js';
import { noProgress, type Progress } from './progress.js';
import { Publisher } from './publisher.js';
import {
  ENVELOPE_ROOM,
  fetchByIds,
  fetchRelayInformation,
  frameSizeFor,
  MIN_FRAME_SIZE,
  positiveInt,
  RATE_LIMIT_RETRIES,
  reconcile,
  RemoteError as SyncError,
  RemoteRelay,
  remoteMessageLimit,
} from './relay-client.js';

export { DEFAULT_FRAME_SIZE, fetchRelayInformation, frameSizeFor, MIN_FRAME_SIZE, type RelayInformation } from './relay-client.js';
/** A failure that ends the command with a message for the operator (exit code 1): the remote's. */
export { SyncError };

export type SyncDirection = 'down' | 'up' | 'both';
export type SyncPhase = 'reconcile' | 'download' | 'upload';

/** The most local records read into memory (ids come back as one hex string: V8 caps strings near 512 MiB). */
export const DEFAULT_MAX_LOCAL_RECORDS = 5_000_000;
/** An upload's first pause after a rate-limited: answer (publisher.ts). */
const FIRST_PAUSE_MS = 500;

export interface SyncOptions {
  /** ws:// or wss:// */
  url: string;
  /** One NIP-01 filter, sent to the remote exactly as given and read locally with the same meaning. Default {}. */
  filter?: Record<string, unknown>;
  direction?: SyncDirection;
  /** Only reconcile: report have/need, move nothing. */
  dryRun?: boolean;
  /** Our largest negentropy message (bytes before hex); 0 = none. Default: from the remote's NIP-11, else 60000. */
  frameSizeLimit?: number;
  /** Ids per REQ when downloading (capped by the remote's announced max_limit), events per local read when uploading. */
  batch?: number;
  /** REQs in flight when downloading. */
  requestsInFlight?: number;
  /** Most events awaiting their OK when uploading. */
  window?: number;
  /** Every wait on the remote: connecting, each negentropy answer, a REQ going quiet, an OK. */
  timeoutMs?: number;
  /** The relay's MAX_MESSAGE_BYTES: the remote's messages are bounded by remoteMessageLimit() of it (relay-client.ts). */
  maxMessageBytes?: number;
  maxLocalRecords?: number;
  /** The relay's write rules for downloaded events (the command uses importPolicy). */
  policy: Policy;
  /** Checks downloaded events' signatures; without it they are trusted (ids are still recomputed). */
  verifier?: SignatureVerifier;
  /** WRITE_POLICY_PLUGIN: asked about every downloaded event that passed the checks (sourceType Sync, the remote's URL). */
  plugin?: WritePlugin;
  /** Events per write transaction for downloaded events. */
  importBatchSize?: number;
  progress?: (phase: SyncPhase) => Progress;
  /** Each event refused: downloaded and refused by our rules, or uploaded and refused by the remote. */
  onRefused?: (phase: 'download' | 'upload', id: string, reason: string) => void;
  /** Things worth telling the operator that do not stop the sync. */
  onWarning?: (message: string) => void;
  signal?: AbortSignal;
}

export interface ReconcileStats {
  /** Records matching the filter in our database. */
  local: number;
  /** Ids we hold that the remote lacks. */
  have: number;
  /** Ids the remote holds that we lack. */
  need: number;
  rounds: number;
  /** Sessions reopened where they stopped after a NEG-ERR rate-limited: (each a new NEG-OPEN). */
  resumed: number;
  /** WebSocket payload bytes during reconciliation (NEG-OPEN … NEG-CLOSE). */
  bytesSent: number;
  bytesReceived: number;
  frameSizeLimit: number;
  frameSizeFrom: 'option' | 'nip11' | 'default';
  /** Reading the local records. */
  readSeconds: number;
  /** NEG-OPEN to the last answer. */
  seconds: number;
}

export interface DownloadStats {
  requested: number;
  received: number;
  accepted: number;
  duplicate: number;
  /** Refused by our rules or checks (invalid + rejected in import's terms). */
  rejected: number;
  /** Not stored because the write policy plugin could not judge them (it kept failing): the sync is incomplete. */
  failed: number;
  reasons: Record<string, number>;
  /** Ids the remote said it had but never sent (why, when a REQ was CLOSED or timed out). */
  missing: number;
  missingIds: string[];
  missingReasons: Record<string, number>;
  /** Events sent that we did not ask for, or sent again (ignored). */
  unrequested: number;
  requests: number;
  bytesReceived: number;
  seconds: number;
}

export interface UploadStats {
  /** Ids to upload. */
  requested: number;
  /** Gone from our database since the records were read (deleted, replaced, expired). */
  gone: number;
  sent: number;
  accepted: number;
  duplicate: number;
  refused: number;
  reasons: Record<string, number>;
  /** Sent again after a rate-limited: answer. */
  retried: number;
  /** Not sent, or sent without an OK: the connection ended, the remote went quiet, or stopped. */
  unanswered: number;
  bytesSent: number;
  seconds: number;
}

export interface SyncResult {
  reconcile: ReconcileStats;
  download?: DownloadStats;
  upload?: UploadStats;
  /** False when stopped early (signal), the connection was lost, or the remote stopped answering. */
  complete: boolean;
  /** Why it is not complete. */
  problem?: string;
  seconds: number;
}

/** The filter for our own records: the relay's meaning, with no limit unless the filter has one. */
export function localFilter(input: Record<string, unknown>, maxRecords: number): Filter {
  const parsed = parseFilter(input, { maxValuesPerArray: Number.MAX_SAFE_INTEGER, defaultLimit: maxRecords + 1, maxLimit: maxRecords + 1 });
  if (!parsed.ok) throw new SyncError(`--filter: ${parsed.reason}`);
  return parsed.value;
}

function countInto(counts: Record<string, number>, key: string, n = 1): void {
  counts[key] = (counts[key] ?? 0) + n;
}

/** Calls `fn` at most every `ms` (and once more at the end, by hand). */
function throttled(ms: number, fn: () => void): () => void {
  let last = 0;
  return () => {
    const now = Date.now();
    if (now - last < ms) return;
    last = now;
    fn();
  };
}

interface DownloadContext {
  remote: RemoteRelay;
  pool: pg.Pool;
  need: string[];
  perRequest: number;
  requestsInFlight: number;
  timeoutMs: number;
  options: SyncOptions;
  progress: Progress;
}

/** Fetches `need` with REQ {ids} and imports what arrives through the import path, as it arrives. */
async function download(ctx: DownloadContext): Promise<DownloadStats> {
  const { remote, pool, need, options, progress } = ctx;
  const started = performance.now();
  const bytesBefore = remote.bytesReceived;
  const stats: DownloadStats = {
    requested: need.length, received: 0, accepted: 0, duplicate: 0, rejected: 0, failed: 0, reasons: {},
    missing: 0, missingIds: [], missingReasons: {}, unrequested: 0, requests: 0, bytesReceived: 0, seconds: 0,
  };
  progress.setTotal(need.length);
  const report = throttled(250, () => progress.update(stats.received));

  const input = new PassThrough();
  const lineIds: string[] = [];
  const importing = importJsonl(pool, input, {
    policy: options.policy,
    verifier: options.verifier,
    source: syncSource(options.url),
    plugin: options.plugin,
    batchSize: options.importBatchSize ?? 2000,
    onRefused: (line, reason) => options.onRefused?.('download', lineIds[line - 1] ?? '?', reason),
  });
  importing.catch(() => undefined); // awaited below
  const drained = () => (input.writableNeedDrain ? new Promise<void>((r) => input.once('drain', r)) : Promise.resolve());

  let fetched: Awaited<ReturnType<typeof fetchByIds>>;
  try {
    fetched = await fetchByIds(remote, need, {
      perRequest: ctx.perRequest,
      requestsInFlight: ctx.requestsInFlight,
      timeoutMs: ctx.timeoutMs,
      signal: options.signal,
      onEvent: (event, id) => {
        stats.received++;
        lineIds.push(id);
        input.write(JSON.stringify(event) + '\n');
        report();
      },
      drained,
    });
  } finally {
    input.end();
  }
  stats.requests = fetched.requests;
  stats.unrequested = fetched.unrequested;
  const imported = await importing;
  progress.update(stats.received);
  progress.stop();
  stats.accepted = imported.accepted;
  stats.duplicate = imported.duplicate;
  stats.rejected = imported.invalid + imported.rejected;
  stats.failed = imported.failed;
  stats.reasons = imported.reasons;
  for (const id of fetched.missing) {
    countInto(stats.missingReasons, fetched.lastFailure.get(id) ?? 'not sent (the REQ ended without it)');
    if (stats.missingIds.length < 20) stats.missingIds.push(id);
  }
  stats.missing = fetched.missing.size;
  stats.bytesReceived = remote.bytesReceived - bytesBefore;
  stats.seconds = (performance.now() - started) / 1000;
  return stats;
}

interface UploadContext {
  remote: RemoteRelay;
  pool: pg.Pool;
  have: string[];
  batch: number;
  window: number;
  timeoutMs: number;
  options: SyncOptions;
  progress: Progress;
}

/** Reads the stored JSON of `ids` (those still stored). */
async function readRaw(pool: pg.Pool, ids: string[]): Promise<Array<{ id: string; raw: string }>> {
  const { rows } = await pool.query<{ id: string; raw: string }>(
    `SELECT encode(id, 'hex') AS id, raw FROM events WHERE id = ANY(SELECT decode(x, 'hex') FROM unnest($1::text[]) x)`,
    [ids],
  );
  return rows;
}

/** Publishes the stored events of `have` with EVENT (publisher.ts), one read of `batch` ids ahead of what is sent. */
async function upload(ctx: UploadContext): Promise<{ stats: UploadStats; problem?: string }> {
  const { remote, pool, have, options, progress } = ctx;
  const started = performance.now();
  const bytesBefore = remote.bytesSent;
  const stats: UploadStats = {
    requested: have.length, gone: 0, sent: 0, accepted: 0, duplicate: 0, refused: 0, reasons: {}, retried: 0, unanswered: 0, bytesSent: 0, seconds: 0,
  };
  progress.setTotal(have.length);
  let answered = 0;
  const report = throttled(250, () => progress.update(answered + stats.gone));
  const publisher = new Publisher(remote, {
    timeoutMs: ctx.timeoutMs,
    maxWindow: ctx.window,
    firstPauseMs: FIRST_PAUSE_MS,
    rateLimitRetries: RATE_LIMIT_RETRIES,
    errorRetries: 0,
    onAnswer: (id, outcome, why) => {
      if (outcome === 'refused') {
        stats.refused++;
        countInto(stats.reasons, why || '(no reason given)');
        options.onRefused?.('upload', id, why);
      } else stats[outcome]++;
      answered++;
      report();
    },
  });
  const stop = () => void publisher.stop();
  options.signal?.addEventListener('abort', stop, { once: true });
  if (options.signal?.aborted) stop();

  let nextChunk = 0;
  const readNext = async () => {
    const ids = have.slice(nextChunk, nextChunk + ctx.batch);
    nextChunk += ids.length;
    const items = await readRaw(pool, ids);
    stats.gone += ids.length - items.length;
    return items;
  };
  let reading = nextChunk < have.length ? readNext() : undefined;
  let ended: string | undefined;
  try {
    while (reading) {
      const items = await reading;
      reading = nextChunk < have.length ? readNext() : undefined;
      reading?.catch(() => undefined); // awaited next round
      if (publisher.ended) break;
      for (const item of items) publisher.enqueue(item.id, item.raw);
      report();
      // The next chunk goes in once no more than one chunk awaits its answers.
      await publisher.completed(publisher.queuedTotal - ctx.batch);
    }
    await publisher.completed(publisher.queuedTotal);
    ended = publisher.ended;
  } finally {
    options.signal?.removeEventListener('abort', stop);
    publisher.close();
    if (reading) await reading.catch(() => undefined); // counts what was gone in it
    stats.sent = publisher.sent;
    stats.retried = publisher.retried;
    stats.unanswered = have.length - stats.gone - answered;
    progress.update(answered + stats.gone);
    progress.stop();
  }
  stats.bytesSent = remote.bytesSent - bytesBefore;
  stats.seconds = (performance.now() - started) / 1000;
  const problem = ended === undefined ? undefined : options.signal?.aborted ? 'stopped during the upload' : `upload interrupted: ${ended}`;
  return { stats, problem };
}

/** Reconciles our records matching the filter with the remote's, then moves what differs (see the top of this file). */
export async function syncWithRelay(pool: pg.Pool, options: SyncOptions): Promise<SyncResult> {
  const started = performance.now();
  const timeoutMs = options.timeoutMs ?? 60_000;
  const filterInput = options.filter ?? {};
  const maxLocal = options.maxLocalRecords ?? DEFAULT_MAX_LOCAL_RECORDS;
  const filter = localFilter(filterInput, maxLocal);
  const direction = options.direction ?? 'both';
  const progressFor = (phase: SyncPhase) => options.progress?.(phase) ?? noProgress;

  const info = await fetchRelayInformation(options.url, Math.min(timeoutMs, 10_000));
  const maxMessageLength = positiveInt(info?.limitation?.max_message_length);
  let frameSizeLimit: number;
  let frameSizeFrom: ReconcileStats['frameSizeFrom'];
  if (options.frameSizeLimit !== undefined) {
    frameSizeLimit = options.frameSizeLimit;
    frameSizeFrom = 'option';
  } else {
    frameSizeLimit = frameSizeFor(maxMessageLength);
    frameSizeFrom = maxMessageLength === undefined ? 'default' : 'nip11';
    if (maxMessageLength !== undefined && frameSizeLimit * 2 + ENVELOPE_ROOM > maxMessageLength)
      options.onWarning?.(`the remote takes messages of at most ${maxMessageLength} bytes; frames of ${frameSizeLimit} bytes (the smallest we make) may be refused`);
  }
  if (frameSizeLimit !== 0 && frameSizeLimit < MIN_FRAME_SIZE) throw new SyncError(`the frame size limit must be 0 (none) or at least ${MIN_FRAME_SIZE}`);
  const nips = info?.supported_nips;
  if (Array.isArray(nips) && !nips.includes(77)) options.onWarning?.('the remote does not list NIP-77 in its supported_nips; trying anyway');
  if (info?.limitation?.auth_required === true) options.onWarning?.('the remote announces auth_required; sync does not support NIP-42 AUTH, so it may refuse');

  const remote = await RemoteRelay.connect(options.url, timeoutMs, { maxMessageBytes: remoteMessageLimit(options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES) });
  try {
    const readStarted = performance.now();
    if (needsPreparing([filter])) await prepareSearch(pool, [filter]);
    const snapshot = await readNegentropySet(pool, filter, Math.floor(Date.now() / 1000), maxLocal);
    if ('tooMany' in snapshot)
      throw new SyncError(`more than ${maxLocal.toLocaleString('en-US')} events in our database match the filter: narrow --filter (e.g. "since"/"until") and sync the pieces one by one`);
    const set = snapshot.set;
    const readSeconds = (performance.now() - readStarted) / 1000;

    const reconcileStarted = performance.now();
    const sent0 = remote.bytesSent;
    const received0 = remote.bytesReceived;
    const { have, need, rounds, resumed } = await reconcile(remote, set, filterInput, frameSizeLimit, timeoutMs, progressFor('reconcile'), options.signal);
    const stats: ReconcileStats = {
      local: set.size, have: have.length, need: need.length, rounds, resumed,
      bytesSent: remote.bytesSent - sent0, bytesReceived: remote.bytesReceived - received0,
      frameSizeLimit, frameSizeFrom, readSeconds, seconds: (performance.now() - reconcileStarted) / 1000,
    };
    const result: SyncResult = { reconcile: stats, complete: true, seconds: 0 };
    const finish = (problem?: string) => {
      if (problem) {
        result.complete = false;
        result.problem = problem;
      }
      result.seconds = (performance.now() - started) / 1000;
      return result;
    };
    if (options.dryRun) return finish();

    const batch = options.batch ?? 500;
    // Down first: a deletion or request to vanish fetched from the remote then keeps us from uploading what it removed.
    if (direction !== 'up' && need.length > 0) {
      // Within the remote's announced max_limit, and its max_message_length (an id takes 67 bytes in the REQ).
      const maxLimit = positiveInt(info?.limitation?.max_limit) ?? batch;
      const idsPerMessage = maxMessageLength === undefined ? batch : Math.max(1, Math.floor((maxMessageLength - ENVELOPE_ROOM) / 67));
      result.download = await download({
        remote, pool, need, options, timeoutMs,
        perRequest: Math.min(batch, maxLimit, idsPerMessage),
        requestsInFlight: options.requestsInFlight ?? 4,
        progress: progressFor('download'),
      });
      if (remote.ended) return finish(`download interrupted: ${remote.ended.message}`);
      if (result.download.failed > 0)
        return finish(`${result.download.failed} downloaded events were not stored: the write policy plugin could not judge them (run the sync again)`);
      if (options.signal?.aborted) return finish('stopped during the download');
    }
    if (direction !== 'down' && have.length > 0) {
      const { stats: up, problem } = await upload({
        remote, pool, have, options, timeoutMs, batch, window: options.window ?? 200, progress: progressFor('upload'),
      });
      result.upload = up;
      if (problem) return finish(problem);
    }
    return finish();
  } finally {
    await remote.close();
  }
}
