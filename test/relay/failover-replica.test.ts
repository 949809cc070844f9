// A relay on DATABASE_URL with two hosts (libpq's form, target_session_attrs=read-write) follows the
// primary when it is lost: the standby is listed first, the relay writes to the primary; the primary
// is killed (a lost host) or frozen (it answers nothing and closes nothing), and the standby promoted,
// as Patroni would. Synchronous replication: every event acknowledged before is on the standby. Events
// sent while no server is writable wait for the new primary and are acknowledged there; a live
// subscriber gets each once.
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { ensureDatabase, withDatabaseName } from '../../src/store/database.js';
import { TestClient } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { startPrimaryWithReplica, type ReplicaPair } from '../support/replica.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import { until } from '../support/wait.js';
import { serverPass } from '../support/server-pass.js';

let pair: ReplicaPair | undefined;
let relay: TestRelay | undefined;
let proxy: TcpProxy | undefined;

afterEach(async () => {
  await relay?.close();
  await proxy?.close();
  await pair?.stop();
  relay = proxy = pair = undefined;
});

const hostPort = (url: string) => new URL(url).host;

/** A synchronous pair, and a relay whose DATABASE_URL lists the standby first, then the primary (through a proxy if asked). */
async function start(options: { proxied?: boolean } = {}): Promise<{ pair: ReplicaPair; relay: TestRelay; proxy?: TcpProxy }> {
  pair = await startPrimaryWithReplica();
  const admin = new pg.Client({ connectionString: pair.primaryAdminUrl });
  await admin.connect();
  await admin.query("ALTER SYSTEM SET synchronous_standby_names = '*'");
  await admin.query('SELECT pg_reload_conf()');
  await admin.end();
  await ensureDatabase(pair.primaryAdminUrl, 'nostr');
  const primary = new URL(withDatabaseName(pair.primaryAdminUrl, 'nostr'));
  if (options.proxied) proxy = await startTcpProxy(primary.toString());
  const primaryHost = proxy ? hostPort(proxy.url) : primary.host;
  const url = `postgres://${primary.username}:${primary.password}@${hostPort(pair.replicaAdminUrl)},${primaryHost}/nostr?target_session_attrs=read-write`;
  relay = await startTestRelay({ WRITE_TIMEOUT_MS: '90000' }, url);
  return { pair, relay, proxy };
}

async function storedOn(adminUrl: string, pubkey: string): Promise<string[]> {
  const db = new pg.Client({ connectionString: withDatabaseName(adminUrl, 'nostr') });
  await db.connect();
  try {
    const { rows } = await db.query<{ id: string }>(`SELECT encode(id, 'hex') AS id FROM events WHERE pubkey = $1`, [Buffer.from(pubkey, 'hex')]);
    return rows.map((r) => r.id).sort();
  } finally {
    await db.end();
  }
}

/** Publishes before, during (while `lose` runs and until `promote`) and after; checks the new primary and the subscriber. */
async function failover(lose: () => Promise<void>, promote: () => Promise<void>): Promise<void> {
  const signer = newSigner();
  const publisher = await TestClient.connect(relay!.url);
  const subscriber = await TestClient.connect(relay!.url);
  subscriber.send(['REQ', 'live', { authors: [signer.pubkey] }]);
  await subscriber.waitFor((m) => m[0] === 'EOSE');
  const make = (i: number) => signer.sign({ kind: 1, created_at: now(), tags: [], content: `failover ${i}` });

  const before = Array.from({ length: 10 }, (_, i) => make(i));
  for (const e of before) expect(await publisher.publish(e, 90_000)).toEqual([true, '']);
  await lose();
  // Sent while no server is writable: each waits for the promotion, then is acknowledged.
  const during = Array.from({ length: 10 }, (_, i) => make(100 + i));
  const answers = Promise.all(during.map((e) => publisher.publish(e, 90_000)));
  // Memory answers what this process wrote before the loss, although the database cannot be read.
  expect((await publisher.query('during', { ids: before.map((e) => e.id) })).map((e) => e.id).sort()).toEqual(before.map((e) => e.id).sort());
  await promote();
  for (const [accepted, message] of await answers) expect([accepted, message.startsWith('duplicate:') ? '' : message]).toEqual([true, '']);
  const after = Array.from({ length: 10 }, (_, i) => make(200 + i));
  for (const e of after) expect(await publisher.publish(e, 90_000)).toEqual([true, '']);

  const all = [...before, ...during, ...after].map((e) => e.id).sort();
  expect(await storedOn(pair!.replicaAdminUrl, signer.pubkey)).toEqual(all);
  await until(() => subscriber.messages.filter((m) => m[0] === 'EVENT').length >= all.length, 'every event delivered live', 60_000);
  expect(subscriber.messages.filter((m) => m[0] === 'EVENT').map((m) => (m[2] as NostrEvent).id).sort()).toEqual(all);
  expect(relay!.db.finder?.serving).toBe(hostPort(pair!.replicaAdminUrl));
  expect(relay!.db.finder?.changes).toBe(1);
  publisher.ws.close();
  subscriber.ws.close();
}

describe.skipIf(serverPass)('DATABASE_URL with several hosts: a lost primary', () => {
  it('killed: writes go to the promoted standby; nothing acknowledged is lost and the subscriber gets every event once', async () => {
    await start();
    await failover(
      () => pair!.killPrimary(),
      () => pair!.promoteReplica(),
    );
  }, 240_000);

  it('frozen (no answer, no close): its connections are cut once the standby is promoted, and writes move there', async () => {
    await start({ proxied: true });
    await failover(
      async () => proxy!.freeze(),
      () => pair!.promoteReplica(),
    );
  }, 240_000);
});
