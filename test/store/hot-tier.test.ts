// The hot tier (src/store/hot/tier.ts): REQ and COUNT answered from memory exactly as the store
// answers them (NIP-01 protocol.md 1.5, 1.9; NIP-40; NIP-45), or not at all when the answer may
// reach below the window; checked case by case and against the reference in nip01-reference.ts.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { parseFilter, type FilterLimits } from '../../src/nostr/filter.js';
import { heldBytes, HotTier } from '../../src/store/hot/tier.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import {
  BASE_TIME, eventArb, expirationsAround, filterArb, filtersArb, parseAll, privacyArb, PUBKEYS, referenceCount, referenceReq, resultOrder,
  type Privacy, type RawFilter,
} from './nip01-reference.js';

const LIMITS: FilterLimits = { maxValuesPerArray: 1000, defaultLimit: 25, maxLimit: 60 };
const NOW = BASE_TIME + 20;
const [ALICE, BOB, CAROL] = PUBKEYS;
const BIG = 1e12; // a budget nothing reaches

/** An id that sorts by `n` (ids compare as strings: lower n, lower id). */
const idOf = (n: number) => n.toString(16).padStart(64, '0');

let next = 1000;
function event(t: Partial<NostrEvent> = {}): NostrEvent {
  return { id: idOf(next++), pubkey: ALICE, created_at: BASE_TIME, kind: 1, tags: [], content: '', sig: '0'.repeat(128), ...t };
}

/** A tier holding the whole store: the events, read newest first in one page to the end. */
function wholeStore(events: NostrEvent[], budgetBytes = BIG): HotTier {
  const tier = new HotTier({ budgetBytes });
  tier.addOlder([...events].sort(resultOrder).map(prepareEvent), true);
  return tier;
}

const filter = (f: RawFilter, privacy?: Privacy) => parseAll([f], LIMITS, privacy)[0];
const answerIds = (tier: HotTier, f: RawFilter, now = NOW, privacy?: Privacy) => tier.answer(filter(f, privacy), now)?.map((r) => r.id);
const countOf = (tier: HotTier, filters: RawFilter[], now = NOW) => tier.count(parseAll(filters, LIMITS), now);

describe('ordering', () => {
  it('answers newest first, and on equal created_at the lowest id first', () => {
    const a = event({ id: idOf(3), created_at: BASE_TIME + 1 });
    const b = event({ id: idOf(2), created_at: BASE_TIME });
    const c = event({ id: idOf(1), created_at: BASE_TIME });
    const d = event({ id: idOf(4), created_at: BASE_TIME + 2 });
    expect(answerIds(wholeStore([b, a, d, c]), {})).toEqual([d.id, a.id, c.id, b.id]);
  });

  it('places events that arrive out of order by created_at and id', () => {
    const tier = wholeStore([]);
    const events = [5, 1, 9, 3, 3, 7, 0, 9].map((dt, i) => event({ id: idOf(100 - i), created_at: BASE_TIME + dt }));
    for (const e of events) tier.add(prepareEvent(e));
    expect(answerIds(tier, { limit: 60 })).toEqual([...events].sort(resultOrder).map((e) => e.id));
  });

  it('raw is the canonical JSON of the event', () => {
    const e = event({ content: 'hi "there"\n', tags: [['t', 'x']] });
    expect(wholeStore([e]).answer(filter({}), NOW)?.map(({ id, raw }) => ({ id, raw }))).toEqual([{ id: e.id, raw: prepareEvent(e).raw }]);
  });
});

describe('limit', () => {
  it('gives the newest `limit` matches of the filter', () => {
    const events = Array.from({ length: 10 }, (_, i) => event({ created_at: BASE_TIME + i }));
    expect(answerIds(wholeStore(events), { limit: 3 })).toEqual([events[9].id, events[8].id, events[7].id]);
  });

  it('limit 0 answers nothing at once, also before the fill', () => {
    expect(answerIds(new HotTier({ budgetBytes: BIG }), { limit: 0 })).toEqual([]);
  });

  it('an event matching several values of a filter comes once', () => {
    const e = event({ tags: [['p', ALICE], ['p', BOB]] });
    expect(answerIds(wholeStore([e]), { '#p': [ALICE, BOB] })).toEqual([e.id]);
  });

  it('a filter that can match nothing answers nothing and counts 0', () => {
    const tier = wholeStore([event()]);
    expect(answerIds(tier, { authors: [] })).toEqual([]);
    expect(answerIds(tier, { since: BASE_TIME + 1, until: BASE_TIME })).toEqual([]);
    expect(countOf(tier, [{ kinds: [] }])).toBe(0);
  });

  it('a search filter is left to PostgreSQL', () => {
    const tier = wholeStore([event({ content: 'nostr' })]);
    const parsed = parseFilter({ search: 'nostr' }, LIMITS);
    if (!parsed.ok) throw new Error(parsed.reason);
    const f = parsed.value;
    expect(tier.answer(f, NOW)).toBeUndefined();
    expect(tier.count([f], NOW)).toBeUndefined();
  });
});

describe('choosing the index', () => {
  const events = [
    event({ pubkey: ALICE, kind: 1, created_at: BASE_TIME + 1, tags: [['p', BOB], ['t', 'nostr']] }),
    event({ pubkey: BOB, kind: 7, created_at: BASE_TIME + 2, tags: [['p', ALICE], ['e', idOf(1)]] }),
    event({ pubkey: CAROL, kind: 1, created_at: BASE_TIME + 3, tags: [['t', 'Nostr']] }),
    event({ pubkey: ALICE, kind: 0, created_at: BASE_TIME + 4 }),
  ];
  const tier = wholeStore(events);
  it.each<[string, RawFilter, number[]]>([
    ['ids', { ids: [events[2].id, events[0].id, idOf(999)] }, [2, 0]],
    ['authors', { authors: [ALICE] }, [3, 0]],
    ['authors and kinds', { authors: [ALICE, BOB], kinds: [1, 7] }, [1, 0]],
    ['a tag, case-sensitive', { '#t': ['nostr'] }, [0]],
    ['two tags', { '#p': [ALICE, BOB], '#e': [idOf(1)] }, [1]],
    ['kinds', { kinds: [1] }, [2, 0]],
    ['kinds and a tag', { kinds: [7], '#p': [ALICE, BOB] }, [1]],
    ['until and since', { until: BASE_TIME + 3, since: BASE_TIME + 2 }, [2, 1]],
    ['authors and until', { authors: [ALICE], until: BASE_TIME + 3 }, [0]],
  ])('answers by %s', (_, f, expected) => {
    expect(answerIds(tier, f)).toEqual(expected.map((i) => events[i].id));
  });

  it('answers by many authors × kinds (read by author, kinds checked per event)', () => {
    const many = [ALICE, BOB, ...Array.from({ length: 998 }, (_, i) => idOf(5000 + i))];
    expect(answerIds(tier, { authors: many, kinds: [1, 0, 42, 43, 44] })).toEqual([3, 0].map((i) => events[i].id));
  });
});

  it('checks a tag the chosen list does not ensure on every held event, with few tags or with many', () => {
    // A follow list's 40 p tags are matched through a Set, a note's two by comparing them; the tag
    // list of `#p` is larger than ALICE's own, so ALICE's list is read and each event's tags checked.
    const others = Array.from({ length: 40 }, (_, i) => idOf(7000 + i));
    const mine = [
      event({ pubkey: ALICE, kind: 3, created_at: BASE_TIME + 1, tags: others.map((p) => ['p', p]) }),
      event({ pubkey: ALICE, kind: 1, created_at: BASE_TIME + 2, tags: [['p', others[39]], ['t', 'x']] }),
      event({ pubkey: ALICE, kind: 1, created_at: BASE_TIME + 3, tags: [['e', others[39]]] }),
    ];
    const crowd = Array.from({ length: 20 }, (_, i) => event({ pubkey: BOB, created_at: BASE_TIME + 10 + i, tags: [['p', others[39]], ['p', others[0]]] }));
    const t = wholeStore([...mine, ...crowd]);
    expect(answerIds(t, { authors: [ALICE], '#p': [others[39]] })).toEqual([mine[1].id, mine[0].id]);
    expect(answerIds(t, { authors: [ALICE], '#p': [others[0]] })).toEqual([mine[0].id]);
    expect(answerIds(t, { authors: [ALICE], '#p': [idOf(9999)] })).toEqual([]);
    expect(answerIds(t, { authors: [ALICE], '#e': [others[39]] })).toEqual([mine[2].id]);
    expect(answerIds(t, { authors: [ALICE], '#t': ['x', 'y'] })).toEqual([mine[1].id]);
  });

describe('replaceable and addressable events', () => {
  it('a newer version replaces the held one', () => {
    const old = event({ kind: 0, created_at: BASE_TIME });
    const tier = wholeStore([old]);
    const newer = event({ kind: 0, created_at: BASE_TIME + 1 });
    tier.add(prepareEvent(newer));
    expect(answerIds(tier, { kinds: [0] })).toEqual([newer.id]);
    expect(tier.size).toBe(1);
  });

  it('an older version arriving later is ignored', () => {
    const current = event({ kind: 10002, created_at: BASE_TIME + 5 });
    const tier = wholeStore([current]);
    tier.add(prepareEvent(event({ kind: 10002, created_at: BASE_TIME + 4 })));
    expect(answerIds(tier, { kinds: [10002] })).toEqual([current.id]);
  });

  it('on equal created_at the version with the lower id is kept, whichever comes first', () => {
    const low = event({ id: idOf(1), kind: 3 });
    const high = event({ id: idOf(2), kind: 3 });
    const tier = wholeStore([high]);
    tier.add(prepareEvent(low));
    expect(answerIds(tier, { kinds: [3] })).toEqual([low.id]);
    tier.add(prepareEvent(high));
    expect(answerIds(tier, { kinds: [3] })).toEqual([low.id]);
  });

  it('each author has their own replaceable version', () => {
    const events = [event({ kind: 0, pubkey: ALICE }), event({ kind: 0, pubkey: BOB })];
    expect(answerIds(wholeStore(events), { kinds: [0] })?.sort()).toEqual(events.map((e) => e.id).sort());
  });

  it('authors × replaceable kinds answer the versions held, none replaced, removed or evicted', () => {
    const alice1 = event({ kind: 0, pubkey: ALICE, created_at: BASE_TIME + 1 });
    const bob = event({ kind: 0, pubkey: BOB, created_at: BASE_TIME + 2 });
    const relays = event({ kind: 10002, pubkey: ALICE, created_at: BASE_TIME });
    const note = event({ kind: 1, pubkey: CAROL, created_at: BASE_TIME + 9 });
    const tier = wholeStore([alice1, bob, relays, note], 1); // evicted only when evict() is called
    const alice2 = event({ kind: 0, pubkey: ALICE, created_at: BASE_TIME + 3 });
    tier.add(prepareEvent(alice2));
    const profiles = { authors: [ALICE, BOB, CAROL], kinds: [0, 10002] };
    expect(answerIds(tier, profiles)).toEqual([alice2.id, bob.id, relays.id]);
    expect(answerIds(tier, { ...profiles, until: BASE_TIME + 2 })).toEqual([bob.id, relays.id]);
    expect(answerIds(tier, { ...profiles, limit: 1 })).toEqual([alice2.id]);
    expect(answerIds(tier, { authors: [CAROL], kinds: [0] })).toEqual([]);
    expect(countOf(tier, [profiles, { authors: [BOB], kinds: [0] }])).toBe(3);
    expect(tier.replaceableVersions).toBe(3);
    tier.remove([bob.id]);
    expect(answerIds(tier, profiles)).toEqual([alice2.id, relays.id]);
    expect(tier.replaceableVersions).toBe(2);
    expect(tier.evict(1000)).toBe(false);
    expect(tier.size).toBe(0);
    expect(tier.replaceableVersions).toBe(0);
  });

  it('addressable versions are kept per d tag, a missing d being ""', () => {
    const a1 = event({ kind: 30023, tags: [['d', 'a']], created_at: BASE_TIME });
    const a2 = event({ kind: 30023, tags: [['d', 'a']], created_at: BASE_TIME + 1 });
    const bare = event({ kind: 30023, tags: [['d']], created_at: BASE_TIME });
    const none = event({ kind: 30023, tags: [], created_at: BASE_TIME + 2 });
    const tier = wholeStore([a1, bare]);
    tier.add(prepareEvent(a2));
    tier.add(prepareEvent(none));
    expect(answerIds(tier, { kinds: [30023] })).toEqual([none.id, a2.id]);
  });

  it('the fill keeps a newer version the change stream brought first', () => {
    const tier = new HotTier({ budgetBytes: BIG });
    const first = event({ created_at: BASE_TIME + 10 });
    tier.addOlder([prepareEvent(first)], false);
    const newer = event({ kind: 0, created_at: BASE_TIME + 12 });
    tier.add(prepareEvent(newer));
    tier.addOlder([prepareEvent(event({ kind: 0, created_at: BASE_TIME + 3 }))], true);
    expect(answerIds(tier, { kinds: [0] })).toEqual([newer.id]);
  });
});

describe('removal', () => {
  it('a removed event is no longer answered or counted', () => {
    const [a, b] = [event({ created_at: BASE_TIME + 1 }), event()];
    const tier = wholeStore([a, b]);
    tier.remove([a.id]);
    expect(answerIds(tier, {})).toEqual([b.id]);
    expect(countOf(tier, [{}])).toBe(1);
    expect(tier.size).toBe(1);
  });

  it('removing an id not held changes nothing', () => {
    const tier = wholeStore([event()]);
    const bytes = tier.bytes;
    tier.remove([idOf(123456)]);
    expect([tier.size, tier.bytes]).toEqual([1, bytes]);
  });

  it('answers stay right while many removals pile up in the lists', () => {
    const events = Array.from({ length: 300 }, (_, i) => event({ created_at: BASE_TIME + (i % 50), tags: [['t', `t${i % 3}`]] }));
    const tier = wholeStore(events);
    const removed = new Set(events.filter((_, i) => i % 4 !== 0).map((e) => e.id));
    tier.remove(removed);
    const left = events.filter((e) => !removed.has(e.id));
    expect(answerIds(tier, { '#t': ['t1'], limit: 60 })).toEqual(referenceReq([{ '#t': ['t1'], limit: 60 }], left, NOW, LIMITS).map((e) => e.id));
    expect(tier.size).toBe(left.length);
  });

  it('bytes go back to 0 when everything is removed', () => {
    const events = [event({ tags: [['t', 'x']] }), event({ kind: 0 })];
    const tier = wholeStore(events);
    expect(tier.bytes).toBeGreaterThan(0);
    tier.remove(events.map((e) => e.id));
    expect([tier.size, tier.bytes]).toEqual([0, 0]);
  });
});

describe('expiry (NIP-40)', () => {
  it('an event is answered until `now` reaches its expiration', () => {
    const e = event({ tags: [['expiration', String(NOW)]] });
    const tier = wholeStore([e]);
    expect(answerIds(tier, {}, NOW - 1)).toEqual([e.id]);
    expect(answerIds(tier, {}, NOW)).toEqual([]);
    expect(countOf(tier, [{}], NOW)).toBe(0);
  });

  it('an expired event does not use up the limit', () => {
    const live = event({ created_at: BASE_TIME });
    const expired = event({ created_at: BASE_TIME + 1, tags: [['expiration', String(NOW - 1)]] });
    expect(answerIds(wholeStore([live, expired]), { limit: 1 })).toEqual([live.id]);
  });
});

describe('private kinds', () => {
  const dm = event({ kind: 4, pubkey: ALICE, tags: [['p', BOB]] });
  const note = event({ kind: 1, pubkey: ALICE });
  const tier = wholeStore([dm, note]);
  const privacy = (readers: string[]): Privacy => ({ kinds: [4], readers });

  it('a private event is answered to its author and to a reader its p tag names', () => {
    expect(answerIds(tier, {}, NOW, privacy([ALICE]))?.sort()).toEqual([dm.id, note.id].sort());
    expect(answerIds(tier, {}, NOW, privacy([BOB]))?.sort()).toEqual([dm.id, note.id].sort());
  });

  it('to anyone else only the open kinds are answered', () => {
    expect(answerIds(tier, {}, NOW, privacy([CAROL]))).toEqual([note.id]);
    expect(answerIds(tier, { kinds: [4] }, NOW, privacy([]))).toEqual([]);
  });
});

describe('the window', () => {
  // Ten events a second apart, the newest six read by the fill: windowStart = BASE_TIME + 5.
  const events = Array.from({ length: 10 }, (_, i) => event({ created_at: BASE_TIME + i, kind: i % 2 ? 1 : 7 }));
  const newestFirst = [...events].sort(resultOrder);
  const partlyFilled = () => {
    const tier = new HotTier({ budgetBytes: BIG });
    tier.addOlder(newestFirst.slice(0, 3).map(prepareEvent), false);
    tier.addOlder(newestFirst.slice(3, 6).map(prepareEvent), false);
    return tier;
  };

  it('before the fill nothing is trusted, and the change stream is ignored', () => {
    const tier = new HotTier({ budgetBytes: BIG });
    expect(tier.windowStart).toBe(Infinity);
    tier.add(prepareEvent(events[9]));
    expect(tier.size).toBe(0);
    expect(answerIds(tier, { since: BASE_TIME })).toBeUndefined();
    expect(countOf(tier, [{ since: BASE_TIME }])).toBeUndefined();
  });

  it('a page not at the end puts the window just above its last created_at', () => {
    expect(partlyFilled().windowStart).toBe(BASE_TIME + 5);
  });

  it('a page reaching the end makes the window the whole store', () => {
    const tier = partlyFilled();
    tier.addOlder(newestFirst.slice(6).map(prepareEvent), true);
    expect(tier.windowStart).toBe(-Infinity);
    expect(answerIds(tier, { limit: 60 })).toEqual(newestFirst.map((e) => e.id));
  });

  it('an answer whose limit is reached inside the window is given', () => {
    expect(answerIds(partlyFilled(), { limit: 2 })).toEqual([events[9].id, events[8].id]);
  });

  it('an answer that may go on below the window is not', () => {
    expect(answerIds(partlyFilled(), { limit: 6 })).toBeUndefined(); // the sixth held is below the window
    expect(answerIds(partlyFilled(), { kinds: [1], limit: 4 })).toBeUndefined(); // three held: a fourth may be below
    expect(answerIds(partlyFilled(), { kinds: [42] })).toBeUndefined(); // none held: may be stored below
  });

  it('an answer with since at or above the window is given, however short', () => {
    expect(answerIds(partlyFilled(), { since: BASE_TIME + 5 })).toEqual(newestFirst.slice(0, 5).map((e) => e.id));
    expect(answerIds(partlyFilled(), { kinds: [42], since: BASE_TIME + 7 })).toEqual([]);
    expect(answerIds(partlyFilled(), { since: BASE_TIME + 4 })).toBeUndefined();
  });

  it('events named by id are answered whenever all are held, below the window too', () => {
    const tier = partlyFilled();
    expect(answerIds(tier, { ids: [events[4].id, events[8].id] })).toEqual([events[8].id, events[4].id]);
    expect(answerIds(tier, { ids: [events[3].id, events[8].id] })).toBeUndefined();
    expect(answerIds(tier, { ids: [events[3].id, events[8].id], since: BASE_TIME + 5 })).toEqual([events[8].id]);
  });

  it('the change stream adds events at or above the window and ignores older ones', () => {
    const tier = partlyFilled();
    const at = event({ created_at: BASE_TIME + 5, kind: 42 });
    tier.add(prepareEvent(at));
    tier.add(prepareEvent(event({ created_at: BASE_TIME + 4, kind: 42 })));
    expect(answerIds(tier, { kinds: [42], since: BASE_TIME + 5 })).toEqual([at.id]);
    expect(tier.size).toBe(7);
  });

  it('a created_at group split between two pages is trusted only once the next page is in', () => {
    const group = [1, 2, 3, 4].map((n) => event({ id: idOf(n), created_at: BASE_TIME + 3 }));
    const newer = event({ created_at: BASE_TIME + 4 });
    const older = event({ created_at: BASE_TIME + 1 });
    const tier = new HotTier({ budgetBytes: BIG });
    tier.addOlder([newer, group[0], group[1]].map(prepareEvent), false);
    expect(tier.windowStart).toBe(BASE_TIME + 4);
    expect(answerIds(tier, { since: BASE_TIME + 3 })).toBeUndefined();
    tier.addOlder([group[2], group[3], older].map(prepareEvent), false);
    expect(tier.windowStart).toBe(BASE_TIME + 2);
    expect(answerIds(tier, { since: BASE_TIME + 3 })).toEqual([newer, ...group].map((e) => e.id));
  });

  it('events held below the window are not trusted: the store may have more in their group', () => {
    const newer = event({ created_at: BASE_TIME + 4 });
    const tier = new HotTier({ budgetBytes: BIG });
    tier.addOlder([newer, event({ id: idOf(2), created_at: BASE_TIME + 3 })].map(prepareEvent), false);
    tier.add(prepareEvent(event({ id: idOf(1), created_at: BASE_TIME + 3 }))); // stored, below the window: not held
    expect(answerIds(tier, { limit: 2 })).toBeUndefined();
    expect(answerIds(tier, { limit: 1 })).toEqual([newer.id]);
  });

  it('a page that reads the boundary group again holds each event once', () => {
    const group = [1, 2, 3].map((n) => event({ id: idOf(n), created_at: BASE_TIME + 3 }));
    const tier = new HotTier({ budgetBytes: BIG });
    tier.addOlder([group[0], group[2]].map(prepareEvent), false);
    tier.addOlder([...group, event({ created_at: BASE_TIME })].map(prepareEvent), true);
    expect(tier.size).toBe(4);
    expect(answerIds(tier, { since: BASE_TIME + 3 })).toEqual(group.map((e) => e.id));
  });
});

describe('the first pass over replaceable events (preHold)', () => {
  // Versions of ALICE's and BOB's profiles (kind 0) and follow lists (kind 3), and notes around them.
  const profileA1 = event({ pubkey: ALICE, kind: 0, created_at: BASE_TIME + 1, tags: [['p', BOB]] });
  const profileA2 = event({ pubkey: ALICE, kind: 0, created_at: BASE_TIME + 5 });
  const profileB = event({ pubkey: BOB, kind: 0, created_at: BASE_TIME + 2 });
  const followsA = event({ pubkey: ALICE, kind: 3, created_at: BASE_TIME + 3, tags: [['p', BOB], ['p', CAROL]] });
  const notes = [4, 6, 7, 8].map((dt) => event({ pubkey: ALICE, kind: 1, created_at: BASE_TIME + dt, tags: [['p', BOB]] }));
  const stored = [profileA2, profileB, followsA, ...notes]; // profileA1 was replaced
  const prepass = (tier: HotTier, events: NostrEvent[]) => {
    for (const e of events) tier.preHold(prepareEvent(e));
    tier.replaceableComplete = true;
  };
  const page = (events: NostrEvent[]) => [...events].sort(resultOrder).map(prepareEvent);

  it('answers authors × replaceable kinds before the window reaches them, and nothing else', () => {
    const tier = new HotTier({ budgetBytes: BIG });
    prepass(tier, [followsA, profileA1, profileB, profileA2]); // in no order: the store's choice is kept
    expect(answerIds(tier, { authors: [ALICE, BOB], kinds: [0] })).toEqual([profileA2.id, profileB.id]);
    expect(answerIds(tier, { authors: [ALICE], kinds: [0, 3], since: BASE_TIME + 4 })).toEqual([profileA2.id]);
    expect(countOf(tier, [{ authors: [ALICE, BOB, CAROL], kinds: [0, 3] }])).toBe(3);
    expect(answerIds(tier, { authors: [ALICE] })).toBeUndefined(); // the window holds nothing yet
    expect(answerIds(tier, { '#p': [CAROL] })).toBeUndefined();
    expect(answerIds(tier, { ids: [profileA2.id, profileA1.id] })).toBeUndefined(); // the replaced one is not held
    expect(answerIds(tier, { ids: [profileB.id] })).toEqual([profileB.id]);
  });

  it('the newest-first pass files each version in the lists once, where it belongs', () => {
    const tier = new HotTier({ budgetBytes: BIG });
    prepass(tier, [profileB, followsA, profileA2]);
    const rows = page(stored);
    tier.addOlder(rows.slice(0, 3), false);
    expect(answerIds(tier, { authors: [ALICE], limit: 2 })).toEqual([notes[3].id, notes[2].id]);
    tier.addOlder(rows.slice(3), true);
    tier.listUnlisted();
    const whole = wholeStore(stored);
    for (const f of [{ authors: [ALICE] }, { '#p': [BOB] }, { kinds: [0, 3] }, {}, { authors: [BOB], kinds: [0, 1] }] as RawFilter[]) {
      expect(answerIds(tier, f)).toEqual(answerIds(whole, f));
      expect(countOf(tier, [f])).toBe(countOf(whole, [f]));
    }
    expect(tier.size).toBe(stored.length);
    expect(tier.bytes).toBe(whole.bytes);
  });

  it('a newer version replaces a held one, an older one is ignored, a removal drops it', () => {
    const tier = new HotTier({ budgetBytes: BIG });
    prepass(tier, [profileA1, profileB]);
    tier.preHold(prepareEvent(profileA2)); // the change stream, during the fill
    tier.preHold(prepareEvent(profileA1));
    expect(answerIds(tier, { authors: [ALICE], kinds: [0] })).toEqual([profileA2.id]);
    tier.remove([profileB.id]);
    expect(answerIds(tier, { authors: [BOB], kinds: [0] })).toEqual([]);
    tier.addOlder(page([profileA2, ...notes]), true);
    tier.listUnlisted();
    expect(answerIds(tier, { authors: [ALICE] })).toEqual([notes[3].id, notes[2].id, notes[1].id, profileA2.id, notes[0].id]);
    expect(tier.size).toBe(5);
  });

  it('versions the newest-first pass did not reach are filed below the window; evicting one ends the exactness', () => {
    const tier = new HotTier({ budgetBytes: BIG });
    prepass(tier, [profileB, followsA, profileA2]);
    const read = page(stored.filter((e) => e.created_at >= BASE_TIME + 4)); // the budget ended the fill there
    tier.addOlder(read, false);
    tier.listUnlisted();
    expect(tier.windowStart).toBe(BASE_TIME + 5);
    expect(answerIds(tier, { authors: [ALICE, BOB], kinds: [0, 3] })).toEqual([profileA2.id, followsA.id, profileB.id]);
    expect(answerIds(tier, { authors: [ALICE], limit: 5 })).toBeUndefined(); // reaches below the window
    expect(answerIds(tier, { authors: [ALICE], limit: 4 })).toEqual([notes[3].id, notes[2].id, notes[1].id, profileA2.id]);
    expect(answerIds(tier, { authors: [ALICE], since: BASE_TIME + 3 })).toBeUndefined();
    const small = new HotTier({ budgetBytes: tier.bytes - 1 });
    prepass(small, [profileB, followsA, profileA2]);
    small.addOlder(read, false);
    small.listUnlisted();
    small.evict(1); // the oldest: BOB's profile
    expect(small.replaceableComplete).toBe(false);
    expect(answerIds(small, { authors: [ALICE, BOB], kinds: [0] })).toBeUndefined();
  });

  it('a newer version stored below the window replaces the held one there, as the store did in the same commit', () => {
    const tier = new HotTier({ budgetBytes: BIG });
    prepass(tier, [profileA1, profileB]);
    tier.addOlder(page(notes.slice(2)), false); // the budget ended the fill at BASE_TIME + 7
    tier.listUnlisted();
    expect(tier.windowStart).toBe(BASE_TIME + 8);
    tier.add(prepareEvent(profileA2)); // BASE_TIME + 5: below the window
    expect(tier.has(profileA1.id)).toBe(false);
    expect(answerIds(tier, { authors: [ALICE, BOB], kinds: [0] })).toEqual([profileA2.id, profileB.id]);
    // Addressable: one held below the window is in the boundary second, where a version with a
    // lower id replaces it. The replaced one goes; the new one is not held (below the window).
    const article1 = event({ pubkey: BOB, kind: 30023, tags: [['d', 'x']], created_at: BASE_TIME + 1 });
    const article2 = event({ pubkey: BOB, kind: 30023, tags: [['d', 'x']], created_at: BASE_TIME + 1, id: idOf(1) });
    const partial = new HotTier({ budgetBytes: BIG });
    partial.addOlder(page([...notes.slice(2), article1]), false);
    expect(partial.windowStart).toBe(BASE_TIME + 2);
    expect(answerIds(partial, { ids: [article1.id] })).toEqual([article1.id]);
    partial.add(prepareEvent(article2));
    expect(partial.has(article1.id)).toBe(false);
    expect(partial.has(article2.id)).toBe(false);
    expect(answerIds(partial, { ids: [article1.id] })).toBeUndefined();
  });
});

describe('eviction', () => {
  const perEvent = () => {
    const tier = wholeStore([event()]);
    return tier.bytes;
  };

  it('evicts the oldest created_at groups until the estimate fits the budget', () => {
    const events = [0, 0, 1, 1, 2, 2, 3].map((dt) => event({ created_at: BASE_TIME + dt }));
    const tier = wholeStore(events, 2.5 * perEvent());
    expect(tier.evict(100)).toBe(false);
    expect(tier.size).toBe(2);
    expect(tier.windowStart).toBe(BASE_TIME + 3); // group 2 evicted in part: below the window
    expect(answerIds(tier, { since: BASE_TIME + 3 })).toEqual([events[6].id]);
    expect(answerIds(tier, { since: BASE_TIME + 2 })).toBeUndefined();
    expect(tier.bytes).toBeLessThanOrEqual(2.5 * perEvent());
  });

  it('evicting a whole group puts the window at the next created_at', () => {
    const events = [0, 0, 1, 1].map((dt) => event({ created_at: BASE_TIME + dt }));
    const tier = wholeStore(events, 2 * perEvent());
    tier.evict(100);
    expect(tier.windowStart).toBe(BASE_TIME + 1);
    expect(answerIds(tier, { since: BASE_TIME + 1 })).toEqual([events[2].id, events[3].id].sort());
  });

  it('evicts at most maxEvents per call and says when more is needed', () => {
    const events = Array.from({ length: 10 }, (_, i) => event({ created_at: BASE_TIME + i }));
    const tier = wholeStore(events, 2 * perEvent());
    expect(tier.evict(3)).toBe(true);
    expect(tier.size).toBe(7);
    expect(tier.evict(3)).toBe(true);
    expect(tier.evict(3)).toBe(false);
    expect(tier.size).toBe(2);
    expect(tier.evict(3)).toBe(false);
  });

  it('the fill cannot go on after an eviction', () => {
    const tier = new HotTier({ budgetBytes: 0 });
    tier.addOlder([prepareEvent(event({ created_at: BASE_TIME + 2 }))], false);
    tier.evict(10);
    expect(() => tier.addOlder([prepareEvent(event())], true)).toThrow(/eviction/);
  });
});

describe('count (NIP-45)', () => {
  it('counts the union of the filters, each event once', () => {
    const events = [event({ kind: 1, tags: [['t', 'a']] }), event({ kind: 7, tags: [['t', 'a']] }), event({ kind: 1 })];
    expect(countOf(wholeStore(events), [{ kinds: [1] }, { '#t': ['a'] }])).toBe(3);
  });

  it('ignores limit', () => {
    const events = Array.from({ length: 5 }, () => event());
    expect(countOf(wholeStore(events), [{ limit: 1 }])).toBe(5);
  });

  it('is given only when every filter lies inside the window', () => {
    const tier = new HotTier({ budgetBytes: BIG });
    tier.addOlder([event({ created_at: BASE_TIME + 5 }), event({ created_at: BASE_TIME + 4 })].map(prepareEvent), false);
    expect(countOf(tier, [{ since: BASE_TIME + 5 }])).toBe(1);
    expect(countOf(tier, [{ since: BASE_TIME + 5 }, { kinds: [1] }])).toBeUndefined();
    expect(countOf(tier, [{ since: BASE_TIME + 5 }, { kinds: [] }])).toBe(1);
  });
});

// ---------------------------------------------------------------------------------------------------
// Against the reference: random streams of events, fills, removals and evictions

type Op =
  | { type: 'arrive' }
  | { type: 'page'; size: number }
  | { type: 'delete'; pick: number }
  | { type: 'evict'; maxEvents: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 6, arbitrary: fc.constant({ type: 'arrive' as const }) },
  { weight: 3, arbitrary: fc.record({ type: fc.constant('page' as const), size: fc.integer({ min: 1, max: 8 }) }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('delete' as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ type: fc.constant('evict' as const), maxEvents: fc.integer({ min: 1, max: 20 }) }) },
);

/** The store as the database keeps it: one version per replaceable key, deletions gone. */
class ModelStore {
  readonly events = new Map<string, NostrEvent>();
  private readonly versions = new Map<string, NostrEvent>();

  /** Stores an arriving event if the store would: whether it did, and the version it replaced. */
  write(e: NostrEvent): { stored: boolean; replaced?: NostrEvent } {
    const p = prepareEvent(e);
    if (p.dTag === null) {
      this.events.set(e.id, e);
      return { stored: true };
    }
    const key = `${e.kind}:${e.pubkey}:${p.dTag}`;
    const held = this.versions.get(key);
    if (held && resultOrder(held, e) <= 0) return { stored: false };
    if (held) this.events.delete(held.id);
    this.versions.set(key, e);
    this.events.set(e.id, e);
    return { stored: true, replaced: held };
  }

  delete(id: string): void {
    const e = this.events.get(id)!;
    this.events.delete(id);
    const p = prepareEvent(e);
    if (p.dTag !== null) this.versions.delete(`${e.kind}:${e.pubkey}:${p.dTag}`);
  }

  /**
   * The fill's next page read from the store: the whole created_at group it stopped in (read again:
   * events stored in that group since, with a lower id, would be missed otherwise), then `size`
   * older events.
   */
  page(after: number | undefined, size: number): { page: NostrEvent[]; end: boolean } {
    const sorted = [...this.events.values()].sort(resultOrder);
    const group = after === undefined ? [] : sorted.filter((e) => e.created_at === after);
    const older = sorted.filter((e) => after === undefined || e.created_at < after);
    return { page: [...group, ...older.slice(0, size)], end: older.length <= size };
  }
}

interface Scenario {
  events: NostrEvent[];
  /** Events stored before the tier starts (the fill will read them). */
  preload: number;
  ops: Op[];
  /** Pages the fill reads at most: it may stop before the end, leaving the window above it. */
  maxPages: number;
  budget: number;
  filters: RawFilter[];
  counts: RawFilter[][];
  privacy: Privacy | undefined;
  checkAt: number;
}

const scenarioArb: fc.Arbitrary<Scenario> = fc
  .uniqueArray(eventArb(expirationsAround(NOW)), { selector: (e) => e.id, minLength: 20, maxLength: 90, size: 'max' })
  .chain((events) => {
    const idPool = events.map((e) => e.id);
    return fc.record({
      events: fc.constant(events),
      preload: fc.integer({ min: 0, max: events.length }),
      ops: fc.array(opArb, { minLength: 40, maxLength: 160, size: 'max' }),
      maxPages: fc.oneof({ weight: 3, arbitrary: fc.integer({ min: 0, max: 4 }) }, { weight: 1, arbitrary: fc.constant(Infinity) }),
      // an event is estimated at 1-2 kB here: from a few events to all of them
      budget: fc.oneof({ weight: 3, arbitrary: fc.integer({ min: 0, max: 80_000 }) }, { weight: 1, arbitrary: fc.constant(BIG) }),
      filters: fc.array(filterArb(idPool), { minLength: 10, maxLength: 10 }),
      counts: fc.array(filtersArb(idPool), { minLength: 4, maxLength: 4 }),
      privacy: fc.option(privacyArb, { freq: 3 }).map((p) => p ?? undefined),
      checkAt: fc.nat(),
    });
  });

/** Every stored event at or above the window is held, and only stored events are. */
function checkInvariant(tier: HotTier, store: ModelStore): void {
  let held = 0;
  const missing: NostrEvent[] = [];
  for (const e of store.events.values()) {
    if (tier.has(e.id)) held++;
    else if (e.created_at >= tier.windowStart) missing.push(e);
  }
  expect(missing, `stored events missing at or above the window ${tier.windowStart}`).toEqual([]);
  expect(tier.size).toBe(held);
}

function checkAnswers(tier: HotTier, store: ModelStore, s: Pick<Scenario, 'filters' | 'counts' | 'privacy'>): void {
  const stored = [...store.events.values()];
  const windowStart = tier.windowStart;
  for (const raw of s.filters) {
    const f = parseAll([raw], LIMITS, s.privacy)[0];
    const expected = referenceReq([raw], stored, NOW, LIMITS, s.privacy);
    const answer = tier.answer(f, NOW);
    if (answer !== undefined) expect(answer.map((r) => r.id), JSON.stringify(raw)).toEqual(expected.map((e) => e.id));
    const limitReachedInside = f.limit > 0 && expected.length >= f.limit && expected[f.limit - 1].created_at >= windowStart;
    const idsHeld = f.ids !== undefined && f.ids.every((id) => tier.has(id));
    const mustAnswer = windowStart === -Infinity || (f.since ?? -Infinity) >= windowStart || f.limit === 0 || limitReachedInside || idsHeld;
    if (mustAnswer) expect(answer, `${JSON.stringify(raw)} window ${windowStart}`).toBeDefined();
  }
  for (const raws of s.counts) {
    const filters = parseAll(raws, LIMITS, s.privacy);
    const count = tier.count(filters, NOW);
    if (count !== undefined) expect(count, JSON.stringify(raws)).toBe(referenceCount(raws, stored, NOW, s.privacy));
    if (windowStart === -Infinity || filters.every((f) => (f.since ?? -Infinity) >= windowStart)) expect(count).toBeDefined();
  }
}

describe('against the NIP-01 reference', () => {
  it('answers REQ and COUNT like the store whenever it answers, and whenever it must', () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        const tier = new HotTier({ budgetBytes: s.budget });
        const store = new ModelStore();
        let arrived = 0;
        let pages = 0;
        const fill: { after: number | undefined; started: boolean; over: boolean } = { after: undefined, started: false, over: false };
        const checkAt = s.checkAt % s.ops.length;
        const arrive = () => {
          const e = s.events[arrived++];
          const { stored, replaced } = store.write(e);
          if (stored) tier.add(prepareEvent(e));
          if (replaced) tier.remove([replaced.id]);
        };
        while (arrived < s.preload) arrive();
        s.ops.forEach((op, i) => {
          if (op.type === 'arrive' && arrived < s.events.length) {
            arrive();
          } else if (op.type === 'page' && !fill.over && pages++ < s.maxPages) {
            const { page, end } = store.page(fill.after, op.size);
            tier.addOlder(page.map(prepareEvent), end);
            fill.after = page.at(-1)?.created_at ?? fill.after;
            fill.started = true;
            fill.over = end;
          } else if (op.type === 'delete' && store.events.size > 0) {
            const ids = [...store.events.keys()];
            const id = ids[op.pick % ids.length];
            store.delete(id);
            tier.remove([id]);
          } else if (op.type === 'evict' && fill.started) {
            const more = tier.evict(op.maxEvents);
            expect(more).toBe(tier.bytes > s.budget && tier.size > 0);
            fill.over = true; // the fill cannot go on below what was evicted
          }
          checkInvariant(tier, store);
          if (i === checkAt) checkAnswers(tier, store, s);
        });
        checkAnswers(tier, store, s);
      }),
      { numRuns: 300 },
    );
  });
});

describe('at scale', () => {
  it('stays exact with thousands of events through pages, the stream, removals and eviction', () => {
    const events = fc.sample(eventArb(expirationsAround(NOW)), { seed: 17, numRuns: 6000 });
    const [before, after] = [events.slice(0, 4000), events.slice(4000)];
    // The store's story first, to know the budget: a quarter of what the tier will hold at the end.
    const final = new ModelStore();
    for (const e of events) final.write(e);
    const removed = [...final.events.keys()].filter((_, i) => i % 3 === 0);
    for (const id of removed) final.delete(id);
    const heldAtEnd = [...final.events.values()].map(prepareEvent).reduce((sum, p) => sum + heldBytes(p.raw, p.tags.length), 0);

    const store = new ModelStore();
    const tier = new HotTier({ budgetBytes: heldAtEnd / 4 });
    for (const e of before) store.write(e);
    for (let last: number | undefined, end = false; !end; ) {
      const page = store.page(last, 500);
      tier.addOlder(page.page.map(prepareEvent), page.end);
      last = page.page.at(-1)?.created_at;
      end = page.end;
    }
    for (const e of after) {
      const { stored, replaced } = store.write(e);
      if (stored) tier.add(prepareEvent(e));
      if (replaced) tier.remove([replaced.id]);
    }
    for (const id of removed) store.delete(id);
    tier.remove(removed);
    expect(tier.bytes).toBe(heldAtEnd);
    checkInvariant(tier, store);
    const idPool = [...store.events.keys()];
    const check = () => {
      const filters = fc.sample(filterArb(idPool), { seed: 18, numRuns: 150 });
      // and counts that read every list to its oldest entry
      const since = Math.max(BASE_TIME - 1, tier.windowStart);
      const everything: RawFilter[][] = [[{ since }], [{ since, kinds: [1, 7] }], [{ since, authors: [ALICE] }], [{ since, '#p': [BOB] }], [{ since, '#t': ['art'] }]];
      const counts = [...fc.sample(filtersArb(idPool), { seed: 19, numRuns: 25 }), ...everything];
      checkAnswers(tier, store, { filters, counts, privacy: undefined });
      checkAnswers(tier, store, { filters, counts, privacy: { kinds: [1, 7], readers: [ALICE] } });
    };
    check();

    let calls = 1;
    while (tier.evict(100)) calls++;
    expect(calls).toBeGreaterThan(10);
    expect(tier.bytes).toBeLessThanOrEqual(heldAtEnd / 4);
    expect(tier.windowStart).toBeGreaterThan(BASE_TIME);
    checkInvariant(tier, store);
    check();
  });
});
