// WOT_ROOTS: only pubkeys within WOT_DEPTH follows of a root may publish, along the stored follow
// lists; the web follows new lists as members publish them, and WOT_MIN_FOLLOWERS asks for more than
// one follower from the second follow on.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import type { WebOfTrust } from '../../src/policy/web-of-trust.js';
import { startRelay } from '../../src/relay/server.js';
import { openDatabase } from '../../src/store/database.js';
import { TestClient } from '../support/client.js';
import { createTestDatabase } from '../support/database.js';
import { unique } from '../support/events.js';
import { newSigner, now, type Signer } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { until } from '../support/wait.js';

const NOT_IN_WEB = "blocked: not in this relay's web of trust";

const root = newSigner();
const friend = newSigner(); // the root follows them
const friendOfFriend = newSigner(); // the friend follows them
const farther = newSigner(); // the friend of a friend follows them: three follows from the root
const stranger = newSigner();
const admin = newSigner();

let relay: TestRelay;
let client: TestClient;
let web: WebOfTrust;
// Each new follow list is newer than the one before, whoever signs it.
let followListTime = now() - 1000;
const follows = (signer: Signer, ...followed: Signer[]): NostrEvent =>
  signer.sign({ kind: 3, created_at: followListTime++, tags: followed.map((f) => ['p', f.pubkey]), content: '' });
const note = (signer: Signer) => signer.sign({ kind: 1, content: unique('note') });

beforeAll(async () => {
  relay = await startTestRelay({ WOT_ROOTS: root.pubkey, WOT_DEPTH: '2', ADMIN_PUBKEYS: admin.pubkey });
  web = relay.relay.context.policy.webOfTrust!;
  client = await TestClient.connect(relay.url);
  expect(await client.publish(follows(root, friend))).toEqual([true, '']);
  await until(() => web.has(friend.pubkey), 'the root\'s follow joins the web');
  expect(await client.publish(follows(friend, friendOfFriend))).toEqual([true, '']);
  await until(() => web.has(friendOfFriend.pubkey), 'the friend\'s follow joins the web');
  expect(await client.publish(follows(friendOfFriend, farther))).toEqual([true, '']);
});
afterAll(async () => {
  client?.close();
  await relay?.close();
});

describe('web of trust', () => {
  it('lets a root publish', async () => {
    expect(await client.publish(note(root))).toEqual([true, '']);
  });

  it('lets a pubkey the root follows publish', async () => {
    expect(await client.publish(note(friend))).toEqual([true, '']);
  });

  it('lets a pubkey two follows from the root publish at WOT_DEPTH=2', async () => {
    expect(await client.publish(note(friendOfFriend))).toEqual([true, '']);
  });

  it('refuses a pubkey three follows from the root at WOT_DEPTH=2', async () => {
    expect(await client.publish(note(farther))).toEqual([false, NOT_IN_WEB]);
    expect(web.has(farther.pubkey)).toBe(false);
  });

  it("refuses a pubkey outside the web with blocked: not in this relay's web of trust", async () => {
    expect(await client.publish(note(stranger))).toEqual([false, NOT_IN_WEB]);
  });

  it('refuses a follow list from outside the web like any other event', async () => {
    expect(await client.publish(follows(stranger, root))).toEqual([false, NOT_IN_WEB]);
  });

  it('lets ADMIN_PUBKEYS publish from outside the web', async () => {
    expect(await client.publish(note(admin))).toEqual([true, '']);
  });

  it('lets a gift wrap addressed to a member through, and refuses one addressed to an outsider', async () => {
    const throwaway = newSigner();
    const wrap = (to: Signer) => throwaway.sign({ kind: 1059, tags: [['p', to.pubkey]], content: unique('sealed') });
    expect(await client.publish(wrap(friend))).toEqual([true, '']);
    expect(await client.publish(wrap(stranger))).toEqual([false, NOT_IN_WEB]);
  });

  it('lets a request to vanish from outside the web through', async () => {
    const leaving = newSigner();
    expect(await client.publish(leaving.sign({ kind: 62, tags: [['relay', 'ALL_RELAYS']], content: '' }))).toEqual([true, '']);
  });

  it('lets a newly followed pubkey publish once the web is computed again', async () => {
    const newcomer = newSigner();
    expect(await client.publish(note(newcomer))).toEqual([false, NOT_IN_WEB]);
    expect(await client.publish(follows(friend, friendOfFriend, newcomer))).toEqual([true, '']);
    await until(() => web.has(newcomer.pubkey), 'the new follow joins the web');
    expect(await client.publish(note(newcomer))).toEqual([true, '']);
  });

  it('refuses a pubkey again once the follow list that reached it no longer names it', async () => {
    const passing = newSigner();
    expect(await client.publish(follows(friend, friendOfFriend, passing))).toEqual([true, '']);
    await until(() => web.has(passing.pubkey), 'the follow joins the web');
    expect(await client.publish(note(passing))).toEqual([true, '']);
    expect(await client.publish(follows(friend, friendOfFriend))).toEqual([true, '']);
    await until(() => !web.has(passing.pubkey), 'the unfollowed pubkey leaves the web');
    expect(await client.publish(note(passing))).toEqual([false, NOT_IN_WEB]);
  });

  it('says writes are restricted in NIP-11', async () => {
    const info = (await (await fetch(relay.url.replace(/^ws/, 'http'), { headers: { Accept: 'application/nostr+json' } })).json()) as { limitation: { restricted_writes: boolean } };
    expect(info.limitation.restricted_writes).toBe(true);
  });

  it('reports its size, last computation and refusals in /metrics and on the status page', async () => {
    const http = relay.url.replace(/^ws/, 'http');
    const before = web.refusals;
    expect(await client.publish(note(stranger))).toEqual([false, NOT_IN_WEB]);
    const metrics = await (await fetch(`${http}/metrics`)).text();
    const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(metrics)?.[1]);
    expect(value('pgrelay_wot_members')).toBe(web.size);
    expect(value('pgrelay_wot_refusals_total')).toBe(before + 1);
    expect(value('pgrelay_wot_last_refresh_timestamp_seconds')).toBeCloseTo(web.current!.computedAt / 1000, 3);
    expect(value('pgrelay_wot_refresh_failures_total')).toBe(0);
    const status = (await (await fetch(`${http}/status.json`)).json()) as { webOfTrust: Record<string, number> };
    expect(status.webOfTrust).toMatchObject({ members: web.size, computedAt: web.current!.computedAt, refusals: before + 1 });
  });
});

describe('web of trust with WOT_MIN_FOLLOWERS=2', () => {
  const root2 = newSigner();
  const [left, right] = [newSigner(), newSigner()]; // the root follows both
  const both = newSigner(); // left and right follow them
  const [x, y] = [newSigner(), newSigner()]; // left follows both, and they follow each other
  const later = newSigner(); // left follows them, and so does `both`, one follow farther out
  let counted: TestRelay;
  let c: TestClient;

  beforeAll(async () => {
    // The follow lists are stored before the web exists (x and y could not publish theirs into it).
    const open = await startTestRelay();
    const o = await TestClient.connect(open.url);
    for (const list of [follows(root2, left, right), follows(left, both, x, y, later), follows(right, both), follows(x, y), follows(y, x), follows(both, later)])
      expect(await o.publish(list)).toEqual([true, '']);
    o.close();
    await open.close();
    counted = await startTestRelay({ WOT_ROOTS: root2.pubkey, WOT_DEPTH: '3', WOT_MIN_FOLLOWERS: '2' }, open.config.DATABASE_URL);
    c = await TestClient.connect(counted.url);
  });
  afterAll(async () => {
    c?.close();
    await counted?.close();
  });

  it("lets the root's follows publish with the root as their one follower", async () => {
    expect(await c.publish(note(left))).toEqual([true, '']);
  });

  it('lets a pubkey two members nearer the root follow publish', async () => {
    expect(await c.publish(note(both))).toEqual([true, '']);
  });

  it('lets a pubkey publish once a member farther out is its second follower', async () => {
    expect(await c.publish(note(later))).toEqual([true, '']);
  });

  it('refuses pubkeys one member follows, however many outsiders follow them', async () => {
    expect(await c.publish(note(x))).toEqual([false, NOT_IN_WEB]);
    expect(await c.publish(note(y))).toEqual([false, NOT_IN_WEB]);
  });
});

describe('starting with a web of trust', () => {
  it('fails the start when the web cannot be computed, rather than serve without it', async () => {
    const url = await createTestDatabase();
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    await pool.query('ALTER TABLE event_tags RENAME TO event_tags_elsewhere');
    await pool.end();
    const config = parseConfig({ DATABASE_URL: url, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', HOT_TIER_SNAPSHOT: 'false', WOT_ROOTS: root.pubkey });
    const log = createLogger('silent');
    const db = await openDatabase(config, log);
    try {
      await expect(startRelay(config, db, log)).rejects.toThrow(/event_tags/);
    } finally {
      await db.close();
    }
  });
});
