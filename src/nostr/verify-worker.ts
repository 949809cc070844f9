// Runs in a worker thread (see verifier.ts): for a batch of events, the id and BIP-340 checks and,
// for each valid event, what storing it needs that costs CPU: its stored JSON and its search words.
// An event arrives as the text it came in (a client's `["EVENT",{…}]`, parsed again here: copying
// a string to a thread costs far less than copying the object the main thread parsed) or as an object.
import { eventJsons, idAndSignatureFault, type NostrEvent, type Verdict } from './event.js';
import { searchBinary } from './search.js';

/** The check and the serialisations of one event, wherever it runs (a thread, or inline). */
export function checkEvent(e: NostrEvent): Verdict {
  const { forId, raw } = eventJsons(e);
  const invalid = idAndSignatureFault(e, forId);
  if (invalid) return { invalid };
  return { raw, search: searchBinary(e) };
}

/** The event in a text the main thread already parsed and checked the shape of: a message or an event. */
function eventIn(text: string): NostrEvent {
  const value = JSON.parse(text) as unknown;
  return (Array.isArray(value) ? value[1] : value) as NostrEvent;
}

export default function verifyBatch(items: Array<NostrEvent | string>): Verdict[] {
  return items.map((item) => checkEvent(typeof item === 'string' ? eventIn(item) : item));
}
