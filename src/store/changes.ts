// One stream of committed changes: what each committed write stored, in commit order, and the
// ephemeral events the relay passes on without storing. Live fan-out and metrics subscribe to it;
// so do the cross-process feed (feed.ts: it sends this process's ephemeral events to the others and
// announces here what other processes and hosts committed) and the replica router (its position).
// Nothing else calls fan-out directly.
import { settledLsn } from './lsn.js';
import type { PreparedEvent } from './prepared-event.js';

/** `local`: written or accepted by this process; `remote`: learnt from the database (feed.ts). */
export type ChangeSource = 'local' | 'remote';

export type Change =
  /** The events one committed transaction newly stored, in arrival order: no duplicate, nothing it
   * refused, replaced or deleted itself. */
  | { type: 'stored'; events: PreparedEvent[]; source: ChangeSource }
  /** An ephemeral event (NIP-01 kinds 20000-29999): accepted, never stored, passed on once. */
  | { type: 'ephemeral'; event: PreparedEvent; source: ChangeSource }
  /** Events deleted from the database by any writer (a kind 5, a replaced version, a vanish, prune …),
   * read from event_removals by the feed (feed.ts) when a listener asked for them (the hot tier). */
  | { type: 'removed'; ids: string[]; source: ChangeSource };

export type ChangeListener = (change: Change) => void;

export class ChangeStream {
  private readonly listeners = new Set<ChangeListener>();
  private announced = 0n;

  constructor(private readonly onError: (err: unknown) => void = () => undefined) {}

  /**
   * The WAL position (store/lsn.ts) up to which every committed event has been announced here, or
   * will be by a publish already called: a read replica that has replayed this far, together with
   * the live stream from now on, misses nothing (replicas.ts). 0n until a write or a feed read.
   */
  get position(): bigint {
    return this.announced;
  }

  /** Moves the position forward (never back); called as soon as a commit or a feed read is known. */
  advance(lsn: bigint): void {
    const settled = settledLsn(lsn);
    if (settled > this.announced) this.announced = settled;
  }

  /** Returns the function that unsubscribes. */
  subscribe(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Delivers on the next turn of the event loop: the OKs of the committed events are sent first
   * (protocol.md 1.10: OK, then live fan-out), and a fan-out to many subscribers never holds them up.
   * One listener's failure does not keep the change from the others.
   */
  publish(change: Change): void {
    if (change.type === 'stored' && change.events.length === 0) return;
    if (change.type === 'removed' && change.ids.length === 0) return;
    setImmediate(() => {
      for (const listener of this.listeners) {
        try {
          listener(change);
        } catch (err) {
          this.onError(err);
        }
      }
    });
  }
}
