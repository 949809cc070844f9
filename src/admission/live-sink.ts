// The relay's sink (admit.ts): an event is stored by the group-committing writer, which announces
// what it committed on the change stream; an ephemeral event is passed on here: its webhook
// deliveries queued first, then announced on the change stream (fan-out, other processes), never
// stored. Clients and router streams write through it.
import type pg from 'pg';
import type { Logger } from '../log.js';
import * as reason from '../nostr/reason.js';
import type { ChangeStream } from '../store/changes.js';
import type { WebhookOutbox } from '../store/outbox.js';
import type { NostrEvent, Verdict } from '../nostr/event.js';
import { prepareVerified } from '../store/prepared-event.js';
import { WriterBusyError, type EventWriter } from '../store/writer.js';
import type { EventSink, SinkResult, SinkSlot } from './admit.js';

export interface LiveSinkParts {
  pool: pg.Pool;
  writer: EventWriter;
  outbox: WebhookOutbox;
  changes: ChangeStream;
  log: Logger;
  /** True once the relay is shutting down: the writer takes no new events. */
  closing(): boolean;
}

export function liveSink(parts: LiveSinkParts): EventSink {
  const { pool, writer, outbox, changes, log } = parts;
  // Nothing to keep per event: every place is the same one.
  const slot: SinkSlot = {
    async store(event: NostrEvent, verdict?: Verdict): Promise<SinkResult> {
      if (parts.closing()) return { status: 'failed', reason: reason.error('relay is shutting down, try again later') };
      try {
        return await writer.submit(prepareVerified(event, verdict));
      } catch (err) {
        if (err instanceof WriterBusyError) return { status: 'busy' };
        log.error({ err: (err as Error).message, id: event.id }, 'storing an event failed');
        return { status: 'failed', reason: reason.error('could not store the event, try again later') };
      }
    },
    async passOn(event: NostrEvent, verdict?: Verdict): Promise<SinkResult> {
      const prepared = prepareVerified(event, verdict);
      // Webhooks: queued before the OK.
      try {
        await outbox.enqueueEphemeral(pool, prepared);
      } catch (err) {
        log.error({ err: (err as Error).message, id: event.id }, 'queueing webhooks for an ephemeral event failed');
        return { status: 'failed', reason: reason.error('could not pass the event on, try again later') };
      }
      changes.publish({ type: 'ephemeral', event: prepared, source: 'local' });
      return { status: 'stored' };
    },
    skip() {},
  };
  return { passesOnEphemeral: true, slot: () => slot };
}
