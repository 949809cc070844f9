// The router as a process of its own (`npm run cli -- router`): the relay's write side built on the
// store as the relay builds it (admission/write-side.ts): the operator's lists watched (a ban applies
// within a second), the write rules, a signature verifier, WRITE_POLICY_PLUGIN, the group-committing
// writer with the webhooks' outbox, and the change stream fed by this process's writer and, through
// the feed, by every other process on the database (the relay's clients, imports): what `up` sends.
import { Registry } from 'prom-client';
import { openWriteSide } from '../../admission/write-side.js';
import type { Config } from '../../config.js';
import type { Logger } from '../../log.js';
import type { Database } from '../../store/database.js';
import { WebOfTrustWatch } from '../../store/web-of-trust.js';
import type { RouterHost } from './host.js';

export interface StandaloneHost extends RouterHost {
  close(): Promise<void>;
}

export async function openStandaloneHost(config: Config, db: Database, log: Logger): Promise<StandaloneHost> {
  // The links bound what they hand the plugin (backpressure), so it queues rather than answer busy.
  const side = await openWriteSide(config, db, log, { plugin: { maxQueued: Infinity } });
  // WOT_ROOTS: the web kept current as the relay keeps it, before the first stream starts.
  const web = side.policy.webOfTrust && (await new WebOfTrustWatch(side.policy.webOfTrust, db.pool, side.changes, log, { refreshSeconds: config.WOT_REFRESH_SECONDS }).start());
  return {
    pool: db.pool,
    log,
    admission: side.admission,
    pluginTimeoutMs: config.WRITE_POLICY_TIMEOUT_MS,
    maxMessageBytes: config.MAX_MESSAGE_BYTES,
    changes: side.changes,
    feed: side.feed,
    registry: new Registry(),
    async close() {
      await side.writer.drain();
      await side.searchMerger.stop();
      await side.writerPool.end();
      await side.feed.stop();
      side.moderation.stop();
      await web?.stop();
      await Promise.all([side.verifier.close(), side.plugin?.close()]);
    },
  };
}
