// Reading several index lists (sorted-list.ts) as one, in NIP-01 result order (created_at DESC, id
// ASC): a k-way merge over a binary heap of the lists' newest unread entries. An event found in more
// than one list (two `#p` values of the same event) comes out once, and dead entries never do.
import type { HeldEvent } from './held-event.js';

/**
 * Part of a list to read, from `next` down to `floor`, both inclusive; while merged, also its newest
 * unread alive entry (`head`) and that entry's created_at (`at`, copied: most comparisons then need
 * not reach the event itself, a cache miss). One object per list: a 500-author feed merges ~1,000.
 */
export class Run {
  head: HeldEvent | undefined = undefined;
  at = 0;

  constructor(
    readonly items: ReadonlyArray<HeldEvent | undefined>,
    public next: number,
    readonly floor: number,
  ) {}

  /** Moves `head` to the next alive entry; false when the run is read. */
  advance(): boolean {
    const { items, floor } = this;
    let i = this.next;
    while (i >= floor) {
      const e = items[i--]!;
      if (e.alive) {
        this.next = i;
        this.head = e;
        this.at = e.created_at;
        return true;
      }
    }
    this.next = i;
    this.head = undefined;
    return false;
  }
}

/** `a` comes first: the newer head, on a tie the lower id (newerFirst). */
const before = (a: Run, b: Run): boolean => a.at > b.at || (a.at === b.at && a.head!.id < b.head!.id);

export class NewestFirst {
  private readonly heap: Run[] = [];
  private last: HeldEvent | undefined;

  constructor(runs: Run[]) {
    for (const run of runs) if (run.advance()) this.heap.push(run);
    for (let i = (this.heap.length >> 1) - 1; i >= 0; i--) this.siftDown(i);
  }

  /** The next event in result order, or undefined when every run is read. */
  next(): HeldEvent | undefined {
    const { heap } = this;
    while (heap.length > 0) {
      const top = heap[0];
      const event = top.head!;
      if (!top.advance()) {
        const tail = heap.pop()!;
        if (heap.length > 0) heap[0] = tail;
      }
      if (heap.length > 1) this.siftDown(0);
      if (event === this.last) continue;
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
