// A relay on DATABASE_URL with two hosts (libpq's form, target_session_attrs=read-write) follows the
// primary when it is lost: the standby is listed first, the relay writes to the primary; the primary's
// postmaster is killed (a lost host) and the standby promoted, as Patroni would. Synchronous
// replication: every event acknowledged before the kill is on the standby. Events sent while no server
// is writable wait for the new primary and are acknowledged there; a live subscriber gets each once.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { ensureDatabase, withDatabaseName } from '../../src/store/database.js';
import { TestClient } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { startPrimaryWithReplica, type ReplicaPair } from '../support/replica.js';
import { until } from '../support/wait.js';

let pair: ReplicaPair;
let relay: TestRelay;

const hostPort = (url: string) => new URL(url).host;

beforeAll(async () => {
  pair = await startPrimaryWithReplica();
  const admin = new pg.Client({ connectionString: pair.primaryAdminUrl });
  await admin.connect();
  await admin.query("ALTER SYSTEM SET synchronous_standby_names = '*'");
  await admin.query('SELECT pg_reload_conf()');
  await admin.end();
  await ensureDatabase(pair.primaryAdminUrl, 'nostr');
  const primary = new URL(withDatabaseName(pair.primaryAdminUrl, 'nostr'));
  // The standby first: the relay must pass it over for the writable server.
  const url = `postgres://${primary.username}:${primary.password}@${hostPort(pair.replicaAdminUrl)},${primary.host}/nostr?target_session_attrs=read-write`;
  relay = await startTestRelay({ WRITE_TIMEOUT_MS: '60000' }, url);
}, 180_000);

afterAll(async () => {
  await relay?.close();
  await pair?.stop();
});


describe('DATABASE_URL with several hosts: a lost primary', () => {
  it('writes go to the writable server, then to the promoted standby; nothing acknowledged is lost and the subscriber gets every event once', async () => {
    const signer = newSigner();
    const publisher = await TestClient.connect(relay.url);
    const subscriber = await TestClient.connect(relay.url);
    subscriber.send(['REQ', 'live', { authors: [signer.pubkey] }]);
    await subscriber.waitFor((m) => m[0] === 'EOSE');
    const make = (i: number) => signer.sign({ kind: 1, created_at: now(), tags: [], content: `failover ${i}` });

    const before = Array.from({ length: 10 }, (_, i) => make(i));
    for (const e of before) expect(await publisher.publish(e, 90_000)).toEqual([true, '']);

    await pair.killPrimary();
    // Sent while no server is writable: each waits for the promotion, then is acknowledged.
    const during = Array.from({ length: 10 }, (_, i) => make(100 + i));
    const answers = Promise.all(during.map((e) => publisher.publish(e, 90_000)));
    // Memory answers what this process wrote before the loss, although the database cannot be read.
    expect((await publisher.query('during', { ids: before.map((e) => e.id) })).map((e) => e.id).sort()).toEqual(before.map((e) => e.id).sort());
    await pair.promoteReplica();
    for (const [accepted, message] of await answers) expect([accepted, message.startsWith('duplicate:') ? '' : message]).toEqual([true, '']);

    const after = Array.from({ length: 10 }, (_, i) => make(200 + i));
    for (const e of after) expect(await publisher.publish(e, 90_000)).toEqual([true, '']);

    const all = [...before, ...during, ...after];
    // On the new primary: every acknowledged event, once.
    const db = new pg.Client({ connectionString: withDatabaseName(pair.replicaAdminUrl, 'nostr') });
    await db.connect();
    const { rows } = await db.query<{ id: string }>(`SELECT encode(id, 'hex') AS id FROM events WHERE pubkey = $1`, [Buffer.from(signer.pubkey, 'hex')]);
    await db.end();
    expect(rows.map((r) => r.id).sort()).toEqual(all.map((e) => e.id).sort());
    // Live: every event, each once.
    await until(() => subscriber.messages.filter((m) => m[0] === 'EVENT').length >= all.length, 'every event delivered live', 60_000);
    const delivered = subscriber.messages.filter((m) => m[0] === 'EVENT').map((m) => (m[2] as NostrEvent).id);
    expect(delivered.sort()).toEqual(all.map((e) => e.id).sort());
    expect(relay.db.finder?.serving).toBe(hostPort(pair.replicaAdminUrl));
    expect(relay.db.finder?.changes).toBe(1);
    publisher.ws.close();
    subscriber.ws.close();
  }, 180_000);
});
