// sync: our database as a NIP-77 negentropy client of another relay (strfry, khatru, another pgrelay).
// The local records matching one filter are read into a NegentropySet (store/negentropy.ts), the
// rounds run over one WebSocket until the initiator settles every range, then what differs is moved:
// down, the ids the remote holds and we lack are fetched with REQ {ids} (a few REQs in flight) and
// imported like `import` does (shape, policy, id and signature, the relay's rules, bulk COPY); up,
// the raw JSON of the ids we hold and the remote lacks is read from `events` and published with
// EVENT, a bounded window awaiting their OK (it shrinks and waits on rate-limited:). A reconciliation
// the remote rate-limits (NEG-ERR rate-limited:) goes on after a pause in a new session, from the last
// message (the responder keeps no state between messages). Every wait has a timeout. No NIP-42 AUTH:
// a remote that requires it answers auth-required:, which ends the command. The connection, the
// negentropy rounds and fetching by id live in relay-client.ts, shared with the router.
import { PassThrough } from 'node:stream';
import type pg from 'pg';
import { syncSource } from '../admission/source.js';
import { parseFilter, type Filter } from '../nostr/filter.js';
import type { SignatureVerifier } from '../nostr/verifier.js';
import type { Policy } from '../policy/policy.js';
import type { WritePlugin } from '../policy/write-plugin.js';
import { readNegentropySet } from '../store/negentropy.js';
import { needsPreparing, prepareSearch } from '../store/search.js';
import { importJsonl } from './import-jsonl.js';
import { noProgress, type Progress } from './progress.js';
import {
  ENVELOPE_ROOM,
  fetchByIds,
  fetchRelayInformation,
  frameSizeFor,
  MAX_BACKOFF_MS,
  MIN_FRAME_SIZE,
  positiveInt,
  RATE_LIMIT_RETRIES,
  reconcile,
  RemoteError as SyncError,
  RemoteRelay,
} from './relay-client.js';

export { DEFAULT_FRAME_SIZE, fetchRelayInformation, frameSizeFor, MIN_FRAME_SIZE, type RelayInformation } from './relay-client.js';
/** A failure that ends the command with a message for the operator (exit code 1): the remote's. */
export { SyncError };

export type SyncDirection = 'down' | 'up' | 'both';
export type SyncPhase = 'reconcile' | 'download' | 'upload';

/** The most local records read into memory (ids come back as one hex string: V8 caps strings near 512 MiB). */
export const DEFAULT_MAX_LOCAL_RECORDS = 5_000_000;
const FIRST_WINDOW = 16;
const FIRST_THRESHOLD = 64;
const FIRST_BACKOFF_MS = 500;

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

interface UploadItem {
  id: string;
  raw: string;
  attempts: number;
  /** The order of its last sending. */
  seq: number;
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
async function readRaw(pool: pg.Pool, ids: string[]): Promise<UploadItem[]> {
  const { rows } = await pool.query<{ id: string; raw: string }>(
    `SELECT encode(id, 'hex') AS id, raw FROM events WHERE id = ANY(SELECT decode(x, 'hex') FROM unnest($1::text[]) x)`,
    [ids],
  );
  return rows.map((r) => ({ id: r.id, raw: r.raw, attempts: 0, seq: 0 }));
}

/** Publishes the stored events of `have` with EVENT, at most `window` awaiting their OK. */
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

  let nextChunk = 0;
  const readNext = async (): Promise<UploadItem[]> => {
    const ids = have.slice(nextChunk, nextChunk + ctx.batch);
    nextChunk += ids.length;
    const items = await readRaw(pool, ids);
    stats.gone += ids.length - items.length;
    return items;
  };
  let ready: UploadItem[] = [];
  let reading: Promise<UploadItem[]> | undefined;
  const retry: UploadItem[] = [];
  const outstanding = new Map<string, UploadItem>();
  // Like TCP: the window grows by one per OK up to `threshold`, then by one per window of OKs. A
  // rate-limited: answer starts a slowdown: a pause, then the window again from 1, the threshold at
  // half the window it had. The refusals of what was already in flight belong to the same slowdown.
  let window = Math.min(FIRST_WINDOW, ctx.window);
  let threshold = Math.min(FIRST_THRESHOLD, ctx.window);
  let growth = 0;
  let seq = 0;
  let slowedAt = 0;
  let pauseUntil = 0;
  let backoff = FIRST_BACKOFF_MS;
  let lastAnswer = Date.now();
  let wake: (() => void) | undefined;

  const off = remote.listen((m) => {
    if (m[0] !== 'OK' || typeof m[1] !== 'string') return;
    const item = outstanding.get(m[1]);
    if (!item) return;
    outstanding.delete(m[1]);
    lastAnswer = Date.now();
    const accepted = m[2] === true;
    const why = typeof m[3] === 'string' ? m[3] : '';
    if (why.startsWith('duplicate:')) stats.duplicate++;
    else if (accepted) stats.accepted++;
    else if (why.startsWith('rate-limited:') && item.attempts < RATE_LIMIT_RETRIES) {
      item.attempts++;
      stats.retried++;
      retry.push(item);
      if (item.seq > slowedAt) {
        threshold = Math.max(2, Math.floor(window / 2));
        window = 1;
        growth = 0;
        slowedAt = seq;
        pauseUntil = Date.now() + backoff;
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
      }
      wake?.();
      return;
    } else {
      stats.refused++;
      countInto(stats.reasons, why || '(no reason given)');
      options.onRefused?.('upload', item.id, why);
    }
    if (accepted || why.startsWith('duplicate:')) {
      if (window < threshold) window++;
      else if (++growth >= window) {
        growth = 0;
        window = Math.min(ctx.window, window + 1);
        backoff = Math.max(FIRST_BACKOFF_MS, backoff / 2);
      }
    }
    answered++;
    report();
    wake?.();
  });

  let problem: string | undefined;
  try {
    for (;;) {
      const stopped = options.signal?.aborted === true;
      // Keep one read ahead of what is being sent.
      if (!stopped && !reading && ready.length < ctx.batch && nextChunk < have.length) {
        reading = readNext();
        reading.catch(() => undefined);
      }
      if (ready.length === 0 && retry.length === 0 && reading) {
        ready = await reading;
        reading = undefined;
        report();
        continue;
      }
      const now = Date.now();
      if (!stopped && now >= pauseUntil) {
        while (outstanding.size < window && (retry.length || ready.length)) {
          const item = retry.length ? retry.shift()! : ready.shift()!;
          if (outstanding.size === 0) lastAnswer = Date.now();
          item.seq = ++seq;
          outstanding.set(item.id, item);
          remote.send(`["EVENT",${item.raw}]`);
          if (item.attempts === 0) stats.sent++;
        }
      }
      const queued = ready.length + retry.length;
      if (outstanding.size === 0 && (stopped || (queued === 0 && !reading && nextChunk >= have.length))) {
        if (stopped) problem = 'stopped during the upload';
        break;
      }
      if (remote.ended) {
        problem = `upload interrupted: ${remote.ended.message}`;
        break;
      }
      const quiet = ctx.timeoutMs - (Date.now() - lastAnswer); // time left for the next OK
      if (outstanding.size > 0 && quiet <= 0) {
        problem = `upload interrupted: no OK from the remote within ${ctx.timeoutMs / 1000} s`;
        break;
      }
      const pause = Math.max(0, pauseUntil - Date.now());
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, Math.max(1, outstanding.size > 0 ? Math.min(quiet, pause || quiet) : pause));
        const offEnd = remote.onEnd(() => done());
        function done() {
          clearTimeout(timer);
          offEnd();
          wake = undefined;
          resolve();
        }
        wake = done;
      });
    }
  } finally {
    off();
    if (reading) {
      const items = await reading.catch(() => [] as UploadItem[]);
      ready.push(...items);
    }
    const unread = have.length - nextChunk;
    stats.unanswered = outstanding.size + ready.length + retry.length + unread;
    progress.update(answered + stats.gone);
    progress.stop();
  }
  stats.bytesSent = remote.bytesSent - bytesBefore;
  stats.seconds = (performance.now() - started) / 1000;
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

  const remote = await RemoteRelay.connect(options.url, timeoutMs);
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
