// WRITE_POLICY_PLUGIN in the operator commands, run as an operator does (the built CLI, a process
// of its own): `import` and `import-nostream` ask the plugin with sourceType Import, `sync` with
// sourceType Sync and the remote's URL; accepted events are stored, rejected ones counted and
// reported with the plugin's reason, shadow-rejected ones counted and not stored.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nostreamEventsTable } from '../../bench/lib/nostream-schema.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatchStored } from '../../src/store/write.js';
import { runCli } from '../support/cli.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { insertNostreamRows, storedIds } from './helpers.js';

const SCRIPTED = path.join(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/plugins/scripted.js');
const CRASHING = path.join(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/plugins/crashing.js');
const dir = mkdtempSync(path.join(tmpdir(), 'pgrelay-import-plugin-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const signer = newSigner();
const t = now() - 1000;
let n = 0;
/** Three events: one the scripted plugin accepts, one it rejects, one it shadow-rejects. */
function trio(label: string): { accepted: NostrEvent; rejected: NostrEvent; shadowed: NostrEvent } {
  return {
    accepted: signer.sign({ created_at: t + n++, content: `${label}: fine` }),
    rejected: signer.sign({ created_at: t + n++, content: 'reject:spam' }),
    shadowed: signer.sign({ created_at: t + n++, content: 'shadow' }),
  };
}

/** A plugin command that logs what it is asked, and the requests it logged. */
function loggingPlugin(name: string): { command: string; requests(): Array<{ sourceType: string; sourceInfo: string; event: NostrEvent }> } {
  const file = path.join(dir, `${name}.jsonl`);
  return {
    command: `${process.execPath} ${SCRIPTED} --log ${file}`,
    requests: () => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []),
  };
}

async function idsStored(databaseUrl: string): Promise<Set<string>> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  try {
    return await storedIds(pool);
  } finally {
    await pool.end();
  }
}

/** `count` events of one author, the one at `odd` (if any) with the content the crashing plugin dies on. */
function many(count: number, label: string, odd?: number): NostrEvent[] {
  const author = newSigner();
  const from = now() - 10_000;
  return Array.from({ length: count }, (_, i) => author.sign({ created_at: from + i, content: i === odd ? 'die' : `${label} ${i}` }));
}

/** The crashing plugin: exits once at its `onceAt`th request, and at every event whose content is "die". */
function crashingPlugin(name: string, onceAt = 0): string {
  return `${process.execPath} ${CRASHING} --once-at ${onceAt} --marker ${path.join(dir, `${name}.crashed`)} --on die`;
}

describe('write-policy plugin in the operator commands', () => {
  it('import: asks the plugin (sourceType Import) about every valid event, and stores only what it accepts', async () => {
    const database = await createTestDatabase();
    const { accepted, rejected, shadowed } = trio('import');
    const badSignature = { ...signer.sign({ created_at: t, content: 'bad signature' }), sig: '0'.repeat(128) };
    const plugin = loggingPlugin('import');
    const input = [accepted, rejected, badSignature, shadowed].map((e) => JSON.stringify(e)).join('\n') + '\n';
    const run = await runCli(['import', '-'], { DATABASE_URL: database, LOG_LEVEL: 'warn', WRITE_POLICY_PLUGIN: plugin.command }, input);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/accepted:\s+1\b/);
    expect(run.stdout).toMatch(/blocked: spam/);
    expect(run.stdout).toMatch(/shadowReject/);
    expect(run.stderr).toMatch(/line 2.*blocked: spam/);
    expect([...(await idsStored(database))]).toEqual([accepted.id]);
    const asked = plugin.requests();
    expect(asked.map((r) => r.event.id)).toEqual([accepted.id, rejected.id, shadowed.id]); // the bad signature never reached it
    expect(asked.every((r) => r.sourceType === 'Import' && r.sourceInfo === '')).toBe(true);
  });

  it('import-nostream: asks the plugin (sourceType Import) and stores only what it accepts', async () => {
    const sourceUrl = await createTestDatabase({ empty: true });
    const source = new pg.Pool({ connectionString: sourceUrl, max: 1 });
    const { accepted, rejected, shadowed } = trio('nostream');
    try {
      await source.query(nostreamEventsTable('events'));
      await insertNostreamRows(source, [accepted, rejected, shadowed].map((event) => ({ event })));
    } finally {
      await source.end();
    }
    const database = await createTestDatabase();
    const plugin = loggingPlugin('nostream');
    const run = await runCli(['import-nostream', '--from', sourceUrl], { DATABASE_URL: database, LOG_LEVEL: 'warn', WRITE_POLICY_PLUGIN: plugin.command });
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/accepted:\s+1\b/);
    expect(run.stdout).toMatch(/blocked: spam/);
    expect([...(await idsStored(database))]).toEqual([accepted.id]);
    const asked = plugin.requests();
    expect(asked.map((r) => r.event.id).sort()).toEqual([accepted.id, rejected.id, shadowed.id].sort());
    expect(asked.every((r) => r.sourceType === 'Import')).toBe(true);
  });

  describe('plugin faults lose nothing', () => {
    it('import: a plugin that exits once, with many events in flight, costs no event (exit code 0)', async () => {
      const database = await createTestDatabase();
      const events = many(2000, 'import once');
      const input = events.map((e) => JSON.stringify(e)).join('\n') + '\n';
      const run = await runCli(['import', '-'], { DATABASE_URL: database, LOG_LEVEL: 'warn', WRITE_POLICY_PLUGIN: crashingPlugin('import-once', 500) }, input);
      expect(existsSync(path.join(dir, 'import-once.crashed'))).toBe(true);
      expect(run.stdout).toMatch(/accepted:\s+2,000\b/);
      expect(run.code).toBe(0);
      expect((await idsStored(database)).size).toBe(2000);
    });

    it('import: an event the plugin always dies on is reported and counted failed, every other one is stored, and the exit code is 1', async () => {
      const database = await createTestDatabase();
      const events = many(2000, 'import odd', 700);
      const input = events.map((e) => JSON.stringify(e)).join('\n') + '\n';
      const run = await runCli(['import', '-'], { DATABASE_URL: database, LOG_LEVEL: 'warn', WRITE_POLICY_PLUGIN: crashingPlugin('import-odd') }, input);
      expect(run.code).toBe(1);
      expect(run.stdout).toMatch(/accepted:\s+1,999\b/);
      expect(run.stdout).toMatch(/failed:\s+1\b/);
      expect(run.stderr).toMatch(/line 701: error:/);
      const stored = await idsStored(database);
      expect(stored.size).toBe(1999);
      expect(stored.has(events[700].id)).toBe(false);
    });

    it('import-nostream: the event the plugin dies on fails the run (exit code 1), the others are stored, and the next run reads it again', async () => {
      const sourceUrl = await createTestDatabase({ empty: true });
      const source = new pg.Pool({ connectionString: sourceUrl, max: 1 });
      const events = many(600, 'nostream odd', 250);
      try {
        await source.query(nostreamEventsTable('events'));
        await insertNostreamRows(source, events.map((event) => ({ event })));
      } finally {
        await source.end();
      }
      const database = await createTestDatabase();
      const env = { DATABASE_URL: database, LOG_LEVEL: 'warn', WRITE_POLICY_PLUGIN: crashingPlugin('nostream-odd') };
      const run = await runCli(['import-nostream', '--from', sourceUrl, '--batch', '100'], env);
      expect(run.code).toBe(1);
      expect(run.stdout).toMatch(/failed:\s+1\b/);
      expect(run.stdout).toMatch(/not complete: 1 events were not imported/);
      const stored = await idsStored(database);
      expect(stored.size).toBe(599);
      expect(stored.has(events[250].id)).toBe(false);
      // Without the plugin, the next run reads the failed event again (the position stayed before it).
      const again = await runCli(['import-nostream', '--from', sourceUrl, '--batch', '100'], { DATABASE_URL: database, LOG_LEVEL: 'warn' });
      expect(again.code).toBe(0);
      expect((await idsStored(database)).size).toBe(600);
    });
  });

  describe('sync', () => {
    let remote: TestRelay;
    beforeAll(async () => {
      remote = await startTestRelay();
    });
    afterAll(() => remote?.close());

    it('asks the plugin (sourceType Sync, the remote\'s URL) about what it downloads', async () => {
      const { accepted, rejected, shadowed } = trio('sync');
      const { results } = await writeBatchStored(remote.db.pool, [accepted, rejected, shadowed].map(prepareEvent));
      expect(results.every((r) => r.status === 'stored')).toBe(true);
      const database = await createTestDatabase();
      const plugin = loggingPlugin('sync');
      const run = await runCli(['sync', remote.url, '--direction', 'down'], { DATABASE_URL: database, LOG_LEVEL: 'warn', WRITE_POLICY_PLUGIN: plugin.command });
      expect(run.stdout + run.stderr).toMatch(/blocked: spam/);
      expect([...(await idsStored(database))]).toEqual([accepted.id]);
      const asked = plugin.requests();
      expect(asked.map((r) => r.event.id).sort()).toEqual([accepted.id, rejected.id, shadowed.id].sort());
      expect(asked.every((r) => r.sourceType === 'Sync' && r.sourceInfo === remote.url)).toBe(true);
    });

    it('an event the plugin always dies on fails the sync (exit code 1); every other one is stored', async () => {
      const events = many(300, 'sync odd', 120);
      const { results } = await writeBatchStored(remote.db.pool, events.map(prepareEvent));
      expect(results.every((r) => r.status === 'stored')).toBe(true);
      const database = await createTestDatabase();
      const filter = JSON.stringify({ authors: [events[0].pubkey] });
      const run = await runCli(['sync', remote.url, '--direction', 'down', '--filter', filter], { DATABASE_URL: database, LOG_LEVEL: 'warn', WRITE_POLICY_PLUGIN: crashingPlugin('sync-odd') });
      expect(run.code).toBe(1);
      expect(run.stdout).toMatch(/failed:\s+1\b/);
      const stored = await idsStored(database);
      expect(stored.size).toBe(299);
      expect(stored.has(events[120].id)).toBe(false);
    });
  });
});
