// Writing events: a batch in one transaction (one commit, one fsync, for the whole batch). Lock the
// keys the batch touches, read the facts that decide it, plan it with the NIP-01/NIP-09 rules
// (plan-batch.ts), then a handful of multi-row statements whatever its size. `OK true` is sent only
// after this commits, so an acknowledged event is durable.
import type pg from 'pg';
import { KIND_DELETION, KIND_GIFT_WRAP, KIND_VANISH } from '../nostr/kinds.js';
import { addressKey, addressOf, DELETED_BY_AUTHOR, deletionTargets, planBatch, VANISHED, vanishKeys, type BatchPlan, type DeletionRequest, type StoredFacts, type VanishRequest } from './plan-batch.js';
import { BinaryArray, OID } from './binary-array.js';
import { lsnValue } from './lsn.js';
import { storedSearch, type PreparedEvent, type WriteResult } from './prepared-event.js';

const hex = (s: string) => Buffer.from(s, 'hex');

/** A client whose queries are all sent at once, without waiting for answers (database.ts createPool). */
const pipelined = (client: pg.ClientBase) => (client as unknown as { pipeline?: boolean }).pipeline === true;

/**
 * Runs statements in the order given: sent all at once on a pipelined client, so they cost one
 * wait for the database; one after another on any other (pg deprecates queueing on those). Each
 * step sends its statement as it is called (before its first await), which is what keeps the order.
 * A statement still takes its own snapshot (READ COMMITTED) when the server starts it.
 */
export async function inOrder<T extends readonly unknown[]>(client: pg.ClientBase, steps: { [K in keyof T]: () => Promise<T[K]> }): Promise<T> {
  if (pipelined(client)) return (await Promise.all(steps.map((step) => step()))) as unknown as T;
  const results: unknown[] = [];
  for (const step of steps) results.push(await step());
  return results as unknown as T;
}

/**
 * The writer's statements are named: a connection parses each once, and, with the generic plans
 * writeBatchStored asks for (SET LOCAL plan_cache_mode), plans it once, instead of at every batch.
 * Parsing and planning the facts, the insert and the locks took ~0.8 ms of the server's ~2 ms for a
 * batch of one event. Their plans do not depend on how many keys a batch has: readFacts probes an
 * index once per key, and the inserts join by hash.
 */
const named = (name: string, text: string) => (values: unknown[]): pg.QueryConfig => ({ name: `pgrelay_write_${name}`, text, values });

/** A writing transaction's start: generic plans for the named statements (see `named`). */
const BEGIN = 'BEGIN; SET LOCAL plan_cache_mode = force_generic_plan';
/** The commit and the WAL position after it in one statement (a simple-protocol query string). */
const COMMIT = 'COMMIT; SELECT pg_current_wal_insert_lsn()::text AS lsn';

/** Runs `fn` in a transaction on a pooled client: COMMIT when it resolves, ROLLBACK when it throws. */
export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/**
 * Takes every key a writer of this batch must hold: each event's id and address, and each deletion
 * request's targets. A deletion and an event it names, written concurrently (even by two relay
 * processes or an import), then serialise instead of missing each other; so do two versions of one
 * address. Transaction-scoped locks, taken in one statement in hash order, so writers cannot deadlock.
 */
export async function takeLocks(client: pg.PoolClient, batch: PreparedEvent[]): Promise<void> {
  const keys = new Set<string>();
  for (const p of batch) {
    keys.add(p.event.id);
    // NIP-62: a request to vanish and an event it covers (by author, or a gift wrap to it) serialise.
    for (const pk of vanishKeys(p)) keys.add('vanish:' + pk);
    const address = addressOf(p);
    if (address) keys.add(address);
    if (p.event.kind === KIND_DELETION) {
      const d = deletionTargets(p);
      d.ids.forEach((id) => keys.add(id));
      d.addresses.forEach((a) => keys.add(addressKey(a.kind, d.pubkey, a.d)));
    }
  }
  await client.query(LOCKS([[...keys]]));
}

const LOCKS = named(
  'locks',
  `SELECT pg_advisory_xact_lock(k) FROM (
     SELECT DISTINCT hashtextextended(key, 0) AS k FROM unnest($1::text[]) AS key ORDER BY k) keys`,
);

/**
 * Everything that decides the batch, in one round trip: which ids are stored, which stored kind 5s
 * name the batch's ids or addresses, and the current versions of its addresses. It runs after
 * takeLocks, so it sees whatever a writer that held one of our keys committed. Each key is looked up
 * on its own (a LATERAL subquery that OFFSET 0 keeps from being flattened into a join): one index
 * probe per key, whatever the tables' sizes and however stale their statistics (an import fills an
 * empty table, and a plan chosen while it looked empty would scan all of it once it is not).
 */
export async function readFacts(client: pg.PoolClient, batch: PreparedEvent[]): Promise<StoredFacts> {
  const ids = batch.map((p) => p.event.id);
  const addressed = batch.filter((p) => p.dTag !== null);
  const vanishers = [...new Set(batch.flatMap(vanishKeys))];
  const { rows } = await client.query<{
    existing: string[];
    deletions: Array<[string, string, number, string]>;
    current: Array<[string, number, string, string, number]>;
    vanished: Array<[string, number]>;
  }>(
    FACTS([
      ids.map(hex),
      ids,
      addressed.map((p) => addressOf(p)!),
      addressed.map((p) => hex(p.event.pubkey)),
      addressed.map((p) => p.event.kind),
      addressed.map((p) => p.dTag),
      vanishers.map(hex),
    ]),
  );
  const { existing, deletions, current, vanished } = rows[0];
  const facts: StoredFacts = {
    existingIds: new Set(existing),
    deletedIds: new Map(),
    deletedAddresses: new Map(),
    current: new Map(),
    vanished: new Map(vanished.map(([pubkey, until]) => [pubkey, Number(until)])),
  };
  for (const [name, value, createdAt, pubkey] of deletions) {
    if (name === 'e') {
      const pks = facts.deletedIds.get(value) ?? new Set<string>();
      pks.add(pubkey);
      facts.deletedIds.set(value, pks);
    } else if (value.split(':')[1] === pubkey) {
      // NIP-09: only the address's own author can delete it.
      facts.deletedAddresses.set(value, Math.max(facts.deletedAddresses.get(value) ?? 0, Number(createdAt)));
    }
  }
  for (const [pubkey, kind, dTag, id, createdAt] of current) facts.current.set(addressKey(kind, pubkey, dTag), { id, createdAt: Number(createdAt) });
  return facts;
}

const FACTS = named(
  'facts',
  `SELECT
       (SELECT coalesce(json_agg(encode(e.id, 'hex')), '[]')
          FROM unnest($1::bytea[]) AS k(id)
          CROSS JOIN LATERAL (SELECT e.id FROM events e WHERE e.id = k.id OFFSET 0) e) AS existing,
       (SELECT coalesce(json_agg(json_build_array(t.name, t.value, t.created_at, encode(t.pubkey, 'hex'))), '[]')
          FROM (SELECT 'e', v FROM unnest($2::text[]) AS v UNION ALL SELECT 'a', v FROM unnest($3::text[]) AS v) AS k(name, value)
          CROSS JOIN LATERAL (
            SELECT t.name, t.value, t.created_at, d.pubkey FROM event_tags t JOIN events d ON d.id = t.event_id
             WHERE t.name = k.name AND t.value = k.value AND t.kind = ${KIND_DELETION} OFFSET 0) t) AS deletions,
       (SELECT coalesce(json_agg(json_build_array(encode(e.pubkey, 'hex'), e.kind, e.d_tag, encode(e.id, 'hex'), e.created_at)), '[]')
          FROM unnest($4::bytea[], $5::int[], $6::text[]) AS k(pubkey, kind, d_tag)
          CROSS JOIN LATERAL (
            SELECT e.pubkey, e.kind, e.d_tag, e.id, e.created_at FROM events e
             WHERE e.pubkey = k.pubkey AND e.kind = k.kind AND e.d_tag = k.d_tag OFFSET 0) e) AS current,
       (SELECT coalesce(json_agg(json_build_array(encode(v.pubkey, 'hex'), v.until)), '[]')
          FROM vanished v WHERE v.pubkey = ANY($7::bytea[])) AS vanished`
);

/** Removes the stored versions the plan replaces, before its inserts take their replacement keys. */
export async function deleteReplaced(client: pg.PoolClient, plan: BatchPlan): Promise<void> {
  if (plan.replacedIds.length) await client.query(DELETE_REPLACED([plan.replacedIds.map(hex)]));
}

const DELETE_REPLACED = named('delete_replaced', 'DELETE FROM events WHERE id = ANY($1::bytea[])');

/**
 * Applies the planned kind 5s to what is stored (including rows this transaction just wrote), all of
 * them in two statements: by id (the author's own events, or gift wraps addressed to the author) and
 * by address up to each request's created_at. Kind 5 and 62 events are never deleted by id.
 */
export async function applyDeletions(client: pg.PoolClient, deletions: DeletionRequest[]): Promise<void> {
  const byId = { ids: [] as Buffer[], pubkeys: [] as Buffer[], hexPubkeys: [] as string[] };
  const byAddress = { pubkeys: [] as Buffer[], kinds: [] as number[], dTags: [] as string[], until: [] as number[] };
  for (const d of deletions) {
    for (const id of d.ids) {
      byId.ids.push(hex(id));
      byId.pubkeys.push(hex(d.pubkey));
      byId.hexPubkeys.push(d.pubkey);
    }
    for (const a of d.addresses) {
      byAddress.pubkeys.push(hex(d.pubkey));
      byAddress.kinds.push(a.kind);
      byAddress.dTags.push(a.d);
      byAddress.until.push(d.createdAt);
    }
  }
  const statements: Array<() => Promise<unknown>> = [];
  if (byId.ids.length) {
    statements.push(() => client.query(DELETE_BY_ID([byId.ids, byId.pubkeys, byId.hexPubkeys])));
  }
  if (byAddress.kinds.length) {
    statements.push(() => client.query(DELETE_BY_ADDRESS([byAddress.pubkeys, byAddress.kinds, byAddress.dTags, byAddress.until])));
  }
  await inOrder(client, statements);
}

const DELETE_BY_ID = named(
  'delete_by_id',
  `DELETE FROM events e USING unnest($1::bytea[], $2::bytea[], $3::text[]) AS d(id, pubkey, hex_pubkey)
    WHERE e.id = d.id AND e.kind NOT IN (${KIND_DELETION}, ${KIND_VANISH})
      AND (e.pubkey = d.pubkey OR (e.kind = ${KIND_GIFT_WRAP} AND EXISTS (
        SELECT 1 FROM event_tags t WHERE t.event_id = e.id AND t.name = 'p' AND t.value = d.hex_pubkey)))`,
);
const DELETE_BY_ADDRESS = named(
  'delete_by_address',
  `DELETE FROM events e USING unnest($1::bytea[], $2::int[], $3::text[], $4::bigint[]) AS a(pubkey, kind, d_tag, until)
    WHERE e.pubkey = a.pubkey AND e.kind = a.kind AND e.d_tag = a.d_tag AND e.created_at <= a.until`,
);

/**
 * NIP-62: records each request's tombstone and deletes, for good, every stored event of its pubkey up
 * to it (kind 5 and earlier kind 62 included) and every gift wrap p-tagging it up to it. Runs before
 * the batch's inserts, so the batch's own newer events stay.
 */
export async function applyVanishes(client: pg.PoolClient, vanishes: VanishRequest[]): Promise<void> {
  if (vanishes.length === 0) return;
  // A large account's deletion outlasts QUERY_TIMEOUT_MS (1M events: see docs/benchmarks.md); were it
  // cancelled, the request could never be stored. Only this transaction goes without the limit.
  const params = [vanishes.map((v) => hex(v.pubkey)), vanishes.map((v) => v.until), vanishes.map((v) => hex(v.id)), vanishes.map((v) => v.pubkey)];
  const tombstone = () => client.query(
    `WITH tomb AS (
       INSERT INTO vanished (pubkey, until, request_id)
       SELECT DISTINCT ON (pubkey) * FROM unnest($1::bytea[], $2::bigint[], $3::bytea[]) AS v(pubkey, until, request_id) ORDER BY pubkey, until DESC
       ON CONFLICT (pubkey) DO UPDATE SET until = greatest(vanished.until, EXCLUDED.until),
         request_id = CASE WHEN EXCLUDED.until > vanished.until THEN EXCLUDED.request_id ELSE vanished.request_id END,
         vanished_at = now()
     ), own AS (
       DELETE FROM events e USING unnest($1::bytea[], $2::bigint[]) AS v(pubkey, until)
        WHERE e.pubkey = v.pubkey AND e.created_at <= v.until
     )
     DELETE FROM events e USING (
       SELECT t.event_id FROM unnest($4::text[], $2::bigint[]) AS v(pubkey, until)
         JOIN event_tags t ON t.name = 'p' AND t.value = v.pubkey AND t.kind = ${KIND_GIFT_WRAP} AND t.created_at <= v.until) w
      WHERE e.id = w.event_id`,
    params,
  );
  await inOrder(client, [() => client.query('SET LOCAL statement_timeout = 0'), tombstone]);
}

/** Inserts the events and their tag rows in one statement; returns the ids actually inserted. */
async function insertRows(client: pg.PoolClient, inserts: PreparedEvent[]): Promise<Set<string>> {
  if (inserts.length === 0) return new Set();
  const { rows } = await client.query<{ id: string }>(INSERT(rowParameters(inserts)));
  return new Set(rows.map((r) => r.id));
}

/**
 * INSERT's parameters $1–$13 (PLAIN's too): the events' columns, their tag rows and search words.
 * Binary arrays (binary-array.ts): nothing escaped here, nothing parsed back there.
 */
function rowParameters(inserts: PreparedEvent[]): Buffer[] {
  const n = inserts.length;
  const ids = new BinaryArray(OID.bytea, n * 36), pubkeys = new BinaryArray(OID.bytea, n * 36);
  const kinds = new BinaryArray(OID.int4, n * 8), times = new BinaryArray(OID.int8, n * 12);
  const dTags = new BinaryArray(OID.text, n * 8), expiries = new BinaryArray(OID.int8, n * 4);
  let rawChars = 0; // the JSON's size in ASCII (most of it): the array is not outgrown and copied
  for (const p of inserts) rawChars += p.raw.length;
  const raws = new BinaryArray(OID.text, rawChars + n * 4 + 64), words = new BinaryArray(OID.tsvector, n * 1200);
  const tags = { ids: new BinaryArray(OID.bytea, n * 72), names: new BinaryArray(OID.text, n * 12), values: new BinaryArray(OID.text, n * 140) };
  const tagKinds = new BinaryArray(OID.int4, n * 16), tagTimes = new BinaryArray(OID.int8, n * 24);
  for (const p of inserts) {
    const { id, pubkey, kind, created_at } = p.event;
    ids.hex(id);
    pubkeys.hex(pubkey);
    kinds.int4(kind);
    times.int8(created_at);
    dTags.text(p.dTag);
    expiries.int8(p.expiresAt);
    raws.text(p.raw);
    words.bytes(storedSearch(p));
    for (const [name, value] of p.tags) {
      tags.ids.hex(id);
      tags.names.text(name);
      tags.values.text(value);
      tagKinds.int4(kind);
      tagTimes.int8(created_at);
    }
  }
  return [
    ids.done(), pubkeys.done(), kinds.done(), times.done(), dTags.done(), expiries.done(), raws.done(),
    tags.ids.done(), tags.names.done(), tags.values.done(), tagKinds.done(), tagTimes.done(), words.done(),
  ];
}

const INSERT = named(
  'insert',
  `WITH inserted AS (
       INSERT INTO events (id, pubkey, kind, created_at, d_tag, expires_at, raw, search)
       SELECT id, pubkey, kind, created_at, d_tag, expires_at, raw, search
         FROM unnest($1::bytea[], $2::bytea[], $3::int[], $4::bigint[], $5::text[], $6::bigint[], $7::text[], $13::tsvector[])
           AS e(id, pubkey, kind, created_at, d_tag, expires_at, raw, search)
       ON CONFLICT (id) DO NOTHING RETURNING id
     ), tags AS (
       INSERT INTO event_tags (event_id, name, value, kind, created_at)
       SELECT * FROM unnest($8::bytea[], $9::text[], $10::text[], $11::int[], $12::bigint[]) AS t(event_id, name, value, kind, created_at)
       WHERE t.event_id IN (SELECT id FROM inserted)
     )
     SELECT encode(id, 'hex') AS id FROM inserted`,
);

/** A committed batch: each event's outcome, in batch order, and the events it newly stored. */
export interface WrittenBatch {
  results: WriteResult[];
  /** In arrival order; an event the batch stored and then replaced or deleted itself is not here. */
  stored: PreparedEvent[];
  /** The WAL position just after the commit (lsn.ts): a replica that has replayed it has the batch. */
  lsn: bigint;
}

/**
 * The writer's own transactions, for the cross-process feed (feed.ts), which must not announce again
 * what this process announces itself: told the transaction's id before COMMIT, and told again if the
 * commit fails (then the feed delivers whatever the database says was committed after all).
 */
export interface WriteOptions {
  /** Told the transaction's id before COMMIT (feed.ts). */
  own?: OwnTransactions;
  /** This relay's name, for NIP-62 requests (plan-batch.ts PlanOptions). */
  relay?: string;
  /** Called once the transaction holds its advisory locks (writer.ts writeAside). */
  onLocked?: () => void;
  /** Webhooks: deliveries for the stored events, enqueued in the same transaction (outbox.ts). */
  outbox?: Outbox;
}

/** What the writer needs of the webhooks outbox (store/outbox.ts WebhookOutbox). */
export interface Outbox {
  /** Endpoints known as of the last prepare(): none, and nothing is enqueued. */
  readonly size: number;
  /** The generation of the endpoints as of the last prepare(), once it has run. */
  readonly knownGeneration: string | undefined;
  prepare(client: pg.PoolClient): Promise<void>;
  /** prepare()'s lock alone (writePlainBatch compares the generation itself). */
  lock(client: pg.PoolClient): Promise<unknown>;
  enqueue(client: pg.PoolClient, stored: PreparedEvent[]): Promise<number>;
}

export interface OwnTransactions {
  claim(txid: string): void;
  release(txid: string): void;
  /** A transaction whose txid comes with its COMMIT's answer runs on server backend `pid` (writePlainBatch). */
  expect(pid: number): void;
  /**
   * Its answer: committed as `txid`, committed nothing (null), or lost (undefined). True when the
   * writer announces what it stored; false when the feed already has (or will: the answer was lost).
   */
  settle(pid: number, txid: string | null | undefined): boolean;
}

/**
 * Writes a batch atomically and says what it stored. Database errors reject the whole batch.
 *
 * On a pipelined client (the writer's), two waits for the database whatever the batch holds (three
 * with webhooks to enqueue): the statements that decide the batch go out together (inOrder), then
 * the ones that write it with the COMMIT. The facts are still read after the locks are held: each
 * statement takes its snapshot as it starts.
 */
export async function writeBatchStored(pool: pg.Pool, batch: PreparedEvent[], { own, relay, onLocked, outbox }: WriteOptions = {}): Promise<WrittenBatch> {
  if (batch.length === 0) return { results: [], stored: [], lsn: 0n };
  const client = await pool.connect();
  let txid: string | undefined;
  try {
    if (!onLocked && batch.every(isPlain) && (!outbox || (outbox.size === 0 && outbox.knownGeneration !== undefined))) {
      const written = await writePlainBatch(client, batch, { own, outbox });
      if (written) return written;
      // Webhook endpoints appeared since the last batch: nothing was written, the batch goes the long way.
    }
    // The transaction's id first, so the feed is told it before COMMIT is sent.
    const [begun, , facts] = await inOrder(client, [
      () => client.query(`${BEGIN}; SELECT pg_current_xact_id()::text AS txid`) as unknown as Promise<pg.QueryResult[]>,
      () => takeLocks(client, batch),
      () => readFacts(client, batch),
      async () => outbox?.prepare(client),
    ] as const);
    onLocked?.();
    const plan = planBatch(batch, facts, { relay });
    if (plan.inserts.length) own?.claim((txid = begun[2].rows[0].txid as string));
    const write = [
      () => deleteReplaced(client, plan),
      () => applyVanishes(client, plan.vanishes),
      () => insertRows(client, plan.inserts),
      () => applyDeletions(client, plan.deletions),
    ] as const;
    const commit = () => client.query(COMMIT) as unknown as Promise<pg.QueryResult[]>;
    let inserted: Set<string>;
    let committed: pg.QueryResult[];
    if (outbox?.size) {
      // Webhooks' deliveries are enqueued for what was inserted, in the same transaction.
      [, , inserted] = await inOrder(client, write);
      if (inserted.size > 0) await outbox.enqueue(client, plan.inserts.filter((p) => inserted.has(p.event.id)));
      committed = await commit();
    } else {
      [, , inserted, , committed] = await inOrder(client, [...write, commit] as const);
    }
    // Every planned id is locked, so none can appear meanwhile; were one to, it is a duplicate.
    const planned = new Set(plan.inserts.map((p) => p.event.id));
    const results = plan.results.map((r, i): WriteResult => {
      const id = batch[i].event.id;
      return r.status === 'stored' && planned.has(id) && !inserted.has(id) ? { status: 'duplicate' } : r;
    });
    return { results, stored: plan.inserts.filter((p) => inserted.has(p.event.id)), lsn: lsnValue(committed[1].rows[0].lsn) };
  } catch (err) {
    if (txid) own?.release(txid);
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/**
 * Whether the event can take writePlainBatch's way: a regular kind (no address to replace), neither
 * a deletion request nor a request to vanish (they delete), nor a gift wrap (its recipients may delete
 * it, and vanish with it). Most of what a relay is sent: notes, reactions, reposts, zaps, DMs.
 */
const isPlain = (p: PreparedEvent) => p.dTag === null && p.event.kind !== KIND_DELETION && p.event.kind !== KIND_VANISH && p.event.kind !== KIND_GIFT_WRAP;

/**
 * A batch of plain events (isPlain) in one round trip: BEGIN, the locks, the webhooks' shared lock,
 * one statement that decides and writes each event, and COMMIT, all sent at once. What planBatch
 * decides for such events with the facts readFacts reads (a duplicate; deleted by its author's stored
 * kind 5; covered by its author's request to vanish; else stored) is decided in SQL, after the locks,
 * so in the same snapshot the long way would read. The txid comes only with the answer: the feed is
 * told the server backend instead (own.expect), so that its NOTIFY does not call for a read, and the
 * txid after (own.settle): if a read announced the batch first, the writer does not announce it again.
 * Undefined when webhook endpoints appeared since the last batch (the statement wrote nothing): the
 * caller writes the batch the long way, which reads them.
 */
async function writePlainBatch(client: pg.PoolClient, batch: PreparedEvent[], { own, outbox }: Pick<WriteOptions, 'own' | 'outbox'>): Promise<WrittenBatch | undefined> {
  // Each id's first place in the batch: later ones are duplicates, as planBatch answers them.
  const firstAt = new Map<string, number>();
  batch.forEach((p, i) => firstAt.has(p.event.id) || firstAt.set(p.event.id, i));
  const events = [...firstAt.values()].map((i) => batch[i]);
  const pid = (client as unknown as { processID: number }).processID;
  own?.expect(pid);
  let settled = false;
  try {
    const [, , , decided, committed] = await inOrder(client, [
      () => client.query(BEGIN) as unknown as Promise<unknown>,
      () => takeLocks(client, events),
      async () => outbox?.lock(client),
      () => client.query<{ generation: string | null; inserted: string[]; refused: Array<[string, boolean]>; txid: string | null }>(
        PLAIN([...rowParameters(events), events.map((p) => p.event.id), outbox?.knownGeneration ?? null]),
      ),
      () => client.query(COMMIT) as unknown as Promise<pg.QueryResult[]>,
    ] as const);
    const { generation, inserted: insertedIds, refused, txid } = decided.rows[0];
    settled = true;
    const announce = own ? own.settle(pid, txid) : true;
    if (outbox && generation !== outbox.knownGeneration) return undefined;
    const inserted = new Set(insertedIds);
    const deleted = new Map(refused);
    const results = batch.map((p, i): WriteResult => {
      const id = p.event.id;
      if (firstAt.get(id) !== i) return { status: 'duplicate' };
      if (inserted.has(id)) return { status: 'stored' };
      if (deleted.has(id)) return { status: 'rejected', reason: deleted.get(id) ? DELETED_BY_AUTHOR : VANISHED };
      return { status: 'duplicate' };
    });
    return { results, stored: announce ? events.filter((p) => inserted.has(p.event.id)) : [], lsn: lsnValue(committed[1].rows[0].lsn) };
  } catch (err) {
    // Committed or not, as far as this writer knows: the feed reads whatever was.
    if (!settled) own?.settle(pid, undefined);
    throw err;
  }
}

const PLAIN = named(
  'plain',
  `WITH e AS (
     SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::int[], $4::bigint[], $5::text[], $6::bigint[], $7::text[], $13::tsvector[], $14::text[])
       AS e(id, pubkey, kind, created_at, d_tag, expires_at, raw, search, hex_id)
   ), refused AS (
     SELECT e.id, f.deleted FROM e
     CROSS JOIN LATERAL (SELECT
       EXISTS (SELECT 1 FROM event_tags t JOIN events d ON d.id = t.event_id
                WHERE t.name = 'e' AND t.value = e.hex_id AND t.kind = ${KIND_DELETION} AND d.pubkey = e.pubkey) AS deleted,
       EXISTS (SELECT 1 FROM vanished v WHERE v.pubkey = e.pubkey AND v.until >= e.created_at) AS vanished) f
     WHERE (f.deleted OR f.vanished) AND NOT EXISTS (SELECT 1 FROM events x WHERE x.id = e.id)
   ), inserted AS (
     INSERT INTO events (id, pubkey, kind, created_at, d_tag, expires_at, raw, search)
     SELECT id, pubkey, kind, created_at, d_tag, expires_at, raw, search FROM e
      WHERE ($15::bigint IS NULL OR (SELECT generation FROM webhook_generation) = $15::bigint)
        AND NOT EXISTS (SELECT 1 FROM refused r WHERE r.id = e.id)
     ON CONFLICT (id) DO NOTHING RETURNING id
   ), tags AS (
     INSERT INTO event_tags (event_id, name, value, kind, created_at)
     SELECT * FROM unnest($8::bytea[], $9::text[], $10::text[], $11::int[], $12::bigint[]) AS t(event_id, name, value, kind, created_at)
     WHERE t.event_id IN (SELECT id FROM inserted)
   )
   SELECT (SELECT generation::text FROM webhook_generation) AS generation,
          (SELECT coalesce(json_agg(encode(id, 'hex')), '[]') FROM inserted) AS inserted,
          (SELECT coalesce(json_agg(json_build_array(encode(id, 'hex'), deleted)), '[]') FROM refused) AS refused,
          CASE WHEN EXISTS (SELECT 1 FROM inserted) THEN pg_current_xact_id()::text END AS txid`,
);

/** Writes a batch atomically; results are in batch order. Database errors reject the whole batch. */
export async function writeBatch(pool: pg.Pool, batch: PreparedEvent[], options: WriteOptions = {}): Promise<WriteResult[]> {
  return (await writeBatchStored(pool, batch, options)).results;
}

/** Writes one event: a batch of one, so single writes follow exactly the same rules. */
export async function writeEvent(pool: pg.Pool, p: PreparedEvent): Promise<WriteResult> {
  return (await writeBatch(pool, [p]))[0];
}
