// The EVENT path: shape → id → signature → policy → store (or, for ephemeral kinds, nothing) → the
// reply. Fan-out is the caller's next step, after it has sent OK.
import { checkIdAndSignature, parseEvent } from '../nostr/event.js';
import { isEphemeral } from '../nostr/kinds.js';
import { prepareEvent, writeEvent, type PreparedEvent } from '../store/write.js';
import { nowSeconds, type RelayContext } from './context.js';
import { checkEventPolicy } from './policy.js';

export interface IngestResult {
  id: string;
  accepted: boolean;
  reason: string;
  /** Set when the event is new to the relay and must be fanned out. */
  publish?: PreparedEvent;
}

function idOf(input: unknown): string {
  const id = (input as { id?: unknown } | null)?.id;
  return typeof id === 'string' ? id : '';
}

export async function ingestEvent(ctx: RelayContext, input: unknown): Promise<IngestResult> {
  const parsed = parseEvent(input);
  if (!parsed.ok) return { id: idOf(input), accepted: false, reason: parsed.reason };
  const event = parsed.value;
  const refused = checkIdAndSignature(event) ?? checkEventPolicy(event, ctx.limits, nowSeconds());
  if (refused) return { id: event.id, accepted: false, reason: refused };

  const prepared = prepareEvent(event);
  if (isEphemeral(event.kind)) return { id: event.id, accepted: true, reason: '', publish: prepared };
  if (ctx.closing) return { id: event.id, accepted: false, reason: 'error: relay is shutting down, try again later' };

  const write = writeEvent(ctx.pool, prepared);
  ctx.inflightWrites.add(write);
  try {
    const result = await write;
    switch (result.status) {
      case 'stored':
        return { id: event.id, accepted: true, reason: '', publish: prepared };
      case 'duplicate':
        return { id: event.id, accepted: true, reason: 'duplicate: already have this event' };
      case 'rejected':
        return { id: event.id, accepted: false, reason: result.reason };
    }
  } catch (err) {
    ctx.log.error({ err: (err as Error).message, id: event.id }, 'storing an event failed');
    return { id: event.id, accepted: false, reason: 'error: could not store the event, try again later' };
  } finally {
    ctx.inflightWrites.delete(write);
  }
}
