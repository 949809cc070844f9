// GET /metrics: valid Prometheus text exposition (parsed by an independent parser), counters that
// move as a client publishes and queries, and METRICS_TOKEN.
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { unique } from '../support/events.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

const TOKEN = 'metrics-token-for-the-test-0123456789';
let relay: TestRelay;
let base: string;
beforeAll(async () => {
  relay = await startTestRelay({ METRICS_TOKEN: TOKEN });
  base = relay.url.replace(/^ws/, 'http');
});
afterAll(() => relay.close());

type Families = ReturnType<typeof parsePrometheusTextFormat>;

async function scrape(): Promise<Families> {
  const res = await fetch(`${base}/metrics`, { headers: { Authorization: `Bearer ${TOKEN}` } });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parsePrometheusTextFormat(await res.text());
}

/** A sample's value: a counter or gauge with these labels, or a histogram's count. */
function value(families: Families, name: string, labels: Record<string, string> = {}): number {
  const family = families.find((f) => f.name === name);
  if (!family) throw new Error(`no metric ${name}`);
  const sample = family.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
  if (!sample) return 0;
  return Number(sample.value ?? sample.count);
}

describe('/metrics', () => {
  it('is valid Prometheus text with the relay\'s metrics and Node\'s default ones', async () => {
    const families = await scrape();
    const names = families.map((f) => f.name);
    for (const name of [
      'nostr_client_messages_total', 'nostr_events_received_total', 'nostr_events_stored_total', 'nostr_events_refused_total',
      'nostr_events_duplicate_total', 'nostr_req_seconds', 'nostr_count_seconds', 'nostr_event_ok_seconds', 'pgrelay_write_batch_events',
      'pgrelay_write_batch_seconds', 'pgrelay_writer_queue_events', 'pgrelay_verify_queue_events', 'nostr_connections', 'nostr_subscriptions',
      'nostr_events_sent_total', 'pgrelay_db_pool_connections', 'pgrelay_db_pool_in_use', 'pgrelay_db_pool_waiting', 'nostr_slow_client_disconnects_total', 'nostr_auth_total',
      'process_cpu_seconds_total', 'nodejs_heap_size_used_bytes',
    ])
      expect(names).toContain(name);
    expect(families.find((f) => f.name === 'nostr_req_seconds')!.type).toBe('HISTOGRAM');
  });

  it('moves its counters as a client publishes, queries, counts and authenticates', async () => {
    const before = await scrape();
    const alice = newSigner();
    const c = await TestClient.connect(relay.url);
    const subscriber = await TestClient.connect(relay.url);
    await subscriber.query('live', { authors: [alice.pubkey] });
    const notes = Array.from({ length: 3 }, () => alice.sign({ content: unique('m') }));
    for (const e of notes) expect(await c.publish(e)).toEqual([true, '']);
    expect(await c.publish(notes[0])).toEqual([true, 'duplicate: already have this event']);
    expect(await c.publish(alice.sign({ tags: [['-']] }))).toEqual([false, expect.stringMatching(/^auth-required:/)]);
    expect(await c.publish(alice.sign({ kind: 7, content: '+' }))).toEqual([true, '']);
    expect(await c.fetch('q', { authors: [alice.pubkey] })).toHaveLength(4);
    expect(await c.count('n', { authors: [alice.pubkey] })).toBe(4);
    expect(await c.auth(alice)).toEqual([true, '']);
    await subscriber.waitFor((m) => m[0] === 'EVENT' && m[1] === 'live' && (m[2] as { kind: number }).kind === 7);
    const after = await scrape();
    const moved = (name: string, labels: Record<string, string> = {}) => value(after, name, labels) - value(before, name, labels);

    expect(moved('nostr_client_messages_total', { verb: 'EVENT' })).toBe(6);
    expect(moved('nostr_client_messages_total', { verb: 'REQ' })).toBe(2);
    expect(moved('nostr_client_messages_total', { verb: 'COUNT' })).toBe(1);
    expect(moved('nostr_client_messages_total', { verb: 'AUTH' })).toBe(1);
    expect(moved('nostr_events_received_total')).toBe(6);
    expect(moved('nostr_events_stored_total', { kind: '1' })).toBe(3);
    expect(moved('nostr_events_stored_total', { kind: '7' })).toBe(1);
    expect(moved('nostr_events_duplicate_total')).toBe(1);
    expect(moved('nostr_events_refused_total', { reason: 'auth-required' })).toBe(1);
    expect(moved('nostr_event_ok_seconds')).toBe(6);
    expect(moved('nostr_req_seconds')).toBe(2);
    expect(moved('nostr_count_seconds')).toBe(1);
    expect(moved('nostr_events_sent_total', { source: 'stored' })).toBe(4);
    expect(moved('nostr_events_sent_total', { source: 'live' })).toBe(4);
    expect(moved('nostr_auth_total', { result: 'accepted' })).toBe(1);
    expect(moved('pgrelay_write_batch_events')).toBeGreaterThanOrEqual(1);
    expect(value(after, 'nostr_connections')).toBe(2);
    expect(value(after, 'nostr_subscriptions')).toBe(1);
    c.close();
    subscriber.close();
  });

  it('needs the bearer token when METRICS_TOKEN is set', async () => {
    expect((await fetch(`${base}/metrics`)).status).toBe(401);
    expect((await fetch(`${base}/metrics`, { headers: { Authorization: 'Bearer wrong' } })).status).toBe(401);
    expect((await fetch(`${base}/metrics`, { headers: { Authorization: TOKEN } })).status).toBe(401);
  });
});
