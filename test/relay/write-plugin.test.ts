// WRITE_POLICY_PLUGIN on a real relay: every client EVENT that passed the relay's own checks goes
// through the plugin (a real child process); reject answers OK false, shadowReject OK true with the
// event neither stored nor passed on; a fault answers error: to the event the plugin failed on only,
// and never holds up the rest of the relay.
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { changeEndpoints } from '../../src/store/outbox.js';
import { TestClient } from '../support/client.js';
import { unique } from '../support/events.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { until } from '../support/wait.js';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/plugins');
const SCRIPTED = path.join(FIXTURES, 'scripted.js');
const dir = mkdtempSync(path.join(tmpdir(), 'pgrelay-relay-plugin-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const signer = newSigner();
const post = (content: string, tag = unique()): NostrEvent => signer.sign({ content, tags: [['t', tag]] });

/** The request lines a plugin started with --log <file> has received. */
function requestsIn(file: string): Array<{ sourceType: string; sourceInfo: string; authed?: string; event: NostrEvent }> {
  return existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : [];
}

async function metricValues(relay: TestRelay, name: string): Promise<Array<{ labels: Record<string, string>; value: number }>> {
  const text = await (await fetch(`${relay.url.replace(/^ws/, 'http')}/metrics`)).text();
  const family = parsePrometheusTextFormat(text).find((f) => f.name === name);
  return (family?.metrics ?? []).map((m) => ({ labels: m.labels ?? {}, value: Number(m.value ?? m.count) }));
}

describe("strfry's whitelist example as the plugin", () => {
  let relay: TestRelay;
  let client: TestClient;
  beforeAll(async () => {
    // strfry's docs/plugins.md example, verbatim but for the whitelisted key (its secret is unknown):
    // the fixture is copied with that hex replaced by a test key.
    const text = readFileSync(path.join(FIXTURES, 'whitelist.js'), 'utf8').replace('003ba9b2c5bd8afeed41a4ce362a8b7fc3ab59c25b6a1359cae9093f296dac01', signer.pubkey);
    const file = path.join(dir, 'whitelist.js');
    writeFileSync(file, text);
    chmodSync(file, 0o755);
    relay = await startTestRelay({ WRITE_POLICY_PLUGIN: file });
    client = await TestClient.connect(relay.url);
  });
  afterAll(async () => {
    client?.close();
    await relay?.close();
  });

  it('stores what it accepts and refuses the rest with its message', async () => {
    const listed = post('on the list');
    expect(await client.publish(listed)).toEqual([true, '']);
    const stranger = newSigner().sign({ content: 'not on the list' });
    expect(await client.publish(stranger)).toEqual([false, 'blocked: not on white-list']);
    expect((await client.fetch('both', { ids: [listed.id, stranger.id] })).map((e) => e.id)).toEqual([listed.id]);
  });
});

describe('a write-policy plugin on the EVENT path', () => {
  let relay: TestRelay;
  let client: TestClient;
  const log = path.join(dir, 'requests.jsonl');
  beforeAll(async () => {
    // A shell command with arguments (it has spaces), as an operator would write `node plugin.js --flag`.
    relay = await startTestRelay({
      WRITE_POLICY_PLUGIN: `${process.execPath} ${SCRIPTED} --log ${log}`,
      HOT_TIER_MB: '16',
      WEBHOOK_DELIVERY: 'false', // deliveries stay in webhook_deliveries, where the test looks
    });
    client = await TestClient.connect(relay.url);
  });
  afterAll(async () => {
    client?.close();
    await relay?.close();
  });

  it('passes a reject message with a NIP-01 prefix as sent, and prefixes the others with blocked:', async () => {
    expect(await client.publish(post('reject:spam'))).toEqual([false, 'blocked: spam']);
    expect(await client.publish(post('reject:rate-limited: slow down'))).toEqual([false, 'rate-limited: slow down']);
    const [ok, why] = await client.publish(post('reject'));
    expect(ok).toBe(false);
    expect(why).toMatch(/^blocked: \S/);
  });

  it('shadowReject: OK true, but the event is neither stored, nor delivered live, nor queued for webhooks', async () => {
    const tag = unique();
    const endpoint = await changeEndpoints(relay.db.pool, async (c) =>
      (await c.query<{ id: number }>("INSERT INTO webhook_endpoints (url, filters, secret, batch_size) VALUES ('http://127.0.0.1:9/hook', $1, 'whsec_dGVzdA==', 1) RETURNING id", [JSON.stringify([{ '#t': [tag] }])])).rows[0].id);
    const subscriber = await TestClient.connect(relay.url);
    try {
      await subscriber.query('live', { '#t': [tag] });
      const shadow = post('shadow', tag);
      const kept = post('kept', tag);
      expect(await client.publish(shadow)).toEqual([true, '']);
      expect(await client.publish(kept)).toEqual([true, '']);
      // Fan-out follows the order of the commits: the kept event arriving means the shadow one never will.
      await until(() => subscriber.liveEvents('live').length > 0, 'the kept event delivered live');
      expect(subscriber.liveEvents('live').map((e) => e.id)).toEqual([kept.id]);
      expect((await client.fetch('stored', { '#t': [tag] })).map((e) => e.id)).toEqual([kept.id]);
      const queued = await relay.db.pool.query<{ id: string }>("SELECT encode(event_id, 'hex') AS id FROM webhook_deliveries WHERE endpoint_id = $1", [endpoint]);
      expect(queued.rows.map((r) => r.id)).toEqual([kept.id]);
      const { rows } = await relay.db.pool.query('SELECT 1 FROM events WHERE id = $1', [Buffer.from(shadow.id, 'hex')]);
      expect(rows).toHaveLength(0);
    } finally {
      subscriber.close();
    }
  });

  it('sees only events that passed the relay\'s checks, with the client\'s address and, after AUTH, its key', async () => {
    const bad = { ...post('bad signature'), sig: '0'.repeat(128) };
    const [ok, why] = await client.publish(bad);
    expect(ok).toBe(false);
    expect(why).toMatch(/^invalid: /);
    const authed = await TestClient.connect(relay.url);
    try {
      const anonymous = post('anonymous');
      expect(await authed.publish(anonymous)).toEqual([true, '']);
      expect(await authed.auth(signer)).toEqual([true, '']);
      const signed = post('after auth');
      expect(await authed.publish(signed)).toEqual([true, '']);
      const seen = requestsIn(log);
      expect(seen.some((r) => r.event.id === bad.id)).toBe(false);
      expect(seen.find((r) => r.event.id === anonymous.id)).toMatchObject({ sourceType: 'IP4', sourceInfo: '127.0.0.1' });
      expect(seen.find((r) => r.event.id === anonymous.id)).not.toHaveProperty('authed');
      expect(seen.find((r) => r.event.id === signed.id)).toMatchObject({ sourceType: 'IP4', sourceInfo: '127.0.0.1', authed: signer.pubkey });
    } finally {
      authed.close();
    }
  });

  it('has many events in flight: a slow decision holds up neither a fast one nor a REQ, and a resent event gets its answer twice', async () => {
    const held = post('hold');
    const from = client.mark;
    client.send(['EVENT', held]);
    client.send(['EVENT', held]); // the same event again while the first waits
    const fast = post('fast');
    expect(await client.publish(fast)).toEqual([true, '']);
    expect(await client.fetch('meanwhile', { ids: [fast.id] })).toHaveLength(1);
    expect(client.messages.slice(from).some((m) => m[0] === 'OK' && m[1] === held.id)).toBe(false);
    expect(await client.publish(post('release'))).toEqual([true, '']);
    await until(() => client.messages.slice(from).filter((m) => m[0] === 'OK' && m[1] === held.id).length === 2, 'both OKs for the held event');
    const oks = client.messages.slice(from).filter((m) => m[0] === 'OK' && m[1] === held.id);
    expect(oks.map((m) => m[2])).toEqual([true, true]); // one stored, one a duplicate (OK true too)
    expect(await client.fetch('held', { ids: [held.id] })).toHaveLength(1);
  });

  it('counts its decisions in /metrics and shows its state on the status page', async () => {
    const decisions = await metricValues(relay, 'pgrelay_write_plugin_decisions_total');
    const by = (action: string) => decisions.find((m) => m.labels.action === action)?.value ?? 0;
    expect(by('accept')).toBeGreaterThan(0);
    expect(by('reject')).toBeGreaterThanOrEqual(3);
    expect(by('shadowReject')).toBeGreaterThanOrEqual(1);
    const seconds = await metricValues(relay, 'pgrelay_write_plugin_seconds');
    expect(seconds.length).toBeGreaterThan(0);
    const status = (await (await fetch(`${relay.url.replace(/^ws/, 'http')}/status.json`)).json()) as { writePlugin?: Record<string, unknown> };
    expect(status.writePlugin).toMatchObject({ command: relay.config.WRITE_POLICY_PLUGIN, running: true, restarts: 0, inFlight: 0 });
    expect(status.writePlugin!.pid).toEqual(expect.any(Number));
  });
});

describe('a write-policy plugin that fails', () => {
  let relay: TestRelay;
  let client: TestClient;
  beforeAll(async () => {
    relay = await startTestRelay({ WRITE_POLICY_PLUGIN: SCRIPTED, WRITE_POLICY_TIMEOUT_MS: '2000' });
    client = await TestClient.connect(relay.url);
  });
  afterAll(async () => {
    client?.close();
    await relay?.close();
  });

  it('exits on one event: that event is answered error:, and the events another client sends right after it are accepted', async () => {
    expect(await client.publish(post('before'))).toEqual([true, '']);
    const other = await TestClient.connect(relay.url);
    try {
      expect(await client.publish(post('exit'))).toEqual([false, 'error: the write policy plugin exited with code 3 on this event']);
      const next = [post('next 1'), post('next 2'), post('next 3'), post('next 4'), post('next 5')];
      const from = other.mark;
      for (const e of next) other.send(['EVENT', e]); // as fast as it can, without waiting for an OK
      const oks = await Promise.all(next.map((e) => other.waitFor((m) => m[0] === 'OK' && m[1] === e.id, 10_000, from)));
      expect(oks.map((m) => [m[2], m[3]])).toEqual(next.map(() => [true, '']));
    } finally {
      other.close();
    }
    const restarts = await metricValues(relay, 'pgrelay_write_plugin_restarts_total');
    expect(restarts.find((m) => m.labels.reason === 'exit')?.value).toBe(1);
  });

  it('exits on one event of several sent together: only that one is answered error:', async () => {
    const exit = post('exit');
    const others = [post('with it 1'), post('reject:with it'), post('with it 3')];
    const from = client.mark;
    for (const e of [exit, ...others]) client.send(['EVENT', e]);
    const oks = await Promise.all([exit, ...others].map((e) => client.waitFor((m) => m[0] === 'OK' && m[1] === e.id, 10_000, from)));
    expect(oks.map((m) => [m[2], m[3]])).toEqual([
      [false, 'error: the write policy plugin exited with code 3 on this event'],
      [true, ''],
      [false, 'blocked: with it'],
      [true, ''],
    ]);
  });

  it('hangs: the event is answered error: after WRITE_POLICY_TIMEOUT_MS, and the plugin is replaced', async () => {
    const [ok, why] = await client.publish(post('hang'));
    expect([ok, why]).toEqual([false, 'error: the write policy plugin did not answer within 2000 ms']);
    await until(async () => (await client.publish(post('again')))[0], 'an event accepted by the new plugin');
    const restarts = await metricValues(relay, 'pgrelay_write_plugin_restarts_total');
    expect(restarts.find((m) => m.labels.reason === 'timeout')?.value).toBe(1);
    const errors = (await metricValues(relay, 'pgrelay_write_plugin_decisions_total')).find((m) => m.labels.action === 'error');
    expect(errors?.value).toBeGreaterThanOrEqual(3); // the two events it exited on, and this one
  });
});

describe('without a write-policy plugin', () => {
  it('shows no plugin on the status page', async () => {
    const relay = await startTestRelay();
    try {
      const status = (await (await fetch(`${relay.url.replace(/^ws/, 'http')}/status.json`)).json()) as Record<string, unknown>;
      expect(status).not.toHaveProperty('writePlugin');
      expect(relay.relay.context.writePlugin).toBeUndefined();
    } finally {
      await relay.close();
    }
  });
});
