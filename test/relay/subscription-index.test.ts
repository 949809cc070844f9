// The live subscription index (relay/subscriptions.ts) against brute force: after any sequence of
// subscriptions added and removed, the subscribers an event reaches are exactly those with a filter
// that matches it. Keys shared by several subscriptions (one entry, then a Set, then one again) are
// where an index like this goes wrong.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compileFilter, parseFilter, toMatchable, type Filter } from '../../src/nostr/filter.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { PENDING_FILE_AT, SubscriptionIndex, type Subscriber } from '../../src/relay/subscriptions.js';

const hex = (n: number) => n.toString(16).padStart(64, '0');
const IDS = [1, 2, 3, 4].map(hex);
const PUBKEYS = [5, 6, 7, 8].map(hex);
const VALUES = [9, 10, 11].map(hex);
const KINDS = [1, 6, 7];
const LIMITS = { maxValuesPerArray: 1000, defaultLimit: 100, maxLimit: 500 };

const some = <T>(values: T[]) => fc.option(fc.array(fc.constantFrom(...values), { minLength: 0, maxLength: 4 }), { nil: undefined });

const filterInput = fc
  .record({ ids: some(IDS), authors: some(PUBKEYS), kinds: some(KINDS), '#e': some(VALUES), '#p': some(VALUES) })
  .map((r) => Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined)));

const event = fc
  .record({ id: fc.constantFrom(...IDS), pubkey: fc.constantFrom(...PUBKEYS), kind: fc.constantFrom(...KINDS), e: some(VALUES), p: some(VALUES) })
  .map(({ id, pubkey, kind, e, p }): NostrEvent => ({
    id, pubkey, kind, created_at: 1000, content: '', sig: '0'.repeat(128),
    tags: [...(e ?? []).map((v) => ['e', v]), ...(p ?? []).map((v) => ['p', v])],
  }));

type Step = { add: number; filters: object[] } | { remove: number } | { event: NostrEvent };
const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ add: fc.integer({ min: 0, max: 5 }), filters: fc.array(filterInput, { minLength: 1, maxLength: 3 }) }),
  fc.record({ remove: fc.integer({ min: 0, max: 5 }) }),
  fc.record({ event }),
);

function parsed(inputs: object[]): Filter[] {
  return inputs.map((input) => {
    const checked = parseFilter(input, LIMITS);
    if (!checked.ok) throw new Error(checked.reason);
    return checked.value;
  });
}

describe('SubscriptionIndex', () => {
  it('reaches exactly the subscribers with a matching filter, through adds and removes', () => {
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 40 }), (steps) => {
        const index = new SubscriptionIndex();
        const subscribers: Subscriber[] = Array.from({ length: 6 }, () => ({ deliver() {} }));
        const open = new Map<Subscriber, Filter[]>();
        for (const s of steps) {
          if ('add' in s) {
            const sub = subscribers[s.add]!;
            if (open.has(sub)) index.remove(sub); // as a REQ with an open id replaces it
            const filters = parsed(s.filters);
            index.add(sub, filters);
            open.set(sub, filters);
          } else if ('remove' in s) {
            index.remove(subscribers[s.remove]!);
            open.delete(subscribers[s.remove]!);
          } else {
            const m = toMatchable(s.event);
            const expected = [...open].filter(([, filters]) => filters.some((f) => compileFilter(f)(m))).map(([sub]) => sub);
            expect(new Set(index.matching(m))).toEqual(new Set(expected));
          }
        }
        expect(index.size).toBe(open.size);
      }),
      { numRuns: 500 },
    );
  });

  it('files a filter with a repeated value once, and forgets it on removal', () => {
    const index = new SubscriptionIndex();
    const a: Subscriber = { deliver() {} };
    const b: Subscriber = { deliver() {} };
    index.add(a, parsed([{ authors: [PUBKEYS[0], PUBKEYS[0]] }]));
    index.add(b, parsed([{ authors: [PUBKEYS[0]] }]));
    const m = toMatchable({ id: IDS[0]!, pubkey: PUBKEYS[0]!, kind: 1, created_at: 1, tags: [], content: '', sig: '' });
    expect(index.matching(m)).toEqual(new Set([a, b]));
    index.remove(a);
    expect(index.matching(m)).toEqual(new Set([b]));
    index.remove(b);
    expect(index.matching(m)).toEqual(new Set());
  });

  it('keeps a key no subscription is filed under for the next, and drops such keys once they pile up', () => {
    const index = new SubscriptionIndex();
    const a: Subscriber = { deliver() {} };
    const b: Subscriber = { deliver() {} };
    const m = toMatchable({ id: IDS[0]!, pubkey: PUBKEYS[0]!, kind: 1, created_at: 1, tags: [], content: '', sig: '' });
    index.add(a, parsed([{ authors: [PUBKEYS[0]] }]));
    index.matching(m); // files it
    index.remove(a);
    expect(index.matching(m)).toEqual(new Set());
    expect(index.authorKeys).toBe(1); // vacant, kept
    index.add(b, parsed([{ authors: [PUBKEYS[0]] }]));
    expect(index.matching(m)).toEqual(new Set([b]));
    index.add(a, parsed([{ authors: [PUBKEYS[0]] }])); // a Set of two, kept when emptied
    index.matching(m);
    index.remove(a);
    index.remove(b);
    expect(index.matching(m)).toEqual(new Set());
    index.add(a, parsed([{ authors: [PUBKEYS[0]] }]));
    expect(index.matching(m)).toEqual(new Set([a]));
    index.remove(a);

    // 40,000 one-author REQs opened and closed: the vacant keys are dropped, not kept forever.
    const subs = Array.from({ length: 40_000 }, (_, i) => ({ sub: { deliver() {} } as Subscriber, filters: parsed([{ authors: [hex(1000 + i)] }]) }));
    for (const { sub, filters } of subs) index.add(sub, filters);
    index.matching(m);
    expect(index.authorKeys).toBe(40_001);
    for (const { sub } of subs) index.remove(sub);
    expect(index.authorKeys).toBeLessThan(40_001 / 2 + 1);
    const last = subs[subs.length - 1]!;
    index.add(last.sub, last.filters);
    const e = toMatchable({ id: IDS[0]!, pubkey: hex(1000 + 39_999), kind: 1, created_at: 1, tags: [], content: '', sig: '' });
    expect(index.matching(e)).toEqual(new Set([last.sub]));
  });

  it('files a subscription only once an event is matched while it is open', () => {
    const index = new SubscriptionIndex();
    const m = toMatchable({ id: IDS[0]!, pubkey: PUBKEYS[0]!, kind: 1, created_at: 1, tags: [], content: '', sig: '' });
    // Opened and closed with no event in between (a REQ closed after EOSE): never filed.
    const once: Subscriber = { deliver() {} };
    index.add(once, parsed([{ authors: [PUBKEYS[0]] }]));
    expect(index.size).toBe(1);
    index.remove(once);
    expect(index.size).toBe(0);
    expect(index.authorKeys).toBe(0);
    expect(index.pendingSlots).toBe(0);

    // Open when an event arrives: filed then, and reached by that event and later ones.
    const open: Subscriber = { deliver() {} };
    index.add(open, parsed([{ authors: [PUBKEYS[0]] }]));
    expect(index.authorKeys).toBe(0);
    expect(index.matching(m)).toEqual(new Set([open]));
    expect(index.authorKeys).toBe(1);
    expect(index.pendingSlots).toBe(0);
    expect(index.matching(m)).toEqual(new Set([open]));

    // Many opened and closed while a few stay open: the pending list does not grow without bound,
    // and those still open are reached by the next event.
    const stay = Array.from({ length: 5 }, () => ({ deliver() {} }) as Subscriber);
    for (const s of stay) index.add(s, parsed([{ kinds: [1] }]));
    for (let i = 0; i < 20_000; i++) {
      const s: Subscriber = { deliver() {} };
      index.add(s, parsed([{ authors: [hex(5000 + i)] }]));
      index.remove(s);
    }
    expect(index.pendingSlots).toBeLessThan(2 * 5 + 1100);
    expect(index.authorKeys).toBe(1);
    expect(index.matching(m)).toEqual(new Set([open, ...stay]));
    expect(index.size).toBe(6);
  });

  it('files waiting subscriptions once PENDING_FILE_AT of them wait, so the next event files few', () => {
    // 10,000 connections opened during a quiet spell, each holding a live subscription: filed in
    // turns of PENDING_FILE_AT as they come, not all by the first event.
    const index = new SubscriptionIndex();
    const held = Array.from({ length: 10 * PENDING_FILE_AT + 7 }, (_, i) => {
      const s: Subscriber = { deliver() {} };
      index.add(s, parsed([{ authors: [PUBKEYS[i % PUBKEYS.length]] }]));
      expect(index.pendingSubscribers).toBeLessThan(PENDING_FILE_AT);
      return s;
    });
    expect(index.pendingSubscribers).toBe(7);
    expect(index.authorKeys).toBe(PUBKEYS.length);
    const m = toMatchable({ id: IDS[0]!, pubkey: PUBKEYS[1]!, kind: 1, created_at: 1, tags: [], content: '', sig: '' });
    expect(index.matching(m)).toEqual(new Set(held.filter((_, i) => i % PUBKEYS.length === 1)));
    expect(index.pendingSubscribers).toBe(0);
    for (const s of held) index.remove(s);
    expect(index.size).toBe(0);
    expect(index.matching(m).size).toBe(0);
  });
});
