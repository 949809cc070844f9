// The router as a process of its own (`npm run cli -- router`): the relay's write path built on the
// store, as the relay builds it: the operator's lists watched (a ban applies within a second), the
// write rules, a signature verifier, WRITE_POLICY_PLUGIN, the group-committing writer with the
// webhooks' outbox, and the change stream fed by this process's writer and, through the feed, by
// every other process on the database (the relay's clients, imports): what `up` sends.
import { Registry } from 'prom-client';
import type { Config } from '../../config.js';
import type { Logger } from '../../log.js';
import { SignatureVerifier } from '../../nostr/verifier.js';
import { policyFrom } from '../../policy/policy.js';
import { ChangeStream } from '../../store/changes.js';
import type { Database } from '../../store/database.js';
import { ChangeFeed } from '../../store/feed.js';
import { ModerationWatch } from '../../store/moderation.js';
import { WebhookOutbox } from '../../store/outbox.js';
import { EventWriter, writerLimits } from '../../store/writer.js';
import { importWritePlugin } from '../import-plugin.js';
import type { RouterHost } from './host.js';

export interface StandaloneHost extends RouterHost {
  close(): Promise<void>;
}

export async function openStandaloneHost(config: Config, db: Database, log: Logger): Promise<StandaloneHost> {
  const { pool } = db;
  const moderation = await new ModerationWatch(pool, log).start();
  const policy = policyFrom(config, moderation);
  const changes = new ChangeStream((err) => log.error({ err: (err as Error).message, stack: (err as Error).stack }, 'change listener failed'));
  const feed = await new ChangeFeed(db.url, pool, changes, log).start();
  const verifier = new SignatureVerifier(config.VERIFY_THREADS);
  const outbox = new WebhookOutbox();
  const writer = new EventWriter(pool, log, {
    ...writerLimits(config),
    changes,
    own: feed,
    relay: policy.relay,
    outbox,
  });
  const writePlugin = importWritePlugin(config.WRITE_POLICY_PLUGIN, config.WRITE_POLICY_TIMEOUT_MS, log);
  return {
    pool,
    log,
    policy,
    verifier,
    writePlugin,
    pluginTimeoutMs: config.WRITE_POLICY_TIMEOUT_MS,
    writer,
    changes,
    feed,
    outbox,
    registry: new Registry(),
    async close() {
      await writer.drain();
      await feed.stop();
      moderation.stop();
      await Promise.all([verifier.close(), writePlugin?.close()]);
    },
  };
}
