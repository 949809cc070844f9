// Real keys and real BIP-340 signatures (nostr-tools) for test events.
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import type { NostrEvent } from '../../src/nostr/event.js';

export interface Signer {
  secretKey: Uint8Array;
  pubkey: string;
  sign(template: Partial<Omit<NostrEvent, 'id' | 'sig' | 'pubkey'>>): NostrEvent;
}

export const now = () => Math.floor(Date.now() / 1000);

export function newSigner(): Signer {
  const secretKey = generateSecretKey();
  return {
    secretKey,
    pubkey: getPublicKey(secretKey),
    sign: (t) => {
      const e = finalizeEvent({ kind: t.kind ?? 1, created_at: t.created_at ?? now(), tags: t.tags ?? [], content: t.content ?? '' }, secretKey);
      return { id: e.id, pubkey: e.pubkey, created_at: e.created_at, kind: e.kind, tags: e.tags, content: e.content, sig: e.sig };
    },
  };
}
