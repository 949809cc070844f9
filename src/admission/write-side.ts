// The write side as the relay runs it, built in one place for the relay (relay/server.ts) and for the
// router as a process of its own (ops/router/standalone.ts): the operator's lists, watched so a ban
// applies within a second; the write rules; the signature verifier; WRITE_POLICY_PLUGIN; the change
// stream, fed by this process's writer and, through the feed, by every other process on the database;
// the group-committing writer with the webhooks' outbox and the search index's merger; and the
// admission steps in front of them.
import type pg from 'pg';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import { SignatureVerifier } from '../nostr/verifier.js';
import { policyFrom, type Policy } from '../policy/policy.js';
import { WritePlugin, type WritePluginSettings } from '../policy/write-plugin.js';
import { ChangeStream } from '../store/changes.js';
import { ChangeFeed, type FeedOptions } from '../store/feed.js';
import { createPool } from '../store/database.js';
import { ModerationWatch } from '../store/moderation.js';
import { WebhookOutbox } from '../store/outbox.js';
import { SearchIndexMerger } from '../store/search-pending.js';
import { EventWriter, writerLimits, type WriterOptions } from '../store/writer.js';
import { Admission } from './admit.js';
import { liveSink } from './live-sink.js';

export interface WriteSideOptions {
  feed?: FeedOptions;
  /** Told each write transaction's size and time (metrics). */
  onBatch?: WriterOptions['onBatch'];
  /** The plugin's decisions and restarts (metrics), and how many events it may queue. */
  plugin?: Pick<WritePluginSettings, 'onDecision' | 'onRestart' | 'maxQueued'>;
  /** True once the process is shutting down: the writer takes no new events. */
  closing?: () => boolean;
}

export interface WriteSide {
  moderation: ModerationWatch;
  policy: Policy;
  verifier: SignatureVerifier;
  plugin: WritePlugin | undefined;
  changes: ChangeStream;
  feed: ChangeFeed;
  outbox: WebhookOutbox;
  writer: EventWriter;
  /** The writer's own connections, pipelined (store/database.ts createPool); ended by close(). */
  writerPool: pg.Pool;
  /** Merges the search index's pending list beside the writer (store/search-pending.ts). */
  searchMerger: SearchIndexMerger;
  /** Where every event arrives (admit.ts). */
  admission: Admission;
}

export async function openWriteSide(config: Config, db: { pool: pg.Pool; url: string }, log: Logger, options: WriteSideOptions = {}): Promise<WriteSide> {
  const { pool } = db;
  const moderation = await new ModerationWatch(pool, log).start();
  const policy = policyFrom(config, moderation);
  const changes = new ChangeStream((err) => log.error({ err: (err as Error).message, stack: (err as Error).stack }, 'change listener failed'));
  const feed = await new ChangeFeed(db.url, pool, changes, log, options.feed).start();
  const verifier = new SignatureVerifier(config.VERIFY_THREADS);
  const outbox = new WebhookOutbox();
  // WRITE_CONCURRENCY transactions, and one beside them for a request to vanish (writer.ts writeAside).
  const writerPool = createPool(db.url, { DB_POOL_SIZE: config.WRITE_CONCURRENCY + 1, QUERY_TIMEOUT_MS: config.QUERY_TIMEOUT_MS }, log, { pipeline: true });
  const writer = new EventWriter(writerPool, log, { ...writerLimits(config), changes, own: feed, relay: policy.relay, outbox, onBatch: options.onBatch });
  const plugin = config.WRITE_POLICY_PLUGIN ? new WritePlugin(config.WRITE_POLICY_PLUGIN, { timeoutMs: config.WRITE_POLICY_TIMEOUT_MS, log, ...options.plugin }) : undefined;
  const searchMerger = new SearchIndexMerger(pool, log);
  changes.subscribe((change) => searchMerger.observe(change));
  const closing = options.closing ?? (() => false);
  const admission = new Admission({ policy, verifier, plugin, sink: liveSink({ pool, writer, outbox, changes, log, closing }) });
  return { moderation, policy, verifier, plugin, changes, feed, outbox, writer, writerPool, searchMerger, admission };
}
