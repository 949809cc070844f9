// Runs in a worker thread: the id and BIP-340 checks for a batch of events (see verifier.ts).
import { checkIdAndSignature, type NostrEvent } from './event.js';

export default function verifyBatch(events: NostrEvent[]): Array<string | undefined> {
  return events.map(checkIdAndSignature);
}
