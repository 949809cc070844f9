// strfry's write-policy plugin protocol (its docs/plugins.md) on the wire: one JSON line per event
// to the plugin, one JSON line back naming the event's id. What the relay does with the lines (which
// process gets them, when, and what a fault means) is write-plugin.ts's and plugin-process.ts's.
import type { NostrEvent } from '../nostr/event.js';

/** strfry's sourceType values (its docs/plugins.md): `Stored` is what the router's pluginUp is told. */
export type PluginSourceType = 'IP4' | 'IP6' | 'Import' | 'Stream' | 'Sync' | 'Stored';
/** Where an event came from, as the plugin is told: `info` is the client's address or a relay's URL. */
export interface PluginSource {
  type: PluginSourceType;
  info: string;
  /** NIP-42: a pubkey the connection authenticated as (hex). */
  authed?: string;
}
export type PluginAction = 'accept' | 'reject' | 'shadowReject';
/** msg as the plugin sent it ('' if none); faults give { action: 'reject', msg: 'error: …' }. */
export interface PluginVerdict {
  action: PluginAction;
  msg: string;
  /** Set when no plugin decided: it died, hung or was busy, or the relay is closing (action reject, msg `error:` or `rate-limited:`). */
  fault?: true;
}

/** A line from the plugin that names an event; action is undefined when it is none of the three. */
export interface PluginAnswer {
  id: string;
  action: PluginAction | undefined;
  msg: string;
}

export function sameSource(a: PluginSource, b: PluginSource): boolean {
  return a.type === b.type && a.info === b.info && a.authed === b.authed;
}

/** The request line: built by hand around the event's JSON, one string per event. */
export function requestLine(event: NostrEvent, source: PluginSource, receivedAt: number): string {
  return (
    '{"type":"new","event":' +
    JSON.stringify(event) +
    ',"receivedAt":' +
    receivedAt +
    ',"sourceType":"' +
    source.type +
    '","sourceInfo":' +
    JSON.stringify(source.info) +
    (source.authed === undefined ? '' : ',"authed":' + JSON.stringify(source.authed)) +
    '}\n'
  );
}

/** A line from the plugin's stdout as an answer, or what it is instead (to be logged and skipped). */
export function parseAnswer(line: string): PluginAnswer | 'not JSON' | 'no id' {
  let message: { id?: unknown; action?: unknown; msg?: unknown };
  try {
    message = JSON.parse(line);
  } catch {
    return 'not JSON';
  }
  if (typeof message !== 'object' || message === null || typeof message.id !== 'string') return 'no id';
  const { action } = message;
  return {
    id: message.id,
    action: action === 'accept' || action === 'reject' || action === 'shadowReject' ? action : undefined,
    msg: typeof message.msg === 'string' ? message.msg : '',
  };
}
