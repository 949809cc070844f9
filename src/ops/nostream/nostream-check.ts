// What a nostream row becomes: its event rebuilt from the columns and taken through the one
// admission path (admission/admit.ts) as an `import` line is. Both modes of import-nostream read
// rows here, and only here.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Admission, type AdmissionChecks, type Answer } from '../../admission/admit.js';
import { importSource } from '../../admission/source.js';
import { expirationOf, type Tag } from '../../nostr/tags.js';
import * as reason from '../../nostr/reason.js';
import { countAnswer, countReason, emptyCounts, type ImportCounts, type OrderedSink } from '../import-batch.js';
import type { SourceBatch, SourceRow } from './nostream-source.js';

export interface NostreamCounts extends ImportCounts {
  /** Rows read from nostream. */
  read: number;
  /** Rows with deleted_at set: not imported. */
  softDeleted: number;
  /** Of those, events our store held and that were removed. */
  removed: number;
  /** Rows already expired: not imported. */
  expired: number;
}

export const emptyNostreamCounts = (): NostreamCounts => ({ read: 0, softDeleted: 0, removed: 0, expired: 0, ...emptyCounts() });

export function addCounts(into: NostreamCounts, add: NostreamCounts): void {
  for (const key of ['read', 'softDeleted', 'removed', 'expired', 'accepted', 'duplicate', 'replaced', 'invalid', 'rejected', 'failed'] as const) into[key] += add[key];
  for (const [reason, n] of Object.entries(add.reasons)) into.reasons[reason] = (into.reasons[reason] ?? 0) + n;
}

/** A row's tags as nostream's column holds them: an array of arrays, or something the shape check will refuse. */
const isTagList = (tags: unknown): tags is Tag[] => Array.isArray(tags) && tags.every(Array.isArray);

export interface AdmittedRows {
  /** The ids of the soft-deleted rows (not imported). */
  softDeleted: Buffer[];
  /** Resolves once every admitted row's answer is counted into the tally (and its refusal reported). */
  settled: Promise<void>;
}

/**
 * Rebuilds each row's event from its columns and admits it, judged by `checks`, into `sink` (whose
 * places it takes in row order, then flushes). Soft-deleted and expired rows are counted and left
 * out, and a row whose tags are not JSON is refused, before admission. `select` says which rows of
 * the batch are this pass's (the others are neither admitted nor counted). Counts go into `tally`,
 * merged into the totals when the batch is written, so a checkpoint never counts a batch it does not
 * cover. Signatures are checked only where `checks` has a verifier (nostream verified them on
 * arrival; ids are always recomputed).
 */
export async function admitRows(
  rows: SourceBatch,
  select: ((row: SourceRow) => boolean) | undefined,
  tally: NostreamCounts,
  checks: AdmissionChecks,
  sink: OrderedSink,
  onRefused: ((id: string, reason: string) => void) | undefined,
): Promise<AdmittedRows> {
  const now = Math.floor(Date.now() / 1000);
  const admission = new Admission({ ...checks, sink });
  const source = importSource(checks.verifier ? 'verify' : 'trust');
  const softDeleted: Buffer[] = [];
  const answers: Array<[string, Promise<Answer>]> = [];
  let i = 0;
  for (const row of rows) {
    // Let the writes and reads in flight move on: they wait for this thread between their steps.
    if (++i % 256 === 0) await nextTurn();
    if (select && !select(row)) continue;
    tally.read++;
    const id = row.event_id;
    if (row.deleted) {
      tally.softDeleted++;
      softDeleted.push(Buffer.from(id, 'hex'));
      continue;
    }
    let tags: unknown;
    try {
      // nostream's event_tags is nullable (its first migration) and may hold NULL for an event with
      // no tags: read as []. A row whose tags were lost is then refused, its id not matching.
      tags = row.tags === null ? [] : JSON.parse(row.tags);
    } catch {
      const why = reason.invalid('tags are not JSON');
      countReason(tally, 'invalid', why);
      onRefused?.(id, why);
      continue;
    }
    const expiration = row.expires_at ?? (isTagList(tags) ? expirationOf(tags) : undefined);
    if (expiration !== undefined && expiration <= now) {
      tally.expired++;
      continue;
    }
    const event = {
      id,
      pubkey: row.event_pubkey,
      created_at: row.event_created_at,
      kind: row.event_kind,
      tags,
      content: row.event_content,
      sig: row.event_signature,
    };
    const answer = admission.admit(event, source);
    answer.catch(() => undefined); // awaited below
    answers.push([id, answer]);
  }
  void sink.flush();
  const settled = (async () => {
    for (const [id, answer] of answers) {
      const refused = countAnswer(tally, await answer);
      if (refused !== undefined) onRefused?.(id, refused);
    }
  })();
  settled.catch(() => undefined); // the caller awaits it
  return { softDeleted, settled };
}
