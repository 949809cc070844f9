// Live fan-out: a newly stored or ephemeral event goes to every matching subscription. This is the
// single entry point, so cross-process delivery (several relays on one database) can hook in here.
import { toMatchable } from '../nostr/filter.js';
import type { PreparedEvent } from '../store/prepared-event.js';
import type { SubscriptionIndex } from './subscriptions.js';

export function broadcast(subscriptions: SubscriptionIndex, p: PreparedEvent): number {
  const subscribers = subscriptions.matching(toMatchable(p.event, p.tags));
  for (const s of subscribers) s.deliver(p.event.id, p.raw);
  return subscribers.size;
}
