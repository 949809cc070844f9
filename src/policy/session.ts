// What a policy rule sees besides the event or filter: the session it arrives on, and the shapes of
// the rules themselves (khatru's RejectEvent / RejectFilter lists). A connection has a session; the
// importers check events with `importSession`, which has no connection behind it.
import type { NostrEvent } from '../nostr/event.js';
import type { Filter } from '../nostr/filter.js';
import type { Reason } from '../nostr/reason.js';

export interface Session {
  /** A client's connection, or an operator's import (which no client can speak for). */
  readonly origin: 'connection' | 'import';
  /** The client's address (see relay/client-address.ts); undefined when there is no connection. */
  readonly address: string | undefined;
  /** NIP-42: the pubkeys authenticated on this connection. All of them count, for its whole life. */
  readonly pubkeys: ReadonlySet<string>;
}

/** The session of an operator's import: no connection, nobody authenticated. */
export const importSession: Session = Object.freeze({ origin: 'import', address: undefined, pubkeys: new Set<string>() });

/** A write rule: a NIP-01 prefixed reason to refuse the event, or undefined to let it through. */
export type WriteRule = (event: NostrEvent, session: Session, now: number) => Reason | undefined;

/**
 * A read rule: who may see which event. `refuse` turns a whole REQ or COUNT away (CLOSED with its
 * reason); `narrow` shrinks one filter to the events this session may see. The narrowed filter is
 * what PostgreSQL answers (REQ, COUNT) and what live fan-out matches in memory, so all three agree.
 */
export interface ReadRule {
  readonly name: string;
  /**
   * Narrows REQs only: a rule that shortens answers (a cap on limit), which COUNT ignores and NIP-77
   * must not (it reconciles every event a filter matches).
   */
  readonly reqOnly?: boolean;
  refuse?(filters: readonly Filter[], session: Session): Reason | undefined;
  narrow?(filter: Filter, session: Session): Filter;
}
