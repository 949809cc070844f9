// One real PostgreSQL for the whole run: the embedded server in a fresh temporary folder (exactly
// what the relay uses without DATABASE_URL), or the server at TEST_DATABASE_URL when that is set.
// Each test file then creates its own database on it.
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { createLogger } from '../../src/log.js';
import { parseConfig } from '../../src/config.js';
import { ensureDatabase, openDatabase, withDatabaseName } from '../../src/store/database.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/store/embedded.js';
import { dropDatabase } from './database.js';

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
    /** A database with every migration applied, copied for each test database (support/database.ts). */
    pgTemplate: string;
  }
}

let embedded: EmbeddedPostgres | undefined;
let dataDir: string | undefined;
let templateOf: { url: string; name: string } | undefined;

export async function setup(project: TestProject): Promise<void> {
  // Worker threads (signature verification) and relay child processes run the compiled build:
  // built here when a source is newer than it (scripts/build.mjs), as every command does.
  execFileSync(process.execPath, ['scripts/build.mjs'], { stdio: 'inherit' });
  let url = process.env.TEST_DATABASE_URL;
  if (!url) {
    dataDir = await mkdtemp(path.join(tmpdir(), 'pgrelay-test-'));
    embedded = await startEmbeddedPostgres(dataDir, 0, createLogger('warn'));
    url = embedded.adminUrl;
  }
  project.provide('pgAdminUrl', url);
  // Migrated once here rather than once per test database: each is then a copy of this one.
  const template = `pgrelay_template_${process.pid}`;
  await ensureDatabase(url, template);
  const db = await openDatabase(parseConfig({ DATABASE_URL: withDatabaseName(url, template), LOG_LEVEL: 'warn' }), createLogger('warn'));
  await db.close();
  templateOf = { url, name: template };
  project.provide('pgTemplate', template);
}

export async function teardown(): Promise<void> {
  // On a server of its own (TEST_DATABASE_URL) the template is dropped; the embedded one goes whole.
  if (templateOf && !embedded) await dropDatabase(templateOf.url, templateOf.name);
  await embedded?.stop();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
}
