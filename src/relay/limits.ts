// The relay's limits, derived once from the configuration: enforced by policy.ts and connection.ts,
// announced by nip11.ts, so what we announce is what we enforce.
import type { Config } from '../config.js';
import type { FilterLimits } from '../nostr/filter.js';

export interface Limits extends FilterLimits {
  maxMessageBytes: number;
  maxSubscriptions: number;
  maxFilters: number;
  maxSubidLength: number;
  maxEventTags: number;
  maxContentLength: number; // Unicode code points
  createdAtFutureSeconds: number;
  createdAtPastSeconds: number; // 0: no lower bound
  minPowDifficulty: number;
  maxBufferedBytes: number;
  maxPendingEvents: number; // per connection, events awaiting their OK
}

export function limitsFrom(config: Config): Limits {
  return {
    maxMessageBytes: config.MAX_MESSAGE_BYTES,
    maxSubscriptions: config.MAX_SUBSCRIPTIONS,
    maxFilters: config.MAX_FILTERS,
    maxLimit: config.MAX_LIMIT,
    defaultLimit: config.DEFAULT_LIMIT,
    maxSubidLength: config.MAX_SUBID_LENGTH,
    maxEventTags: config.MAX_EVENT_TAGS,
    maxContentLength: config.MAX_CONTENT_LENGTH,
    maxValuesPerArray: config.MAX_FILTER_VALUES,
    createdAtFutureSeconds: config.CREATED_AT_FUTURE_SECONDS,
    createdAtPastSeconds: config.CREATED_AT_PAST_SECONDS,
    minPowDifficulty: config.MIN_POW_DIFFICULTY,
    maxBufferedBytes: config.MAX_BUFFERED_BYTES,
    maxPendingEvents: config.MAX_PENDING_EVENTS,
  };
}
