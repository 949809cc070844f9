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
      return hideKinds(filter, hidden, readers);
    },
  };
}

const unions = new WeakMap<ReadonlySet<number>, WeakMap<ReadonlySet<number>, ReadonlySet<number>>>();

/** a ∪ b, made once per pair of the rules' (constant) sets. */
function union(a: ReadonlySet<number>, b: ReadonlySet<number>): ReadonlySet<number> {
  if (a === b) return a;
  let byB = unions.get(a);
  if (!byB) unions.set(a, (byB = new WeakMap()));
  let both = byB.get(b);
  if (!both) byB.set(b, (both = new Set([...a, ...b])));
  return both;
}

/**
 * The filter with events of `kinds` left out unless their author or a `p`-tagged pubkey is among
 * `readers` (the connection's live set): the privateKinds condition, added to any the filter already
 * carries, so the rules that hide kinds (this one, policy/read-rules.ts) may narrow in any order.
 */
export function hideKinds(filter: Filter, kinds: ReadonlySet<number>, readers: ReadonlySet<string>): Filter {
  const already = filter.privateKinds;
  return { ...filter, privateKinds: { kinds: already ? union(already.kinds, kinds) : kinds, readers } };
}
