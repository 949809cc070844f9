// sync: our database as a NIP-77 negentropy client of another relay (strfry, khatru, another pgrelay).
// The local records matching one filter are read into a NegentropySet (store/negentropy.ts), the
// rounds run over one WebSocket until the initiator settles every range, then what differs is moved:
// down, the ids the remote holds and we lack are fetched with REQ {ids} (a few REQs in flight) and
// imported like `import` does (shape, policy, id and signature, the relay's rules, bulk COPY); up,
// the raw JSON of the ids we hold and the remote lacks is read from `events` and published with
// EVENT, a bounded window awaiting their OK (it shrinks and waits on rate-limited:). A reconciliation
// the remote rate-limits (NEG-ERR rate-limited:) goes on after a pause in a new session, from the last
// message (the responder keeps no state between messages). Every wait has a timeout. No NIP-42 AUTH:
// a remote that requires it answers auth-required:, which ends the command.
import { randomBytes } from 'node:crypto';
import { PassThrough } from 'node:stream';
import type pg from 'pg';
import WebSocket from 'ws';
import { parseFilter, type Filter } from '../nostr/filter.js';
import { NegentropyError, NegentropyInitiator, type NegentropySet } from '../nostr/negentropy.js';
import type { SignatureVerifier } from '../nostr/verifier.js';
import type { Policy } from '../policy/policy.js';
import { readNegentropySet } from '../store/negentropy.js';
import { needsPreparing, prepareSearch } from '../store/search.js';
import { importJsonl } from './import-jsonl.js';
import { noProgress, type Progress } from './progress.js';

export type SyncDirection = 'down' | 'up' | 'both';
export type SyncPhase = 'reconcile' | 'download' | 'upload';

/** Our frame size limit when the remote announces no max_message_length (NIP-77's suggestion). */
export const DEFAULT_FRAME_SIZE = 60_000;
/** The smallest limit the initiator accepts (nostr/negentropy.ts). */
export const MIN_FRAME_SIZE = 4096;
/** A message's size in bytes is twice its frame (hex) plus the JSON around it; this leaves room for that. */
const ENVELOPE_ROOM = 512;
/** Frames past this gain little (a round costs one round trip either way) and a remote may cut off large frames. */
const MAX_FRAME_SIZE = 500_000;
/** The most local records read into memory (ids come back as one hex string: V8 caps strings near 512 MiB). */
export const DEFAULT_MAX_LOCAL_RECORDS = 5_000_000;
/** Times an event or a REQ refused with rate-limited: is sent again. */
const RATE_LIMIT_RETRIES = 8;
const FIRST_WINDOW = 16;
const FIRST_THRESHOLD = 64;
const FIRST_BACKOFF_MS = 500;
/** The first wait before going on with a reconciliation the remote rate-limited (NEG-ERR rate-limited:). */
const FIRST_RESUME_MS = 1000;
const MAX_BACKOFF_MS = 10_000;

/** A failure that ends the command with a message for the operator (exit code 1). */
export class SyncError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SyncError';
  }
}

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

export interface RelayInformation {
  supported_nips?: unknown;
  limitation?: { max_message_length?: unknown; max_limit?: unknown; auth_required?: unknown };
}

/** The remote's NIP-11 document, or undefined when it has none (or does not answer in time). */
export async function fetchRelayInformation(url: string, timeoutMs: number): Promise<RelayInformation | undefined> {
  const http = url.replace(/^ws(s?):\/\//i, 'http$1://');
  try {
    const res = await fetch(http, { headers: { Accept: 'application/nostr+json' }, signal: AbortSignal.timeout(timeoutMs) });
    if (!res.ok) return undefined;
    const doc: unknown = await res.json();
    return typeof doc === 'object' && doc !== null && !Array.isArray(doc) ? (doc as RelayInformation) : undefined;
  } catch {
    return undefined;
  }
}

const positiveInt = (v: unknown): number | undefined => (typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : undefined);

/** Our frame size limit for a remote taking messages of up to `maxMessageLength` bytes: hex doubles a frame. */
export function frameSizeFor(maxMessageLength: number | undefined): number {
  if (maxMessageLength === undefined) return DEFAULT_FRAME_SIZE;
  return Math.min(MAX_FRAME_SIZE, Math.max(MIN_FRAME_SIZE, Math.floor((maxMessageLength - ENVELOPE_ROOM) / 2)));
}

/** The filter for our own records: the relay's meaning, with no limit unless the filter has one. */
export function localFilter(input: Record<string, unknown>, maxRecords: number): Filter {
  const parsed = parseFilter(input, { maxValuesPerArray: Number.MAX_SAFE_INTEGER, defaultLimit: maxRecords + 1, maxLimit: maxRecords + 1 });
  if (!parsed.ok) throw new SyncError(`--filter: ${parsed.reason}`);
  return parsed.value;
}

type Message = unknown[];

/** One WebSocket to the remote: parsed messages to listeners, payload bytes counted, waits with timeouts. */
class RemoteRelay {
  bytesSent = 0;
  bytesReceived = 0;
  /** Set once the connection is gone, with why. */
  ended: SyncError | undefined;
  private readonly listeners = new Set<(m: Message) => void>();
  private readonly endListeners = new Set<(err: SyncError) => void>();

  private constructor(private readonly ws: WebSocket) {
    ws.on('message', (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
      const buf = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
      this.bytesReceived += buf.length;
      if (isBinary) return;
      let m: unknown;
      try {
        m = JSON.parse(buf.toString('utf8'));
      } catch {
        return;
      }
      if (!Array.isArray(m)) return;
      for (const listener of [...this.listeners]) listener(m);
    });
    ws.on('close', (code, why) => this.end(new SyncError(`the remote closed the connection (code ${code}${why.length ? `: ${why.toString()}` : ''})`)));
    ws.on('error', (err) => this.end(new SyncError(`connection error: ${err.message}`)));
  }

  static connect(url: string, timeoutMs: number): Promise<RemoteRelay> {
    return new Promise((resolve, reject) => {
      let ws: WebSocket;
      try {
        ws = new WebSocket(url, { handshakeTimeout: timeoutMs, maxPayload: 256 * 1024 * 1024 });
      } catch (err) {
        return reject(new SyncError(`cannot connect to ${url}: ${(err as Error).message}`));
      }
      const failed = (err: Error) => reject(new SyncError(`cannot connect to ${url}: ${err.message}`));
      ws.on('error', failed);
      ws.once('open', () => {
        ws.off('error', failed);
        resolve(new RemoteRelay(ws));
      });
    });
  }

  private end(err: SyncError): void {
    if (this.ended) return;
    this.ended = err;
    for (const listener of [...this.endListeners]) listener(err);
  }

  send(message: Message | string): void {
    if (this.ended) return;
    const text = typeof message === 'string' ? message : JSON.stringify(message);
    this.bytesSent += Buffer.byteLength(text);
    this.ws.send(text);
  }

  listen(listener: (m: Message) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  onEnd(listener: (err: SyncError) => void): () => void {
    this.endListeners.add(listener);
    return () => this.endListeners.delete(listener);
  }

  /** The first value `pick` returns for a message from now on; rejects on timeout or when the connection ends. */
  next<T>(pick: (m: Message) => T | undefined, timeoutMs: number, what: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.ended) return reject(this.ended);
      const finish = (err: Error | undefined, value?: T) => {
        clearTimeout(timer);
        off();
        offEnd();
        if (err) reject(err);
        else resolve(value as T);
      };
      const timer = setTimeout(() => finish(new SyncError(`no ${what} from the remote within ${timeoutMs / 1000} s`)), timeoutMs);
      const off = this.listen((m) => {
        let value: T | undefined;
        try {
          value = pick(m);
        } catch (err) {
          return finish(err as Error);
        }
        if (value !== undefined) finish(undefined, value);
      });
      const offEnd = this.onEnd((err) => finish(err));
    });
  }

  /** Closes the connection, waiting (briefly) for the close handshake so the last frames go out. */
  async close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.ws.terminate();
        resolve();
      }, 2000);
      this.ws.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
      this.ws.close(1000);
    });
  }
}

/** What a NEG-ERR / CLOSED reason means for the operator: the reason, and what to do about it. */
function refusalMessage(answer: string, why: string): string {
  const prefix = why.split(':')[0];
  const head = `the remote answered ${answer}: ${why}`;
  if (prefix === 'blocked')
    return `${head}\nnarrow --filter so it matches fewer events (e.g. "since"/"until" for a time range, "kinds", "authors") and sync the pieces one by one`;
  if (prefix === 'auth-required') return `${head}\nthe remote requires NIP-42 authentication, which sync does not support yet`;
  if (prefix === 'rate-limited') return `${head}\ntry again later, or ask its operator to exempt this address from its rate limits`;
  return head;
}

/** Runs the negentropy rounds; have/need are the ids settled over all of them. */
async function reconcile(
  remote: RemoteRelay,
  set: NegentropySet,
  filter: Record<string, unknown>,
  frameSizeLimit: number,
  timeoutMs: number,
  progress: Progress,
  signal: AbortSignal | undefined,
): Promise<{ have: string[]; need: string[]; rounds: number; resumed: number }> {
  const initiator = new NegentropyInitiator(set, frameSizeLimit);
  const have: string[] = [];
  const need: string[] = [];
  let rounds = 0;
  let resumed = 0;
  let backoff = FIRST_RESUME_MS;
  let subId = `sync-${randomBytes(6).toString('hex')}`;
  let open = true;
  // The last message sent: a responder keeps no state between messages, so a session the remote ended
  // (rate-limited:) goes on where it stopped, in a new session opened with that message.
  let last = initiator.initiate().toString('hex');
  remote.send(['NEG-OPEN', subId, filter, last]);
  try {
    for (;;) {
      const first = rounds === 0;
      const reply = await remote.next(
        (m) => {
          if ((m[0] === 'NEG-MSG' || m[0] === 'NEG-ERR' || m[0] === 'CLOSED') && m[1] === subId) return m;
          // A relay without NIP-77 answers an unknown message with a NOTICE (or not at all: the timeout).
          if (first && m[0] === 'NOTICE') return m;
          return undefined;
        },
        timeoutMs,
        first ? 'answer to NEG-OPEN (does the remote support NIP-77 negentropy?)' : 'answer to NEG-MSG',
      );
      if (reply[0] === 'NOTICE') {
        open = false;
        throw new SyncError(`the remote answered NEG-OPEN with NOTICE ${JSON.stringify(reply[1])}: it does not seem to support NIP-77 negentropy sync`);
      }
      if (reply[0] === 'NEG-ERR' || reply[0] === 'CLOSED') {
        open = false;
        if (reply[0] === 'NEG-ERR' && String(reply[2]).startsWith('rate-limited:') && resumed < RATE_LIMIT_RETRIES && !signal?.aborted) {
          await new Promise((r) => setTimeout(r, backoff));
          backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
          resumed++;
          subId = `sync-${randomBytes(6).toString('hex')}`;
          open = true;
          remote.send(['NEG-OPEN', subId, filter, last]);
          continue;
        }
        throw new SyncError(refusalMessage(`${reply[0]}${rounds ? ` after ${rounds} round${rounds === 1 ? '' : 's'}` : ''}`, String(reply[2])));
      }
      const hex = reply[2];
      if (typeof hex !== 'string' || hex.length === 0 || !/^(?:[0-9a-fA-F]{2})+$/.test(hex)) throw new SyncError('the remote sent a NEG-MSG that is not hex');
      rounds++;
      let step: ReturnType<NegentropyInitiator['reconcile']>;
      try {
        step = initiator.reconcile(Buffer.from(hex, 'hex'));
      } catch (err) {
        if (err instanceof NegentropyError) throw new SyncError(`the remote's negentropy message is not usable: ${err.message}`);
        throw err;
      }
      for (const id of step.have) have.push(id);
      for (const id of step.need) need.push(id);
      progress.update(rounds);
      if (!step.next) break;
      if (signal?.aborted) throw new SyncError('stopped during reconciliation: nothing was transferred');
      last = step.next.toString('hex');
      remote.send(['NEG-MSG', subId, last]);
    }
  } finally {
    if (open) remote.send(['NEG-CLOSE', subId]);
    progress.stop();
  }
  return { have, need, rounds, resumed };
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
    requested: need.length, received: 0, accepted: 0, duplicate: 0, rejected: 0, reasons: {},
    missing: 0, missingIds: [], missingReasons: {}, unrequested: 0, requests: 0, bytesReceived: 0, seconds: 0,
  };
  progress.setTotal(need.length);
  const report = throttled(250, () => progress.update(stats.received));

  const input = new PassThrough();
  const lineIds: string[] = [];
  const importing = importJsonl(pool, input, {
    policy: options.policy,
    verifier: options.verifier,
    batchSize: options.importBatchSize ?? 2000,
    onRefused: (line, reason) => options.onRefused?.('download', lineIds[line - 1] ?? '?', reason),
  });
  importing.catch(() => undefined); // awaited below
  const drained = () => (input.writableNeedDrain ? new Promise<void>((r) => input.once('drain', r)) : Promise.resolve());

  const pending = new Set(need); // not received yet
  const lastFailure = new Map<string, string>(); // id → why its last REQ ended without it
  let n = 0;

  /** One REQ: resolves at EOSE, CLOSED, a quiet spell of timeoutMs, or the end of the connection. */
  const request = (ids: string[]): Promise<{ received: number; closed?: string }> =>
    new Promise((resolve) => {
      const subId = `sync-get-${++n}`;
      const wanted = new Set(ids);
      let received = 0;
      let ended = false;
      const finish = (closed?: string, sendClose = true) => {
        if (ended) return;
        ended = true;
        clearTimeout(timer);
        off();
        offEnd();
        if (sendClose) remote.send(['CLOSE', subId]);
        resolve({ received, closed });
      };
      const timer = setTimeout(() => finish(`no EOSE within ${ctx.timeoutMs / 1000} s`), ctx.timeoutMs);
      const off = remote.listen((m) => {
        if (m[1] !== subId) return;
        if (m[0] === 'EVENT') {
          timer.refresh();
          const event = m[2] as { id?: unknown } | null;
          const id = typeof event === 'object' && event !== null ? event.id : undefined;
          if (typeof id !== 'string' || !wanted.delete(id) || !pending.delete(id)) {
            stats.unrequested++;
            return;
          }
          received++;
          stats.received++;
          lineIds.push(id);
          input.write(JSON.stringify(event) + '\n');
          report();
        } else if (m[0] === 'EOSE') finish();
        else if (m[0] === 'CLOSED') finish(String(m[2] ?? 'closed'), false);
      });
      const offEnd = remote.onEnd((err) => finish(err.message, false));
      stats.requests++;
      remote.send(['REQ', subId, { ids, limit: ids.length }]);
    });

  const chunks: string[][] = [];
  for (let i = 0; i < need.length; i += ctx.perRequest) chunks.push(need.slice(i, i + ctx.perRequest));
  const worker = async () => {
    for (;;) {
      if (remote.ended || options.signal?.aborted) return;
      const chunk = chunks.shift();
      if (!chunk) return;
      let ids: string[] = chunk;
      let delay = 1000;
      for (let attempt = 0; ids.length > 0; attempt++) {
        const { received, closed } = await request(ids);
        const left: string[] = ids.filter((id) => pending.has(id));
        if (closed) for (const id of left) lastFailure.set(id, closed);
        if (left.length === 0 || remote.ended) break;
        // A relay may cap results below what we asked for (its max_limit): ask again for the rest while
        // that makes progress; wait and retry a rate-limited REQ a few times.
        if (closed?.startsWith('rate-limited:') && attempt < RATE_LIMIT_RETRIES) {
          await new Promise((r) => setTimeout(r, delay));
          delay = Math.min(delay * 2, 10_000);
        } else if (received === 0 || closed) break;
        ids = left;
      }
      await drained();
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.max(1, Math.min(ctx.requestsInFlight, chunks.length)) }, worker));
  } finally {
    input.end();
  }
  const imported = await importing;
  progress.update(stats.received);
  progress.stop();
  stats.accepted = imported.accepted;
  stats.duplicate = imported.duplicate;
  stats.rejected = imported.invalid + imported.rejected;
  stats.reasons = imported.reasons;
  for (const id of pending) {
    countInto(stats.missingReasons, lastFailure.get(id) ?? 'not sent (the REQ ended without it)');
    if (stats.missingIds.length < 20) stats.missingIds.push(id);
  }
  stats.missing = pending.size;
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
