// The importers' write path: a chunk of thousands of events in one short transaction, with the
// relay's own rules and the relay's own locking, but with the rows streamed by COPY instead of
// bound as arrays, and every statement set-based (one per step, whatever the chunk's size).
//
// The steps are those of writeBatch (src/store/write.ts), in the same order, so the outcome is the
// same as writing the chunk through it:
//   1. Lock every key the chunk touches (ids, replaceable/addressable addresses, deletion targets,
//      NIP-62 keys) with the relay's advisory locks, in one statement in hash order. The relay's
//      writers lock the same keys the same way, so an import running beside a live relay serialises
//      with it key by key (two versions of one address, a deletion and its target, a request to
//      vanish and its author's events) and cannot deadlock with it. A NIP-62 key is taken shared
//      when the chunk holds no request to vanish from that pubkey (takeChunkLocks says why).
//      A table lock (SHARE ROW EXCLUSIVE) would not be enough: a relay writer that has read its
//      facts before the import committed could still store an event the import's kind 5 deletes.
//      The locks live in the shared lock table, so a chunk stays at a few thousand events
//      (MAX_CHUNK_EVENTS).
//   2. Read the facts that decide the chunk in one statement: which ids are stored, which stored
//      kind 5s name its ids or addresses, the current versions of its addresses.
//   3. Plan with planBatch (src/store/plan-batch.ts), the one place the NIP-01/NIP-09 rules live:
//      duplicates, the newest version of each address (created_at, then the lowest id) across the
//      chunk and the store, kind 5s applied in arrival order to the chunk and to stored events.
//      The rules are not written again in SQL: their outcome depends on arrival order (a kind 5
//      naming one version by id, then older versions arriving), which a set-based copy would have
//      to reproduce case by case and keep in step with planBatch; planning costs ~0.3 µs an event.
//   4. Delete the stored versions the chunk replaces; COPY the planned events into `events` and
//      their tag rows into `event_tags` (EventRows, copyRows: binary COPY, which the empty-target
//      load of empty-target-load.ts uses too); apply the kind 5s to stored events.
// Every step but the locks and the inserts is writeBatch's own function (readFacts, deleteReplaced,
// applyDeletions).
// Everything happens under the locks, so the plan is exact: no ON CONFLICT is needed, and a COPY
// that hits a unique key anyway (a writer that does not lock) fails the chunk, which is then written
// through writeBatch instead, halved until the event PostgreSQL refuses is isolated.
//
// Two chunks are in flight at once (BulkWriter), so PostgreSQL works on two cores: where they share
// no key (shared NIP-62 keys do not count), the second reads and copies while the first does. The
// order stays the input's: a chunk takes its locks only once the one before holds all of its own, so
// where their keys meet it waits for that one's commit and sees its rows, exactly as if it had
// started after it; and it commits only once the one before has committed (if that one fails, it
// rolls back and starts over after it).
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { KIND_DELETION, KIND_VANISH } from '../nostr/kinds.js';
import { addressKey, addressOf, deletionTargets, planBatch, vanishKeys } from '../store/plan-batch.js';
import { BinaryCopyWriter } from './binary-copy.js';
import * as reason from '../nostr/reason.js';
import { hasSqlState, inSqlStateClass, SQLSTATE } from '../store/pg-errors.js';
import { storedSearch, type PreparedEvent, type WriteResult } from '../store/prepared-event.js';
import { applyDeletions, applyVanishes, deleteReplaced, readFacts, writeBatch } from '../store/write.js';

/**
 * The largest chunk the importers accept: two chunks in flight hold two chunks' worth of advisory
 * locks (about one per event), and the shared lock table (max_locks_per_transaction × connections,
 * ~15,000 entries with the defaults and the embedded server's 200 connections, and some room to
 * spare) must keep room for the relay's own transactions.
 */
export const MAX_CHUNK_EVENTS = 10_000;

export interface ChunkOutcome {
  /** One per event, in chunk order, as writeBatch answers. */
  results: WriteResult[];
  /** The chunk's addresses that had a stored version when it was written (to count replacements). */
  hadVersion: Set<string>;
}

export interface BulkOptions {
  /** This relay's name, for NIP-62 requests in the input (policy.relay). */
  relay?: string;
}

/** The COPY data of some events (binary-copy.ts): for `events`, and for `event_tags` (their tag rows). */
export interface EncodedRows {
  events: Uint8Array;
  tags: Uint8Array;
  /** How many rows each holds. */
  eventRows: number;
  tagRows: number;
}

/**
 * Encodes prepared events and their tag rows (the rows prepareEvent gives, as for published events)
 * as they are added, so the caller need not keep them.
 */
export class EventRows {
  private readonly events: BinaryCopyWriter;
  private readonly tags: BinaryCopyWriter;
  private eventRows = 0;
  private tagRows = 0;

  constructor(expected = 1000) {
    this.events = new BinaryCopyWriter(expected * 1024);
    this.tags = new BinaryCopyWriter(expected * 256);
  }

  add(p: PreparedEvent): void {
    const e = p.event;
    const id = Buffer.from(e.id, 'hex');
    const row = this.events.row(8).bytes(id).hex(e.pubkey).int4(e.kind).int8(e.created_at).text(p.dTag).int8(p.expiresAt).text(p.raw);
    row.bytes(storedSearch(p));
    for (const [name, value] of p.tags) this.tags.row(5).bytes(id).text(name).text(value).int4(e.kind).int8(e.created_at);
    this.eventRows++;
    this.tagRows += p.tags.length;
  }

  finish(): EncodedRows {
    return { events: this.events.finish(), tags: this.tags.finish(), eventRows: this.eventRows, tagRows: this.tagRows };
  }
}

async function copyIn(client: pg.PoolClient, sql: string, data: Uint8Array): Promise<void> {
  await pipeline(Readable.from([data]), client.query(copyFrom(sql)));
}

/** COPYs encoded rows into `events` and `event_tags`, on a client inside a transaction. */
export async function copyRows(client: pg.PoolClient, rows: EncodedRows): Promise<void> {
  if (rows.eventRows === 0) return;
  await copyIn(client, 'COPY events (id, pubkey, kind, created_at, d_tag, expires_at, raw, search) FROM STDIN (FORMAT binary)', rows.events);
  if (rows.tagRows === 0) return;
  await copyIn(client, 'COPY event_tags (event_id, name, value, kind, created_at) FROM STDIN (FORMAT binary)', rows.tags);
}

/**
 * The relay's locks for a chunk (takeLocks in store/write.ts: the same keys, hashed the same way, in
 * hash order in one statement), except that a NIP-62 key is taken shared where the chunk holds no
 * request to vanish from that pubkey. Such a key only orders an event after or before a request to
 * vanish that covers it, and the request's writer takes it exclusive; two chunks of ordinary events
 * by one author have nothing to order, so they need not wait for each other. Taken exclusive, the
 * author keys of consecutive chunks nearly always met, so every chunk waited for the previous one's
 * commit before it could read or copy anything, and the two chunks in flight were written one
 * after the other.
 */
async function takeChunkLocks(client: pg.PoolClient, chunk: PreparedEvent[]): Promise<void> {
  const exclusive = new Set<string>();
  const shared = new Set<string>();
  for (const p of chunk) {
    exclusive.add(p.event.id);
    const vanish = p.event.kind === KIND_VANISH ? exclusive : shared;
    for (const pk of vanishKeys(p)) vanish.add('vanish:' + pk);
    const address = addressOf(p);
    if (address) exclusive.add(address);
    if (p.event.kind === KIND_DELETION) {
      const d = deletionTargets(p);
      d.ids.forEach((id) => exclusive.add(id));
      d.addresses.forEach((a) => exclusive.add(addressKey(a.kind, d.pubkey, a.d)));
    }
  }
  for (const key of exclusive) shared.delete(key);
  // Two keys with one hash are one lock: exclusive if either needs it.
  await client.query(
    `SELECT CASE WHEN x THEN pg_advisory_xact_lock(k) ELSE pg_advisory_xact_lock_shared(k) END FROM (
       SELECT hashtextextended(key, 0) AS k, bool_or(x) AS x FROM unnest($1::text[], $2::bool[]) AS t(key, x) GROUP BY 1 ORDER BY 1) keys`,
    [
      [...exclusive, ...shared],
      [...exclusive].map(() => true).concat([...shared].map(() => false)),
    ],
  );
}

/** What the next chunk needs to know about one attempt at writing a chunk. */
interface Attempt {
  /** Resolves once the attempt holds its locks (or has ended). */
  locked: Promise<void>;
  /** Resolves if the attempt fails: a chunk that overlapped it must roll back and start again. */
  failed: Promise<void>;
}

interface Turn {
  /** The attempt under way. */
  attempt: Attempt;
  /** Resolves once the chunk is written; rejects if it cannot be. */
  done: Promise<void>;
  /** Set when `done` resolves. */
  written: boolean;
}

function deferred(): { promise: Promise<void>; resolve(): void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/** Another chunk failed under this one: roll back and try again once it is written. */
class StartOver extends Error {}

/** SQLSTATE classes 22 (data exception) and 23 (integrity): caused by some event, not the database. */
const isDataError = (err: unknown) => inSqlStateClass(err, '22', '23');
/** Deadlock, serialization failure: worth another attempt. */
const isTransient = (err: unknown) => hasSqlState(err, SQLSTATE.deadlockDetected, SQLSTATE.serializationFailure);

/**
 * Writes chunks in the order they are handed over, two at a time (see the top of this file). Hand
 * over a chunk with write() and await the results in the same order, with at most two outstanding.
 */
export class BulkWriter {
  private last: Turn = { attempt: { locked: Promise.resolve(), failed: new Promise(() => undefined) }, done: Promise.resolve(), written: true };

  constructor(
    private readonly pool: pg.Pool,
    private readonly options: BulkOptions = {},
  ) {}

  write(chunk: PreparedEvent[]): Promise<ChunkOutcome> {
    const previous = this.last;
    const turn: Turn = { attempt: { locked: Promise.resolve(), failed: new Promise(() => undefined) }, done: Promise.resolve(), written: false };
    this.last = turn;
    const outcome = this.run(chunk, previous, turn);
    turn.done = outcome.then(() => {
      turn.written = true;
    });
    turn.done.catch(() => undefined); // the caller sees the failure through `outcome`
    return outcome;
  }

  private async run(chunk: PreparedEvent[], previous: Turn, turn: Turn): Promise<ChunkOutcome> {
    if (chunk.length === 0) return { results: [], hadVersion: new Set() };
    for (let tries = 1; ; tries++) {
      const locked = deferred();
      const failed = deferred();
      turn.attempt = { locked: locked.promise, failed: failed.promise };
      try {
        return await this.attempt(chunk, previous, locked.resolve);
      } catch (err) {
        failed.resolve();
        locked.resolve();
        // Whatever went wrong, the chunk before is written first: the order is the input's.
        await previous.done;
        if (err instanceof StartOver || (isTransient(err) && tries < 5)) continue;
        if (!isDataError(err)) throw err;
        return writeSplitting(this.pool, chunk, this.options.relay);
      } finally {
        locked.resolve();
      }
    }
  }

  /** One transaction: the steps at the top of this file. */
  private async attempt(chunk: PreparedEvent[], previous: Turn, onLocked: () => void): Promise<ChunkOutcome> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      // The chunk before holds its locks (or is written) before this one asks for any.
      const before = previous.attempt;
      await Promise.race([before.locked, previous.done.catch(() => undefined)]);
      await takeChunkLocks(client, chunk);
      onLocked();
      const facts = await readFacts(client, chunk);
      const hadVersion = new Set(facts.current.keys());
      const plan = planBatch(chunk, facts, { relay: this.options.relay });

      await deleteReplaced(client, plan);
      await applyVanishes(client, plan.vanishes);
      const rows = new EventRows(plan.inserts.length);
      for (const p of plan.inserts) rows.add(p);
      await copyRows(client, rows.finish());
      await applyDeletions(client, plan.deletions);

      // Commit only after the chunk before: if it failed, its rows are not there and this plan is void.
      await Promise.race([previous.done.catch(() => undefined), before.failed]);
      if (!previous.written) throw new StartOver();
      await client.query('COMMIT');
      return { results: plan.results, hadVersion };
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
  }
}

/** The addresses in `items` that already have a stored version: to tell a replacement from a first version. */
async function storedAddresses(pool: pg.Pool, items: PreparedEvent[]): Promise<Set<string>> {
  // A d value with NUL cannot be stored, nor even compared in SQL.
  const comparable = items.filter((p) => !p.dTag?.includes('\u0000'));
  const client = await pool.connect();
  try {
    return new Set((await readFacts(client, comparable)).current.keys());
  } finally {
    client.release();
  }
}

/**
 * A chunk PostgreSQL refused because of some event's data: through writeBatch, halving until that
 * event is isolated, so it alone is refused and its neighbours are written.
 */
async function writeSplitting(pool: pg.Pool, chunk: PreparedEvent[], relay: string | undefined): Promise<ChunkOutcome> {
  const hadVersion = await storedAddresses(pool, chunk);
  const results: WriteResult[] = [];
  const write = async (part: PreparedEvent[]): Promise<void> => {
    try {
      results.push(...(await writeBatch(pool, part, { relay })));
    } catch (err) {
      if (!isDataError(err)) throw err;
      if (part.length === 1) {
        results.push({ status: 'rejected', reason: reason.error(`the database refused this event (${(err as Error).message})`) });
        return;
      }
      const half = Math.ceil(part.length / 2);
      await write(part.slice(0, half));
      await write(part.slice(half));
    }
  };
  await write(chunk);
  return { results, hadVersion };
}
