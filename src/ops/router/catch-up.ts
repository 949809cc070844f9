// What a link does on each new connection before it trusts the live stream alone: moves what it may
// have missed since its positions (positions.ts says what they mean and what the margin covers).
// The live subscription is already open and the live `up` feed already on, so whatever happens from
// now on is live, and everything before is here:
//
//   1. negentropy (NIP-77), when the remote speaks it: one reconciliation of the stream's filter from
//      the oldest position minus the margin. down fetches what the remote has and we lack (REQ
//      {ids}); up sends what we have and the remote lacks.
//   2. up, besides: what transactions from the up position on stored here, whatever its created_at
//      (events.txid is our arrival order), when it lies before the reconciled window, or everything
//      when there was no reconciliation. The remote answers duplicate: for what it has.
//   3. without negentropy (a NOTICE, a NEG-ERR, no answer, NIP-11 without 77), down asks REQ with
//      `since` = position minus margin, a page at a time with `until` moving back, until a page brings
//      nothing new.
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { Logger } from '../../log.js';
import { prepareStored, type PreparedEvent } from '../../store/prepared-event.js';
import { readNegentropySet } from '../../store/negentropy.js';
import { noProgress } from '../progress.js';
import {
  ENVELOPE_ROOM,
  fetchByIds,
  frameSizeFor,
  positiveInt,
  reconcile,
  RemoteError,
  type RelayInformation,
  type RemoteRelay,
} from '../relay-client.js';
import { DEFAULT_MAX_LOCAL_RECORDS, localFilter } from '../sync.js';
import type { CatchUpMethod } from './metrics.js';
import type { Position, PositionDirection } from './positions.js';

/** What a catch-up needs from its link. */
export interface CatchUpSession {
  remote: RemoteRelay;
  info: RelayInformation | undefined;
  /** The stream's filter as written (no limit). */
  filter: Record<string, unknown>;
  down: { position: Position; take(event: object): void; drained(): Promise<void> } | undefined;
  up: { position: Position; offer(events: PreparedEvent[]): Promise<void> } | undefined;
  margin: number;
  timeoutMs: number;
  pool: pg.Pool;
  log: Logger;
  /** Told what each direction's catch-up did. */
  report(direction: PositionDirection, method: CatchUpMethod, events: number): void;
}

/** Ids per REQ when fetching what negentropy found missing. */
const IDS_PER_REQUEST = 500;
/** Rows per read of what was committed since the up position. */
const PAGE_ROWS = 1000;

export async function catchUp(s: CatchUpSession): Promise<void> {
  const since = (p: Position | undefined) => (p === undefined ? Infinity : Math.max(0, p.through - s.margin));
  const filterSince = typeof s.filter.since === 'number' ? s.filter.since : 0;
  const windowStart = Math.max(filterSince, Math.min(since(s.down?.position), since(s.up?.position)));

  const reconciled = await reconcileWindow(s, windowStart);
  if (s.down) {
    if (reconciled) s.report('down', 'negentropy', reconciled.need);
    else s.report('down', 'req', await pageBackSince(s, windowStart));
  }
  if (s.up) {
    // What was committed here since the position, outside the reconciled window (or all of it).
    const sent = await sendCommittedSince(s, s.up.position, reconciled ? windowStart : undefined);
    if (reconciled) s.report('up', 'negentropy', reconciled.have);
    s.report('up', 'txid', sent);
  }
}

/** Negentropy over the window; undefined when the remote does not (or will not) reconcile it. */
async function reconcileWindow(s: CatchUpSession, windowStart: number): Promise<{ have: number; need: number } | undefined> {
  const nips = s.info?.supported_nips;
  if (Array.isArray(nips) && !nips.includes(77)) return undefined;
  const filter = { ...s.filter, since: windowStart };
  const snapshot = await readNegentropySet(s.pool, localFilter(filter, DEFAULT_MAX_LOCAL_RECORDS), Math.floor(Date.now() / 1000), DEFAULT_MAX_LOCAL_RECORDS);
  if ('tooMany' in snapshot) {
    s.log.warn({ records: snapshot.tooMany }, 'router: too many events in the catch-up window to reconcile; asking with REQ instead');
    return undefined;
  }
  const maxMessageLength = positiveInt(s.info?.limitation?.max_message_length);
  let result: { have: string[]; need: string[] };
  try {
    result = await reconcile(s.remote, snapshot.set, filter, frameSizeFor(maxMessageLength), s.timeoutMs, noProgress, undefined);
  } catch (err) {
    if (!(err instanceof RemoteError) || s.remote.ended) throw err;
    s.log.info({ why: err.message.split('\n')[0] }, 'router: no negentropy with this remote; catching up with REQ');
    return undefined;
  }
  if (s.down && result.need.length > 0) {
    const maxLimit = positiveInt(s.info?.limitation?.max_limit) ?? IDS_PER_REQUEST;
    const idsPerMessage = maxMessageLength === undefined ? IDS_PER_REQUEST : Math.max(1, Math.floor((maxMessageLength - ENVELOPE_ROOM) / 67));
    const down = s.down;
    const fetched = await fetchByIds(s.remote, result.need, {
      perRequest: Math.min(IDS_PER_REQUEST, maxLimit, idsPerMessage),
      requestsInFlight: 4,
      timeoutMs: s.timeoutMs,
      onEvent: (event) => down.take(event),
      drained: () => down.drained(),
    });
    if (s.remote.ended) throw s.remote.ended;
    if (fetched.missing.size > 0) s.log.warn({ missing: fetched.missing.size }, 'router: the remote listed events it then did not send');
  }
  if (s.up && result.have.length > 0) {
    for (let i = 0; i < result.have.length; i += PAGE_ROWS) {
      const { rows } = await s.pool.query<{ raw: string }>(
        `SELECT raw FROM events WHERE id = ANY(SELECT decode(x, 'hex') FROM unnest($1::text[]) x)`,
        [result.have.slice(i, i + PAGE_ROWS)],
      );
      await s.up.offer(rows.map((r) => prepareStored(r.raw, false)));
    }
  }
  return { have: result.have.length, need: result.need.length };
}

/**
 * Offers what transactions from the position's txid on stored (in our arrival order), those with
 * created_at before `before` when given; returns how many were offered.
 */
async function sendCommittedSince(s: CatchUpSession, position: Position, before: number | undefined): Promise<number> {
  if (position.txid === undefined) return 0;
  // The filter's kinds and authors narrow the read; its other conditions are matched as events are offered.
  const kinds = Array.isArray(s.filter.kinds) ? (s.filter.kinds as number[]) : null;
  const authors = Array.isArray(s.filter.authors) ? (s.filter.authors as string[]) : null;
  let cursor = { txid: position.txid, seq: '-1' };
  let offered = 0;
  for (;;) {
    const { rows } = await s.pool.query<{ txid: string; seq: string; raw: string }>(
      `SELECT txid::text AS txid, seq::text AS seq, raw FROM events
        WHERE txid IS NOT NULL AND (txid, seq) > ($1::xid8, $2::bigint) AND ($3::bigint IS NULL OR created_at < $3)
          AND ($4::int[] IS NULL OR kind = ANY($4)) AND ($5::text[] IS NULL OR pubkey = ANY(SELECT decode(a, 'hex') FROM unnest($5::text[]) a))
        ORDER BY txid, seq LIMIT ${PAGE_ROWS}`,
      [cursor.txid, cursor.seq, before ?? null, kinds, authors],
    );
    if (rows.length === 0) return offered;
    cursor = { txid: rows[rows.length - 1].txid, seq: rows[rows.length - 1].seq };
    offered += rows.length;
    await s.up!.offer(rows.map((r) => prepareStored(r.raw, false)));
    if (rows.length < PAGE_ROWS) return offered;
  }
}

/** REQ {filter, since} a page at a time, newest first, `until` moving back; returns events received. */
async function pageBackSince(s: CatchUpSession, since: number): Promise<number> {
  const down = s.down!;
  const limit = positiveInt(s.info?.limitation?.max_limit) ?? 500;
  const seen = new Set<string>();
  let until = typeof s.filter.until === 'number' ? s.filter.until : undefined;
  let received = 0;
  for (let page = 0; ; page++) {
    const subId = `router-since-${randomBytes(4).toString('hex')}-${page}`;
    let fresh = 0;
    let oldest = Infinity;
    const filter = { ...s.filter, since, ...(until === undefined ? {} : { until }), limit };
    const off = s.remote.listen((m) => {
      if (m[0] !== 'EVENT' || m[1] !== subId) return;
      const event = m[2] as { id?: unknown; created_at?: unknown } | null;
      if (typeof event !== 'object' || event === null || typeof event.id !== 'string' || seen.has(event.id)) return;
      seen.add(event.id);
      fresh++;
      if (typeof event.created_at === 'number') oldest = Math.min(oldest, event.created_at);
      down.take(event);
    });
    try {
      s.remote.send(['REQ', subId, filter]);
      const end = await s.remote.next((m) => ((m[0] === 'EOSE' || m[0] === 'CLOSED') && m[1] === subId ? m : undefined), s.timeoutMs, 'EOSE');
      if (end[0] === 'CLOSED') throw new RemoteError(`the remote refused the catch-up REQ: ${String(end[2])}`);
      s.remote.send(['CLOSE', subId]);
    } finally {
      off();
    }
    received += fresh;
    await down.drained();
    // Several events may share the oldest second: the next page starts at it again; seen ids are skipped.
    if (fresh === 0 || oldest === Infinity || oldest < since) return received;
    until = oldest;
  }
}
