// `webhook`: endpoints and their queues, as an operator runs it (the built CLI in a child process),
// checked against the tables; replay's paging also in-process, with tiny pages.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { replayEndpoint } from '../../src/store/webhook-endpoints.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import type { Database } from '../../src/store/database.js';
import { WebhookOutbox } from '../../src/store/outbox.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatch } from '../../src/store/write.js';
import { openTestStore, store, unsignedEvent } from '../ops/helpers.js';
import { runCli } from '../support/cli.js';

let db: Database;
const cli = (...args: string[]) => runCli(['webhook', ...args], { DATABASE_URL: db.url, LOG_LEVEL: 'warn' });

beforeAll(async () => {
  db = await openTestStore();
});
afterAll(async () => {
  await db?.close();
});

async function generation(): Promise<number> {
  return Number((await db.pool.query('SELECT generation FROM webhook_generation')).rows[0].generation);
}

async function endpointRow(id: number) {
  const { rows } = await db.pool.query('SELECT url, filters, secret, batch_size, paused FROM webhook_endpoints WHERE id = $1', [id]);
  return rows[0] as { url: string; filters: unknown; secret: string | null; batch_size: number; paused: boolean } | undefined;
}

async function addEndpoint(...args: string[]): Promise<number> {
  const r = await cli('add', ...args);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  const m = /^added webhook endpoint (\d+)$/m.exec(r.stdout);
  expect(m).not.toBeNull();
  return Number(m![1]);
}

async function enqueue(endpointId: number, events: NostrEvent[], dead = false): Promise<void> {
  for (const e of events)
    await db.pool.query(
      `INSERT INTO webhook_deliveries (endpoint_id, event_id, payload, dead, attempts, last_error, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, now() - interval '2 hours')`,
      [endpointId, Buffer.from(e.id, 'hex'), JSON.stringify(e), dead, dead ? 8 : 0, dead ? 'HTTP 500' : null],
    );
}

async function deliveries(endpointId: number): Promise<Array<{ event_id: string; payload: string; dead: boolean; attempts: number }>> {
  const { rows } = await db.pool.query(
    "SELECT encode(event_id, 'hex') AS event_id, payload, dead, attempts FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id",
    [endpointId],
  );
  return rows;
}

describe('webhook add', () => {
  it('adds an endpoint, generates a secret and prints it once, and bumps the generation', async () => {
    const before = await generation();
    const r = await cli('add', 'https://example.com/hook', '--filter', '{"kinds":[1],"#t":["nostr"]}', '--batch', '10');
    expect(r.code).toBe(0);
    const id = Number(/^added webhook endpoint (\d+)$/m.exec(r.stdout)![1]);
    const secret = /^secret: (whsec_\S+)$/m.exec(r.stdout)![1];
    expect(Buffer.from(secret.slice('whsec_'.length), 'base64')).toHaveLength(24);
    expect(await endpointRow(id)).toEqual({ url: 'https://example.com/hook', filters: [{ kinds: [1], '#t': ['nostr'] }], secret, batch_size: 10, paused: false });
    expect(await generation()).toBe(before + 1);
    // Another one gets another secret.
    const other = await cli('add', 'http://localhost:8080/x', '--filter', '{}');
    expect(/^secret: (whsec_\S+)$/m.exec(other.stdout)![1]).not.toBe(secret);
  });

  it('takes a given secret (printing none), several --filter and arrays of filters', async () => {
    const secret = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;
    const r = await cli('add', 'https://example.com/two', '--filter', '[{"kinds":[0]},{"kinds":[3]}]', '--filter', '{"authors":["' + 'a'.repeat(64) + '"]}', '--secret', secret);
    expect(r.code).toBe(0);
    expect(r.stdout).not.toMatch(/secret/);
    const id = Number(/^added webhook endpoint (\d+)$/m.exec(r.stdout)![1]);
    const row = await endpointRow(id);
    expect(row?.secret).toBe(secret);
    expect(row?.filters).toEqual([{ kinds: [0] }, { kinds: [3] }, { authors: ['a'.repeat(64)] }]);
    expect(row?.batch_size).toBe(1);
  });

  it.each([
    [['ftp://example.com/x', '--filter', '{}'], /http or https/],
    [['not a url', '--filter', '{}'], /not a URL/],
    [['mailto:op@example.com', '--filter', '{}'], /http or https/],
    [['https://example.com/x'], /at least one --filter/],
    [['https://example.com/x', '--filter', '{"kinds":"1"}'], /--filter: .*"kinds" must be an array/],
    [['https://example.com/x', '--filter', '{"colour":"red"}'], /--filter: .*filter key "colour"/],
    [['https://example.com/x', '--filter', '{kinds:[1]}'], /--filter is not valid JSON/],
    [['https://example.com/x', '--filter', '[]'], /non-empty/],
    [['https://example.com/x', '--filter', '{}', '--secret', 'hunter2'], /--secret: .*whsec_/],
    [['https://example.com/x', '--filter', '{}', '--secret', 'whsec_c2hvcnQ='], /--secret: .*24 to 64 bytes/],
    [['https://example.com/x', '--filter', '{}', '--batch', '1001'], /--batch must be at most 1000/],
    [['https://example.com/x', '--filter', '{}', '--batch', '0'], /--batch must be an integer >= 1/],
    [['https://example.com/x', '--filter', '{}', '--dead'], /--dead does not go with webhook add/],
  ])('refuses %j with exit 2', async (args, message) => {
    const before = (await db.pool.query('SELECT count(*)::int AS n FROM webhook_endpoints')).rows[0].n;
    const r = await cli('add', ...args);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).toBe('');
    expect((await db.pool.query('SELECT count(*)::int AS n FROM webhook_endpoints')).rows[0].n).toBe(before);
  });

  it('refuses an unknown subcommand and a bad id with exit 2', async () => {
    expect((await cli('frobnicate')).code).toBe(2);
    const r = await cli('pause', 'abc');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/expected an endpoint id/);
  });

  it('adds an endpoint the writers use: the outbox enqueues matching events for it', async () => {
    const id = await addEndpoint('https://example.com/outbox', '--filter', '{"kinds":[30078]}');
    const outbox = new WebhookOutbox();
    const hit = unsignedEvent({ kind: 30078, tags: [['d', 'outbox-test']], created_at: 1_600_000_000 });
    const miss = unsignedEvent({ kind: 1, content: 'outbox miss', created_at: 1_600_000_000 });
    await writeBatch(db.pool, [hit, miss].map(prepareEvent), { outbox });
    expect((await deliveries(id)).map((d) => d.event_id)).toEqual([hit.id]);
    await removeQuietly(id);
  });
});

async function removeQuietly(id: number): Promise<void> {
  expect((await cli('remove', String(id))).code).toBe(0);
}

describe('webhook list, pause, resume, deliveries, redeliver, remove', () => {
  let id: number;
  const queued = [unsignedEvent({ content: 'q1' }), unsignedEvent({ content: 'q2' })];
  const dead = [unsignedEvent({ content: 'd1' })];

  beforeAll(async () => {
    id = await addEndpoint('https://hooks.example.org/nostr', '--filter', '{"kinds":[1]}', '--batch', '5');
    await enqueue(id, queued);
    await enqueue(id, dead, true);
  });

  it('lists each endpoint with its queue counts and the oldest queued age', async () => {
    const r = await cli('list');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^${id}  https://hooks\\.example\\.org/nostr  active  batch 5$`, 'm'));
    const block = r.stdout.slice(r.stdout.indexOf(`${id}  https://hooks.example.org/nostr`));
    expect(block).toMatch(/^ {4}filters: \[\{"kinds":\[1\]\}\]$/m);
    expect(block).toMatch(/^ {4}queued: 2 {2}dead: 1 {2}oldest queued: (119m|2h)$/m);
    const json = JSON.parse((await cli('list', '--json')).stdout) as Array<{ id: number; queued: number; dead: number; paused: boolean }>;
    expect(json.find((e) => e.id === id)).toMatchObject({ queued: 2, dead: 1, paused: false });
    expect(JSON.stringify(json)).not.toMatch(/whsec_/); // secrets are never listed
  });

  it('pauses and resumes', async () => {
    const before = await generation();
    const paused = await cli('pause', String(id));
    expect(paused.code).toBe(0);
    expect(paused.stdout).toBe(`paused webhook endpoint ${id}\n`);
    expect((await endpointRow(id))?.paused).toBe(true);
    expect((await cli('list')).stdout).toMatch(new RegExp(`^${id}  \\S+  paused  batch 5$`, 'm'));
    expect((await cli('resume', String(id))).code).toBe(0);
    expect((await endpointRow(id))?.paused).toBe(false);
    expect(await generation()).toBe(before + 2);
    const missing = await cli('pause', '99999');
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no webhook endpoint 99999/);
  });

  it('lists the queued deliveries, or the dead ones', async () => {
    const r = await cli('deliveries', String(id));
    expect(r.code).toBe(0);
    const lines = r.stdout.split('\n').filter((l) => / event [0-9a-f]{64} /.test(l));
    expect(lines.map((l) => / event ([0-9a-f]{64}) /.exec(l)![1])).toEqual(queued.map((e) => e.id));
    expect(lines[0]).toMatch(/attempts 0 {2}created \d{4}-\d\d-\d\dT\S+ {2}visible \d{4}-/);
    const limited = await cli('deliveries', String(id), '--limit', '1');
    expect(limited.stdout.split('\n').filter((l) => / event /.test(l))).toHaveLength(1);
    const deadOnes = await cli('deliveries', String(id), '--dead');
    expect(deadOnes.stdout).toContain(`event ${dead[0].id}  attempts 8`);
    expect(deadOnes.stdout).toMatch(/^ {4}last error: HTTP 500$/m);
    expect(deadOnes.stdout).not.toContain(queued[0].id);
  });

  it('redelivers the dead deliveries', async () => {
    const r = await cli('redeliver', String(id));
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/redelivering 1 dead deliveries/);
    const rows = await deliveries(id);
    expect(rows.every((d) => !d.dead)).toBe(true);
    expect(rows.find((d) => d.event_id === dead[0].id)?.attempts).toBe(0);
    const { rows: visible } = await db.pool.query('SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1 AND visible_at <= now()', [id]);
    expect(visible[0].n).toBe(3);
    expect((await cli('redeliver', String(id))).stdout).toMatch(/redelivering 0 dead/);
  });

  it('removes the endpoint and its queue, saying how many deliveries went', async () => {
    await db.pool.query('UPDATE webhook_deliveries SET dead = true WHERE endpoint_id = $1 AND event_id = $2', [id, Buffer.from(dead[0].id, 'hex')]);
    const r = await cli('remove', String(id));
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(`removed webhook endpoint ${id}: dropped 2 queued deliveries and 1 dead ones\n`);
    expect(await endpointRow(id)).toBeUndefined();
    expect(await deliveries(id)).toEqual([]);
    expect((await cli('remove', String(id))).code).toBe(1);
  });
});

describe('webhook replay', () => {
  const now = Math.floor(Date.now() / 1000);
  const since = now - 10_000;
  const author = 'b'.repeat(64);
  let matching: NostrEvent[];
  let others: NostrEvent[];

  beforeAll(async () => {
    await db.pool.query('TRUNCATE events CASCADE');
    matching = [
      unsignedEvent({ kind: 1, created_at: since, tags: [['t', 'replay']], content: 'at the bound' }),
      unsignedEvent({ kind: 1, created_at: since + 10, tags: [['t', 'replay']], content: 'a' }),
      unsignedEvent({ kind: 1, created_at: since + 10, tags: [['t', 'replay']], content: 'b' }), // same second: the keyset's tie-break
      unsignedEvent({ kind: 1, created_at: since + 20, tags: [['t', 'replay']], content: 'c' }),
      unsignedEvent({ kind: 7, created_at: since + 30, tags: [['p', author]], content: '+' }), // the second filter
      unsignedEvent({ kind: 1, created_at: now - 5, tags: [['t', 'replay']], content: 'recent' }),
    ];
    others = [
      unsignedEvent({ kind: 1, created_at: since - 1, tags: [['t', 'replay']], content: 'too old' }),
      unsignedEvent({ kind: 1, created_at: since + 5, tags: [['t', 'other']], content: 'other tag' }),
      unsignedEvent({ kind: 6, created_at: since + 5, tags: [['t', 'replay']], content: 'other kind' }),
      unsignedEvent({ kind: 7, created_at: since + 5, tags: [['p', 'c'.repeat(64)]], content: '+' }),
      unsignedEvent({ kind: 1, created_at: since + 40, tags: [['t', 'replay'], ['expiration', String(now + 100_000)]], content: 'expired below' }),
    ];
    await store(db.pool, [...matching, ...others]);
    await db.pool.query('UPDATE events SET expires_at = $1 WHERE id = $2', [now - 60, Buffer.from(others[4].id, 'hex')]);
  });

  const sortIds = (events: Array<{ id: string }>) => events.map((e) => e.id).sort();

  it('enqueues exactly the stored, unexpired events since the time that match the filters', async () => {
    const id = await addEndpoint('https://example.com/replay', '--filter', '{"kinds":[1],"#t":["replay"]}', '--filter', `{"kinds":[7],"#p":["${author}"]}`);
    const r = await cli('replay', String(id), '--since', String(since));
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/enqueued 6 deliveries for endpoint \d+ \(9 stored events read\)/);
    const rows = await deliveries(id);
    expect(rows.map((d) => d.event_id).sort()).toEqual(sortIds(matching));
    // The payload is the stored JSON, in created_at order.
    const { rows: raw } = await db.pool.query<{ raw: string }>("SELECT raw FROM events WHERE encode(id, 'hex') = $1", [rows[0].event_id]);
    expect(rows[0].payload).toBe(raw[0].raw);
    expect(rows[0].event_id).toBe(matching[0].id);
    // Again: queued again (replay does not look at the queue).
    expect((await cli('replay', String(id), '--since', String(since))).stdout).toMatch(/enqueued 6 deliveries/);
    expect(await deliveries(id)).toHaveLength(12);
    await removeQuietly(id);
  });

  it('takes --since as an age', async () => {
    const id = await addEndpoint('https://example.com/age', '--filter', '{"kinds":[1]}');
    // 1h: only the recent event is that young, however long this file has run (the others are ~3 h old).
    const r = await cli('replay', String(id), '--since', '1h');
    expect(r.code).toBe(0);
    expect((await deliveries(id)).map((d) => d.event_id)).toEqual([matching[5].id]);
    await removeQuietly(id);
  });

  it('matches search filters as the writer does', async () => {
    const id = await addEndpoint('https://example.com/search', '--filter', '{"search":"bound"}');
    expect((await cli('replay', String(id), '--since', '0')).code).toBe(0);
    expect((await deliveries(id)).map((d) => d.event_id)).toEqual([matching[0].id]);
    await removeQuietly(id);
  });

  it('reads in pages by (created_at, id) and inserts in batches, missing none and repeating none', async () => {
    const id = await addEndpoint('https://example.com/pages', '--filter', '{"kinds":[1,6,7]}');
    for (const pageSize of [1, 2, 3]) {
      await db.pool.query('DELETE FROM webhook_deliveries WHERE endpoint_id = $1', [id]);
      const result = await replayEndpoint(db.pool, id, { since, pageSize, insertSize: 2 });
      expect(result).toEqual({ scanned: 9, enqueued: 9, complete: true });
      const ids = (await deliveries(id)).map((d) => d.event_id);
      expect(new Set(ids).size).toBe(9);
      expect(ids.sort()).toEqual(sortIds([...matching, ...others.slice(1, 4)]));
    }
    expect(await replayEndpoint(db.pool, 99999, { since })).toBeUndefined();
    await removeQuietly(id);
  });

  it('pages in numeric created_at order, also across a change in the number of digits', async () => {
    const early = unsignedEvent({ kind: 1111, created_at: 999_999_999 });
    const late = unsignedEvent({ kind: 1111, created_at: 1_000_000_000 });
    await store(db.pool, [late, early]);
    const id = await addEndpoint('https://example.com/digits', '--filter', '{"kinds":[1111]}');
    expect(await replayEndpoint(db.pool, id, { since: 0, pageSize: 1 })).toEqual({ scanned: 12, enqueued: 2, complete: true });
    expect((await deliveries(id)).map((d) => d.event_id)).toEqual([early.id, late.id]);
    await removeQuietly(id);
  });

  it('refuses a bad --since and an unknown endpoint', async () => {
    const bad = await cli('replay', '1', '--since', 'yesterday');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--since/);
    expect((await cli('replay', '1')).code).toBe(2);
    const missing = await cli('replay', '99999', '--since', '1h');
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no webhook endpoint 99999/);
  });
});

