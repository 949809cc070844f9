// Where an event comes from, as the admission steps (admit.ts) need to know it: the session the
// write rules see, what the write-policy plugins are told (strfry's sourceType and sourceInfo),
// whether its signature is checked, and what a fault means to it. Every way an event arrives builds
// one of these and calls admit() with it.
import { connectionSource, type PluginSource, type WritePlugin } from '../policy/write-plugin.js';
import { importSession, type Session } from '../policy/session.js';

export interface EventSource {
  /** The session the write rules see: a client's connection, or importSession (nobody authenticated). */
  readonly session: Session;
  /** What the plugins are told: strfry's sourceType and sourceInfo, and the authenticated pubkey. */
  readonly plugin: PluginSource;
  /**
   * `verify`: the id and the BIP-340 signature are checked. `trust`: only the id is recomputed, for
   * the operator's own dumps (`import --no-verify`) and nostream's rows (checked when nostream took
   * them; `import-nostream --verify` checks them again).
   */
  readonly signatures: 'verify' | 'trust';
  /**
   * What a fault (a plugin down or busy, the writer's queue full) means. `answer`: it is the answer,
   * and the client sends again. `retry`: the event is offered again a few times before the fault is
   * the answer (the router, the importers, sync: nobody is there to send it again).
   */
  readonly faults: 'answer' | 'retry';
  /** A stage of this source's own, after the signature check and before WRITE_POLICY_PLUGIN: a router stream's pluginDown. */
  readonly ownPlugin?: WritePlugin;
}

/** A client's EVENT: its connection's session, as it is now (NIP-42 may have added a pubkey). */
export function clientSource(session: Session): EventSource {
  return { session, plugin: connectionSource(session), signatures: 'verify', faults: 'answer' };
}

/** An event a router stream brought down from `url`, through the stream's pluginDown when it has one. */
export function streamSource(url: string, pluginDown: WritePlugin | undefined): EventSource {
  return { session: importSession, plugin: { type: 'Stream', info: url }, signatures: 'verify', faults: 'retry', ownPlugin: pluginDown };
}

/** `import` and `import-nostream`: the operator's input. */
export function importSource(signatures: 'verify' | 'trust'): EventSource {
  return { session: importSession, plugin: { type: 'Import', info: '' }, signatures, faults: 'retry' };
}

/** `sync`: events fetched from the relay at `url`. */
export function syncSource(url: string): EventSource {
  return { session: importSession, plugin: { type: 'Sync', info: url }, signatures: 'verify', faults: 'retry' };
}
