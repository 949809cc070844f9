// NIP-01 REQ / CLOSE: filter semantics, result order, limits, EOSE, subscription lifecycle
// (protocol.md 1.7-1.9). The relay runs with DEFAULT_LIMIT=5 and MAX_LIMIT=10 so the caps are cheap
// to observe.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { TestClient } from '../support/client.js';
import { ids, newestFirst, randomHex64, unique } from '../support/events.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let client: TestClient;
let publisher: TestClient;
beforeAll(async () => {
  relay = await startTestRelay({ DEFAULT_LIMIT: '5', MAX_LIMIT: '10' });
  client = await TestClient.connect(relay.url);
  publisher = await TestClient.connect(relay.url);
});
afterAll(async () => {
  client.close();
  publisher.close();
  await relay.close();
});

const T = now() - 10_000; // stored events live in the past, clear of the created_at window

async function publishAll(events: NostrEvent[]): Promise<void> {
  for (const e of events) expect(await publisher.publish(e)).toEqual([true, '']);
}

/** Opens a subscription and waits for its EOSE; live events can then be read with liveEvents. */
async function subscribe(c: TestClient, subId: string, ...filters: object[]): Promise<NostrEvent[]> {
  return c.query(subId, ...filters); // stays open for live events
}

describe('REQ filter fields', () => {
  it('ids: returns exactly the listed events', async () => {
    const a = newSigner();
    const [e1, e2, e3] = [1, 2, 3].map((i) => a.sign({ created_at: T + i }));
    await publishAll([e1, e2, e3]);
    expect(await client.fetch('ids', { ids: [e1.id, e3.id] })).toEqual([e3, e1]);
  });

  it('authors: returns only those authors\' events', async () => {
    const [a, b, c] = [newSigner(), newSigner(), newSigner()];
    const events = [a, b, c].map((s, i) => s.sign({ created_at: T + i }));
    await publishAll(events);
    expect(await client.fetch('authors', { authors: [a.pubkey, c.pubkey] })).toEqual([events[2], events[0]]);
  });

  it('kinds: returns only the listed kinds', async () => {
    const a = newSigner();
    const k1 = a.sign({ kind: 1, created_at: T });
    const k7 = a.sign({ kind: 7, created_at: T + 1 });
    const k1111 = a.sign({ kind: 1111, created_at: T + 2 });
    await publishAll([k1, k7, k1111]);
    expect(await client.fetch('kinds', { authors: [a.pubkey], kinds: [1, 1111] })).toEqual([k1111, k1]);
  });

  it('kinds alone: a kind-only filter returns the events of that kind', async () => {
    const kind = 40_000 + Math.floor(Math.random() * 20_000); // an unused regular kind
    const a = newSigner();
    const match = a.sign({ kind, created_at: T });
    await publishAll([match, a.sign({ kind: kind + 1, created_at: T })]);
    expect(await client.fetch('kind-only', { kinds: [kind] })).toEqual([match]);
  });

  it('#t: matches the tag value exactly and case-sensitively, never by prefix', async () => {
    const v = unique('nostr');
    const a = newSigner();
    const exact = a.sign({ tags: [['t', v]], created_at: T });
    await publishAll([exact, a.sign({ tags: [['t', v.toUpperCase()]], created_at: T }), a.sign({ tags: [['t', v + 'ich']], created_at: T })]);
    expect(await client.fetch('tag-exact', { '#t': [v] })).toEqual([exact]);
  });

  it('#e and #E are different tags (tag names are case-sensitive)', async () => {
    const target = randomHex64();
    const a = newSigner();
    const lower = a.sign({ tags: [['e', target]], created_at: T });
    const upper = a.sign({ tags: [['E', target]], created_at: T + 1 });
    await publishAll([lower, upper]);
    expect(await client.fetch('tag-e', { '#e': [target] })).toEqual([lower]);
    expect(await client.fetch('tag-E', { '#E': [target] })).toEqual([upper]);
  });

  it('#x matches only the first value of a tag (element 1), not later elements', async () => {
    const [v1, v2] = [unique(), unique()];
    const e = newSigner().sign({ tags: [['t', v1, v2]], created_at: T });
    await publishAll([e]);
    expect(await client.fetch('first-value', { '#t': [v1] })).toEqual([e]);
    expect(await client.fetch('second-value', { '#t': [v2] })).toEqual([]);
  });

  it('#x with several values matches any of them (OR within one tag letter)', async () => {
    const [v1, v2, v3] = [unique(), unique(), unique()];
    const a = newSigner();
    const [e1, e2, e3] = [v1, v2, v3].map((v, i) => a.sign({ tags: [['t', v]], created_at: T + i }));
    await publishAll([e1, e2, e3]);
    expect(await client.fetch('tag-or', { '#t': [v1, v3] })).toEqual([e3, e1]);
  });

  it('#e AND #p: two tag letters in one filter must both match', async () => {
    const [e, p] = [randomHex64(), randomHex64()];
    const a = newSigner();
    const both = a.sign({ tags: [['e', e], ['p', p]], created_at: T });
    await publishAll([both, a.sign({ tags: [['e', e]], created_at: T + 1 }), a.sign({ tags: [['p', p]], created_at: T + 2 })]);
    expect(await client.fetch('tag-and', { '#e': [e], '#p': [p] })).toEqual([both]);
  });

  it('conditions of one filter are ANDed (authors and kinds and #t)', async () => {
    const [a, b] = [newSigner(), newSigner()];
    const v = unique();
    const hit = a.sign({ kind: 1, tags: [['t', v]], created_at: T });
    await publishAll([hit, a.sign({ kind: 7, tags: [['t', v]], created_at: T }), b.sign({ kind: 1, tags: [['t', v]], created_at: T })]);
    expect(await client.fetch('and', { authors: [a.pubkey], kinds: [1], '#t': [v] })).toEqual([hit]);
  });

  it('since and until are inclusive', async () => {
    const a = newSigner();
    const events = [-2, -1, 0, 1, 2].map((d) => a.sign({ created_at: T + d }));
    await publishAll(events);
    const found = await client.fetch('window', { authors: [a.pubkey], since: T - 1, until: T + 1 });
    expect(found.map((e) => e.created_at)).toEqual([T + 1, T, T - 1]);
  });

  it('since alone and until alone bound one side only', async () => {
    const a = newSigner();
    const events = [0, 1, 2].map((d) => a.sign({ created_at: T + d }));
    await publishAll(events);
    expect((await client.fetch('since', { authors: [a.pubkey], since: T + 1 })).map((e) => e.created_at)).toEqual([T + 2, T + 1]);
    expect((await client.fetch('until', { authors: [a.pubkey], until: T + 1 })).map((e) => e.created_at)).toEqual([T + 1, T]);
  });

  it('an empty list matches nothing (it does not mean "any")', async () => {
    const a = newSigner();
    await publishAll([a.sign({ created_at: T })]);
    expect(await client.fetch('empty-authors', { authors: [] })).toEqual([]);
    expect(await client.fetch('empty-ids', { ids: [] })).toEqual([]);
    expect(await client.fetch('empty-kinds', { kinds: [], authors: [a.pubkey] })).toEqual([]);
    expect(await client.fetch('empty-tag', { '#t': [], authors: [a.pubkey] })).toEqual([]);
  });

  it('since > until matches nothing', async () => {
    const a = newSigner();
    await publishAll([a.sign({ created_at: T })]);
    expect(await client.fetch('inverted', { authors: [a.pubkey], since: T + 1, until: T - 1 })).toEqual([]);
  });

  it('an empty filter {} matches every event (up to the default limit)', async () => {
    const a = newSigner();
    const newest = Array.from({ length: 6 }, (_, i) => a.sign({ created_at: now() + 600 + i })); // newer than all others
    await publishAll(newest);
    expect(ids(await client.fetch('everything', {}))).toEqual(ids(newestFirst(newest).slice(0, 5)));
  });
});

describe('REQ result order and limits', () => {
  /** Three events on each of three created_at values, published in a scrambled order. */
  function tiedEvents(tag: string) {
    const signers = [newSigner(), newSigner(), newSigner()];
    const events = signers.flatMap((s) => [0, 1, 2].map((d) => s.sign({ kind: 1, created_at: T + d, tags: [['t', tag]] })));
    return { signers, events, scrambled: [...events].sort((x, y) => (x.sig < y.sig ? -1 : 1)) };
  }

  const shapes: Array<[string, (ctx: { tag: string; authors: string[]; events: NostrEvent[] }) => object[]]> = [
    ['ids', ({ events }) => [{ ids: ids(events), limit: 10 }]],
    ['authors', ({ authors }) => [{ authors, limit: 10 }]],
    ['authors + kinds', ({ authors }) => [{ authors, kinds: [1], limit: 10 }]],
    ['#t', ({ tag }) => [{ '#t': [tag], limit: 10 }]],
    ['#t + kinds', ({ tag }) => [{ '#t': [tag], kinds: [1], limit: 10 }]],
    ['two filters', ({ tag, authors }) => [{ '#t': [tag], limit: 10 }, { authors, limit: 10 }]],
  ];

  it.each(shapes)('orders by created_at DESC, then id ASC on ties (%s)', async (_, filters) => {
    const tag = unique('order');
    const { signers, events, scrambled } = tiedEvents(tag);
    await publishAll(scrambled);
    const found = await client.fetch('order', ...filters({ tag, authors: signers.map((s) => s.pubkey), events }));
    expect(ids(found)).toEqual(ids(newestFirst(events)));
  });

  it('limit returns the newest n events, ties broken by lowest id', async () => {
    const tag = unique('limit');
    const { events, scrambled } = tiedEvents(tag);
    await publishAll(scrambled);
    const found = await client.fetch('limit', { '#t': [tag], limit: 4 });
    expect(ids(found)).toEqual(ids(newestFirst(events).slice(0, 4)));
  });

  it('limit applies per filter: each filter of one REQ keeps its own limit', async () => {
    const [a, b] = [newSigner(), newSigner()];
    const aEvents = [0, 1, 2, 3, 4].map((d) => a.sign({ created_at: T + d * 2 }));
    const bEvents = [0, 1, 2, 3, 4].map((d) => b.sign({ created_at: T + d * 2 + 1 }));
    await publishAll([...aEvents, ...bEvents]);
    const found = await client.fetch('per-filter', { authors: [a.pubkey], limit: 2 }, { authors: [b.pubkey], limit: 3 });
    expect(ids(found)).toEqual(ids(newestFirst([...aEvents.slice(3), ...bEvents.slice(2)])));
  });

  it('an event matching two filters of one REQ is sent once (OR with deduplication)', async () => {
    const a = newSigner();
    const v = unique();
    const both = a.sign({ tags: [['t', v]], created_at: T + 1 });
    const onlyAuthor = a.sign({ created_at: T });
    await publishAll([both, onlyAuthor]);
    const found = await client.fetch('dedupe', { authors: [a.pubkey] }, { '#t': [v] }, { ids: [both.id] });
    expect(found).toEqual([both, onlyAuthor]);
  });

  it('applies default_limit (5 here) to a filter without limit', async () => {
    const a = newSigner();
    const events = Array.from({ length: 7 }, (_, i) => a.sign({ created_at: T + i }));
    await publishAll(events);
    const found = await client.fetch('default-limit', { authors: [a.pubkey] });
    expect(ids(found)).toEqual(ids(newestFirst(events).slice(0, 5)));
  });

  it('clamps limit to max_limit (10 here)', async () => {
    const a = newSigner();
    const events = Array.from({ length: 12 }, (_, i) => a.sign({ created_at: T + i }));
    await publishAll(events);
    const found = await client.fetch('max-limit', { authors: [a.pubkey], limit: 1000 });
    expect(ids(found)).toEqual(ids(newestFirst(events).slice(0, 10)));
  });

  it('limit 0 sends EOSE at once with no stored events, then delivers live events', async () => {
    const a = newSigner();
    await publishAll([a.sign({ created_at: T })]);
    expect(await subscribe(client, 'limit0', { authors: [a.pubkey], limit: 0 })).toEqual([]);
    const live = a.sign({ content: 'live after limit 0' });
    await publishAll([live]);
    await client.waitFor((m) => m[0] === 'EVENT' && m[1] === 'limit0');
    expect(client.liveEvents('limit0')).toEqual([live]);
    client.send(['CLOSE', 'limit0']);
  });

  it('sends EOSE even when nothing matches', async () => {
    const from = client.mark;
    client.send(['REQ', 'nothing', { authors: [randomHex64()] }]);
    await client.waitFor((m) => m[0] === 'EOSE' && m[1] === 'nothing', 10_000, from);
    expect(client.messages.slice(from)).toEqual([['EOSE', 'nothing']]);
    client.send(['CLOSE', 'nothing']);
  });
});

describe('subscription lifecycle', () => {
  it('CLOSE stops a subscription: no EVENT for it afterwards', async () => {
    const a = newSigner();
    await subscribe(client, 'to-close', { authors: [a.pubkey] });
    await subscribe(client, 'control', { authors: [a.pubkey] });
    client.send(['CLOSE', 'to-close']);
    await client.sync();
    const e = a.sign({});
    await publishAll([e]);
    await client.sync();
    expect(client.liveEvents('control')).toEqual([e]);
    expect(client.liveEvents('to-close')).toEqual([]);
    client.send(['CLOSE', 'control']);
  });

  it('CLOSE gets no reply', async () => {
    await subscribe(client, 'quiet', { limit: 0 });
    const from = client.mark;
    client.send(['CLOSE', 'quiet']);
    client.send(['CLOSE', 'never-opened']);
    await client.sync();
    expect(client.messages.slice(from).filter((m) => m[0] !== 'COUNT')).toEqual([]);
  });

  it('a REQ reusing an open id replaces it: the old filters stop, the new one gets its own EOSE', async () => {
    const a = newSigner();
    const [old, fresh] = [unique('old'), unique('new')];
    const storedNew = a.sign({ tags: [['t', fresh]], created_at: T });
    await publishAll([storedNew]);
    const from = client.mark;
    await subscribe(client, 'reused', { '#t': [old] });
    expect(await subscribe(client, 'reused', { '#t': [fresh] })).toEqual([storedNew]);
    expect(client.messages.slice(from).filter((m) => m[0] === 'EOSE' && m[1] === 'reused')).toHaveLength(2);
    const liveOld = a.sign({ tags: [['t', old]] });
    const liveNew = a.sign({ tags: [['t', fresh]] });
    await publishAll([liveOld, liveNew]);
    await client.sync();
    expect(client.liveEvents('reused')).toEqual([liveNew]);
    client.send(['CLOSE', 'reused']);
  });

  it('two REQs with one id sent back to back leave only the second one live', async () => {
    const a = newSigner();
    const [first, second] = [unique('first'), unique('second')];
    const from = client.mark;
    client.send(['REQ', 'twice', { '#t': [first] }]);
    client.send(['REQ', 'twice', { '#t': [second] }]);
    await client.waitFor((m) => m[0] === 'EOSE' && m[1] === 'twice', 10_000, from);
    await client.sync();
    const [e1, e2] = [a.sign({ tags: [['t', first]] }), a.sign({ tags: [['t', second]] })];
    await publishAll([e1, e2]);
    // e2 may come before or after the second EOSE (either REQ may have answered first): wait for it.
    await client.waitFor((m) => m[0] === 'EVENT' && m[1] === 'twice' && (m[2] as NostrEvent).id === e2.id, 10_000, from);
    await client.sync();
    expect(client.eventsFor('twice', from)).toEqual([e2]);
    client.send(['CLOSE', 'twice']);
  });

  it('subscription ids belong to one connection: two connections can use the same id independently', async () => {
    const other = await TestClient.connect(relay.url);
    const [a, b] = [newSigner(), newSigner()];
    await subscribe(client, 'shared', { authors: [a.pubkey] });
    await subscribe(other, 'shared', { authors: [b.pubkey] });
    const [ea, eb] = [a.sign({}), b.sign({})];
    await publishAll([ea, eb]);
    await Promise.all([client.sync(), other.sync()]);
    expect(client.liveEvents('shared')).toEqual([ea]);
    expect(other.liveEvents('shared')).toEqual([eb]);

    other.send(['CLOSE', 'shared']); // closing it on one connection leaves the other alone
    const ea2 = a.sign({ content: 'second' });
    await publishAll([ea2]);
    await client.sync();
    expect(client.liveEvents('shared')).toEqual([ea, ea2]);
    client.send(['CLOSE', 'shared']);
    other.close();
  });
});

describe('REQ refusals', () => {
  it.each([
    ['an unknown key', { foo: 1 }],
    ['a multi-letter tag key', { '#tt': ['x'] }],
    ['a bare # key', { '#': ['x'] }],
    ['a __proto__ key', JSON.parse('{"__proto__": {"kinds": [1]}}')],
  ])('refuses %s with CLOSED "unsupported:"', async (_, filter) => {
    expect(await client.refused('unsupported', filter)).toMatch(/^unsupported: /);
  });

  const upper = randomHex64().toUpperCase();
  const short = randomHex64().slice(0, 63);
  it.each([
    ['ids in uppercase hex', { ids: [upper] }],
    ['ids with a 63-char prefix', { ids: [short] }],
    ['authors in uppercase hex', { authors: [upper] }],
    ['authors with a 63-char prefix', { authors: [short] }],
    ['#e in uppercase hex', { '#e': [upper] }],
    ['#e with a 63-char prefix', { '#e': [short] }],
    ['#p in uppercase hex', { '#p': [upper] }],
    ['#p with a 63-char prefix', { '#p': [short] }],
    ['ids that are not an array', { ids: randomHex64() }],
    ['a non-string #t value', { '#t': [1] }],
    ['a kind above 65535', { kinds: [65536] }],
    ['a negative limit', { limit: -1 }],
    ['a float since', { since: 1.5 }],
    ['a string until', { until: '100' }],
    ['a filter that is not an object', 'authors'],
    ['a filter that is an array', [{ kinds: [1] }]],
  ])('refuses %s with CLOSED "invalid:"', async (_, filter) => {
    expect(await client.refused('invalid', filter)).toMatch(/^invalid: /);
  });

  it('refuses an empty subscription id with CLOSED "invalid:"', async () => {
    expect(await client.refused('', {})).toMatch(/^invalid: /);
  });

  it('refuses a subscription id over 64 characters with CLOSED "invalid:", and accepts 64', async () => {
    expect(await client.refused('x'.repeat(65), {})).toMatch(/^invalid: /);
    expect(await client.fetch('y'.repeat(64), { ids: [] })).toEqual([]);
    client.send(['CLOSE', 'y'.repeat(64)]);
  });

  it.each([
    ['a number', 1],
    ['null', null],
    ['an object', {}],
  ])('answers a subscription id that is %s with a NOTICE', async (_, subId) => {
    const from = client.mark;
    client.send(['REQ', subId, {}]);
    expect(await client.notice(from)).toMatch(/^invalid: /);
  });

  it('a refused REQ opens no subscription', async () => {
    const a = newSigner();
    await client.refused('refused-sub', { authors: [a.pubkey], foo: 1 });
    await publishAll([a.sign({})]);
    await client.sync();
    expect(client.eventsFor('refused-sub')).toEqual([]);
  });
});

/** A REQ's stored events, or the CLOSED reason when it is refused: for cases where either is right. */
async function eventsOrRefusal(subId: string, ...filters: object[]): Promise<NostrEvent[] | string> {
  try {
    return await client.fetch(subId, ...filters);
  } catch (err) {
    return (err as Error).message.replace(/^CLOSED: /, '');
  }
}

/** Either answer is right: nothing matches (EOSE with no events), or the filter is refused as invalid. */
function expectNothingOrInvalid(answer: NostrEvent[] | string): void {
  if (typeof answer === 'string') expect(answer).toMatch(/^invalid: /);
  else expect(answer).toEqual([]);
}

// PostgreSQL TEXT cannot hold NUL and pg sends a lone surrogate as U+FFFD: such values must never reach
// the SQL, where they failed the REQ (CLOSED "error:") or matched events tagged U+FFFD that live
// matching (exact JS strings) does not. No stored tag value can hold either.
describe('tag filter values that cannot be stored as PostgreSQL text', () => {
  it('a #t value holding NUL matches nothing (REQ)', async () => {
    expectNothingOrInvalid(await eventsOrRefusal('nul', { '#t': ['a\u0000b'] }));
  });

  it('a #t value holding NUL counts 0 (COUNT)', async () => {
    let answer: number | string;
    try {
      answer = await client.count('nul', { '#t': ['a\u0000b'] });
    } catch (err) {
      answer = (err as Error).message.replace(/^CLOSED: /, '');
    }
    if (typeof answer === 'string') expect(answer).toMatch(/^invalid: /);
    else expect(answer).toBe(0);
  });

  it('a #t value with a lone surrogate does not match an event tagged with U+FFFD', async () => {
    const v = unique();
    const e = newSigner().sign({ tags: [['t', '\ufffd' + v]], created_at: T });
    await publishAll([e]);
    expectNothingOrInvalid(await eventsOrRefusal('surrogate', { '#t': ['\ud800' + v] }));
  });
});
