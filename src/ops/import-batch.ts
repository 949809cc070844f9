// The write step shared by the importers: batches are written by the bulk path (bulk-load.ts: the
// relay's locks and rules, rows by COPY), strictly in input order, so the order-dependent rules (a
// deletion and its target, two versions of one address) give what publishing the events one by one
// would; and their outcomes are counted.
import type pg from 'pg';
import { addressOf } from '../store/plan-batch.js';
import type { PreparedEvent } from '../store/prepared-event.js';
import { BulkWriter, type BulkOptions } from './bulk-load.js';

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

/**
 * Writes batches in the order they are handed over, two at a time (BulkWriter), and counts their
 * outcomes. Keep at most two write() calls outstanding, and await them in order.
 */
export class ImportWriter {
  private readonly writer: BulkWriter;

  constructor(pool: pg.Pool, bulk: BulkOptions) {
    this.writer = new BulkWriter(pool, bulk);
  }

  /** Resolves once the batch is written, with its outcomes added to `counts`; refusals are reported with their ref. */
  async write<Ref>(items: ImportItem<Ref>[], counts: ImportCounts, onRejected?: (ref: Ref, reason: string) => void): Promise<void> {
    const { results, hadVersion } = await this.writer.write(items.map((i) => i.prepared));
    results.forEach((r, i) => {
      const p = items[i].prepared;
      if (r.status === 'stored') {
        counts.accepted++;
        const address = addressOf(p);
        if (address !== undefined) {
          if (hadVersion.has(address)) counts.replaced++;
          hadVersion.add(address);
        }
      } else if (r.status === 'duplicate') {
        counts.duplicate++;
      } else {
        countReason(counts, 'rejected', r.reason);
        onRejected?.(items[i].ref, r.reason);
      }
    });
  }
}
