// /health (the process serves) and /ready (database reachable, migrations current).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let http: string;
beforeAll(async () => {
  relay = await startTestRelay();
  http = relay.url.replace(/^ws/, 'http');
});
afterAll(() => relay.close());

describe('health endpoints', () => {
  it('/health answers 200 {"status":"ok"}', async () => {
    const res = await fetch(`${http}/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok' });
  });

  it('/ready answers 200 when the database answers and every migration is applied', async () => {
    const res = await fetch(`${http}/ready`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ready' });
  });

  it('/ready answers 503 while a migration of this build is not applied', async () => {
    const { rows } = await relay.db.pool.query<{ name: string }>('DELETE FROM knex_migrations WHERE name = (SELECT max(name) FROM knex_migrations) RETURNING name');
    try {
      const res = await fetch(`${http}/ready`);
      expect(res.status).toBe(503);
      expect(await res.json()).toEqual({ status: 'unavailable', reason: 'migrations pending', pending: [rows[0].name] });
    } finally {
      await relay.db.pool.query("INSERT INTO knex_migrations (name, batch, migration_time) VALUES ($1, 1, now())", [rows[0].name]);
    }
    expect((await fetch(`${http}/ready`)).status).toBe(200);
  });
});
