#!/usr/bin/env node
// Starts a compiled entry point of dist/ (`node scripts/run.mjs src/main.js [args…]`), building first
// only when a source is newer than the build (scripts/build.mjs). npm start, npm run cli, the
// benchmarks and the `pgrelay` binary all start here, so none of them compiles when nothing changed.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { ensureBuilt, root } from './build.mjs';

const [entry] = process.argv.splice(2, 1);
if (!entry) {
  process.stderr.write('usage: node scripts/run.mjs <entry under dist/, e.g. src/main.js> [args…]\n');
  process.exit(2);
}
const code = ensureBuilt();
if (code !== 0) {
  process.stderr.write('pgrelay: the build failed (see above)\n');
  process.exit(code);
}
const target = path.join(root, 'dist', entry);
// The entry sees itself as the script, with its own arguments after it, as `node dist/<entry>` would.
process.argv[1] = target;
await import(pathToFileURL(target).href);
