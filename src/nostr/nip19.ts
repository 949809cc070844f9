// Operator input of keys and ids: 64-character hex, or NIP-19 bech32 (npub, nprofile, nsec for a
// pubkey; note, nevent for an event id), decoded with nostr-tools. Hex in any other case, or
// anything else, is refused (undefined): never guessed, never lowercased silently.
import { decode } from 'nostr-tools/nip19';
import { getPublicKey } from 'nostr-tools/pure';
import { HEX64 } from './event.js';

function decoded(text: string): ReturnType<typeof decode> | undefined {
  try {
    return decode(text.trim());
  } catch {
    return undefined;
  }
}

/** A pubkey from hex, npub, nprofile or nsec (the public key of that secret key). */
export function pubkeyFromText(text: string): string | undefined {
  if (HEX64.test(text)) return text;
  const d = decoded(text);
  if (d?.type === 'npub') return d.data;
  if (d?.type === 'nprofile') return d.data.pubkey;
  if (d?.type === 'nsec') return getPublicKey(d.data);
  return undefined;
}

/** An event id from hex, note or nevent. */
export function eventIdFromText(text: string): string | undefined {
  if (HEX64.test(text)) return text;
  const d = decoded(text);
  if (d?.type === 'note') return d.data;
  if (d?.type === 'nevent') return d.data.id;
  return undefined;
}
