// The hot tier's k-way merge (src/store/hot/merge.ts) against sorting: whatever the lists, their dead
// entries, the events they share and the test, the events that come out are the alive ones that pass
// it, each once, in NIP-01 result order. Long streaks of entries of other kinds are where a list
// stops at one (MAX_KIND_SKIP) and the merge must drop it. The lists themselves (sorted-list.ts)
// keep each entry's created_at and kind beside it through every way in and out.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { HeldEvent, newerFirst } from '../../src/store/hot/held-event.js';
import { kindTest, NewestFirst, Run } from '../../src/store/hot/merge.js';
import { entryAt, kindOf, SortedList } from '../../src/store/hot/sorted-list.js';

const idOf = (n: number) => n.toString(16).padStart(64, '0');
const NO_TAGS: string[] = [];

function held(n: number, createdAt: number, kind: number): HeldEvent {
  return new HeldEvent(idOf(n), 'a'.repeat(64), createdAt, kind, `{"n":${n}}`, NO_TAGS, null, null, 8);
}

/** A list as the tier keeps it: oldest first, read from the end. */
const listOrder = (a: HeldEvent, b: HeldEvent) => (newerFirst(a, b) ? 1 : -1);

const world = fc
  .record({
    // created_at from a narrow range, so ties (ordered by id) are common
    // mostly kind 7: a test for kind 1 meets streaks of failing entries, often longer than MAX_KIND_SKIP
    events: fc.array(fc.record({ at: fc.integer({ min: 0, max: 20 }), kind: fc.integer({ min: 0, max: 9 }).map((k) => (k === 0 ? 1 : 7)) }), { minLength: 1, maxLength: 160, size: 'max' }),
    lists: fc.array(fc.array(fc.nat(), { maxLength: 120, size: 'max' }), { minLength: 1, maxLength: 8 }),
    dead: fc.array(fc.nat(), { maxLength: 20 }),
    kind: fc.constantFrom(1, 7, undefined),
    since: fc.option(fc.integer({ min: 0, max: 21 }), { nil: undefined }),
  })
  .map(({ events, lists, dead, kind, since }) => {
    const all = events.map((e, i) => held(i, e.at, e.kind));
    for (const d of dead) all[d % all.length]!.alive = false;
    // Each list holds an event at most once; different lists may share events.
    const runs = lists.map((picks) => [...new Set(picks.map((p) => all[p % all.length]!))].sort(listOrder));
    return { all, runs, kind, since };
  });

describe('NewestFirst', () => {
  it('gives the alive events that pass the test, each once, in result order, none older than since', () => {
    fc.assert(
      fc.property(world, ({ runs, kind, since }) => {
        const test = kind === undefined ? undefined : (e: HeldEvent) => e.kind === kind;
        const expected = [...new Set(runs.flat())]
          .filter((e) => e.alive && (test === undefined || test(e)) && (since === undefined || e.created_at >= since))
          .sort((a, b) => (newerFirst(a, b) ? -1 : 1));
        // The kind checked on each event, or on the lists' own kinds.
        for (const [eventTest, kindOk] of [
          [test, undefined],
          [undefined, kind === undefined ? undefined : kindTest([kind])],
        ] as const) {
          const walk = new NewestFirst(
            runs.map((items) => Run.of(items)),
            eventTest,
            since,
            kindOk,
          );
          const out: HeldEvent[] = [];
          for (let e = walk.next(); e !== undefined; e = walk.next()) out.push(e);
          expect(out.map((e) => e.id)).toEqual(expected.map((e) => e.id));
        }
      }),
      { numRuns: 1000 },
    );
  });

  it('a list with long streaks of failing entries still gives its passing ones in order', () => {
    // 200 events, one in 50 of kind 1: streaks of 49 kind-7 entries, longer than a list passes over at once.
    const events = Array.from({ length: 200 }, (_, i) => held(i, 1000 + i, i % 50 === 0 ? 1 : 7)).sort(listOrder);
    const other = [held(500, 1100, 1), held(501, 1010, 1)].sort(listOrder);
    const walk = new NewestFirst(
      [Run.of(events), Run.of(other)],
      (e) => e.kind === 1,
    );
    const out: number[] = [];
    for (let e = walk.next(); e !== undefined; e = walk.next()) out.push(e.created_at);
    expect(out).toEqual([1150, 1100, 1100, 1050, 1010, 1000]);
  });

  it('orders events by created_at beyond 2^37 (the year 6325), which the lists read from the events', () => {
    const ats = [5, 2 ** 37 + 2, 2 ** 37, 2 ** 37 + 1, 2 ** 37 - 1, 2 ** 50];
    const lists = [ats.slice(0, 3), ats.slice(3)].map((group, k) => group.map((at, i) => held(10 * k + i, at, 1)).sort(listOrder));
    const walk = new NewestFirst(
      lists.map((items) => Run.of(items)),
      undefined,
      2 ** 37,
      kindTest([1]),
    );
    const out: number[] = [];
    for (let e = walk.next(); e !== undefined; e = walk.next()) out.push(e.created_at);
    expect(out).toEqual([2 ** 50, 2 ** 37 + 2, 2 ** 37 + 1, 2 ** 37]);
  });

  it("reads no event of another kind than the filter's", () => {
    // 300 events, one in 30 of kind 1; reading a kind-7 event's fields counts it.
    const events = Array.from({ length: 300 }, (_, i) => held(i, 1000 + i, i % 30 === 0 ? 1 : 7)).sort(listOrder);
    let read = 0;
    for (const e of events) {
      if (e.kind === 1) continue;
      Object.defineProperty(e, 'alive', { get: () => (read++, true) });
    }
    const walk = new NewestFirst([Run.of(events)], (e) => e.kind === 1, undefined, kindTest([1, 6]));
    const out: number[] = [];
    for (let e = walk.next(); e !== undefined; e = walk.next()) out.push(e.created_at);
    expect(out).toEqual(Array.from({ length: 10 }, (_, i) => 1270 - 30 * i));
    expect(read).toBe(0);
  });

  it('ends at since, even when the test fails every older entry', () => {
    // A filter's `since` is in its test too (compileFilter); the failing entries below it are dropped
    // inside the merge, so only the floor stops the walk before the lists' oldest entries.
    const events = Array.from({ length: 10_000 }, (_, i) => held(i, i, 1)).sort(listOrder);
    const others = Array.from({ length: 3 }, (_, k) => Array.from({ length: 1000 }, (_, i) => held(20_000 + 1000 * k + i, 10 * i + k, 1)).sort(listOrder));
    let tested = 0;
    const walk = new NewestFirst(
      [events, ...others].map((items) => Run.of(items)),
      (e) => (tested++, e.created_at >= 9990),
      9990,
    );
    const out: number[] = [];
    for (let e = walk.next(); e !== undefined; e = walk.next()) out.push(e.created_at);
    expect(out).toEqual([9999, 9998, 9997, 9996, 9995, 9994, 9993, 9992, 9992, 9991, 9991, 9990, 9990]);
    expect(tested).toBeLessThan(100);
  });
});

describe('SortedList', () => {
  it('keeps each entry in order with its created_at and kind beside it, through adds, removals and sweeps', () => {
    const op = fc.oneof(
      // created_at mostly small; some at and above 2^37, which an entry's number does not keep
      fc.record({ add: fc.oneof(fc.integer({ min: 0, max: 300 }), fc.constantFrom(2 ** 37 - 1, 2 ** 37, 2 ** 37 + 3, 2 ** 45)), kind: fc.integer({ min: 0, max: 65535 }), oldest: fc.boolean() }),
      fc.record({ kill: fc.nat() }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 400 }), fc.array(fc.oneof(fc.integer({ min: -1, max: 301 }), fc.constantFrom(2 ** 37 - 1, 2 ** 37, 2 ** 37 + 2, 2 ** 46)), { maxLength: 10 }), (ops, probes) => {
        const list = new SortedList();
        const alive: HeldEvent[] = [];
        let n = 0;
        for (const o of ops) {
          if ('add' in o) {
            const e = held(n++, o.add, o.kind);
            if (o.oldest) list.addOldest(e);
            else list.add(e);
            alive.push(e);
          } else if (alive.length > 0) {
            const [e] = alive.splice(o.kill % alive.length, 1);
            e!.alive = false;
            list.dead++;
            list.tidy();
          }
        }
        const entries = list.items.slice(list.start).filter((e) => e!.alive);
        expect(entries).toEqual([...alive].sort(listOrder));
        expect(list.metas.length).toBe(list.items.length);
        for (let i = list.start; i < list.items.length; i++) {
          expect(entryAt(list.items, list.metas, i)).toBe(list.items[i]!.created_at);
          expect(kindOf(list.metas[i]!)).toBe(list.items[i]!.kind);
        }
        for (const t of probes) {
          let last = list.start - 1;
          for (let i = list.start; i < list.items.length; i++) if (list.items[i]!.created_at <= t) last = i;
          expect(list.lastAtOrBefore(t)).toBe(last);
        }
      }),
      { numRuns: 300 },
    );
  });
});
