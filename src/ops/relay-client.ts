// Our side of a conversation with another relay, shared by `sync` (sync.ts) and the router
// (router/): one WebSocket with parsed messages and waits that time out (RemoteRelay), the remote's
// NIP-11 document, NIP-77 negentropy rounds as the initiator (reconcile), and fetching events by id
// with a few REQs in flight (fetchByIds). Every wait has a timeout; nothing here writes to our
// database.
import { randomBytes } from 'node:crypto';
import WebSocket from 'ws';
import { NegentropyError, NegentropyInitiator, type NegentropySet } from '../nostr/negentropy.js';
import type { Progress } from './progress.js';

/** Our frame size limit when the remote announces no max_message_length (NIP-77's suggestion). */
export const DEFAULT_FRAME_SIZE = 60_000;
/** The smallest limit the initiator accepts (nostr/negentropy.ts). */
export const MIN_FRAME_SIZE = 4096;
/** A message's size in bytes is twice its frame (hex) plus the JSON around it; this leaves room for that. */
export const ENVELOPE_ROOM = 512;
/** Frames past this gain little (a round costs one round trip either way) and a remote may cut off large frames. */
const MAX_FRAME_SIZE = 500_000;
/**
 * A NIP-77 answer can be larger than any event: strfry answers with frames of up to 500,000 bytes,
 * a million hex digits in the message. A remote's messages are never bounded below this.
 */
export const NEGENTROPY_ANSWER_BYTES = 1_048_576;
/** Times a reconciliation or a REQ the remote rate-limits is taken up again. */
export const RATE_LIMIT_RETRIES = 8;
/** The first wait before going on with a reconciliation the remote rate-limited (NEG-ERR rate-limited:). */
const FIRST_RESUME_MS = 1000;
export const MAX_BACKOFF_MS = 10_000;

/** The remote failed us: could not connect, closed the connection, went quiet, or refused. */
export class RemoteError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RemoteError';
  }
}

/** The remote answered a negentropy session with NEG-ERR, CLOSED or NOTICE: `why` is its reason. */
export class RemoteRefusal extends RemoteError {
  constructor(
    message: string,
    readonly answer: 'NEG-ERR' | 'CLOSED' | 'NOTICE',
    readonly why: string,
  ) {
    super(message);
  }
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

/**
 * The largest message taken from a remote by a relay whose clients may send `maxMessageBytes`
 * (MAX_MESSAGE_BYTES): twice that, where the relay cuts its own clients' frames (relay/server.ts),
 * and at least a negentropy answer. A larger message cuts the connection before it is buffered.
 */
export function remoteMessageLimit(maxMessageBytes: number): number {
  return Math.max(2 * maxMessageBytes, NEGENTROPY_ANSWER_BYTES);
}

export const positiveInt = (v: unknown): number | undefined => (typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : undefined);

/** Our frame size limit for a remote taking messages of up to `maxMessageLength` bytes: hex doubles a frame. */
export function frameSizeFor(maxMessageLength: number | undefined): number {
  if (maxMessageLength === undefined) return DEFAULT_FRAME_SIZE;
  return Math.min(MAX_FRAME_SIZE, Math.max(MIN_FRAME_SIZE, Math.floor((maxMessageLength - ENVELOPE_ROOM) / 2)));
}

export type Message = unknown[];

export interface ConnectOptions {
  /** The largest message taken from the remote (remoteMessageLimit()); one larger cuts the connection (ws: close code 1009). */
  maxMessageBytes: number;
  /** A ping this often; a connection that has not answered by the next one is cut (0: none). */
  keepAliveMs?: number;
}

/** One WebSocket to the remote: parsed messages to listeners, payload bytes counted, waits with timeouts. */
export class RemoteRelay {
  bytesSent = 0;
  bytesReceived = 0;
  /** Set once the connection is gone, with why. */
  ended: RemoteError | undefined;
  private readonly listeners = new Set<(m: Message) => void>();
  private readonly endListeners = new Set<(err: RemoteError) => void>();
  private keepAlive: NodeJS.Timeout | undefined;
  /** Waiting for the pongs of pings sent, oldest first (a WebSocket answers pings in order). */
  private readonly pongs: Array<() => void> = [];

  private constructor(
    private readonly ws: WebSocket,
    keepAliveMs: number,
    maxMessageBytes: number,
  ) {
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
    ws.on('close', (code, why) => this.end(new RemoteError(`the remote closed the connection (code ${code}${why.length ? `: ${why.toString()}` : ''})`)));
    ws.on('error', (err: Error & { code?: string }) =>
      this.end(
        new RemoteError(
          err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH' ? `the remote sent a message larger than ${maxMessageBytes} bytes` : `connection error: ${err.message}`,
        ),
      ),
    );
    ws.on('pong', () => this.pongs.shift()?.());
    if (keepAliveMs > 0) {
      // A remote host that vanished without closing (power, network) shows up only as silence.
      let answered = true;
      this.keepAlive = setInterval(() => {
        if (!answered) {
          this.end(new RemoteError(`no answer to a ping within ${keepAliveMs / 1000} s`));
          ws.terminate();
          return;
        }
        answered = false;
        void this.ping().then(() => (answered = true));
      }, keepAliveMs);
      this.keepAlive.unref();
    }
  }

  /**
   * Resolves when the remote answers a ping sent now (never, if the connection ends first). Frames
   * arrive in order, so everything the remote sent before it answered has been received by then.
   */
  ping(): Promise<void> {
    if (this.ended) return new Promise(() => undefined);
    return new Promise((resolve) => {
      this.pongs.push(resolve);
      this.ws.ping();
    });
  }

  static connect(url: string, timeoutMs: number, options: ConnectOptions): Promise<RemoteRelay> {
    return new Promise((resolve, reject) => {
      let ws: WebSocket;
      try {
        ws = new WebSocket(url, { handshakeTimeout: timeoutMs, maxPayload: options.maxMessageBytes });
      } catch (err) {
        return reject(new RemoteError(`cannot connect to ${url}: ${(err as Error).message}`));
      }
      const failed = (err: Error) => reject(new RemoteError(`cannot connect to ${url}: ${err.message}`));
      ws.on('error', failed);
      ws.once('open', () => {
        ws.off('error', failed);
        resolve(new RemoteRelay(ws, options.keepAliveMs ?? 0, options.maxMessageBytes));
      });
    });
  }

  private end(err: RemoteError): void {
    if (this.ended) return;
    this.ended = err;
    clearInterval(this.keepAlive);
    for (const listener of [...this.endListeners]) listener(err);
  }

  send(message: Message | string): void {
    if (this.ended) return;
    const text = typeof message === 'string' ? message : JSON.stringify(message);
    this.bytesSent += Buffer.byteLength(text);
    this.ws.send(text);
  }

  /** Bytes given to send() and not yet written to the socket. */
  get buffered(): number {
    return this.ws.bufferedAmount;
  }

  /** Stops reading from the socket (backpressure: TCP then slows the remote down); resume() reads on. */
  pause(): void {
    if (!this.ended) this.ws.pause();
  }

  resume(): void {
    if (!this.ended) this.ws.resume();
  }

  listen(listener: (m: Message) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  onEnd(listener: (err: RemoteError) => void): () => void {
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
      const timer = setTimeout(() => finish(new RemoteError(`no ${what} from the remote within ${timeoutMs / 1000} s`)), timeoutMs);
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

  /** Cuts the connection at once (no close handshake). */
  terminate(): void {
    this.end(new RemoteError('closed by us'));
    this.ws.terminate();
  }

  /** Closes the connection, waiting (briefly) for the close handshake so the last frames go out. */
  async close(): Promise<void> {
    this.end(new RemoteError('closed by us'));
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
export async function reconcile(
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
        throw new RemoteRefusal(
          `the remote answered NEG-OPEN with NOTICE ${JSON.stringify(reply[1])}: it does not seem to support NIP-77 negentropy sync`,
          'NOTICE',
          String(reply[1]),
        );
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
        const why = String(reply[2]);
        throw new RemoteRefusal(refusalMessage(`${reply[0]}${rounds ? ` after ${rounds} round${rounds === 1 ? '' : 's'}` : ''}`, why), reply[0], why);
      }
      const hex = reply[2];
      if (typeof hex !== 'string' || hex.length === 0 || !/^(?:[0-9a-fA-F]{2})+$/.test(hex)) throw new RemoteError('the remote sent a NEG-MSG that is not hex');
      rounds++;
      let step: ReturnType<NegentropyInitiator['reconcile']>;
      try {
        step = initiator.reconcile(Buffer.from(hex, 'hex'));
      } catch (err) {
        if (err instanceof NegentropyError) throw new RemoteError(`the remote's negentropy message is not usable: ${err.message}`);
        throw err;
      }
      for (const id of step.have) have.push(id);
      for (const id of step.need) need.push(id);
      progress.update(rounds);
      if (!step.next) break;
      if (signal?.aborted) throw new RemoteError('stopped during reconciliation: nothing was transferred');
      last = step.next.toString('hex');
      remote.send(['NEG-MSG', subId, last]);
    }
  } finally {
    if (open) remote.send(['NEG-CLOSE', subId]);
    progress.stop();
  }
  return { have, need, rounds, resumed };
}

export interface FetchByIdsOptions {
  /** Ids per REQ. */
  perRequest: number;
  requestsInFlight: number;
  /** A REQ that stays quiet this long ends (its ids count as missing). */
  timeoutMs: number;
  signal?: AbortSignal;
  /** Each event asked for, as it arrives (each id once). */
  onEvent(event: object, id: string): void;
  /** Awaited between REQs: resolves when the consumer has room for more. */
  drained?(): Promise<void>;
}

export interface FetchByIdsResult {
  requests: number;
  /** Events sent that we did not ask for, or sent twice (ignored). */
  unrequested: number;
  /** Ids never received. */
  missing: Set<string>;
  /** Why the last REQ for a missing id ended without it (CLOSED's reason, a timeout, the connection's end). */
  lastFailure: Map<string, string>;
}

/** Fetches `ids` with REQ {ids} in chunks, a few REQs in flight, asking again for what a REQ left out. */
export async function fetchByIds(remote: RemoteRelay, ids: string[], options: FetchByIdsOptions): Promise<FetchByIdsResult> {
  const pending = new Set(ids); // not received yet
  const lastFailure = new Map<string, string>(); // id → why its last REQ ended without it
  const result: FetchByIdsResult = { requests: 0, unrequested: 0, missing: pending, lastFailure };
  let n = 0;
  const tag = randomBytes(4).toString('hex');

  /** One REQ: resolves at EOSE, CLOSED, a quiet spell of timeoutMs, or the end of the connection. */
  const request = (chunk: string[]): Promise<{ received: number; closed?: string }> =>
    new Promise((resolve) => {
      const subId = `sync-get-${tag}-${++n}`;
      const wanted = new Set(chunk);
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
      const timer = setTimeout(() => finish(`no EOSE within ${options.timeoutMs / 1000} s`), options.timeoutMs);
      const off = remote.listen((m) => {
        if (m[1] !== subId) return;
        if (m[0] === 'EVENT') {
          timer.refresh();
          const event = m[2] as { id?: unknown } | null;
          const id = typeof event === 'object' && event !== null ? event.id : undefined;
          if (typeof id !== 'string' || !wanted.delete(id) || !pending.delete(id)) {
            result.unrequested++;
            return;
          }
          received++;
          options.onEvent(event as object, id);
        } else if (m[0] === 'EOSE') finish();
        else if (m[0] === 'CLOSED') finish(String(m[2] ?? 'closed'), false);
      });
      const offEnd = remote.onEnd((err) => finish(err.message, false));
      result.requests++;
      remote.send(['REQ', subId, { ids: chunk, limit: chunk.length }]);
    });

  const chunks: string[][] = [];
  for (let i = 0; i < ids.length; i += options.perRequest) chunks.push(ids.slice(i, i + options.perRequest));
  const worker = async () => {
    for (;;) {
      if (remote.ended || options.signal?.aborted) return;
      const chunk = chunks.shift();
      if (!chunk) return;
      let left: string[] = chunk;
      let delay = 1000;
      for (let attempt = 0; left.length > 0; attempt++) {
        const { received, closed } = await request(left);
        const rest = left.filter((id) => pending.has(id));
        if (closed) for (const id of rest) lastFailure.set(id, closed);
        if (rest.length === 0 || remote.ended) break;
        // A relay may cap results below what we asked for (its max_limit): ask again for the rest while
        // that makes progress; wait and retry a rate-limited REQ a few times.
        if (closed?.startsWith('rate-limited:') && attempt < RATE_LIMIT_RETRIES) {
          await new Promise((r) => setTimeout(r, delay));
          delay = Math.min(delay * 2, MAX_BACKOFF_MS);
        } else if (received === 0 || closed) break;
        left = rest;
      }
      await options.drained?.();
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(options.requestsInFlight, chunks.length)) }, worker));
  return result;
}
