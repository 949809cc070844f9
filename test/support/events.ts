// Small helpers for building expectations about events, independent of the relay's own code.
import { randomBytes } from 'node:crypto';
import { getPow, minePow } from 'nostr-tools/nip13';
import { finalizeEvent } from 'nostr-tools/pure';
import type { NostrEvent } from '../../src/nostr/event.js';
import { now, type Signer } from './keys.js';

/** NIP-01 result order: created_at descending, then id ascending. */
export function newestFirst(events: NostrEvent[]): NostrEvent[] {
  return [...events].sort((a, b) => b.created_at - a.created_at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** The NIP-01 replaceable winner: the highest created_at, ties to the lowest id. */
export function latest(events: NostrEvent[]): NostrEvent {
  return newestFirst(events)[0];
}

export const ids = (events: NostrEvent[]) => events.map((e) => e.id);

/** A fresh value for tags, so a test's tag filters see only that test's events. */
export const unique = (label = 'v') => `${label}-${randomBytes(6).toString('hex')}`;

/** A 64-hex string that is no event's id nor anyone's pubkey. */
export const randomHex64 = () => randomBytes(32).toString('hex');

/** NIP-13: signs an event whose id has at least `difficulty` leading zero bits. */
export function signWithPow(signer: Signer, template: Partial<NostrEvent>, difficulty: number): NostrEvent {
  const mined = minePow(
    { kind: template.kind ?? 1, created_at: template.created_at ?? now(), tags: template.tags ?? [], content: template.content ?? '', pubkey: signer.pubkey },
    difficulty,
  );
  const e = finalizeEvent({ kind: mined.kind, created_at: mined.created_at, tags: mined.tags, content: mined.content }, signer.secretKey);
  if (e.id !== mined.id) throw new Error('mined id changed when signing');
  return { id: e.id, pubkey: e.pubkey, created_at: e.created_at, kind: e.kind, tags: e.tags, content: e.content, sig: e.sig };
}

/** Signs events until one has fewer than `difficulty` leading zero bits. */
export function signWithoutPow(signer: Signer, template: Partial<NostrEvent>, difficulty: number): NostrEvent {
  for (let i = 0; ; i++) {
    const e = signer.sign({ ...template, tags: [...(template.tags ?? []), ['attempt', String(i)]] });
    if (getPow(e.id) < difficulty) return e;
  }
}

export { getPow };

/** Resolves once the wall clock has reached `unixSeconds` (for NIP-40 tests, where time is the subject). */
export async function sleepUntil(unixSeconds: number): Promise<void> {
  const ms = unixSeconds * 1000 - Date.now() + 50;
  if (ms > 0) await new Promise((r) => setTimeout(r, ms));
}
