// The operator's read rules on a running relay: broad filters refused (READ_REFUSE_BROAD), limits
// capped by filter shape (READ_LIMIT_CAPS), kinds served to authenticated readers only
// (READ_AUTH_KINDS), each counted in pgrelay_read_rules_total. Relay A answers from its hot tier,
// relay B (same database, no tier) from PostgreSQL: the narrowed filter holds on both paths.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { NegentropyInitiator, NegentropySet } from '../../src/nostr/negentropy.js';
import { TestClient } from '../support/client.js';
import { ids, newestFirst, unique } from '../support/events.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

const RULES = { READ_REFUSE_BROAD: 'true', READ_LIMIT_CAPS: 'authors:10,tags:7,default:15', READ_AUTH_KINDS: '30023' };

let a: TestRelay; // hot tier on
let b: TestRelay; // hot tier off, same database
const clients: TestClient[] = [];
beforeAll(async () => {
  a = await startTestRelay({ ...RULES, HOT_TIER_MB: '64' });
  b = await startTestRelay({ ...RULES, HOT_TIER_MB: '0' }, a.config.DATABASE_URL);
});
afterAll(async () => {
  clients.forEach((c) => c.close());
  await b?.close();
  await a?.close();
});

const relays = () => ({ memory: a, database: b });
async function connect(relay = a, as?: ReturnType<typeof newSigner>): Promise<TestClient> {
  const c = await TestClient.connect(relay.url);
  clients.push(c);
  if (as) expect(await c.auth(as)).toEqual([true, '']);
  return c;
}

/** A series' value in a relay's /metrics (0 while it has none). */
async function metric(relay: TestRelay, series: string): Promise<number> {
  const text = await (await fetch(`${relay.url.replace('ws', 'http')}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return Number(line?.slice(series.length + 1) ?? 0);
}
const ruleCount = (relay: TestRelay, rule: string, outcome: 'refused' | 'narrowed') => metric(relay, `pgrelay_read_rules_total{rule="${rule}",outcome="${outcome}"}`);
const fromMemory = () => metric(a, 'pgrelay_hot_tier_reqs_total{answered="memory"}');

let n = 0;
const sub = () => `s${++n}`;

/** NIP-77 with an empty local set: the ids the relay holds for `filter` (everything it has, we need). */
async function negentropyIds(c: TestClient, filter: object): Promise<string[]> {
  const subId = sub();
  const initiator = new NegentropyInitiator(NegentropySet.fromRecords([]));
  const need: string[] = [];
  let from = c.mark;
  c.send(['NEG-OPEN', subId, filter, initiator.initiate().toString('hex')]);
  for (;;) {
    const reply = await c.waitFor((m) => (m[0] === 'NEG-MSG' || m[0] === 'NEG-ERR') && m[1] === subId, 10_000, from);
    from = c.messages.indexOf(reply) + 1;
    if (reply[0] === 'NEG-ERR') throw new Error(`NEG-ERR ${reply[2]}`);
    const r = initiator.reconcile(Buffer.from(reply[2] as string, 'hex'));
    need.push(...r.need);
    if (!r.next) break;
    c.send(['NEG-MSG', subId, r.next.toString('hex')]);
  }
  c.send(['NEG-CLOSE', subId]);
  return need.sort();
}

describe('READ_REFUSE_BROAD', () => {
  it('refuses a REQ or COUNT with a filter that names nothing and gives no since, with CLOSED blocked:', async () => {
    const c = await connect();
    expect(await c.refused(sub(), { limit: 100 })).toMatch(/^blocked: a filter must name ids, authors, kinds, tags or a search, or give since/);
    expect(await c.refused(sub(), { kinds: [1] }, {})).toMatch(/^blocked: /);
    expect(await c.refused(sub(), { until: now(), limit: 10 })).toMatch(/^blocked: /);
    expect(await c.refused(sub(), { limit: 0 })).toMatch(/^blocked: /);
    await expect(c.count(sub(), {})).rejects.toThrow(/CLOSED: blocked: /);
  });

  it('answers filters that name a list, a tag or a search, or give since', async () => {
    const c = await connect();
    const word = `broad${Math.random().toString(36).slice(2, 8)}`; // one search word
    const note = newSigner().sign({ content: `a note about ${word}`, tags: [['t', word]] });
    expect(await c.publish(note)).toEqual([true, '']);
    expect(await c.fetch(sub(), { ids: [note.id] })).toEqual([note]);
    expect(await c.fetch(sub(), { authors: [note.pubkey] })).toEqual([note]);
    expect(await c.fetch(sub(), { '#t': [word] })).toEqual([note]);
    expect(await c.fetch(sub(), { search: word })).toEqual([note]);
    expect(ids(await c.fetch(sub(), { kinds: [1], limit: 1000 }))).toContain(note.id);
    expect(ids(await c.fetch(sub(), { since: note.created_at, limit: 1000 }))).toContain(note.id);
  });

  it('counts each refusal in pgrelay_read_rules_total{rule="broadFilter"}', async () => {
    const c = await connect();
    const before = await ruleCount(a, 'broadFilter', 'refused');
    await c.refused(sub(), { limit: 5 });
    await c.refused(sub(), {});
    await expect(c.count(sub(), {})).rejects.toThrow(/blocked/);
    expect((await ruleCount(a, 'broadFilter', 'refused')) - before).toBe(3);
  });

  it('is off by default: a broad filter is answered', async () => {
    const open = await startTestRelay();
    try {
      const c = await TestClient.connect(open.url);
      const note = newSigner().sign({ content: unique('everyone') });
      expect(await c.publish(note)).toEqual([true, '']);
      expect(await c.fetch(sub(), { limit: 5 })).toEqual([note]);
      c.close();
    } finally {
      await open.close();
    }
  });
});

describe('READ_LIMIT_CAPS', () => {
  const alice = newSigner();
  const tag = unique('capped');
  const t = now() - 100;
  const notes = Array.from({ length: 25 }, (_, i) => alice.sign({ content: `note ${i}`, created_at: t + i, tags: [['t', tag]] }));
  const newest = (k: number) => ids(newestFirst(notes).slice(0, k));

  beforeAll(async () => {
    const c = await connect();
    for (const e of notes) expect(await c.publish(e)).toEqual([true, '']);
  });

  it.each(['memory', 'database'] as const)('gives a REQ filter asking 5,000 at most its shape\'s cap, the newest first (%s)', async (path) => {
    const c = await connect(relays()[path]);
    expect(ids(await c.fetch(sub(), { authors: [alice.pubkey], limit: 5000 }))).toEqual(newest(10));
    expect(ids(await c.fetch(sub(), { '#t': [tag], kinds: [1], limit: 5000 }))).toEqual(newest(7));
    // ids is not named: the default cap.
    expect(ids(await c.fetch(sub(), { ids: ids(notes), limit: 5000 }))).toEqual(newest(15));
    expect(ids(await c.fetch(sub(), { kinds: [1], since: t, until: t + 24, limit: 5000 }))).toEqual(newest(15));
  });

  it('keeps a limit below the cap', async () => {
    const c = await connect();
    expect(ids(await c.fetch(sub(), { authors: [alice.pubkey], limit: 3 }))).toEqual(newest(3));
  });

  it('caps a filter without limit too, whose limit is DEFAULT_LIMIT', async () => {
    const c = await connect();
    expect(await c.fetch(sub(), { authors: [alice.pubkey] })).toHaveLength(10);
  });

  it('caps no COUNT and no NEG-OPEN: they concern every matching event', async () => {
    const c = await connect();
    expect(await c.count(sub(), { authors: [alice.pubkey], limit: 5000 })).toBe(25);
    expect(await negentropyIds(c, { authors: [alice.pubkey] })).toEqual(ids(notes).sort());
  });

  it('counts each REQ it capped in pgrelay_read_rules_total{rule="limitCaps",outcome="narrowed"}', async () => {
    const c = await connect();
    const before = await ruleCount(a, 'limitCaps', 'narrowed');
    await c.fetch(sub(), { authors: [alice.pubkey], limit: 5000 }, { '#t': [tag], limit: 5000 }); // one REQ, two filters capped
    await c.fetch(sub(), { authors: [alice.pubkey], limit: 11 });
    await c.fetch(sub(), { authors: [alice.pubkey], limit: 10 }); // at the cap: not narrowed
    await c.count(sub(), { authors: [alice.pubkey], limit: 5000 });
    expect((await ruleCount(a, 'limitCaps', 'narrowed')) - before).toBe(2);
  });
});

describe('READ_AUTH_KINDS', () => {
  const alice = newSigner();
  const carol = newSigner(); // authenticates, writes nothing
  const topic = unique('topic');
  const article = alice.sign({ kind: 30023, tags: [['d', 'first'], ['t', topic]], content: 'members only' });
  const note = alice.sign({ kind: 1, tags: [['t', topic]], content: 'for everyone' });

  beforeAll(async () => {
    const c = await connect(a, alice);
    for (const e of [article, note]) expect(await c.publish(e)).toEqual([true, '']);
  });

  it('answers a REQ, COUNT or NEG-OPEN naming one from nobody with auth-required:', async () => {
    const c = await connect();
    expect(await c.refused(sub(), { kinds: [30023] })).toMatch(/^auth-required: kind 30023 is served to authenticated users only/);
    expect(await c.refused(sub(), { kinds: [1] }, { kinds: [1, 30023], authors: [alice.pubkey] })).toMatch(/^auth-required: /);
    await expect(c.count(sub(), { kinds: [30023] })).rejects.toThrow(/CLOSED: auth-required: /);
    await expect(negentropyIds(c, { kinds: [30023] })).rejects.toThrow(/NEG-ERR auth-required: /);
  });

  it('serves them after AUTH, to any key, not only their author', async () => {
    const c = await connect(a, carol);
    expect(await c.fetch(sub(), { kinds: [30023], authors: [alice.pubkey] })).toEqual([article]);
    expect(await c.count(sub(), { kinds: [30023], authors: [alice.pubkey] })).toBe(1);
    expect(ids(await c.fetch(sub(), { authors: [alice.pubkey] }))).toEqual(ids(newestFirst([article, note])));
  });

  it.each(['memory', 'database'] as const)('leaves them out of a filter without kinds from nobody (%s)', async (path) => {
    const c = await connect(relays()[path]);
    const memoryBefore = await fromMemory();
    expect(await c.fetch(sub(), { authors: [alice.pubkey] })).toEqual([note]);
    expect(await c.fetch(sub(), { ids: [article.id, note.id] })).toEqual([note]);
    expect(await c.fetch(sub(), { '#t': [topic] })).toEqual([note]);
    expect(await c.count(sub(), { authors: [alice.pubkey] })).toBe(1);
    expect(await negentropyIds(c, { authors: [alice.pubkey] })).toEqual([note.id]);
    if (path === 'memory') expect((await fromMemory()) - memoryBefore).toBe(3);
  });

  it('never delivers them live to a subscription from nobody', async () => {
    const anonymous = await connect();
    const member = await connect(a, carol);
    await anonymous.query('live', { authors: [alice.pubkey] });
    await member.query('live', { authors: [alice.pubkey] });
    const publisher = await connect(a, alice);
    const fresh = alice.sign({ kind: 30023, tags: [['d', unique('d')]], content: 'new article' });
    const after = alice.sign({ kind: 1, content: unique('after') });
    expect(await publisher.publish(fresh)).toEqual([true, '']);
    expect(await publisher.publish(after)).toEqual([true, '']);
    await member.waitFor((m) => m[0] === 'EVENT' && m[1] === 'live' && (m[2] as NostrEvent).id === after.id);
    await anonymous.waitFor((m) => m[0] === 'EVENT' && m[1] === 'live' && (m[2] as NostrEvent).id === after.id);
    expect(ids(member.liveEvents('live'))).toEqual([fresh.id, after.id]);
    expect(ids(anonymous.liveEvents('live'))).toEqual([after.id]);
  });

  it('counts refusals and narrowed filters in pgrelay_read_rules_total{rule="authKinds"}', async () => {
    const c = await connect();
    const [refused, narrowed] = [await ruleCount(a, 'authKinds', 'refused'), await ruleCount(a, 'authKinds', 'narrowed')];
    await c.refused(sub(), { kinds: [30023] });
    await c.fetch(sub(), { authors: [alice.pubkey] });
    await c.fetch(sub(), { kinds: [1], authors: [alice.pubkey] }); // names kinds, none of them: as it is
    expect((await ruleCount(a, 'authKinds', 'refused')) - refused).toBe(1);
    expect((await ruleCount(a, 'authKinds', 'narrowed')) - narrowed).toBe(1);
  });
});
