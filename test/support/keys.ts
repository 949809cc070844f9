// Real keys and real BIP-340 signatures for test events: libsecp256k1 (tiny-secp256k1) for the bulk,
// ten times faster than nostr-tools' pure JavaScript, and nostr-tools where a test wants an
// independent implementation's event (signIndependent).
import { createHash } from 'node:crypto';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import * as secp from 'tiny-secp256k1';
import type { NostrEvent } from '../../src/nostr/event.js';

export interface Signer {
  secretKey: Uint8Array;
  pubkey: string;
  /** A valid event: id the sha256 of the NIP-01 serialisation, a BIP-340 signature by libsecp256k1. */
  sign(template: Partial<Omit<NostrEvent, 'id' | 'sig' | 'pubkey'>>): NostrEvent;
  /** The same, built and signed by nostr-tools (finalizeEvent): what an independent client sends. */
  signIndependent(template: Partial<Omit<NostrEvent, 'id' | 'sig' | 'pubkey'>>): NostrEvent;
  /**
   * Signs whatever it is given, with an id that is the sha256 of JSON.stringify of the NIP-01 array:
   * for events that nostr-tools refuses to build (a number or null in a tag, for example).
   */
  signLoose(template: { kind: unknown; created_at: unknown; tags: unknown; content: unknown }): Record<string, unknown>;
}

export const now = () => Math.floor(Date.now() / 1000);

export function newSigner(): Signer {
  const secretKey = generateSecretKey();
  const pubkey = getPublicKey(secretKey);
  const signer: Signer = {
    secretKey,
    pubkey,
    sign: (t) => signer.signLoose({ kind: t.kind ?? 1, created_at: t.created_at ?? now(), tags: t.tags ?? [], content: t.content ?? '' }) as unknown as NostrEvent,
    signIndependent: (t) => {
      const e = finalizeEvent({ kind: t.kind ?? 1, created_at: t.created_at ?? now(), tags: t.tags ?? [], content: t.content ?? '' }, secretKey);
      return { id: e.id, pubkey: e.pubkey, created_at: e.created_at, kind: e.kind, tags: e.tags, content: e.content, sig: e.sig };
    },
    signLoose: (t) => {
      const id = createHash('sha256').update(JSON.stringify([0, pubkey, t.created_at, t.kind, t.tags, t.content])).digest();
      const sig = Buffer.from(secp.signSchnorr(id, secretKey)).toString('hex');
      return { id: id.toString('hex'), pubkey, created_at: t.created_at, kind: t.kind, tags: t.tags, content: t.content, sig };
    },
  };
  return signer;
}
