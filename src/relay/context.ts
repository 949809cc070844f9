import type pg from 'pg';
import type { Admission } from '../admission/admit.js';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import type { SignatureVerifier } from '../nostr/verifier.js';
import type { Limits } from '../policy/limits.js';
import type { Policy } from '../policy/policy.js';
import type { WritePlugin } from '../policy/write-plugin.js';
import type { ChangeStream } from '../store/changes.js';
import type { ChangeFeed } from '../store/feed.js';
import type { HotTierService } from '../store/hot/service.js';
import type { ReportQueue } from '../store/reports.js';
import type { ReadRouter } from '../store/replicas.js';
import type { EventWriter } from '../store/writer.js';
import type { RelayMetrics } from './metrics.js';
import type { NegentropyBudget } from './negentropy-budget.js';
import type { RateLimiter } from './rate-limit.js';
import type { SubscriptionIndex } from './subscriptions.js';

/** The state shared by every connection of one relay process. */
export interface RelayContext {
  config: Config;
  /** The write and read rules every EVENT, REQ and COUNT is checked against. */
  policy: Policy;
  limits: Limits; // policy.limits
  pool: pg.Pool;
  log: Logger;
  subscriptions: SubscriptionIndex;
  verifier: SignatureVerifier;
  /** Group commit; shutdown drains it, so every event it took gets its OK. */
  writer: EventWriter;
  /** Where every EVENT goes (admission/admit.ts): rules, signature, plugin, then the writer or, if ephemeral, the change stream. */
  admission: Admission;
  /** Per address and per authenticated pubkey budgets (RATE_LIMIT_*, MAX_CONNECTIONS_PER_ADDRESS). */
  limiter: RateLimiter;
  /** What each committed batch stored, and the ephemeral events: fan-out and metrics listen. */
  changes: ChangeStream;
  /** Other writers' commits and other processes' ephemeral events (store/feed.ts). */
  feed: ChangeFeed;
  /** Where a REQ's or COUNT's stored part runs: a read replica or the primary (store/replicas.ts). */
  reads: ReadRouter;
  /** The newest events in memory (HOT_TIER_MB; store/hot): answers REQs inside its window. */
  tier: HotTierService | undefined;
  /** NIP-56 reports' moderation queue: the events REPORTS_HIDE_AT withholds from every answer. */
  reports: ReportQueue;
  metrics: RelayMetrics;
  /** The operator's write-policy plugin (WRITE_POLICY_PLUGIN): one child per process, asked by admission. */
  writePlugin: WritePlugin | undefined;
  /** NIP-77: records held by this process's negentropy sessions (NEGENTROPY_MAX_TOTAL_RECORDS). */
  negentropy: NegentropyBudget;
  /** A stop has begun (the drain, then the close): `/ready` says 503, new connections are refused. */
  stopping: boolean;
  /** The sockets are closing: new writes are refused, those in flight answered. */
  closing: boolean;
}

export const nowSeconds = () => Math.floor(Date.now() / 1000);
