// Compiles native/schnorr.c (BIP-340 verification with the system's libsecp256k1) into
// dist/native/schnorr.node, when a C compiler, Node's headers and libsecp256k1 with its schnorrsig
// module are there. Never fails an install: without them it writes why into
// dist/native/schnorr.unavailable and the relay verifies with the WebAssembly build instead, saying
// so at start and in /metrics. Tried again only when native/schnorr.c changes, or with --force
// (`npm run build:native`). `bash scripts/install-libsecp256k1.sh` installs what it needs on Debian.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SOURCE = path.join(root, 'native', 'schnorr.c');
export const NATIVE_OUTPUT = path.join(root, 'dist', 'native', 'schnorr.node');
const UNAVAILABLE = path.join(root, 'dist', 'native', 'schnorr.unavailable');

const mtime = (file) => statSync(file, { throwIfNoEntry: false })?.mtimeMs;

/** Node's own headers: beside the binary (official tarballs, NodeSource's /usr/include/node). */
function nodeHeaders() {
  const dir = path.join(path.dirname(process.execPath), '..', 'include', 'node');
  return existsSync(path.join(dir, 'node_api.h')) ? dir : undefined;
}

/** Builds when the source is newer than the last attempt; returns what happened, in a line. */
export function buildNative({ force = false } = {}) {
  const source = mtime(SOURCE);
  if (source === undefined) return 'no native source';
  const last = Math.max(mtime(NATIVE_OUTPUT) ?? 0, mtime(UNAVAILABLE) ?? 0);
  if (!force && last >= source) return existsSync(NATIVE_OUTPUT) ? 'native verifier up to date' : 'native verifier unavailable (unchanged)';
  mkdirSync(path.dirname(NATIVE_OUTPUT), { recursive: true });
  rmSync(UNAVAILABLE, { force: true });
  const headers = nodeHeaders();
  const fail = (why) => {
    writeFileSync(UNAVAILABLE, why + '\n');
    rmSync(NATIVE_OUTPUT, { force: true });
    return `native verifier not built (${why}): signatures are checked with the WebAssembly build`;
  };
  if (!headers) return fail(`no Node headers beside ${process.execPath}`);
  const cc = process.env.CC || 'cc';
  const result = spawnSync(cc, ['-O2', '-fPIC', '-shared', '-I', headers, '-o', NATIVE_OUTPUT, SOURCE, '-lsecp256k1'], { encoding: 'utf8', timeout: 120_000 });
  if (result.error) return fail(`${cc}: ${result.error.code ?? result.error.message}`);
  if (result.status !== 0) return fail(`${cc} failed: ${(result.stderr || '').split('\n').find((l) => /error/i.test(l))?.trim() ?? `exit ${result.status}`}`);
  return 'native verifier built (libsecp256k1)';
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.stderr.write(`pgrelay: ${buildNative({ force: process.argv.includes('--force') })}\n`);
}
