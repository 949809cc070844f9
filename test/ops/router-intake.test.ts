// The router's intake: what a remote sends down goes through the one admission path with the
// stream's pluginDown as a stage of its own. pluginDown runs after the signature check (strfry asks
// it before, docs/mesh.md says why we differ), so a plugin never judges a forged event; and before
// WRITE_POLICY_PLUGIN, which sees only what pluginDown accepted.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { importWritePlugin } from '../../src/ops/import-plugin.js';
import { Intake } from '../../src/ops/router/intake.js';
import type { WritePlugin } from '../../src/policy/write-plugin.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

const SCRIPTED = path.join(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/plugins/scripted.js');
const dir = mkdtempSync(path.join(tmpdir(), 'pgrelay-intake-'));
const REMOTE = 'ws://remote.example';

/** The events a plugin started with --log <file> was asked about. */
const askedIn = (file: string): string[] =>
  existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => (JSON.parse(l) as { event: NostrEvent }).event.id) : [];

describe('router intake', () => {
  let relay: TestRelay;
  let pluginDown: WritePlugin;
  const downLog = path.join(dir, 'down.jsonl');
  const writeLog = path.join(dir, 'write.jsonl');
  beforeAll(async () => {
    relay = await startTestRelay({ WRITE_POLICY_PLUGIN: `${process.execPath} ${SCRIPTED} --log ${writeLog}` });
    pluginDown = importWritePlugin(`${process.execPath} ${SCRIPTED} --log ${downLog}`, 5000, createLogger('silent'))!;
  });
  afterAll(async () => {
    await pluginDown?.close();
    await relay?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('asks pluginDown only about events whose signature verified, then WRITE_POLICY_PLUGIN about what it accepted', async () => {
    const intake = new Intake(relay.relay.context.admission);
    const gate = Intake.gate({ tags: [], limit: 0 }, pluginDown);
    const signer = newSigner();
    const genuine = signer.sign({ content: 'genuine', created_at: now() - 5 });
    const forged = { ...signer.sign({ content: 'forged', created_at: now() - 4 }), sig: 'ab'.repeat(64) };
    const refusedDown = signer.sign({ content: 'reject:not here', created_at: now() - 3 });

    expect((await intake.take(forged, REMOTE, gate)).outcome).toBe('invalid');
    expect(await intake.take(genuine, REMOTE, gate)).toMatchObject({ outcome: 'stored' });
    expect(askedIn(downLog)).toEqual([genuine.id]);
    expect(await intake.take(refusedDown, REMOTE, gate)).toMatchObject({ outcome: 'rejected', reason: 'blocked: not here' });

    expect(askedIn(downLog)).toEqual([genuine.id, refusedDown.id]);
    expect(askedIn(writeLog)).toEqual([genuine.id]);
  });
});
