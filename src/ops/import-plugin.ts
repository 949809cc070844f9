// The write-policy plugin (WRITE_POLICY_PLUGIN, policy/write-plugin.ts) as the importers ask it:
// `import`, `import-nostream` and `sync` each run a plugin of their own, asked about every event
// that passed the relay's checks (shape, policy, id and signature), before the writer. Its verdict
// becomes an import outcome: counted, and reported with the event's line or id like any refusal.
import type { Logger } from '../log.js';
import type { NostrEvent } from '../nostr/event.js';
import { rejectionReason, WritePlugin, type PluginSource } from '../policy/write-plugin.js';

export interface ImportPlugin {
  plugin: WritePlugin;
  /** What the plugin is told of where the events come from: `Import`, or `Sync` and the remote's URL. */
  source: PluginSource;
}

/** Why an event the plugin shadow-rejected was not stored (counted with the rejected). */
export const SHADOW_REJECTED = 'shadowReject: kept out by the write policy plugin';

export interface PluginRefusal {
  /** invalid, like the relay's policy refusals (and the plugin's faults); rejected, for shadowReject. */
  kind: 'invalid' | 'rejected';
  reason: string;
}

/**
 * An operator command's plugin, when one is configured. It queues what the command reads ahead
 * (the command bounds that) instead of refusing it as busy; close() it when the command ends.
 */
export function importWritePlugin(command: string | undefined, timeoutMs: number, log: Logger): WritePlugin | undefined {
  return command ? new WritePlugin(command, { timeoutMs, log, maxQueued: Infinity }).start() : undefined;
}

/**
 * The plugin's verdict on an event, asked once `checked` (the id and signature check: an `invalid:`
 * reason, or undefined) has passed; undefined when the event is to be written.
 */
export async function askPlugin(p: ImportPlugin, event: NostrEvent, checked?: Promise<string | undefined> | string): Promise<PluginRefusal | undefined> {
  if ((await checked) !== undefined) return undefined; // refused as invalid by the check itself
  const verdict = await p.plugin.decide(event, p.source);
  if (verdict.action === 'accept') return undefined;
  if (verdict.action === 'shadowReject') return { kind: 'rejected', reason: SHADOW_REJECTED };
  return { kind: 'invalid', reason: rejectionReason(verdict.msg) };
}
