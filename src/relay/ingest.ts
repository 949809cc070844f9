// The EVENT path: shape → write rules (with the connection's session) → id and signature (worker
// pool) → the operator's write-policy plugin, if any → group-committed write (or, for ephemeral
// kinds, nothing) → the reply. The writer announces what it committed on the change stream, and an
// ephemeral event is announced here: fan-out listens there and runs on the next turn, after the
// caller has sent OK.
import { claimedId, parseEvent } from '../nostr/event.js';
import { isEphemeral } from '../nostr/kinds.js';
import * as reason from '../nostr/reason.js';
import { checkWrite } from '../policy/policy.js';
import type { Session } from '../policy/session.js';
import { connectionSource, rejectionReason } from '../policy/write-plugin.js';
import { prepareEvent } from '../store/prepared-event.js';
import { WriterBusyError } from '../store/writer.js';
import { nowSeconds, type RelayContext } from './context.js';

export interface IngestResult {
  /** The id the OK answers: the event's, or whatever string the client claimed; undefined (none) gets a NOTICE. */
  id: string | undefined;
  accepted: boolean;
  reason: string;
}

export async function ingestEvent(ctx: RelayContext, session: Session, input: unknown): Promise<IngestResult> {
  const parsed = parseEvent(input);
  if (!parsed.ok) return { id: claimedId(input), accepted: false, reason: parsed.reason };
  const event = parsed.value;
  const refuse = (why: string): IngestResult => ({ id: event.id, accepted: false, reason: why });
  // Rules first: they are cheap, and spare the signature check for events we refuse anyway.
  const refusal = checkWrite(ctx.policy, event, session, nowSeconds());
  if (refusal) return refuse(refusal);
  const invalid = await ctx.verifier.verify(event);
  if (invalid) return refuse(invalid);
  // WRITE_POLICY_PLUGIN has the last word on what passed our checks. shadowReject: the client is told
  // OK, and the event is neither stored nor passed on (fan-out, webhooks, the hot tier).
  if (ctx.writePlugin) {
    const verdict = await ctx.writePlugin.decide(event, connectionSource(session));
    if (verdict.action === 'shadowReject') return { id: event.id, accepted: true, reason: '' };
    if (verdict.action === 'reject') return refuse(rejectionReason(verdict.msg));
  }

  const prepared = prepareEvent(event);
  if (isEphemeral(event.kind)) {
    // Webhooks: queued before the OK.
    try {
      await ctx.outbox.enqueueEphemeral(ctx.pool, prepared);
    } catch (err) {
      ctx.log.error({ err: (err as Error).message, id: event.id }, 'queueing webhooks for an ephemeral event failed');
      return refuse(reason.error('could not pass the event on, try again later'));
    }
    ctx.changes.publish({ type: 'ephemeral', event: prepared, source: 'local' });
    return { id: event.id, accepted: true, reason: '' };
  }
  if (ctx.closing) return refuse(reason.error('relay is shutting down, try again later'));
  try {
    const result = await ctx.writer.submit(prepared);
    switch (result.status) {
      case 'stored':
        return { id: event.id, accepted: true, reason: '' };
      case 'duplicate':
        return { id: event.id, accepted: true, reason: reason.duplicate('already have this event') };
      case 'rejected':
        return refuse(result.reason);
    }
  } catch (err) {
    if (err instanceof WriterBusyError) return refuse(reason.rateLimited('the relay is busy writing, try again shortly'));
    ctx.log.error({ err: (err as Error).message, id: event.id }, 'storing an event failed');
    return refuse(reason.error('could not store the event, try again later'));
  }
}
