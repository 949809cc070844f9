// What a nostream row becomes: its event rebuilt from the columns and checked like an EVENT
// message. Both modes of import-nostream check rows here, and only here.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { computeEventId, ID_MISMATCH, parseEvent } from '../../nostr/event.js';
import { isEphemeral } from '../../nostr/kinds.js';
import { expirationOf } from '../../nostr/tags.js';
import * as reason from '../../nostr/reason.js';
import type { SignatureVerifier } from '../../nostr/verifier.js';
import { checkWrite, type Policy } from '../../policy/policy.js';
import { importSession } from '../../policy/session.js';
import { prepareEvent } from '../../store/prepared-event.js';
import { countReason, emptyCounts, type ImportCounts, type ImportItem } from '../import-batch.js';
import { EPHEMERAL_NOT_STORED } from '../import-jsonl.js';
import { askPlugin, type ImportPlugin, type PluginRefusal } from '../import-plugin.js';
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
  for (const key of ['read', 'softDeleted', 'removed', 'expired', 'accepted', 'duplicate', 'replaced', 'invalid', 'rejected'] as const) into[key] += add[key];
  for (const [reason, n] of Object.entries(add.reasons)) into.reasons[reason] = (into.reasons[reason] ?? 0) + n;
}

export interface CheckOptions {
  /** The relay's write rules, checked with importSession (no connection, nobody authenticated). */
  policy: Policy;
  /** Checks signatures too (nostream verified them on arrival; ids are always recomputed). */
  verifier?: SignatureVerifier;
  /** Told about every refused row (hex event id, reason). */
  onRefused?: (id: string, reason: string) => void;
  /** WRITE_POLICY_PLUGIN: asked about every event that passed the checks (ops/import-plugin.ts). */
  plugin?: ImportPlugin;
}

/**
 * Rebuilds each row's event from its columns and checks it like an EVENT message: shape, expiry, id,
 * the relay's policy, ephemeral kinds, the signature when there is a verifier, and the write-policy
 * plugin when there is one (the batch's events all in flight to it at once). Soft-deleted and
 * expired rows are counted and left out; each accepted event goes to `accept`, in order (at once,
 * without a verifier, so that a caller that encodes it need not keep it). Both modes check rows
 * here, and only here; `select` says which rows of the batch are this pass's (the others are
 * neither checked nor counted). Counts go into `tally`, merged into the totals when the batch is
 * written, so a checkpoint never counts a batch it does not cover. Returns the soft-deleted ids.
 */
export async function checkRows(
  rows: SourceBatch,
  select: ((row: SourceRow) => boolean) | undefined,
  tally: NostreamCounts,
  accept: (item: ImportItem<string>) => void,
  options: CheckOptions,
): Promise<Buffer[]> {
  const now = Math.floor(Date.now() / 1000);
  const refuse = (id: string, kind: 'invalid' | 'rejected', reason: string) => {
    countReason(tally, kind, reason);
    options.onRefused?.(id, reason);
  };
  const softDeleted: Buffer[] = [];
  const verifying: Array<{ item: ImportItem<string>; verdict?: Promise<string | undefined>; plugin?: Promise<PluginRefusal | undefined> }> = [];
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
      // no tags: read as []. A row whose tags were lost is then refused below, its id not matching.
      tags = row.tags === null ? [] : JSON.parse(row.tags);
    } catch {
      refuse(id, 'invalid', reason.invalid('tags are not JSON'));
      continue;
    }
    const parsed = parseEvent({
      id,
      pubkey: row.event_pubkey,
      created_at: row.event_created_at,
      kind: row.event_kind,
      tags,
      content: row.event_content,
      sig: row.event_signature,
    });
    if (!parsed.ok) {
      refuse(id, 'invalid', parsed.reason);
      continue;
    }
    const event = parsed.value;
    const expiration = row.expires_at === null ? expirationOf(event.tags) : row.expires_at;
    if (expiration !== undefined && expiration <= now) {
      tally.expired++;
      continue;
    }
    if (computeEventId(event) !== id) {
      refuse(id, 'invalid', ID_MISMATCH);
      continue;
    }
    const refusal = checkWrite(options.policy, event, importSession, now);
    if (refusal) {
      refuse(id, 'invalid', refusal);
      continue;
    }
    if (isEphemeral(event.kind)) {
      refuse(id, 'rejected', EPHEMERAL_NOT_STORED);
      continue;
    }
    const item = { prepared: prepareEvent(event), ref: id };
    const verdict = options.verifier?.verify(event);
    const plugin = options.plugin && askPlugin(options.plugin, event, verdict);
    plugin?.catch(() => undefined); // awaited below (after the verdict, which may throw first)
    if (verdict || plugin) verifying.push({ item, verdict, plugin });
    else accept(item);
  }
  for (const { item, verdict, plugin } of verifying) {
    const invalid = await verdict;
    const refusal = await plugin;
    if (invalid) refuse(item.ref, 'invalid', invalid);
    else if (refusal) refuse(item.ref, refusal.kind, refusal.reason);
    else accept(item);
  }
  return softDeleted;
}
