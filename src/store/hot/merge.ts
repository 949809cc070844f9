// Reading several index lists (sorted-list.ts) as one, in NIP-01 result order (created_at DESC, id
// ASC): a k-way merge over a binary heap of the lists' newest unread entries. An event found in more
// than one list (two `#p` values of the same event) comes out once, and dead entries never do.
//
// With a test (the filter's conditions the lists do not ensure), each list passes over the entries
// that fail it before they reach the heap: a 150-value `#p` filter for notes walked ~1,500 events,
// two thirds of them reactions and reposts, through a heap 150 wide to serve 500. A list stops at a
// failing entry anyway after MAX_SKIP of them, so one with no match at all is not read to its end
// when the answer is complete long before; the merge then drops that entry.
import type { HeldEvent } from './held-event.js';

/** Failing entries a list passes over in one step before it stops at one (see above). */
const MAX_SKIP = 16;

export type EventTest = (e: HeldEvent) => boolean;

/**
 * Part of a list to read, from `next` down to `floor`, both inclusive; while merged, also its newest
 * unread alive entry (`head`) and that entry's created_at (`at`, copied: most comparisons then need
 * not reach the event itself, a cache miss). One object per list: a 500-author feed merges ~1,000.
 */
export class Run {
  head: HeldEvent | undefined = undefined;
  at = 0;
  /** Whether `head` passed the merge's test. */
  passed = false;

  constructor(
    readonly items: ReadonlyArray<HeldEvent | undefined>,
    public next: number,
    readonly floor: number,
  ) {}

  /**
   * Moves `head` to the next alive entry that passes `test`, or that fails it after MAX_SKIP failing
   * ones; false when the run is read.
   */
  advance(test: EventTest | undefined): boolean {
    const { items, floor } = this;
    let i = this.next;
    let skipped = 0;
    while (i >= floor) {
      const e = items[i--]!;
      if (!e.alive) continue;
      const passed = test === undefined || test(e);
      if (passed || ++skipped >= MAX_SKIP) {
        this.next = i;
        this.head = e;
        this.at = e.created_at;
        this.passed = passed;
        return true;
      }
    }
    this.next = i;
    this.head = undefined;
    return false;
  }
}

/** Where NewestFirst puts what it reads ahead: a value read and kept is a read not optimized away. */
let ahead = 0;

/** `a` comes first: the newer head, on a tie the lower id (newerFirst). */
const before = (a: Run, b: Run): boolean => a.at > b.at || (a.at === b.at && a.head!.id < b.head!.id);

export class NewestFirst {
  private readonly heap: Run[] = [];
  private last: HeldEvent | undefined;

  /**
   * `test`: only events that pass it come out. `since`: none older comes out, and the walk ends at
   * the first entry older than it. The test may check `since` too, but failing entries are dropped
   * inside the merge: without the floor a filter's `since` would not end the walk, and it would read
   * every list to its oldest entry (a one-hour `since` over the 1M corpus: ~90 ms instead of <1).
   */
  constructor(
    runs: Run[],
    private readonly test?: EventTest,
    private readonly since = -Infinity,
  ) {
    // The newest entry of each run, and its event, read first in a loop whose reads do not wait on
    // one another: most are not in the CPU cache, and advance() below would wait for each in turn.
    for (const run of runs) if (run.next >= run.floor) ahead ^= run.items[run.next]!.kind;
    for (const run of runs) if (run.advance(test)) this.heap.push(run);
    for (let i = (this.heap.length >> 1) - 1; i >= 0; i--) this.siftDown(i);
  }

  /** The next event in result order that passes the test, or undefined when every run is read (down to `since`). */
  next(): HeldEvent | undefined {
    const { heap } = this;
    while (heap.length > 0) {
      const top = heap[0];
      if (top.at < this.since) return undefined; // the newest unread entry: every other is older
      const event = top.head!;
      const passed = top.passed;
      if (!top.advance(this.test)) {
        const tail = heap.pop()!;
        if (heap.length > 0) heap[0] = tail;
      }
      if (heap.length > 1) this.siftDown(0);
      // Copies of one event are adjacent (one key), and pass or fail the test alike.
      if (!passed || event === this.last) continue;
      this.last = event;
      return event;
    }
    return undefined;
  }

  private siftDown(i: number): void {
    const { heap } = this;
    const n = heap.length;
    const item = heap[i];
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && before(heap[child + 1], heap[child])) child++;
      if (!before(heap[child], item)) break;
      heap[i] = heap[child];
      i = child;
    }
    heap[i] = item;
  }
}
