// One stream of committed changes: what each committed write stored, in commit order, and the
// ephemeral events the relay passes on without storing. Live fan-out and metrics subscribe to it
// (cross-process delivery, webhooks and caches will too); nothing else calls fan-out directly.
import type { PreparedEvent } from './prepared-event.js';

export type Change =
  /** The events one committed transaction newly stored, in arrival order: no duplicate, nothing it
   * refused, replaced or deleted itself. */
  | { type: 'stored'; events: PreparedEvent[] }
  /** An ephemeral event (NIP-01 kinds 20000-29999): accepted, never stored, passed on once. */
  | { type: 'ephemeral'; event: PreparedEvent };

export type ChangeListener = (change: Change) => void;

export class ChangeStream {
  private readonly listeners = new Set<ChangeListener>();

  constructor(private readonly onError: (err: unknown) => void = () => undefined) {}

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
