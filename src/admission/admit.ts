// One door for every event. A client's EVENT, a router stream's event, a line of `import`, a row of
// `import-nostream` and an event `sync` fetched all come through admit(), with their source
// (source.ts), and get one answer. The steps, in order, defined here and nowhere else:
//
//   shape (nostr/event.ts) → the relay's write rules, with the source's session (policy/) → id and
//   signature (the verifier's threads; only the id where the source's signatures are trusted) → the
//   source's own plugin (a stream's pluginDown) → WRITE_POLICY_PLUGIN → the sink: prepared
//   (canonical JSON, tag rows: store/prepared-event.ts) and stored by the writer, or, for an
//   ephemeral kind, passed on.
//
// Rules come before the signature because they are cheap and refuse most bad events. The plugins
// come after it, so a plugin only ever judges authentic events. The sink is where events go: the
// relay's group-committing writer and change stream (live-sink.ts), or an import's ordered bulk
// writer (ops/import-batch.ts). A sink hands out its places in arrival order, before anything is
// awaited, so an ordered sink writes events in the order they arrived whatever order their checks
// finish in. A sink prepares an event as it writes it, so an import's events waiting for their batch
// hold only their JSON, not their rows.
import { claimedId, computeEventId, ID_MISMATCH, parseEvent, type NostrEvent, type Verdict } from '../nostr/event.js';
import { isEphemeral } from '../nostr/kinds.js';
import * as reason from '../nostr/reason.js';
import type { SignatureVerifier } from '../nostr/verifier.js';
import { checkWrite, type Policy } from '../policy/policy.js';
import { rejectionReason, type PluginSource, type PluginVerdict, type WritePlugin } from '../policy/write-plugin.js';
import type { WriteResult } from '../store/prepared-event.js';
import type { EventSource } from './source.js';

/**
 * What became of an event. `stored` (committed), `passed` (an ephemeral event passed on) and
 * `duplicate` are OK true, as is `shadowed` (a plugin's shadowReject: nothing kept). `invalid`: not
 * an event, or a wrong id or signature. `refused`: the relay's rules or a plugin said no.
 * `rejected`: the store said no (an older version, a deleted event; an ephemeral event where the
 * sink does not pass them on). `fault`: not the event's fault (a plugin down or busy, the writer's
 * queue full, the database failing, the relay closing): the same event may be taken later.
 */
export type Outcome = 'stored' | 'passed' | 'duplicate' | 'shadowed' | 'invalid' | 'refused' | 'rejected' | 'fault';

export interface Answer {
  /** The id an OK answers: the event's, or what the input claimed; undefined if none (a NOTICE then). */
  id: string | undefined;
  outcome: Outcome;
  /** OK's verdict. */
  accepted: boolean;
  /** OK's message: '' or a NIP-01 prefixed reason. */
  reason: string;
  /** Stored in place of an earlier version of its address (the importers count these). */
  replaced?: boolean;
}

/** A sink's answer: the writer's (`replaced` where a sink knows it), or `busy` (offer it again later), or `failed` with the reason to give. */
export type SinkResult = WriteResult | { status: 'stored'; replaced?: boolean } | { status: 'busy' } | { status: 'failed'; reason: string };

/** One event's place in a sink, taken when the event arrives; exactly one method is called, once (store may be called again after `busy`). */
export interface SinkSlot {
  /** `verdict`: the verifier's serialisations of the event, when it checked the signature. */
  store(event: NostrEvent, verdict?: Verdict): Promise<SinkResult>;
  /** An ephemeral event: passed on without being stored (`stored` once it is). */
  passOn(event: NostrEvent, verdict?: Verdict): Promise<SinkResult>;
  /** The event was refused before reaching the sink. */
  skip(): void;
}

export interface EventSink {
  /** The relay passes ephemeral events on; an import only stores, so they are refused before any check is spent on them. */
  readonly passesOnEphemeral: boolean;
  /** The next event's place, in arrival order. */
  slot(): SinkSlot;
}

/** What judges an event before its sink: the same for every source of one process. */
export interface AdmissionChecks {
  /** The relay's write rules. */
  policy: Policy;
  /** Checks ids and signatures; a source whose signatures are trusted needs none. */
  verifier: SignatureVerifier | undefined;
  /** WRITE_POLICY_PLUGIN, when set. */
  plugin: WritePlugin | undefined;
}

export interface AdmissionParts extends AdmissionChecks {
  sink: EventSink;
}

/** Why an import refuses an ephemeral event: it stores events, and an ephemeral one is never stored. */
export const EPHEMERAL_NOT_STORED = 'ephemeral: ephemeral events are not stored';

/** Times a plugin's fault is asked again, and the first pause (doubling): ~6 s in all, longer than a restart. */
const PLUGIN_FAULT_RETRIES = 5;
const PLUGIN_FAULT_FIRST_PAUSE_MS = 200;
/** Times a full writer queue is offered the event again, pausing 25 ms doubling to 1 s. */
const WRITER_BUSY_RETRIES = 40;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const nowSeconds = () => Math.floor(Date.now() / 1000);

/** The event goes no further: its place in the sink is given up, and `no` is the answer. */
function refused(slot: SinkSlot, no: Answer): Answer {
  slot.skip();
  return no;
}

function faultOrRefusal(event: NostrEvent, result: SinkResult): Answer {
  if (result.status === 'rejected') return answer(event, 'rejected', result.reason);
  if (result.status === 'busy') return answer(event, 'fault', reason.rateLimited('the relay is busy writing, try again shortly'));
  if (result.status === 'failed') return answer(event, 'fault', result.reason);
  return answer(event, 'fault', reason.error('the event was not kept, try again later'));
}

function answer(event: NostrEvent, outcome: Outcome, why = ''): Answer {
  const accepted = outcome === 'stored' || outcome === 'passed' || outcome === 'duplicate' || outcome === 'shadowed';
  return { id: event.id, outcome, accepted, reason: why };
}

/**
 * A plugin's verdict on an event: the one place a plugin is asked. With `retry`, a fault is asked
 * again a few times (a plugin restarting, busy) before it stands. Also asked by the router's
 * pluginUp about the events it sends.
 */
export async function askPlugin(plugin: WritePlugin, event: NostrEvent, source: PluginSource, faults: EventSource['faults']): Promise<PluginVerdict> {
  for (let attempt = 0; ; attempt++) {
    const verdict = await plugin.decide(event, source);
    if (!verdict.fault || faults === 'answer' || attempt >= PLUGIN_FAULT_RETRIES) return verdict;
    await sleep(PLUGIN_FAULT_FIRST_PAUSE_MS << attempt);
  }
}

export class Admission {
  constructor(private readonly parts: AdmissionParts) {}

  /**
   * Takes one event (as parsed JSON) through every step; never rejects for the event's sake. `text`:
   * the JSON it was parsed from, if at hand (verifier.ts: cheaper to hand to its threads).
   */
  admit(input: unknown, source: EventSource, text?: string): Promise<Answer> {
    const slot = this.parts.sink.slot(); // now, before anything is awaited: the arrival order
    const parsed = parseEvent(input);
    if (!parsed.ok) {
      slot.skip();
      return Promise.resolve({ id: claimedId(input), outcome: 'invalid', accepted: false, reason: parsed.reason });
    }
    return this.take(parsed.value, source, slot, text);
  }

  /** admit() for an event whose shape parseEvent already checked (the router reads it first). */
  admitEvent(event: NostrEvent, source: EventSource): Promise<Answer> {
    return this.take(event, source, this.parts.sink.slot());
  }

  /** The steps after the shape, in order; one async function, so an event costs few promises. */
  private async take(event: NostrEvent, source: EventSource, slot: SinkSlot, text?: string): Promise<Answer> {
    let verdict: Verdict | undefined;
    try {
      const { policy, verifier, plugin, sink } = this.parts;
      const refusal = checkWrite(policy, event, source.session, nowSeconds());
      if (refusal) return refused(slot, answer(event, 'refused', refusal));
      if (!sink.passesOnEphemeral && isEphemeral(event.kind)) return refused(slot, answer(event, 'rejected', EPHEMERAL_NOT_STORED));
      let invalid: string | undefined;
      if (source.signatures === 'trust') invalid = computeEventId(event) === event.id ? undefined : ID_MISMATCH;
      else if (verifier) invalid = (verdict = await verifier.verify(event, text)).invalid;
      else throw new Error('admission: no signature verifier for a source whose signatures are checked');
      if (invalid) return refused(slot, answer(event, 'invalid', invalid));
      if (source.ownPlugin) {
        const no = await this.pluginSays(source.ownPlugin, event, source);
        if (no) return refused(slot, no);
      }
      if (plugin) {
        const no = await this.pluginSays(plugin, event, source);
        if (no) return refused(slot, no);
      }
    } catch (err) {
      slot.skip();
      throw err;
    }
    // The sink: stored, or passed on; a full writer queue is waited out by sources that retry.
    if (isEphemeral(event.kind)) {
      const passed = await slot.passOn(event, verdict);
      return passed.status === 'stored' ? answer(event, 'passed') : faultOrRefusal(event, passed);
    }
    for (let attempt = 0; ; attempt++) {
      const result = await slot.store(event, verdict);
      if (result.status === 'busy' && source.faults === 'retry' && attempt < WRITER_BUSY_RETRIES) {
        await sleep(Math.min(1000, 25 << Math.min(attempt, 6)));
        continue;
      }
      if (result.status === 'stored') return 'replaced' in result && result.replaced ? { ...answer(event, 'stored'), replaced: true } : answer(event, 'stored');
      if (result.status === 'duplicate') return answer(event, 'duplicate', reason.duplicate('already have this event'));
      return faultOrRefusal(event, result);
    }
  }

  /** A plugin's refusal (or fault) as the answer, or undefined when it accepts. */
  private async pluginSays(judge: WritePlugin, event: NostrEvent, source: EventSource): Promise<Answer | undefined> {
    const verdict = await askPlugin(judge, event, source.plugin, source.faults);
    if (verdict.fault) return answer(event, 'fault', verdict.msg);
    if (verdict.action === 'shadowReject') return answer(event, 'shadowed');
    if (verdict.action === 'reject') return answer(event, 'refused', rejectionReason(verdict.msg));
    return undefined;
  }
}
