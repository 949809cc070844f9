// The write step shared by the importers: a batch goes through prepareEvent + writeBatch, exactly
// like live events (replaceable/addressable, NIP-09 deletion, duplicates), and the outcomes are
// counted. Batches are written strictly in input order, so the order-dependent rules (a deletion
// and its target, two versions of one address) give what publishing the events one by one would.
import type pg from 'pg';
import { writeBatch, type PreparedEvent, type WriteResult } from '../store/write.js';

export interface ImportCounts {
  /** Events stored. */
  accepted: number;
  /** Events already stored (or seen earlier in the input). */
  duplicate: number;
  /** Accepted versions of a replaceable/addressable event that took the place of an earlier version. */
  replaced: number;
  /** Not an event, or one the relay refuses on sight: bad JSON or shape, wrong id or signature, policy. */
  invalid: number;
  /** Valid events the relay rules refuse: an older version, deleted by its author, ephemeral. */
  rejected: number;
  /** invalid + rejected, by reason. */
  reasons: Record<string, number>;
}

export const emptyCounts = (): ImportCounts => ({ accepted: 0, duplicate: 0, replaced: 0, invalid: 0, rejected: 0, reasons: {} });

export function countReason(counts: ImportCounts, kind: 'invalid' | 'rejected', reason: string): void {
  counts[kind]++;
  // Reasons with a number in them ("more than 2000 tags") stay as they are: a handful of distinct ones.
  counts.reasons[reason] = (counts.reasons[reason] ?? 0) + 1;
}

export interface ImportItem<Ref> {
  prepared: PreparedEvent;
  /** Where the event came from (a line number, a source id), handed back with its refusal. */
  ref: Ref;
}

const addressOf = (p: PreparedEvent) => (p.dTag === null ? undefined : `${p.event.kind}:${p.event.pubkey}:${p.dTag}`);

/** The addresses in `items` that already have a stored version: to tell a replacement from a first version. */
async function storedAddresses(pool: pg.Pool, items: PreparedEvent[]): Promise<Set<string>> {
  const addressed = items.filter((p) => p.dTag !== null);
  if (addressed.length === 0) return new Set();
  const { rows } = await pool.query<{ address: string }>(
    `SELECT e.kind || ':' || encode(e.pubkey, 'hex') || ':' || e.d_tag AS address
       FROM events e JOIN unnest($1::bytea[], $2::int[], $3::text[]) AS k(pubkey, kind, d_tag)
         ON e.pubkey = k.pubkey AND e.kind = k.kind AND e.d_tag = k.d_tag`,
    [addressed.map((p) => Buffer.from(p.event.pubkey, 'hex')), addressed.map((p) => p.event.kind), addressed.map((p) => p.dTag)],
  );
  return new Set(rows.map((r) => r.address));
}

/** SQLSTATE classes 22 (data exception) and 23 (integrity): caused by some event, not the database. */
const isDataError = (err: unknown) => /^2[23]/.test(String((err as { code?: string }).code ?? ''));

/** writeBatch, and if one event's data makes PostgreSQL refuse the batch, halves until it is isolated. */
async function writeSplitting<Ref>(
  pool: pg.Pool,
  items: ImportItem<Ref>[],
  out: Array<WriteResult>,
): Promise<void> {
  try {
    out.push(...(await writeBatch(pool, items.map((i) => i.prepared))));
  } catch (err) {
    if (!isDataError(err)) throw err;
    if (items.length === 1) {
      out.push({ status: 'rejected', reason: `error: the database refused this event (${(err as Error).message})` });
      return;
    }
    const half = Math.ceil(items.length / 2);
    await writeSplitting(pool, items.slice(0, half), out);
    await writeSplitting(pool, items.slice(half), out);
  }
}

/** Writes one batch (in order) and adds its outcomes to `counts`; refusals are reported with their ref. */
export async function writeImportBatch<Ref>(
  pool: pg.Pool,
  items: ImportItem<Ref>[],
  counts: ImportCounts,
  onRejected?: (ref: Ref, reason: string) => void,
): Promise<void> {
  if (items.length === 0) return;
  const had = await storedAddresses(pool, items.map((i) => i.prepared));
  const results: WriteResult[] = [];
  await writeSplitting(pool, items, results);
  results.forEach((r, i) => {
    const p = items[i].prepared;
    if (r.status === 'stored') {
      counts.accepted++;
      const address = addressOf(p);
      if (address !== undefined) {
        if (had.has(address)) counts.replaced++;
        had.add(address);
      }
    } else if (r.status === 'duplicate') {
      counts.duplicate++;
    } else {
      countReason(counts, 'rejected', r.reason);
      onRejected?.(items[i].ref, r.reason);
    }
  });
}
