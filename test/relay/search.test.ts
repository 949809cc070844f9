// NIP-50 search against the real relay and database: relevance order with ties newest first, limit
// after ranking, every other filter field, phrases, exclusions, OR, ignored extensions, language
// stemming, CJK, hashtags and host names, live delivery by the same matcher, COUNT, refusals, and
// the GIN index serving it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { TestClient } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { until } from '../support/wait.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let client: TestClient;
beforeAll(async () => {
  relay = await startTestRelay();
  client = await TestClient.connect(relay.url);
});
afterAll(async () => {
  client?.close();
  await relay?.close();
});

const alice = newSigner();
const bob = newSigner();
let n = 0;
const sub = () => `s${++n}`;
/** A word no other test uses, so each test searches its own events. */
const unique = (prefix: string) => `${prefix}${Math.random().toString(36).slice(2, 8)}`;

async function publishAll(...events: NostrEvent[]): Promise<void> {
  for (const e of events) expect(await client.publish(e)).toEqual([true, '']);
}
const ids = (events: NostrEvent[]) => events.map((e) => e.id);
const search = (text: string, more: object = {}) => client.fetch(sub(), { search: text, ...more });

describe('NIP-50 search', () => {
  it('orders by relevance, ties newest first, and applies limit after ranking', async () => {
    const w = unique('rank');
    const t = now() - 1000;
    const strong = alice.sign({ content: `${w} ${w} ${w} is everywhere here`, created_at: t });
    const weakOld = alice.sign({ content: `one mention of ${w} in a longer sentence`, created_at: t + 1 });
    const weakNew = alice.sign({ content: `one mention of ${w} in a longer sentence!`, created_at: t + 2 });
    const other = alice.sign({ content: 'nothing to see', created_at: t + 3 });
    await publishAll(strong, weakOld, weakNew, other);
    expect(ids(await search(w))).toEqual([strong.id, weakNew.id, weakOld.id]);
    // The oldest event is the most relevant: limit 1 keeps it, not the newest.
    expect(ids(await search(w, { limit: 1 }))).toEqual([strong.id]);
  });

  it('combines with kinds, authors, since, until and tags', async () => {
    const w = unique('combo');
    const t = now() - 500;
    const a1 = alice.sign({ content: `${w} one`, created_at: t, tags: [['t', 'cats']] });
    const a2 = alice.sign({ kind: 30023, content: `${w} long form`, created_at: t + 10, tags: [['d', 'x'], ['title', 'about it']] });
    const b1 = bob.sign({ content: `${w} by bob`, created_at: t + 20 });
    await publishAll(a1, a2, b1);
    expect(ids(await search(w, { authors: [bob.pubkey] }))).toEqual([b1.id]);
    expect(ids(await search(w, { kinds: [30023] }))).toEqual([a2.id]);
    expect(ids(await search(w, { since: t + 5, until: t + 15 }))).toEqual([a2.id]);
    expect(ids(await search(w, { '#t': ['cats'] }))).toEqual([a1.id]);
    expect(ids(await search(w, { ids: [b1.id, a1.id], authors: [alice.pubkey] }))).toEqual([a1.id]);
  });

  it('honours quoted phrases, -exclusions and OR', async () => {
    const w = unique('phr');
    const t = now() - 400;
    const quick = alice.sign({ content: `${w} the quick brown fox`, created_at: t });
    const brownQuick = alice.sign({ content: `${w} brown and quick`, created_at: t + 1 });
    const dog = alice.sign({ content: `${w} a lazy dog`, created_at: t + 2 });
    await publishAll(quick, brownQuick, dog);
    expect(ids(await search(`${w} "quick brown"`))).toEqual([quick.id]);
    expect(ids(await search(`${w} -dog`)).sort()).toEqual(ids([quick, brownQuick]).sort());
    expect(ids(await search(`${w} -"quick brown"`)).sort()).toEqual(ids([brownQuick, dog]).sort());
    expect(ids(await search(`${w} fox OR dog`)).sort()).toEqual(ids([quick, dog]).sort());
  });

  it('ignores key:value extensions it does not support, and a search with no word matches nothing', async () => {
    const w = unique('ext');
    const e = alice.sign({ content: `${w} with extensions` });
    await publishAll(e);
    expect(ids(await search(`include:spam ${w} nsfw:false domain:example.com`))).toEqual([e.id]);
    expect(await search('include:spam')).toEqual([]);
    expect(await search(`-${w}`)).toEqual([]);
    expect(await search('')).toEqual([]);
  });

  it('language:xx stems the query with that language; without it words match exactly', async () => {
    const w = unique('lang');
    const runs = alice.sign({ content: `${w} she runs every morning` });
    const running = alice.sign({ content: `${w} running shoes` });
    await publishAll(runs, running);
    expect(ids(await search(`${w} running`))).toEqual([running.id]);
    expect(ids(await search(`${w} running language:en`)).sort()).toEqual(ids([runs, running]).sort());
    // An English stop word is dropped from the query, not required.
    expect(ids(await search(`${w} the running language:en`)).sort()).toEqual(ids([runs, running]).sort());
    // German stemming: "Häuser" and "Hauses" share the stem "haus".
    const haus = alice.sign({ content: `${w} das Haus am See` });
    await publishAll(haus);
    expect(ids(await search(`${w} hauses language:de`))).toEqual([haus.id]);
    // An unknown language falls back to exact words.
    expect(await search(`${w} run language:zz`)).toEqual([]);
  });

  it('finds a word its language stems into something it does not begin with, stored and live', async () => {
    // English stems "happy" as "happi", German "häuser" as "haus".
    const w = unique('stem');
    const id = sub();
    await client.query(id, { search: `${w} happy language:en` });
    const happy = alice.sign({ content: `${w} a happy day` });
    const happiness = alice.sign({ content: `${w} happiness` });
    const happen = alice.sign({ content: `${w} it may happen` });
    await publishAll(happy, happiness, happen);
    await until(() => client.liveEvents(id).length >= 2, 'the live matches');
    await new Promise((r) => setTimeout(r, 200));
    expect(ids(client.liveEvents(id)).sort()).toEqual([happy.id, happiness.id].sort());
    expect(ids(await search(`${w} happy language:en`)).sort()).toEqual([happy.id, happiness.id].sort());
    const houses = alice.sign({ content: `${w} zwei Häuser` });
    await publishAll(houses);
    expect(ids(await search(`${w} häuser language:de`))).toEqual([houses.id]);
  });

  it('finds Chinese and Japanese words inside text written without spaces', async () => {
    const w = unique('cjk');
    const ja = alice.sign({ content: `${w} 東京タワーに行きました` });
    const zh = alice.sign({ content: `${w} 我喜欢北京烤鸭` });
    await publishAll(ja, zh);
    expect(ids(await search(`${w} 東京`))).toEqual([ja.id]);
    expect(ids(await search(`${w} タワー`))).toEqual([ja.id]);
    expect(ids(await search(`${w} 北京烤鸭`))).toEqual([zh.id]);
    expect(ids(await search(`${w} 鸭`))).toEqual([zh.id]);
    expect(await search(`${w} 京北`)).toEqual([]);
  });

  it('finds hashtags, host names, short words and profiles', async () => {
    const w = unique('misc');
    const tagged = alice.sign({ content: `${w} a post`, tags: [['t', 'bitcoin']] });
    const link = alice.sign({ content: `${w} read https://example.com/some/page now` });
    const short = alice.sign({ content: `${w} plan b is x` });
    const profile = newSigner().sign({ kind: 0, content: JSON.stringify({ name: `${w}`, about: 'I build relays', picture: 'https://x.y/z.png' }) });
    await publishAll(tagged, link, short, profile);
    expect(ids(await search(`${w} #bitcoin`))).toEqual([tagged.id]);
    expect(ids(await search(`${w} example.com`))).toEqual([link.id]);
    expect(ids(await search(`${w} "plan b"`))).toEqual([short.id]);
    expect(ids(await search(`${w} relays`, { kinds: [0] }))).toEqual([profile.id]);
    expect(await search(`${w} png`, { kinds: [0] })).toEqual([]); // a profile's picture is not searched
  });

  it('does not search kinds that carry no text', async () => {
    const w = unique('kind');
    await publishAll(alice.sign({ kind: 7, content: w }), alice.sign({ kind: 4, content: w, tags: [['p', bob.pubkey]] }));
    expect(await search(w)).toEqual([]);
  });

  it('delivers new matching events to an open search subscription, and only those', async () => {
    const w = unique('live');
    const id = sub();
    await client.query(id, { search: `${w} running language:en`, kinds: [1] });
    const match = alice.sign({ content: `${w} I ran, and runs are fun` });
    const phraseMiss = alice.sign({ content: `${w} walking only` });
    const wrongKind = alice.sign({ kind: 7, content: `${w} runs` });
    await publishAll(phraseMiss, wrongKind, match);
    await until(() => client.liveEvents(id).length >= 1, 'the live match');
    await new Promise((r) => setTimeout(r, 200));
    expect(ids(client.liveEvents(id))).toEqual([match.id]);
  });

  it('counts with a search', async () => {
    const w = unique('count');
    await publishAll(alice.sign({ content: `${w} a` }), bob.sign({ content: `${w} b` }), bob.sign({ content: 'not it' }));
    expect(await client.count(sub(), { search: w })).toBe(2);
    expect(await client.count(sub(), { search: w, authors: [bob.pubkey] })).toBe(1);
  });

  // Found by the fuzzer (bench/lib/fuzz.ts): a language search waits for PostgreSQL to stem its words.
  it('ends a language search closed while its words are being stemmed: no EOSE, no events, no subscription left', async () => {
    const w = unique('closing');
    await publishAll(alice.sign({ content: `${w} running` }));
    const open = relay.relay.context.subscriptions.size;
    const c = await TestClient.connect(relay.url);
    c.send(['REQ', 'stemming', { search: `${w} running language:en` }]);
    c.send(['CLOSE', 'stemming']);
    await c.fetch('later', { ids: ['0'.repeat(64)] });
    await new Promise((r) => setTimeout(r, 300));
    expect(c.messages.filter((m) => m[1] === 'stemming')).toEqual([]);
    expect(relay.relay.context.subscriptions.size).toBe(open);
    c.close();
  });

  it('leaves no subscription behind when the connection closes while a language search is being stemmed', async () => {
    const open = relay.relay.context.subscriptions.size;
    const c = await TestClient.connect(relay.url);
    c.send(['REQ', 'stemming', { search: `${unique('gone')} running language:en` }]);
    c.close();
    await c.closed();
    await new Promise((r) => setTimeout(r, 300));
    expect(relay.relay.context.subscriptions.size).toBe(open);
  });

  it('refuses a search that is not a string or is too long', async () => {
    expect(await client.refused(sub(), { search: 5 })).toBe('invalid: "search" must be a string');
    expect(await client.refused(sub(), { search: 'x'.repeat(513) })).toBe('invalid: "search" is longer than 512 characters');
  });

  it('is served by the GIN index events_search', async () => {
    const client2 = await relay.db.pool.connect();
    try {
      await client2.query('SET enable_seqscan = off');
      const { rows } = await client2.query(`EXPLAIN SELECT id FROM events WHERE search @@ $1::tsquery`, ["'nostr' & 'relay'"]);
      expect(rows.map((r) => r['QUERY PLAN']).join('\n')).toMatch(/Bitmap Index Scan on events_search/);
    } finally {
      client2.release();
    }
  });
});
