// The structure-aware fuzzer (bench/lib/fuzz.ts) against a relay process: 5,000 messages of every verb,
// near-valid and broken, over 4 connections, while a well-behaved client publishes and reads back
// every second. The checks are the fuzzer's own (FuzzReport.failures), without the well-behaved
// client's 1 s bound, which `npm run fuzz` keeps: a test asserts answers, never speed. FUZZ_SEED=<n> replays another
// run's messages; `npm run fuzz -- --messages 100000` runs a long one.
import { afterAll, expect, it } from 'vitest';
import { collectGarbageAt, formatReport, freePort, inspectorOption, runFuzz } from '../../bench/lib/fuzz.js';
import { startRelayProcess, type RelayProcess } from '../../bench/lib/relay-process.js';
import { createTestDatabase } from '../support/database.js';

const seed = process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : 16;

let relay: RelayProcess | undefined;
let exited = false;
afterAll(async () => {
  if (!exited) await relay?.stop(); // stop() would wait for an exit that has already happened
});

it('survives 5,000 fuzzed messages: alive, no error logged, every message answered as owed, every event delivered valid, the well-behaved client answered right, nothing held and the heap back near baseline', async () => {
  const inspector = await freePort(); // to collect the relay's garbage before measuring its heap
  relay = await startRelayProcess({ DATABASE_URL: await createTestDatabase(), NODE_OPTIONS: inspectorOption(inspector) });
  relay.child.once('exit', () => (exited = true));
  const report = await runFuzz({
    relay: { url: relay.url, alive: () => !exited, logs: relay.logs, collectGarbage: () => collectGarbageAt(inspector) },
    messages: 5000,
    seed,
    settleMs: 10_000,
  });
  expect(report.failures, `FUZZ_SEED=${seed}\n${formatReport(report)}`).toEqual([]);
  expect(report.messages).toBe(5000);
}, 120_000);
