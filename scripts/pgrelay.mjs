#!/usr/bin/env node
// The `pgrelay` binary: the operator commands (src/cli/main.ts), started through scripts/run.mjs.
process.argv.splice(2, 0, 'src/cli/main.js');
await import('./run.mjs');
