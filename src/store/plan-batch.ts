// The write rules for a batch of events, as a pure function: given what the database already holds,
// decide each event's outcome and the rows to insert and delete. The outcome is exactly what writing
// the events one by one, in arrival order, would give (NIP-01 replacement, NIP-09 deletion, duplicates),
// so batching is invisible to clients.
import { HEX64 } from '../nostr/event.js';
import { KIND_DELETION, KIND_GIFT_WRAP, KIND_VANISH, kindClass } from '../nostr/kinds.js';
import * as reason from '../nostr/reason.js';
import { vanishNamesRelay } from '../policy/vanish.js';
import type { PreparedEvent, WriteResult } from './prepared-event.js';

/** What the database holds that bears on a batch (read under the batch's advisory locks). */
export interface StoredFacts {
  /** Ids of the batch already stored. */
  existingIds: Set<string>;
  /** Event id → pubkeys whose stored kind 5 names it in an `e` tag. */
  deletedIds: Map<string, Set<string>>;
  /** Address "kind:pubkey:d" → newest created_at of a stored kind 5 by that pubkey naming it. */
  deletedAddresses: Map<string, number>;
  /** Address → the stored current version. */
  current: Map<string, { id: string; createdAt: number }>;
  /** NIP-62: pubkey (of the batch's events, or p-tagged by its gift wraps) → vanished up to this created_at. */
  vanished: Map<string, number>;
}

/** A NIP-62 request addressed to this relay: delete and refuse the pubkey's events up to `until`. */
export interface VanishRequest {
  pubkey: string;
  until: number;
  id: string;
}

export interface DeletionRequest {
  pubkey: string;
  createdAt: number;
  ids: string[];
  addresses: Array<{ kind: number; d: string }>;
}

export interface BatchPlan {
  results: WriteResult[];
  inserts: PreparedEvent[];
  /** Stored versions replaced by a newer one from the batch. */
  replacedIds: string[];
  /** Kind 5 requests to apply to stored events. */
  deletions: DeletionRequest[];
  /** Kind 62 requests to apply to stored events (before the inserts: write.ts applyVanishes). */
  vanishes: VanishRequest[];
}

/** Planning options: this relay's name, to tell which kind 62 requests are addressed to it. */
export interface PlanOptions {
  relay?: string;
}

export const NEWER_VERSION_STORED = reason.blocked('a newer version of this event is stored');
export const DELETED_BY_AUTHOR = reason.blocked('this event was deleted by its author');
export const VANISHED = reason.blocked('this pubkey asked this relay to delete its events up to this time (NIP-62)');

/** The pubkeys a gift wrap is addressed to: a request to vanish deletes the wraps to its author too. */
function wrapRecipients(p: PreparedEvent): string[] {
  return p.event.kind === KIND_GIFT_WRAP ? p.tags.filter(([n, v]) => n === 'p' && HEX64.test(v)).map(([, v]) => v) : [];
}

/** The pubkeys whose NIP-62 tombstones bear on `p`: its author's, and a gift wrap's recipients'. */
export function vanishKeys(p: PreparedEvent): string[] {
  return [p.event.pubkey, ...wrapRecipients(p)];
}

/** NIP-09 targets of a kind 5: `e` ids, and `a` addresses of its own author (replaceable d = ""). */
export function deletionTargets(p: PreparedEvent): DeletionRequest {
  const ids: string[] = [];
  const addresses: Array<{ kind: number; d: string }> = [];
  for (const [name, value] of p.tags) {
    if (name === 'e' && HEX64.test(value)) ids.push(value);
    if (name === 'a') {
      const m = /^(\d{1,5}):([0-9a-f]{64}):(.*)$/s.exec(value);
      if (!m || m[2] !== p.event.pubkey) continue;
      const kind = Number(m[1]);
      const cls = kindClass(kind);
      if (cls === 'replaceable' || cls === 'addressable') addresses.push({ kind, d: cls === 'replaceable' ? '' : m[3] });
    }
  }
  return { pubkey: p.event.pubkey, createdAt: p.event.created_at, ids, addresses };
}

export function addressKey(kind: number, pubkey: string, d: string): string {
  return `${kind}:${pubkey}:${d}`;
}

/** The address of a replaceable or addressable event, else undefined. */
export function addressOf(p: PreparedEvent): string | undefined {
  return p.dTag === null ? undefined : addressKey(p.event.kind, p.event.pubkey, p.dTag);
}

/** Kinds a deletion request never removes (NIP-09: a deletion of a deletion has no effect; NIP-62). */
const UNDELETABLE = new Set([KIND_DELETION, KIND_VANISH]);

/**
 * May a kind 5 signed by `requester` delete `p` by id? Its author may; so may the recipient of a gift
 * wrap (1059, signed by a throwaway key: NIP-59), named in its `p` tag. One rule for both orders:
 * a wrap stored before the deletion is removed, one arriving after it is refused.
 */
function mayDeleteById(requester: string, p: PreparedEvent): boolean {
  return p.event.pubkey === requester || wrapRecipients(p).includes(requester);
}

/** Does the kind 5 `d` (its targets) delete `p`? */
function deletes(d: DeletionRequest, p: PreparedEvent): boolean {
  if (UNDELETABLE.has(p.event.kind)) return false;
  const address = addressOf(p);
  if (address && p.event.pubkey === d.pubkey && p.event.created_at <= d.createdAt &&
      d.addresses.some((a) => addressKey(a.kind, d.pubkey, a.d) === address)) return true;
  return d.ids.includes(p.event.id) && mayDeleteById(d.pubkey, p);
}

export function planBatch(batch: PreparedEvent[], facts: StoredFacts, options: PlanOptions = {}): BatchPlan {
  const results: WriteResult[] = [];
  const pending = new Map<string, PreparedEvent>(); // id → event to insert, in arrival order
  const replacedIds: string[] = [];
  const deletions: DeletionRequest[] = [];
  const vanishes: VanishRequest[] = [];
  const vanished = new Map(facts.vanished);
  const seen = new Set<string>();
  // Facts as they evolve through the batch.
  const current = new Map(facts.current);
  const deletedIds = new Map([...facts.deletedIds].map(([id, pks]) => [id, new Set(pks)]));
  const deletedAddresses = new Map(facts.deletedAddresses);

  const isDeleted = (p: PreparedEvent) => {
    // A kind 5 never deletes a kind 5 nor a kind 62 (NIP-62: it has no effect), in either order.
    if (UNDELETABLE.has(p.event.kind)) return false;
    const requesters = deletedIds.get(p.event.id);
    if (requesters && [...requesters].some((pk) => mayDeleteById(pk, p))) return true;
    const address = addressOf(p);
    const until = address === undefined ? undefined : deletedAddresses.get(address);
    return until !== undefined && p.event.created_at <= until;
  };

  const isVanished = (p: PreparedEvent) =>
    vanishKeys(p).some((pk) => {
      const until = vanished.get(pk);
      return until !== undefined && p.event.created_at <= until;
    });

  for (const p of batch) {
    const { id, created_at } = p.event;
    if (seen.has(id) || facts.existingIds.has(id)) {
      results.push({ status: 'duplicate' });
      continue;
    }
    if (isDeleted(p)) {
      results.push({ status: 'rejected', reason: DELETED_BY_AUTHOR });
      continue;
    }
    if (isVanished(p)) {
      results.push({ status: 'rejected', reason: VANISHED });
      continue;
    }
    const address = addressOf(p);
    if (address !== undefined) {
      const cur = current.get(address);
      if (cur && (cur.createdAt > created_at || (cur.createdAt === created_at && cur.id < id))) {
        results.push({ status: 'rejected', reason: NEWER_VERSION_STORED });
        continue;
      }
      if (cur) {
        if (pending.has(cur.id)) pending.delete(cur.id); // an earlier version from this batch
        else replacedIds.push(cur.id);
      }
      current.set(address, { id, createdAt: created_at });
    }
    seen.add(id);
    pending.set(id, p);
    results.push({ status: 'stored' });

    if (p.event.kind === KIND_DELETION) {
      const d = deletionTargets(p);
      deletions.push(d);
      for (const target of d.ids) {
        const pks = deletedIds.get(target) ?? new Set<string>();
        pks.add(d.pubkey);
        deletedIds.set(target, pks);
      }
      for (const a of d.addresses) {
        const key = addressKey(a.kind, d.pubkey, a.d);
        deletedAddresses.set(key, Math.max(deletedAddresses.get(key) ?? 0, d.createdAt));
      }
      // A stored current version it names by id is gone too: an older version may follow. It is
      // deleted with the replaced ones, before the inserts, so that version's row can take its key.
      for (const [address, cur] of current) {
        if (d.ids.includes(cur.id) && !pending.has(cur.id) && address.split(':')[1] === d.pubkey) {
          current.delete(address);
          replacedIds.push(cur.id);
        }
      }
      // Earlier events of this batch that the request names were stored, and are deleted now.
      for (const [pendingId, q] of pending) {
        if (!deletes(d, q)) continue;
        pending.delete(pendingId);
        const qAddress = addressOf(q);
        if (qAddress !== undefined && current.get(qAddress)?.id === pendingId) current.delete(qAddress);
      }
    }

    if (vanishNamesRelay(p.event, options.relay)) {
      // NIP-62: every event of the pubkey up to the request, and the gift wraps to it, go: stored ones
      // by applyVanishes (before the inserts), this batch's earlier ones here; later ones are refused.
      const pubkey = p.event.pubkey;
      vanishes.push({ pubkey, until: created_at, id });
      vanished.set(pubkey, Math.max(vanished.get(pubkey) ?? 0, created_at));
      const covered = (q: PreparedEvent) => q !== p && q.event.created_at <= created_at && (q.event.pubkey === pubkey || wrapRecipients(q).includes(pubkey));
      for (const [pendingId, q] of pending) if (covered(q)) pending.delete(pendingId);
      // Versions up to the request are gone (this batch's just now, stored ones by applyVanishes).
      for (const [address, cur] of current) if (address.split(':')[1] === pubkey && cur.createdAt <= created_at) current.delete(address);
    }
  }
  return { results, inserts: [...pending.values()], replacedIds, deletions, vanishes };
}
