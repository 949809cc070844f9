// The file piscina's worker threads load (verifier.ts): CommonJS, so that piscina's `require()` of
// it is an ordinary one. Given the ES module itself, that `require()` is Node's require(esm), which
// aborted a whole test process once on Node 20.20 as a worker started ("FATAL ERROR:
// v8::Module::IsGraphAsync must be used on an instantiated module"). The ES module is imported
// here instead, once per thread, by import(), which has no such path.
import type verifyBatchType from './verify-worker.js';

let loaded: Promise<typeof verifyBatchType> | undefined;

async function verifyBatch(events: Parameters<typeof verifyBatchType>[0]): Promise<ReturnType<typeof verifyBatchType>> {
  loaded ??= import('./verify-worker.js').then((m) => m.default);
  return (await loaded)(events);
}

export = verifyBatch;
