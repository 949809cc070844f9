// The relay's limits, derived once from the configuration: enforced by the rules below and by
// relay/connection.ts, announced by relay/http/nip11.ts, so what we announce is what we enforce.
import type { Config } from '../config.js';
import type { FilterLimits } from '../nostr/filter.js';
import { isAddressable } from '../nostr/kinds.js';
import * as reason from '../nostr/reason.js';
import { dTagOf, isIndexableTagValue } from '../nostr/tags.js';
import type { WriteRule } from './session.js';

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

function codePointsOver(s: string, max: number): boolean {
  if (s.length <= max) return false; // code points <= UTF-16 units
  let n = 0;
  for (const _ of s) if (++n > max) return true;
  return false;
}

/** The size and time-window limits announced in NIP-11 `limitation`, as write rules. */
export function limitRules(limits: Limits): WriteRule[] {
  return [
    function tooManyTags(e) {
      return e.tags.length > limits.maxEventTags ? reason.invalid(`more than ${limits.maxEventTags} tags`) : undefined;
    },
    function contentTooLong(e) {
      return codePointsOver(e.content, limits.maxContentLength) ? reason.invalid(`content longer than ${limits.maxContentLength} characters`) : undefined;
    },
    function createdAtTooFarAhead(e, _session, now) {
      return e.created_at > now + limits.createdAtFutureSeconds
        ? reason.invalid(`created_at is more than ${limits.createdAtFutureSeconds} seconds in the future`)
        : undefined;
    },
    function createdAtTooOld(e, _session, now) {
      return limits.createdAtPastSeconds > 0 && e.created_at < now - limits.createdAtPastSeconds
        ? reason.invalid(`created_at is more than ${limits.createdAtPastSeconds} seconds in the past`)
        : undefined;
    },
  ];
}

/** The d value is part of the unique replacement key, so it must fit the index. */
export const addressTooLong: WriteRule = function addressTooLong(e) {
  return isAddressable(e.kind) && !isIndexableTagValue(dTagOf(e.tags)) ? reason.invalid('d tag value is too long or contains NUL') : undefined;
};
