// The empty-target mode of import-nostream splits nostream's rows in two: those phase 1 loads in
// bulk, and those phase 2 writes in event_id order through the relay's rules. The split must never
// change an outcome: phase 1 takes an event only if no other event of the source bears on it except
// a kind 5 that deletes it, which phase 2 then applies to it as the relay does to a stored event.
import type pg from 'pg';
import { isAddressable, isReplaceable, KIND_DELETION, KIND_GIFT_WRAP, KIND_VANISH } from '../../nostr/kinds.js';
import { dTagOf } from '../../nostr/tags.js';
import { addressKey } from '../../store/plan-batch.js';
import type { AdmissionChecks } from '../../admission/admit.js';
import { EventRows, type EncodedRows } from '../bulk-load.js';
import { OrderedSink } from '../import-batch.js';
import { admitRows, emptyNostreamCounts, type NostreamCounts } from './nostream-check.js';
import type { SourceBatch, SourceRow } from './nostream-source.js';

const isVersioned = (kind: number) => isReplaceable(kind) || isAddressable(kind);

/**
 * Kinds whose events may depend on other events of the source in more ways than being deleted by
 * their author's kind 5 (whichever came first): replaceable and addressable versions, deletions,
 * vanish requests (a kind 5 blocks a later one but does not delete a stored one: plan-batch.ts), and
 * gift wraps (deleted by another key's kind 5: kept with the deletions, in order). Ephemeral kinds
 * are refused on sight wherever they are read.
 */
function mayNeedOrder(kind: number): boolean {
  return isVersioned(kind) || kind === KIND_DELETION || kind === KIND_VANISH || kind === KIND_GIFT_WRAP;
}

/** `predicate` over nostream's event_kind as SQL, derived from it (kinds outside 0..65535: false). */
function kindsSql(predicate: (kind: number) => boolean): string {
  const ranges: string[] = [];
  for (let kind = 0; kind <= 65535; kind++) {
    if (!predicate(kind)) continue;
    let last = kind;
    while (last < 65535 && predicate(last + 1)) last++;
    ranges.push(last === kind ? `event_kind = ${kind}` : `event_kind BETWEEN ${kind} AND ${last}`);
    kind = last;
  }
  return ranges.length ? `(${ranges.join(' OR ')})` : 'false';
}

/** The relay's address (kind:pubkey:d, d by dTagOf) of a replaceable or addressable row; undefined if its tags are unreadable. */
function rowAddress(kind: number, pubkey: string | null, tagsJson: string | null): string | undefined {
  if (isReplaceable(kind)) return addressKey(kind, pubkey ?? '', '');
  let tags: unknown;
  try {
    tags = JSON.parse(tagsJson ?? '[]');
  } catch {
    return undefined;
  }
  if (!Array.isArray(tags) || !tags.every(Array.isArray)) return undefined;
  return addressKey(kind, pubkey ?? '', String(dTagOf(tags)));
}

/**
 * The empty-target mode's split: which rows phase 2 writes in order. Kinds 5, 62 and 1059, and the
 * versions of every address the source holds more than one row of. A replaceable or addressable
 * event that is the only row of its address meets no replacement rule (the store is empty), and a
 * kind 5 naming it acts on it as on a regular event, so phase 1 loads it: nostream keeps one
 * version per address, and contact lists alone hold a third of a relay's tag rows. The split is
 * found again by each run from the source, so a resumed phase 2 skips exactly what phase 1 took.
 */
export class OrderedRows {
  /** A superset of the rows phase 2 takes, as SQL (phase 2 reads these, and skips the rest in has()). */
  static readonly sql = kindsSql(mayNeedOrder);

  private constructor(private readonly contested: Set<string>) {}

  /**
   * Finds the addresses with several rows. SQL narrows the rows to those whose (pubkey, kind) has
   * several (one scan); their addresses are then worked out here, with the relay's dTagOf.
   */
  static async find(source: pg.Pool): Promise<OrderedRows> {
    const versioned = kindsSql(isVersioned);
    const { rows } = await source.query<{ pubkey: string; kind: number; tags: string | null }>(
      `SELECT encode(event_pubkey, 'hex') AS pubkey, event_kind::int4 AS kind, event_tags::text AS tags
         FROM events
        WHERE ${versioned} AND (event_pubkey, event_kind) IN (
              SELECT event_pubkey, event_kind FROM events WHERE ${versioned} GROUP BY 1, 2 HAVING count(*) > 1)`,
    );
    const seen = new Set<string>();
    const contested = new Set<string>();
    for (const row of rows) {
      const address = rowAddress(row.kind, row.pubkey, row.tags);
      if (address === undefined) continue;
      if (seen.has(address)) contested.add(address);
      else seen.add(address);
    }
    return new OrderedRows(contested);
  }

  has(row: SourceRow): boolean {
    const kind = row.event_kind;
    if (kind === null || !Number.isSafeInteger(kind) || kind < 0 || kind > 65535 || !mayNeedOrder(kind)) return false;
    if (!isVersioned(kind)) return true;
    const address = rowAddress(kind, row.event_pubkey, row.tags);
    return address !== undefined && this.contested.has(address);
  }
}

/** What phase 1 makes of one batch of source rows. */
export interface BulkBatch {
  /** The COPY data of the events it loads. */
  rows: EncodedRows;
  tally: NostreamCounts;
  /** Refused rows: hex event id and reason, in order. */
  refused: Array<[string, string]>;
  /** The id of the last event loaded so far (this batch's, or `lastLoaded`). */
  lastLoaded: string;
}

/**
 * Phase 1's work for one batch: the rows `ordered` does not have, admitted as phase 2's are, and the
 * COPY data of the events they give (in row order: the sink's places are). `lastLoaded` is the
 * previous batch's: a repeated event_id (nostream's column is UNIQUE; this is for a source that is
 * not) would fail the primary key, and rows come in event_id order, so a repeat follows the row it
 * repeats.
 */
export async function bulkBatch(rows: SourceBatch, ordered: OrderedRows, checks: AdmissionChecks, lastLoaded: string): Promise<BulkBatch> {
  const tally = emptyNostreamCounts();
  const refused: Array<[string, string]> = [];
  const copy = new EventRows(rows.length);
  const sink = new OrderedSink(async (events) =>
    events.map((prepared) => {
      if (prepared.event.id === lastLoaded) return { status: 'duplicate' as const };
      lastLoaded = prepared.event.id;
      copy.add(prepared);
      return { status: 'stored' as const };
    }), Infinity, Infinity);
  const { settled } = await admitRows(rows, (row) => !ordered.has(row), tally, checks, sink, (id, reason) => refused.push([id, reason]));
  await settled;
  return { rows: copy.finish(), tally, refused, lastLoaded };
}
