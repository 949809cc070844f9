// The write-policy plugin (WRITE_POLICY_PLUGIN, policy/write-plugin.ts) as an operator command runs
// it: `import`, `import-nostream`, `sync` and the router's streams each start a plugin of their own,
// which the admission path asks (admission/admit.ts).
import type { Logger } from '../log.js';
import { WritePlugin } from '../policy/write-plugin.js';

/**
 * An operator command's plugin, when one is configured. It queues what the command reads ahead
 * (the command bounds that) instead of refusing it as busy; close() it when the command ends.
 */
export function importWritePlugin(command: string | undefined, timeoutMs: number, log: Logger): WritePlugin | undefined {
  return command ? new WritePlugin(command, { timeoutMs, log, maxQueued: Infinity }).start() : undefined;
}
