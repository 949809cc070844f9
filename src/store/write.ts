// Writing events: a batch in one transaction (one commit, one fsync, for the whole batch). Lock the
// keys the batch touches, read the facts that decide it, plan it with the NIP-01/NIP-09 rules
// (plan-batch.ts), then a handful of multi-row statements whatever its size. `OK true` is sent only
// after this commits, so an acknowledged event is durable.
import type pg from 'pg';
import { KIND_DELETION, KIND_GIFT_WRAP, KIND_VANISH } from '../nostr/kinds.js';
import { addressKey, addressOf, deletionTargets, planBatch, vanishKeys, type BatchPlan, type DeletionRequest, type StoredFacts, type VanishRequest } from './plan-batch.js';
import { lsnValue } from './lsn.js';
import type { PreparedEvent, WriteResult } from './prepared-event.js';
import { tsvectorLiteral } from '../nostr/search.js';

const hex = (s: string) => Buffer.from(s, 'hex');

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
  await client.query(
    `SELECT pg_advisory_xact_lock(k) FROM (
       SELECT DISTINCT hashtextextended(key, 0) AS k FROM unnest($1::text[]) AS key ORDER BY k) keys`,
    [[...keys]],
  );
}

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
          FROM vanished v WHERE v.pubkey = ANY($7::bytea[])) AS vanished`,
    [
      ids.map(hex),
      ids,
      addressed.map((p) => addressOf(p)!),
      addressed.map((p) => hex(p.event.pubkey)),
      addressed.map((p) => p.event.kind),
      addressed.map((p) => p.dTag),
      vanishers.map(hex),
    ],
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

/** Removes the stored versions the plan replaces, before its inserts take their replacement keys. */
export async function deleteReplaced(client: pg.PoolClient, plan: BatchPlan): Promise<void> {
  if (plan.replacedIds.length) await client.query('DELETE FROM events WHERE id = ANY($1::bytea[])', [plan.replacedIds.map(hex)]);
}

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
  if (byId.ids.length) {
    await client.query(
      `DELETE FROM events e USING unnest($1::bytea[], $2::bytea[], $3::text[]) AS d(id, pubkey, hex_pubkey)
        WHERE e.id = d.id AND e.kind NOT IN (${KIND_DELETION}, ${KIND_VANISH})
          AND (e.pubkey = d.pubkey OR (e.kind = ${KIND_GIFT_WRAP} AND EXISTS (
            SELECT 1 FROM event_tags t WHERE t.event_id = e.id AND t.name = 'p' AND t.value = d.hex_pubkey)))`,
      [byId.ids, byId.pubkeys, byId.hexPubkeys],
    );
  }
  if (byAddress.kinds.length) {
    await client.query(
      `DELETE FROM events e USING unnest($1::bytea[], $2::int[], $3::text[], $4::bigint[]) AS a(pubkey, kind, d_tag, until)
        WHERE e.pubkey = a.pubkey AND e.kind = a.kind AND e.d_tag = a.d_tag AND e.created_at <= a.until`,
      [byAddress.pubkeys, byAddress.kinds, byAddress.dTags, byAddress.until],
    );
  }
}

/**
 * NIP-62: records each request's tombstone and deletes, for good, every stored event of its pubkey up
 * to it (kind 5 and earlier kind 62 included) and every gift wrap p-tagging it up to it. Runs before
 * the batch's inserts, so the batch's own newer events stay.
 */
export async function applyVanishes(client: pg.PoolClient, vanishes: VanishRequest[]): Promise<void> {
  if (vanishes.length === 0) return;
  // A large account's deletion outlasts QUERY_TIMEOUT_MS (1M events: see docs/benchmarks.md); were it
  // cancelled, the request could never be stored. Only this transaction goes without the limit.
  await client.query('SET LOCAL statement_timeout = 0');
  const params = [vanishes.map((v) => hex(v.pubkey)), vanishes.map((v) => v.until), vanishes.map((v) => hex(v.id)), vanishes.map((v) => v.pubkey)];
  await client.query(
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
}

/**
 * Inserts the events and their tag rows in one statement; returns the ids actually inserted and the
 * transaction's id (the `txid` the rows carry: feed.ts), when it inserted any.
 */
async function insertRows(client: pg.PoolClient, inserts: PreparedEvent[]): Promise<{ ids: Set<string>; txid?: string }> {
  if (inserts.length === 0) return { ids: new Set() };
  const eventIds: Buffer[] = [], names: string[] = [], values: string[] = [], kinds: number[] = [], times: number[] = [];
  for (const p of inserts) {
    const id = hex(p.event.id);
    for (const [name, value] of p.tags) {
      eventIds.push(id);
      names.push(name);
      values.push(value);
      kinds.push(p.event.kind);
      times.push(p.event.created_at);
    }
  }
  const { rows } = await client.query<{ id: string; txid: string }>(
    `WITH inserted AS (
       INSERT INTO events (id, pubkey, kind, created_at, d_tag, expires_at, raw, search)
       SELECT id, pubkey, kind, created_at, d_tag, expires_at, raw, search::tsvector
         FROM unnest($1::bytea[], $2::bytea[], $3::int[], $4::bigint[], $5::text[], $6::bigint[], $7::text[], $13::text[])
           AS e(id, pubkey, kind, created_at, d_tag, expires_at, raw, search)
       ON CONFLICT (id) DO NOTHING RETURNING id
     ), tags AS (
       INSERT INTO event_tags (event_id, name, value, kind, created_at)
       SELECT * FROM unnest($8::bytea[], $9::text[], $10::text[], $11::int[], $12::bigint[]) AS t(event_id, name, value, kind, created_at)
       WHERE t.event_id IN (SELECT id FROM inserted)
     )
     SELECT encode(id, 'hex') AS id, pg_current_xact_id()::text AS txid FROM inserted`,
    [
      inserts.map((p) => hex(p.event.id)),
      inserts.map((p) => hex(p.event.pubkey)),
      inserts.map((p) => p.event.kind),
      inserts.map((p) => p.event.created_at),
      inserts.map((p) => p.dTag),
      inserts.map((p) => p.expiresAt),
      inserts.map((p) => p.raw),
      eventIds,
      names,
      values,
      kinds,
      times,
      inserts.map((p) => (p.search ? tsvectorLiteral(p.search) : null)),
    ],
  );
  return { ids: new Set(rows.map((r) => r.id)), txid: rows[0]?.txid };
}

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
  prepare(client: pg.PoolClient): Promise<void>;
  enqueue(client: pg.PoolClient, stored: PreparedEvent[]): Promise<number>;
}

export interface OwnTransactions {
  claim(txid: string): void;
  release(txid: string): void;
}

/** Writes a batch atomically and says what it stored. Database errors reject the whole batch. */
export async function writeBatchStored(pool: pg.Pool, batch: PreparedEvent[], { own, relay, onLocked, outbox }: WriteOptions = {}): Promise<WrittenBatch> {
  if (batch.length === 0) return { results: [], stored: [], lsn: 0n };
  const client = await pool.connect();
  let txid: string | undefined;
  try {
    await client.query('BEGIN');
    await takeLocks(client, batch);
    onLocked?.();
    const plan = planBatch(batch, await readFacts(client, batch), { relay });
    await deleteReplaced(client, plan);
    await applyVanishes(client, plan.vanishes);
    const inserted = await insertRows(client, plan.inserts);
    await applyDeletions(client, plan.deletions);
    if (outbox && inserted.ids.size > 0) {
      await outbox.prepare(client);
      await outbox.enqueue(client, plan.inserts.filter((p) => inserted.ids.has(p.event.id)));
    }
    txid = inserted.txid;
    if (txid) own?.claim(txid);
    // The commit and the WAL position after it in one round trip (a simple-protocol query string).
    const [, position] = (await client.query('COMMIT; SELECT pg_current_wal_insert_lsn()::text AS lsn')) as unknown as pg.QueryResult[];
    // Every planned id is locked, so none can appear meanwhile; were one to, it is a duplicate.
    const planned = new Set(plan.inserts.map((p) => p.event.id));
    const results = plan.results.map((r, i): WriteResult => {
      const id = batch[i].event.id;
      return r.status === 'stored' && planned.has(id) && !inserted.ids.has(id) ? { status: 'duplicate' } : r;
    });
    return { results, stored: plan.inserts.filter((p) => inserted.ids.has(p.event.id)), lsn: lsnValue(position.rows[0].lsn) };
  } catch (err) {
    if (txid) own?.release(txid);
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/** Writes a batch atomically; results are in batch order. Database errors reject the whole batch. */
export async function writeBatch(pool: pg.Pool, batch: PreparedEvent[], options: WriteOptions = {}): Promise<WriteResult[]> {
  return (await writeBatchStored(pool, batch, options)).results;
}

/** Writes one event: a batch of one, so single writes follow exactly the same rules. */
export async function writeEvent(pool: pg.Pool, p: PreparedEvent): Promise<WriteResult> {
  return (await writeBatch(pool, [p]))[0];
}
