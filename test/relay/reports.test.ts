// NIP-56 reports feeding the moderation queue, against real relays, a real database and real sockets:
// whose reports count, the reasons NIP-86 listeventsneedingmoderation gives, reported pubkeys, the
// admin's decisions (allowevent, banevent, dismisspubkeyreports), REPORTS_HIDE_AT in REQ, COUNT and
// live delivery (from the hot tier and from PostgreSQL, in this process and another one), the
// catch-up of reports stored while no relay ran, the queue's length on the status page and /metrics,
// and `npm run cli -- moderation`.
import { npubEncode } from 'nostr-tools/nip19';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { openDatabase } from '../../src/store/database.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeEvent } from '../../src/store/write.js';
import { runCli } from '../support/cli.js';
import { TestClient } from '../support/client.js';
import { createTestDatabase } from '../support/database.js';
import { unique } from '../support/events.js';
import { newSigner, type Signer } from '../support/keys.js';
import { httpOf, rpc } from '../support/management.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { until } from '../support/wait.js';

const admin = newSigner();
const stranger = newSigner();
/** Members of the stand-in web of trust (the relays are given `inWeb`). */
const web = new Set<string>();
const inWeb = (pubkey: string) => web.has(pubkey);
const member = () => {
  const s = newSigner();
  web.add(s.pubkey);
  return s;
};

const env = { ADMIN_PUBKEYS: npubEncode(admin.pubkey), REPORTS_HIDE_AT: '2' };
/** A holds a hot tier, so its answers come from memory; B, on the same database, has none. */
let a: TestRelay;
let b: TestRelay;
let ca: TestClient;
let cb: TestClient;
beforeAll(async () => {
  a = await startTestRelay({ ...env, HOT_TIER_MB: '64' }, undefined, { inWeb });
  b = await startTestRelay({ ...env, HOT_TIER_MB: '0' }, a.config.DATABASE_URL, { inWeb });
  [ca, cb] = [await TestClient.connect(a.url), await TestClient.connect(b.url)];
});
afterAll(async () => {
  ca?.close();
  cb?.close();
  await b?.close();
  await a?.close();
});

async function ok(method: string, params: unknown[] = []): Promise<unknown> {
  const r = await rpc(httpOf(a.url), admin, method, params);
  expect(r).toMatchObject({ status: 200 });
  expect(r.body.error).toBeUndefined();
  return r.body.result;
}
const queuedEvents = async () => (await ok('listeventsneedingmoderation')) as Array<{ id: string; reason: string }>;
const queuedPubkeys = async () => (await ok('listpubkeysneedingmoderation')) as Array<{ pubkey: string; reason: string }>;
const entryOf = async (id: string) => (await queuedEvents()).find((e) => e.id === id);

async function publish(event: NostrEvent, client = ca): Promise<void> {
  expect(await client.publish(event)).toEqual([true, '']);
}

/** A report signed by `reporter`, published, and waited for until a relay process has judged it; returns whether it counted. */
async function report(reporter: Signer, tags: string[][]): Promise<boolean> {
  const r = reporter.sign({ kind: 1984, tags, content: unique('report') });
  await publish(r);
  let trusted: boolean | undefined;
  await until(async () => {
    const { rows } = await a.db.pool.query<{ trusted: boolean }>("SELECT trusted FROM reports WHERE id = decode($1, 'hex')", [r.id]);
    trusted = rows[0]?.trusted;
    return trusted !== undefined;
  }, 'the report judged');
  return trusted!;
}

function note(author: Signer = newSigner()): NostrEvent {
  return author.sign({ content: unique('note') });
}

let sub = 0;
const fetchFrom = (client: TestClient, ...filters: object[]) => client.fetch(`s${++sub}`, ...filters);

describe('who counts', () => {
  it("an admin's report puts the reported event in the queue, with the reporters and report types as its reason", async () => {
    const n = note();
    await publish(n);
    expect(await report(admin, [['e', n.id, 'spam'], ['p', n.pubkey]])).toBe(true);
    await until(async () => (await entryOf(n.id)) !== undefined, 'the event queued');
    expect(await entryOf(n.id)).toEqual({ id: n.id, reason: '1 reporter: spam (1)' });
  });

  it("anyone else's report is stored and queues nothing", async () => {
    const n = note();
    await publish(n);
    expect(await report(stranger, [['e', n.id, 'spam'], ['p', n.pubkey]])).toBe(false);
    expect(await entryOf(n.id)).toBeUndefined();
    expect(await fetchFrom(ca, { kinds: [1984], authors: [stranger.pubkey], '#e': [n.id] })).toHaveLength(1);
  });

  it("an allowed pubkey's report counts", async () => {
    const n = note();
    await publish(n);
    const moderator = newSigner();
    await ok('allowpubkey', [moderator.pubkey]);
    try {
      // The process that took allowpubkey trusts the moderator at once; another may judge the report
      // before it has read the list (within a second), and the report counts once one trusts it.
      await report(moderator, [['e', n.id, 'illegal']]);
      await until(async () => (await entryOf(n.id))?.reason === '1 reporter: illegal (1)', 'the event queued');
    } finally {
      await ok('unallowpubkey', [moderator.pubkey]);
    }
  });

  it("a web of trust member's report counts", async () => {
    const n = note();
    await publish(n);
    expect(await report(member(), [['e', n.id, 'nudity']])).toBe(true);
    await until(async () => (await entryOf(n.id))?.reason === '1 reporter: nudity (1)', 'the event queued');
  });
});

describe('reasons', () => {
  it('count the distinct reporters of each report type, most given first; a type NIP-56 does not name is other', async () => {
    const n = note();
    await publish(n);
    const [m1, m2] = [member(), member()];
    await report(admin, [['e', n.id, 'spam']]);
    await report(m1, [['e', n.id, 'spam']]);
    await report(m1, [['e', n.id, 'illegal']]);
    await report(m1, [['e', n.id, 'spam']]); // the same reporter again: counted once
    await report(m2, [['e', n.id, 'rude']]);
    await until(async () => (await entryOf(n.id))?.reason === '3 reporters: spam (2), illegal (1), other (1)', 'the reason with every report');
  });
});

describe('reported pubkeys', () => {
  it('a report naming only a pubkey queues the pubkey, listed by listpubkeysneedingmoderation and not among the events', async () => {
    const suspect = newSigner();
    await report(admin, [['p', suspect.pubkey, 'impersonation']]);
    await until(async () => (await queuedPubkeys()).some((e) => e.pubkey === suspect.pubkey), 'the pubkey queued');
    expect((await queuedPubkeys()).find((e) => e.pubkey === suspect.pubkey)).toEqual({ pubkey: suspect.pubkey, reason: '1 reporter: impersonation (1)' });
    expect((await queuedEvents()).map((e) => e.id)).not.toContain(suspect.pubkey);
  });

  it('dismisspubkeyreports clears a pubkey entry, and so does banpubkey', async () => {
    const [kept, banned] = [newSigner(), newSigner()];
    await report(admin, [['p', kept.pubkey, 'spam']]);
    await report(admin, [['p', banned.pubkey, 'spam']]);
    await until(async () => (await queuedPubkeys()).filter((e) => [kept.pubkey, banned.pubkey].includes(e.pubkey)).length === 2, 'both queued');
    expect(await ok('dismisspubkeyreports', [npubEncode(kept.pubkey)])).toBe(true);
    expect(await ok('banpubkey', [banned.pubkey, 'spam'])).toBe(true);
    const listed = (await queuedPubkeys()).map((e) => e.pubkey);
    expect(listed).not.toContain(kept.pubkey);
    expect(listed).not.toContain(banned.pubkey);
  });

  it('dismisspubkeyreports refuses a first parameter that is not a pubkey', async () => {
    for (const params of [[], ['A'.repeat(64)], [42], ['note1xyz']]) {
      const r = await rpc(httpOf(a.url), admin, 'dismisspubkeyreports', params);
      expect(r).toMatchObject({ status: 200, body: { result: null, error: 'the first parameter must be a pubkey: 64 lowercase hex characters or npub' } });
    }
  });

  it('supportedmethods lists the queue methods', async () => {
    expect(await ok('supportedmethods')).toEqual(expect.arrayContaining(['listeventsneedingmoderation', 'allowevent', 'banevent', 'listpubkeysneedingmoderation', 'dismisspubkeyreports']));
  });
});

describe("an admin's decisions", () => {
  it('allowevent clears the entry and keeps the event; those who reported it cannot bring it back, a new reporter can', async () => {
    const n = note();
    await publish(n);
    const earlier = member();
    await report(earlier, [['e', n.id, 'spam']]);
    await until(async () => (await entryOf(n.id)) !== undefined, 'the event queued');
    expect(await ok('allowevent', [n.id])).toBe(true);
    expect(await entryOf(n.id)).toBeUndefined();
    expect(await fetchFrom(ca, { ids: [n.id] })).toEqual([n]);

    await report(earlier, [['e', n.id, 'illegal']]);
    expect(await entryOf(n.id)).toBeUndefined();
    await report(admin, [['e', n.id, 'profanity']]);
    await until(async () => (await entryOf(n.id))?.reason === '1 reporter: profanity (1)', 'the event queued again, counting the new reporter only');
  });

  it('banevent removes the event and clears the entry', async () => {
    const n = note();
    await publish(n);
    await report(admin, [['e', n.id, 'illegal']]);
    await until(async () => (await entryOf(n.id)) !== undefined, 'the event queued');
    expect(await ok('banevent', [n.id, 'illegal'])).toBe(true);
    expect(await entryOf(n.id)).toBeUndefined();
    expect(await fetchFrom(ca, { ids: [n.id] })).toEqual([]);
    const { rows } = await a.db.pool.query("SELECT count(*)::int AS n FROM report_targets WHERE target = decode($1, 'hex') AND cleared_at IS NULL", [n.id]);
    expect(rows[0].n).toBe(0);
  });

  it('allowevent and banevent keep their meaning for an event nobody reported', async () => {
    const n = note();
    await publish(n);
    expect(await ok('banevent', [n.id])).toBe(true);
    expect(await ca.publish(n)).toEqual([false, 'blocked: this event is banned from this relay']);
    expect(await ok('allowevent', [n.id])).toBe(true);
    await publish(n);
    expect(await fetchFrom(ca, { ids: [n.id] })).toEqual([n]);
  });
});

describe('REPORTS_HIDE_AT=2', () => {
  /** Both processes withhold `id` (A's reports reach B through the database). */
  const withheldEverywhere = (id: string) => until(() => [a, b].every((r) => r.relay.context.reports.withheld?.has(id) === true), 'withheld by both processes');
  const servedEverywhere = (id: string) => until(() => [a, b].every((r) => r.relay.context.reports.withheld?.has(id) !== true), 'served by both processes');

  it('an event one trusted reporter reported is still served', async () => {
    const n = note();
    await publish(n);
    await report(admin, [['e', n.id, 'spam']]);
    await until(async () => (await entryOf(n.id)) !== undefined, 'the event queued');
    expect(await fetchFrom(ca, { ids: [n.id] })).toEqual([n]);
    expect(a.relay.context.reports.withheld?.has(n.id) ?? false).toBe(false);
  });

  it('an event two trusted reporters reported is withheld from REQ and COUNT, answered from memory and from PostgreSQL', async () => {
    const author = newSigner();
    const [hidden, shown] = [note(author), note(author)];
    await publish(hidden);
    await publish(shown);
    await report(admin, [['e', hidden.id, 'spam']]);
    await report(member(), [['e', hidden.id, 'spam']]);
    await withheldEverywhere(hidden.id);

    const memoryBefore = a.relay.context.tier!.stats.memory;
    expect(await fetchFrom(ca, { authors: [author.pubkey] })).toEqual([shown]);
    expect(await fetchFrom(ca, { ids: [hidden.id] })).toEqual([]);
    expect(a.relay.context.tier!.stats.memory).toBe(memoryBefore + 2); // both answered by the hot tier
    expect(await fetchFrom(cb, { authors: [author.pubkey] })).toEqual([shown]);
    expect(await fetchFrom(cb, { ids: [hidden.id] })).toEqual([]);
    for (const client of [ca, cb]) {
      expect(await client.count(`c${++sub}`, { authors: [author.pubkey] })).toBe(1);
      expect(await client.count(`c${++sub}`, { ids: [hidden.id, shown.id] })).toBe(1);
    }
    expect(await entryOf(hidden.id)).toEqual({ id: hidden.id, reason: '2 reporters: spam (2)' });
  });

  it('an event withheld before it arrives is not delivered live, in this process or another', async () => {
    const author = newSigner();
    const [hidden, shown] = [note(author), note(author)];
    await report(admin, [['e', hidden.id, 'illegal']]);
    await report(member(), [['e', hidden.id, 'illegal']]);
    await withheldEverywhere(hidden.id);
    const [liveA, liveB] = [`live${++sub}`, `live${++sub}`];
    expect(await ca.query(liveA, { authors: [author.pubkey] })).toEqual([]);
    expect(await cb.query(liveB, { authors: [author.pubkey] })).toEqual([]);
    await publish(hidden);
    await publish(shown); // committed after `hidden`: once it arrives, `hidden` would have come before it
    await ca.waitFor((m) => m[0] === 'EVENT' && m[1] === liveA && (m[2] as NostrEvent).id === shown.id);
    await cb.waitFor((m) => m[0] === 'EVENT' && m[1] === liveB && (m[2] as NostrEvent).id === shown.id);
    expect(ca.liveEvents(liveA)).toEqual([shown]);
    expect(cb.liveEvents(liveB)).toEqual([shown]);
    ca.send(['CLOSE', liveA]);
    cb.send(['CLOSE', liveB]);
    // Now stored, it is listed for the admin.
    await until(async () => (await entryOf(hidden.id)) !== undefined, 'the stored event listed');
  });

  it('allowevent serves a withheld event again, in every process', async () => {
    const n = note();
    await publish(n);
    await report(admin, [['e', n.id, 'spam']]);
    await report(member(), [['e', n.id, 'spam']]);
    await withheldEverywhere(n.id);
    expect(await fetchFrom(ca, { ids: [n.id] })).toEqual([]);
    expect(await ok('allowevent', [n.id])).toBe(true);
    expect(await fetchFrom(ca, { ids: [n.id] })).toEqual([n]); // the process that took the call: at once
    await servedEverywhere(n.id);
    expect(await fetchFrom(cb, { ids: [n.id] })).toEqual([n]);
  });
});

describe("the queue's length", () => {
  it('the status page and /metrics show it', async () => {
    const n = note();
    await publish(n);
    await report(admin, [['e', n.id, 'malware']]);
    await until(async () => (await entryOf(n.id)) !== undefined, 'the event queued');
    const [events, pubkeys] = [(await queuedEvents()).length, (await queuedPubkeys()).length];
    expect(events).toBeGreaterThan(0);
    await until(async () => {
      const status = (await (await fetch(`${httpOf(a.url)}status.json`)).json()) as { moderationQueue?: { events: number; pubkeys: number } };
      return status.moderationQueue?.events === events && status.moderationQueue.pubkeys === pubkeys;
    }, 'the status page showing the queue');
    const metrics = await (await fetch(`${httpOf(a.url)}metrics`)).text();
    expect(metrics).toContain(`pgrelay_moderation_queue_entries{target="event"} ${events}\n`);
    expect(metrics).toContain(`pgrelay_moderation_queue_entries{target="pubkey"} ${pubkeys}\n`);
    expect(metrics).toMatch(/^pgrelay_moderation_withheld_events [1-9]\d*$/m);
  });
});

describe('npm run cli -- moderation', () => {
  const cliEnv = () => ({ DATABASE_URL: a.config.DATABASE_URL!, LOG_LEVEL: 'silent', ADMIN_PUBKEYS: admin.pubkey });

  it('queue lists each entry with its reason, reporters and when it was first reported', async () => {
    const n = note();
    await publish(n);
    const before = new Date();
    await report(admin, [['e', n.id, 'spam']]);
    await until(async () => (await entryOf(n.id)) !== undefined, 'the event queued');
    const json = await runCli(['moderation', 'queue', '--json'], cliEnv());
    expect(json.code).toBe(0);
    const entries = JSON.parse(json.stdout) as Array<{ target: string; id: string; reason: string; reporters: number; first_reported: string }>;
    const entry = entries.find((e) => e.id === n.id)!;
    expect(entry).toMatchObject({ target: 'event', reason: '1 reporter: spam (1)', reporters: 1 });
    expect(new Date(entry.first_reported).getTime()).toBeGreaterThanOrEqual(before.getTime() - 1000);
    expect(entries.filter((e) => e.target === 'event').map((e) => e.id)).toEqual((await queuedEvents()).map((e) => e.id));
    expect(entries.filter((e) => e.target === 'pubkey').map((e) => e.id)).toEqual((await queuedPubkeys()).map((e) => e.pubkey));

    const text = await runCli(['moderation', 'queue'], cliEnv());
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(new RegExp(`^events needing moderation \\(${entries.filter((e) => e.target === 'event').length}\\)$`, 'm'));
    expect(text.stdout).toMatch(new RegExp(`^  ${n.id}  first reported \\S+  1 reporter: spam \\(1\\)$`, 'm'));
    expect(text.stdout).toMatch(/^pubkeys needing moderation \(\d+\)$/m);
  });

  it('allow keeps a reported event and dismiss a reported pubkey, as the NIP-86 calls do', async () => {
    const n = note();
    const suspect = newSigner();
    await publish(n);
    await report(admin, [['e', n.id, 'spam']]);
    await report(admin, [['p', suspect.pubkey, 'spam']]);
    await until(async () => (await entryOf(n.id)) !== undefined && (await queuedPubkeys()).some((e) => e.pubkey === suspect.pubkey), 'both queued');
    expect(await runCli(['moderation', 'allow', n.id], cliEnv())).toMatchObject({ code: 0, stdout: expect.stringMatching(/^kept event/) });
    expect(await runCli(['moderation', 'dismiss', npubEncode(suspect.pubkey)], cliEnv())).toMatchObject({ code: 0, stdout: expect.stringMatching(/^kept pubkey/) });
    expect(await entryOf(n.id)).toBeUndefined();
    expect((await queuedPubkeys()).map((e) => e.pubkey)).not.toContain(suspect.pubkey);
    expect(await runCli(['moderation', 'allow', suspect.pubkey.toUpperCase()], cliEnv())).toMatchObject({ code: 2, stderr: expect.stringMatching(/expected an event id/) });
  });
});

describe('reports stored while no relay ran', () => {
  it('are judged at the next start', async () => {
    // The store as an import leaves it: the events written, no relay process to read them.
    const url = await createTestDatabase();
    const config = parseConfig({ DATABASE_URL: url, LOG_LEVEL: 'silent' });
    const db = await openDatabase(config, createLogger('silent'));
    const n = note();
    const r = admin.sign({ kind: 1984, tags: [['e', n.id, 'spam']], content: '' });
    try {
      await writeEvent(db.pool, prepareEvent(n));
      await writeEvent(db.pool, prepareEvent(r));
    } finally {
      await db.close();
    }

    const relay = await startTestRelay({ ADMIN_PUBKEYS: admin.pubkey }, url);
    try {
      const listed = async () => (await rpc(httpOf(relay.url), admin, 'listeventsneedingmoderation')).body.result as Array<{ id: string; reason: string }>;
      await until(async () => (await listed()).length > 0, 'the report judged');
      expect(await listed()).toEqual([{ id: n.id, reason: '1 reporter: spam (1)' }]);
    } finally {
      await relay.close();
    }
  });
});

describe('with WOT_ROOTS', () => {
  it("a member of the relay's web of trust is a trusted reporter; a key outside it cannot even publish the report", async () => {
    const root = newSigner();
    const follower = newSigner();
    const outsider = newSigner();
    const relay = await startTestRelay({ WOT_ROOTS: root.pubkey, WOT_DEPTH: '1', ADMIN_PUBKEYS: npubEncode(admin.pubkey) });
    const client = await TestClient.connect(relay.url);
    try {
      const reported = root.sign({ content: unique('note') });
      expect(await client.publish(reported)).toEqual([true, '']);
      expect(await client.publish(root.sign({ kind: 3, tags: [['p', follower.pubkey]], content: '' }))).toEqual([true, '']);
      const byFollower = () => follower.sign({ kind: 1984, tags: [['e', reported.id, 'spam'], ['p', root.pubkey]], content: unique('report') });
      // The web is computed again shortly after the root's follow list: until then the follower is outside it.
      let r = byFollower();
      await until(async () => (await client.publish(r))[0] || ((r = byFollower()), false), 'the follower inside the web');
      await until(async () => (await relay.db.pool.query("SELECT 1 FROM reports WHERE id = decode($1, 'hex') AND trusted", [r.id])).rowCount === 1, 'the report counted');
      const listed = await rpc(httpOf(relay.url), admin, 'listeventsneedingmoderation', []);
      expect(listed.body.result).toEqual([{ id: reported.id, reason: '1 reporter: spam (1)' }]);

      const fromOutside = outsider.sign({ kind: 1984, tags: [['e', reported.id, 'spam']], content: unique('report') });
      expect(await client.publish(fromOutside)).toEqual([false, "blocked: not in this relay's web of trust"]);
    } finally {
      client.close();
      await relay.close();
    }
  });
});
