// Live fan-out: each change from the change stream (store/changes.ts) goes to every matching
// subscription, each event once per subscription. The stream is its only caller, so events written
// by this process and, later, by others reach subscribers the same way.
import { toMatchable } from '../nostr/filter.js';
import type { Change } from '../store/changes.js';
import { matchableWords, type PreparedEvent } from '../store/prepared-event.js';
import type { SubscriptionIndex } from './subscriptions.js';

function broadcast(subscriptions: SubscriptionIndex, p: PreparedEvent): number {
  const subscribers = subscriptions.matching({ ...toMatchable(p.event, p.tags), searchDocument: matchableWords(p) });
  for (const s of subscribers) s.deliver(p.event.id, p.raw);
  return subscribers.size;
}

/**
 * Delivers a change to the live subscriptions; returns the number of EVENT messages sent. `withheld`:
 * stored events held back from everyone (REPORTS_HIDE_AT, store/reports.ts), read at each change.
 */
export function fanOut(subscriptions: SubscriptionIndex, change: Change, withheld?: () => ReadonlySet<string> | undefined): number {
  if (change.type === 'ephemeral') return broadcast(subscriptions, change.event);
  if (change.type === 'removed') return 0; // NIP-01 has no way to take back a sent event
  const held = withheld?.();
  let delivered = 0;
  for (const p of change.events) if (!held?.has(p.event.id)) delivered += broadcast(subscriptions, p);
  return delivered;
}
