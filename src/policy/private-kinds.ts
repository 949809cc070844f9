// Private kinds (RESTRICTED_READ_KINDS, default NIP-04 DMs and NIP-59 gift wraps): an event of these
// kinds is served only to a connection on which its author, or a pubkey in its `p` tags, is
// authenticated (NIP-42; protocol.md 6: relays SHOULD serve kind 1059 only to its recipient). The
// rule narrows each filter (filter.privateKinds), so REQ and COUNT filter in SQL through indexes
// (store/query.ts) and live fan-out filters in memory with the same condition.
import type { Filter } from '../nostr/filter.js';
import { matchesNothing } from '../nostr/filter.js';
import * as reason from '../nostr/reason.js';
import type { ReadRule, Session } from './session.js';

export function privateKindsRule(kinds: readonly number[]): ReadRule | undefined {
  if (kinds.length === 0) return undefined;
  const hidden = new Set(kinds);
  const onlyHidden = (f: Filter) => f.kinds !== undefined && f.kinds.every((k) => hidden.has(k));
  const noneHidden = (f: Filter) => f.kinds !== undefined && !f.kinds.some((k) => hidden.has(k));
  const allOf = (values: readonly string[] | undefined, readers: ReadonlySet<string>) => values !== undefined && values.every((v) => readers.has(v));
  return {
    name: 'privateKinds',
    /** Filters that can match nothing but private kinds, from nobody: ask for AUTH instead of answering nothing. */
    refuse(filters: readonly Filter[], session: Session) {
      if (session.pubkeys.size > 0) return undefined;
      const live = filters.filter((f) => !matchesNothing(f));
      if (live.length > 0 && live.every(onlyHidden))
        return reason.authRequired(`kinds ${[...hidden].join(', ')} are private: authenticate (NIP-42) as their author or recipient`);
      return undefined;
    },
    narrow(filter: Filter, session: Session): Filter {
      const readers = session.pubkeys;
      // Nothing private can match, or everything that can is the session's own: no condition needed.
      if (noneHidden(filter) || allOf(filter.authors, readers) || filter.tags.some((t) => t.name === 'p' && allOf(t.values, readers))) return filter;
      return { ...filter, privateKinds: { kinds: hidden, readers } };
    },
  };
}
