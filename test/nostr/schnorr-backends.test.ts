// The two BIP-340 verifiers (src/nostr/schnorr.ts) accept and refuse exactly the same signatures:
// BIP-340's own test vectors, valid events, and each kind of damage (a flipped bit in the signature,
// the id, the pubkey; pubkeys that are no point of the curve). The native one is built from
// native/schnorr.c when a compiler and libsecp256k1 are there (scripts/install-libsecp256k1.sh).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/paths.js';
import { checkIdAndSignature } from '../../src/nostr/event.js';
import { nativeVerifier, signatureBackend, verifyWasm, type Verify } from '../../src/nostr/schnorr.js';
import { skipWithout } from '../support/executables.js';
import { newSigner, now } from '../support/keys.js';

const vectors = (JSON.parse(readFileSync(path.join(packageRoot(), 'test/fixtures/bip340-vectors.json'), 'utf8')) as {
  vectors: Array<{ index: number; pubkey: string; message: string; signature: string; valid: boolean; comment: string }>;
}).vectors;
const hex = (s: string) => Buffer.from(s, 'hex');
const flip = (bytes: Buffer, bit: number) => {
  const copy = Buffer.from(bytes);
  copy[bit >> 3] ^= 1 << (bit & 7);
  return copy;
};

/** Every case: [message, pubkey, signature]. */
function cases(): Array<[Buffer, Buffer, Buffer]> {
  const out: Array<[Buffer, Buffer, Buffer]> = [];
  const signers = Array.from({ length: 8 }, () => newSigner());
  for (let i = 0; i < 80; i++) {
    const e = signers[i % signers.length].sign({ kind: 1, created_at: now(), tags: [], content: `case ${i}` });
    const [m, p, s] = [hex(e.id), hex(e.pubkey), hex(e.sig)];
    out.push([m, p, s], [m, p, flip(s, i * 7 % 512)], [flip(m, i % 256), p, s], [m, flip(p, (i * 13) % 256), s]);
  }
  const p = 'fffffffffffffffffffffffffffffffffffffffffffffffffffffffefffffc2f'; // the field size
  const [m, , s] = out[0];
  for (const pubkey of [p, 'fffffffffffffffffffffffffffffffffffffffffffffffffffffffefffffc30', 'ff'.repeat(32), '00'.repeat(32)]) out.push([m, hex(pubkey), s]);
  // Wrong lengths: false, never a throw.
  out.push([m.subarray(0, 31), out[0][1], s], [m, out[0][1].subarray(1), s], [m, out[0][1], s.subarray(0, 63)]);
  return out;
}

function checkVectors(verify: Verify) {
  for (const v of vectors) expect([v.index, verify(hex(v.message), hex(v.pubkey), hex(v.signature))]).toEqual([v.index, v.valid]);
}

describe('BIP-340 verification', () => {
  it('the WebAssembly build passes BIP-340\'s test vectors', () => checkVectors(verifyWasm));

  describe.skipIf(skipWithout(nativeVerifier() !== undefined, `native BIP-340 verifier not built (${signatureBackend().why}): bash scripts/install-libsecp256k1.sh, then npm run build:native`))(
    'the native build',
    () => {
      it('passes BIP-340\'s test vectors', () => checkVectors(nativeVerifier()!));

      it('accepts and refuses exactly what the WebAssembly build does', () => {
        const all = cases();
        const wasm = all.map(([m, p, s]) => verifyWasm(m, p, s));
        const native = all.map(([m, p, s]) => nativeVerifier()!(m, p, s));
        expect(native).toEqual(wasm);
        // Both ways occur: 80 valid events, the rest refused.
        expect(wasm.filter(Boolean)).toHaveLength(80);
      });

      it('gives the same answers with its parsed pubkeys kept: more authors than it keeps, again in another order, bad points between', () => {
        const signers = Array.from({ length: 600 }, () => newSigner());
        const events = signers.map((signer, i) => signer.sign({ kind: 1, created_at: now(), tags: [], content: `author ${i}` }));
        const bad = hex('ff'.repeat(32));
        const all: Array<[Buffer, Buffer, Buffer]> = [];
        for (const e of [...events, ...events.slice().reverse()]) {
          const [m, p, sig] = [hex(e.id), hex(e.pubkey), hex(e.sig)];
          all.push([m, p, sig], [m, bad, sig], [m, p, flip(sig, 9)], [m, Buffer.concat([p.subarray(0, 2), flip(p.subarray(2), 5)]), sig]);
        }
        const wasm = all.map(([m, p, sig]) => verifyWasm(m, p, sig));
        expect(all.map(([m, p, sig]) => nativeVerifier()!(m, p, sig))).toEqual(wasm);
        expect(wasm.filter(Boolean)).toHaveLength(1200);
      });

      it('is the one the relay uses, unless SIGNATURE_BACKEND=wasm', () => {
        expect(signatureBackend().name).toBe(process.env.SIGNATURE_BACKEND === 'wasm' ? 'wasm' : 'native');
        const e = newSigner().sign({ kind: 1, created_at: now(), tags: [], content: 'through the event check' });
        expect(checkIdAndSignature(e)).toBeUndefined();
        expect(checkIdAndSignature({ ...e, sig: flip(hex(e.sig), 3).toString('hex') })).toBe('invalid: bad signature');
      });
    },
  );
});
