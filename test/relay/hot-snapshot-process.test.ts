// The hot tier's snapshot as an operator meets it (`node dist/src/main.js`, its own process): a stop
// (SIGTERM) writes it to DATA_DIR, the next start reads it back instead of filling and answers as
// PostgreSQL does; a start that fails leaves the file for the next one; a table changed under it
// (another writer while the relay was down) is found.
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/paths.js';
import { TestClient } from '../support/client.js';
import { createTestDatabase } from '../support/database.js';
import { until } from '../support/wait.js';
import { eventsArb, expirationsAround, insertAll } from '../store/nip01-reference.js';

const MAIN = path.join(packageRoot(), 'dist/src/main.js');

interface Relay {
  child: ChildProcess;
  logs: Array<Record<string, unknown>>;
  url?: string;
  exited: Promise<number | null>;
}

const children: ChildProcess[] = [];

function spawnRelay(env: Record<string, string>): Relay {
  const child = spawn(process.execPath, [MAIN], { cwd: tmpdir(), env: { PATH: process.env.PATH, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...env } });
  children.push(child);
  const relay: Relay = { child, logs: [], exited: new Promise((resolve) => child.on('close', resolve)) };
  createInterface({ input: child.stdout! }).on('line', (line) => {
    try {
      const entry = JSON.parse(line) as Record<string, unknown>;
      relay.logs.push(entry);
      if (entry.msg === 'relay listening') relay.url = entry.url as string;
    } catch {
      // not a log line
    }
  });
  child.stderr!.resume();
  return relay;
}

async function logged(relay: Relay, msg: string): Promise<Record<string, unknown>> {
  for (let waited = 0; waited < 60_000; waited += 20) {
    const line = relay.logs.find((l) => l.msg === msg);
    if (line) return line;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`no "${msg}" line; logged: ${relay.logs.map((l) => l.msg).join(' | ')}`);
}

let dir: string;
let databaseUrl: string;
let pool: pg.Pool;
const snapshots = () => readdirSync(dir).filter((name) => name.startsWith('hot-tier.'));

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'pgrelay-snapshot-'));
  databaseUrl = await createTestDatabase();
  pool = new pg.Pool({ connectionString: databaseUrl, max: 4 });
}, 60_000);

afterAll(async () => {
  // A failed assertion leaves its relay running: stopped here, whatever happened.
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await pool?.end();
  await rm(dir, { recursive: true, force: true });
});

/** A REQ for everything answers as PostgreSQL does. */
async function expectExact(relay: Relay): Promise<void> {
  await logged(relay, 'relay listening');
  const client = await TestClient.connect(relay.url!);
  try {
    const stored = await pool.query<{ id: string }>("SELECT encode(id, 'hex') AS id FROM events ORDER BY created_at DESC, id");
    const answer = await client.query('all', { limit: 1000 });
    expect(answer.map((e) => e.id)).toEqual(stored.rows.map((r) => r.id));
  } finally {
    client.close();
  }
}

describe('the hot tier snapshot across restarts', () => {
  it('is written at stop, read back at the next start, kept when a start fails, and refused when the table changed under it', async () => {
    const [initial, later] = fc.sample(eventsArb(expirationsAround(2_000_000_000), 200, 200), { seed: 20261203, numRuns: 2 });
    await insertAll(pool, initial, 8);
    const env = { DATABASE_URL: databaseUrl, DATA_DIR: dir, HOT_TIER_MB: '16' };

    const first = spawnRelay(env);
    expect((await logged(first, 'hot tier filled')).from).toBeUndefined(); // no snapshot yet: the fill
    first.child.kill('SIGTERM');
    expect(await first.exited).toBe(0);
    expect(first.logs.some((l) => l.msg === 'hot tier snapshot written')).toBe(true);
    expect(snapshots()).toEqual([`hot-tier.${first.child.pid}.snapshot`]);

    const second = spawnRelay(env);
    const filled = await logged(second, 'hot tier filled');
    expect(filled.from).toBe('snapshot');
    expect(filled.bucketsReadAgain).toBe(0);
    await until(() => snapshots().length === 0, 'the snapshot removed once read');
    await expectExact(second);
    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);
    expect(snapshots()).toEqual([`hot-tier.${second.child.pid}.snapshot`]);

    // A start that fails after taking the file (its TLS files are missing) gives it back.
    const failing = spawnRelay({ ...env, TLS_CERT_FILE: path.join(dir, 'missing.pem'), TLS_KEY_FILE: path.join(dir, 'missing-key.pem') });
    expect(await failing.exited).not.toBe(0);
    expect(snapshots()).toHaveLength(1);
    expect(snapshots()[0]).toMatch(/^hot-tier\.\d+\.snapshot$/);

    // Another writer while no relay runs: in a store this small every event is in one bucket, which
    // then differs; most of the snapshot out of date means the fill (test/store/hot-snapshot.test.ts
    // reads changed buckets again).
    const { rows } = await pool.query<{ id: Buffer }>("SELECT id FROM events ORDER BY md5(id::text || 'z') LIMIT 2");
    await pool.query('DELETE FROM events WHERE id = ANY($1::bytea[])', [rows.map((r) => r.id)]);
    await insertAll(pool, later.slice(0, 3), 1);
    const third = spawnRelay(env);
    expect((await logged(third, 'hot tier filled')).from).toBeUndefined();
    expect(third.logs.some((l) => l.msg === 'hot tier: most of the snapshot is out of date; filling from the database')).toBe(true);
    await expectExact(third);
    third.child.kill('SIGTERM');
    expect(await third.exited).toBe(0);
  }, 120_000);
});
