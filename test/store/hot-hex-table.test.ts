// The hot tier's tables keyed by hex (store/hot/hex-table.ts) against a Map: any sequence of
// inserts, lookups and deletions gives the same answers, including keys
// that share the 56 bits the table keys by, and through the table's growth.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { HeldEvent } from '../../src/store/hot/held-event.js';
import { IdIndex } from '../../src/store/hot/hex-table.js';

const held = (id: string) => new HeldEvent(id, 'a'.repeat(64), 1, 1, '{}', [], null, null, 2);

/** Ids from a small pool: the same 14 leading digits with different tails, and a few that end the same. */
const hex = (length: number) => fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: length, maxLength: length });
const idArb = fc.oneof(
  fc.tuple(fc.constantFrom('00000000000000', '0123456789abcd', 'ffffffffffffff', '00000001000000'), hex(50)).map(([head, tail]) => head + tail),
  hex(64),
);

describe('the id index', () => {
  it('answers as a Map does through inserts, deletions and growth', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.constantFrom('set', 'delete', 'get'), idArb), { maxLength: 500 }), fc.integer({ min: 0, max: 5000 }), (ops, expected) => {
        const index = new IdIndex(expected);
        const map = new Map<string, HeldEvent>();
        const seen: string[] = [];
        for (const [op, fresh] of ops) {
          // Half the time an id already used, so deletions and lookups hit.
          const id = seen.length > 0 && fresh.charCodeAt(63) % 2 === 0 ? seen[fresh.charCodeAt(62) % seen.length]! : fresh;
          seen.push(id);
          if (op === 'set') {
            if (map.has(id)) continue; // the tier never sets an id it holds
            const e = held(id);
            index.set(e);
            map.set(id, e);
          } else if (op === 'delete') {
            expect(index.delete(id)).toBe(map.delete(id));
          } else {
            expect(index.get(id)).toBe(map.get(id));
          }
          expect(index.size).toBe(map.size);
        }
        for (const id of seen) expect(index.get(id)).toBe(map.get(id));
        for (const id of map.keys()) expect(index.has(id)).toBe(true);
      }),
      { numRuns: 200 },
    );
  });

  it('holds 200,000 ids and gives each back, half of them deleted', () => {
    const index = new IdIndex();
    const events: HeldEvent[] = [];
    for (let i = 0; i < 200_000; i++) {
      const e = held(i.toString(16).padStart(8, '0').padEnd(64, '0'));
      events.push(e);
      index.set(e);
    }
    let wrong = 0;
    for (const e of events) if (index.get(e.id) !== e) wrong++;
    for (let i = 0; i < events.length; i += 2) if (!index.delete(events[i]!.id)) wrong++;
    for (let i = 0; i < events.length; i++) if (index.get(events[i]!.id) !== (i % 2 === 0 ? undefined : events[i])) wrong++;
    expect(wrong).toBe(0);
    expect(index.size).toBe(100_000);
  });
});
