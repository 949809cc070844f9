// The operator commands as an operator runs them: the built CLI in a child process, configured by
// the environment, with stdin/stdout/stderr and the exit code as the interface.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalEventJson } from '../../src/nostr/event.js';
import { runCli } from '../support/cli.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now } from '../support/keys.js';

const cli = (args: string[], databaseUrl: string, stdin = '') =>
  runCli(args, { DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn', VERIFY_THREADS: '2' }, stdin);

const alice = newSigner();
const t = now() - 100 * 86_400;
const events = [
  alice.sign({ kind: 1, created_at: t, content: 'first', tags: [['t', 'cli']] }),
  alice.sign({ kind: 7, created_at: t + 1, content: '+', tags: [['t', 'cli']] }),
  alice.sign({ kind: 0, created_at: t + 2, content: '{"name":"alice"}' }),
];
let url: string;
let pool: pg.Pool;

beforeAll(async () => {
  url = await createTestDatabase();
  pool = new pg.Pool({ connectionString: url, max: 2 });
});
afterAll(async () => {
  await pool?.end();
});

describe('operator commands (CLI)', () => {
  it('lists every command in help', async () => {
    const { code, stdout } = await cli(['help'], url);
    expect(code).toBe(0);
    for (const name of ['migrate', 'backfill-tags', 'import-nostream', 'import', 'export', 'prune', 'stats']) expect(stdout).toMatch(new RegExp(`^  ${name} `, 'm'));
  });

  it('import reads stdin, reports bad lines by number on stderr, and prints the counts', async () => {
    const input = [JSON.stringify(events[0]), '{oops', JSON.stringify(events[1]), JSON.stringify(events[2]), JSON.stringify(events[0])].join('\n');
    const { code, stdout, stderr } = await cli(['import', '-'], url, input);
    expect(stderr).toContain('line 2: invalid: not valid JSON');
    expect(code).toBe(0);
    expect(stdout).toMatch(/^lines: +5 lines in/m);
    expect(stdout).toMatch(/^accepted: +3$/m);
    expect(stdout).toMatch(/^duplicate: +1$/m);
    expect(stdout).toMatch(/^invalid: +1$/m);
  });

  it('export writes JSONL to stdout, all of it or filtered', async () => {
    const all = await cli(['export'], url);
    expect(all.code).toBe(0);
    expect(all.stdout.trim().split('\n').sort()).toEqual(events.map(canonicalEventJson).sort());
    expect(all.stderr).toMatch(/exported 3 events/);
    const kind0 = await cli(['export', '--filter', '{"kinds":[0]}'], url);
    expect(kind0.stdout).toBe(canonicalEventJson(events[2]) + '\n');
  });

  it('backfill-tags restores missing tag rows and says so', async () => {
    await pool.query('TRUNCATE event_tags');
    const { code, stdout } = await cli(['backfill-tags'], url);
    expect(code).toBe(0);
    expect(stdout).toMatch(/^tag rows: 2 added$/m);
    expect(stdout).toMatch(/^complete$/m);
    expect((await pool.query('SELECT count(*)::int AS n FROM event_tags')).rows[0].n).toBe(2);
  });

  it('stats prints counts as JSON', async () => {
    const { code, stdout } = await cli(['stats', '--json'], url);
    expect(code).toBe(0);
    expect(JSON.parse(stdout)).toMatchObject({ events: 3, tagRows: 2 });
  });

  it('prune reports what it would remove, then removes it', async () => {
    const dry = await cli(['prune', '--older-than', '30d', '--dry-run'], url);
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(/^would remove: 2 events$/m);
    const run = await cli(['prune', '--older-than', '30d', '--kinds', '7'], url);
    expect(run.stdout).toMatch(/^removed: 1 events in/m);
    expect(run.stdout).toMatch(/kind 7 +1$/m);
  });

  it('import-nostream loads a nostream database and prints a summary', async () => {
    const sourceUrl = await createTestDatabase({ empty: true });
    const source = new pg.Pool({ connectionString: sourceUrl, max: 1 });
    try {
      await source.query(`CREATE TABLE events (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), event_id bytea NOT NULL UNIQUE,
        event_pubkey bytea NOT NULL, event_kind integer NOT NULL, event_created_at integer NOT NULL, event_content text NOT NULL,
        event_tags jsonb, event_signature bytea NOT NULL, first_seen timestamp DEFAULT now(), deleted_at timestamp,
        event_deduplication jsonb, remote_address text, expires_at integer)`);
      const note = alice.sign({ kind: 1, created_at: t + 10, content: 'from nostream', tags: [['t', 'moved']] });
      await source.query(
        'INSERT INTO events (event_id, event_pubkey, event_kind, event_created_at, event_content, event_tags, event_signature) VALUES ($1, $2, $3, $4, $5, $6, $7)',
        [Buffer.from(note.id, 'hex'), Buffer.from(note.pubkey, 'hex'), note.kind, note.created_at, note.content, JSON.stringify(note.tags), Buffer.from(note.sig, 'hex')],
      );
      const { code, stdout } = await cli(['import-nostream', '--from', sourceUrl], url);
      expect(code).toBe(0);
      expect(stdout).toMatch(/^rows read: +1$/m);
      expect(stdout).toMatch(/^accepted: +1$/m);
      expect(stdout).toMatch(/^complete$/m);
    } finally {
      await source.end();
    }
  });

  it('exits with 2 and a hint on a bad command line', async () => {
    const results = await Promise.all([
      cli(['prune'], url),
      cli(['import'], url),
      cli(['export', '--filter', '{"kinds":'], url),
      cli(['backfill-tags', '--batch', 'lots'], url),
      cli(['import', '--batch', '20000', '-'], url), // over the lock table's room
    ]);
    for (const r of results) {
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/run with --help/);
    }
  });
});
