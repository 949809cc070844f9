// Reading several index lists (sorted-list.ts) as one, in NIP-01 result order (created_at DESC, id
// ASC): a k-way merge over a binary heap of the lists' newest unread entries. An event found in more
// than one list (two `#p` values of the same event) comes out once, and dead entries never do.
import type { HeldEvent } from './held-event.js';

/** Part of a list to read, from `next` down to `floor`, both inclusive. */
export interface Run {
  items: ReadonlyArray<HeldEvent | undefined>;
  next: number;
  floor: number;
}

interface Head {
  run: Run;
  event: HeldEvent;
  /** event.created_at, copied: most comparisons then need not reach the event itself (a cache miss). */
  at: number;
}

/** `a` comes first: the newer head, on a tie the lower id (newerFirst). */
const before = (a: Head, b: Head): boolean => a.at > b.at || (a.at === b.at && a.event.id < b.event.id);

export class NewestFirst {
  private readonly heap: Head[] = [];
  private last: HeldEvent | undefined;

  constructor(runs: Run[]) {
    for (const run of runs) {
      const event = nextAlive(run);
      if (event) this.heap.push({ run, event, at: event.created_at });
    }
    for (let i = (this.heap.length >> 1) - 1; i >= 0; i--) this.siftDown(i);
  }

  /** The next event in result order, or undefined when every run is read. */
  next(): HeldEvent | undefined {
    const { heap } = this;
    while (heap.length > 0) {
      const top = heap[0];
      const event = top.event;
      const following = nextAlive(top.run);
      if (following) {
        top.event = following;
        top.at = following.created_at;
      } else {
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

function nextAlive(run: Run): HeldEvent | undefined {
  const { items, floor } = run;
  let i = run.next;
  while (i >= floor) {
    const e = items[i--]!;
    if (e.alive) {
      run.next = i;
      return e;
    }
  }
  run.next = i;
  return undefined;
}
