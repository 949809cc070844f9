// BIP-340 verification: the system's libsecp256k1 through a small N-API addon when it was built
// (scripts/build-native.mjs; ~5x the WebAssembly build's checks per core on this project's machine),
// else libsecp256k1 compiled to WebAssembly (tiny-secp256k1). Both take the 32-byte message (the
// event id), the x-only pubkey and the 64-byte signature; an invalid point is a failure, never a
// throw. SIGNATURE_BACKEND=wasm keeps the WebAssembly build (to compare them).
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import * as secp from 'tiny-secp256k1';
import { packageRoot } from '../paths.js';

export type Verify = (message: Uint8Array, pubkey: Uint8Array, signature: Uint8Array) => boolean;

export const verifyWasm: Verify = (message, pubkey, signature) => {
  try {
    return secp.verifySchnorr(message, pubkey, signature);
  } catch {
    return false;
  }
};

const NATIVE = path.join(packageRoot(), 'dist', 'native', 'schnorr.node');

function loadNative(): { verify?: Verify; why?: string } {
  if (process.env.SIGNATURE_BACKEND === 'wasm') return { why: 'SIGNATURE_BACKEND=wasm' };
  if (!existsSync(NATIVE)) {
    const unavailable = path.join(path.dirname(NATIVE), 'schnorr.unavailable');
    return { why: existsSync(unavailable) ? readFileSync(unavailable, 'utf8').trim() : 'not built' };
  }
  try {
    const addon = createRequire(import.meta.url)(NATIVE) as { verify: Verify };
    return { verify: addon.verify };
  } catch (err) {
    return { why: `could not load ${NATIVE}: ${(err as Error).message.split('\n')[0]}` };
  }
}

// Chosen at first use, not at import: SIGNATURE_BACKEND may come from the .env file, read after the
// modules are loaded (config.ts loadConfig).
let native: { verify?: Verify; why?: string } | undefined;
const chosen = () => (native ??= loadNative());

/** The native addon's verify, when it was built and loads (and SIGNATURE_BACKEND allows it). */
export function nativeVerifier(): Verify | undefined {
  return chosen().verify;
}

/** What checks signatures in this process, and why not the native addon when it is not. */
export function signatureBackend(): { name: 'native' | 'wasm'; why?: string } {
  const { verify, why } = chosen();
  return verify ? { name: 'native' } : { name: 'wasm', why };
}

export const verifySchnorr: Verify = (message, pubkey, signature) => (chosen().verify ?? verifyWasm)(message, pubkey, signature);
