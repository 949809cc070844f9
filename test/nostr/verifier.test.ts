// The verifier's threads check each event and serialise the valid ones for storage: the same
// verdicts and the same serialisations as on the main thread, whether handed the object or the text.
import { afterAll, describe, expect, it } from 'vitest';
import { canonicalEventJson, type NostrEvent, type Verdict } from '../../src/nostr/event.js';
import { searchDocument, tsvectorBinary } from '../../src/nostr/search.js';
import { SignatureVerifier } from '../../src/nostr/verifier.js';
import { newSigner } from '../support/keys.js';

const threads = new SignatureVerifier(2);
const inline = new SignatureVerifier(0);
afterAll(() => threads.close());

const alice = newSigner();
const flip = (hex: string) => (hex[0] === '0' ? '1' : '0') + hex.slice(1);
const words = (e: NostrEvent) => {
  const doc = searchDocument(e);
  return doc ? tsvectorBinary(doc) : null;
};

const valid = [
  alice.sign({ content: 'hello "world"\nsecond line 🎉 nostr.com', tags: [['t', 'Nostr'], ['p', 'a'.repeat(64)]] }),
  alice.sign({ kind: 7, content: '+', tags: [['e', 'b'.repeat(64)]] }),
  alice.sign({ kind: 0, content: JSON.stringify({ name: 'alice', about: 'likes 日本語' }) }),
];
const good = valid[0];
const invalid: Array<[string, NostrEvent]> = [
  ['a signature by another key', { ...good, sig: newSigner().sign({ content: 'x' }).sig }],
  ['a changed content (wrong id)', { ...good, content: good.content + '!' }],
  ['a changed signature', { ...good, sig: flip(good.sig) }],
  ['a pubkey that is not on the curve', { ...good, pubkey: 'f'.repeat(64) }],
];

describe('the verifier', () => {
  for (const [name, verifier] of [['on its threads', threads], ['inline', inline]] as const) {
    it(`${name}: serialises a valid event as it is stored, with its words`, async () => {
      for (const e of valid) {
        // A thread's Buffer comes back a Uint8Array: compared as bytes.
        const asBytes = (v: Verdict) => ({ ...v, search: v.search && Buffer.from(v.search) });
        expect(asBytes(await verifier.verify(e))).toEqual({ raw: canonicalEventJson(e), search: words(e) });
        expect(asBytes(await verifier.verify(e, JSON.stringify(['EVENT', { ...e, extra: 'dropped' }])))).toEqual({ raw: canonicalEventJson(e), search: words(e) });
      }
    });

    it(`${name}: refuses what is not signed right, from the object or the text`, async () => {
      for (const [what, e] of invalid) {
        const verdict = await verifier.verify(e);
        expect(verdict.invalid, what).toMatch(/^invalid: /);
        expect(verdict.raw, what).toBeUndefined();
        expect(await verifier.verify(e, JSON.stringify(['EVENT', e])), what).toEqual(verdict);
      }
    });
  }
});
