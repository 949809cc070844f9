// What the router runs on: the relay's own parts when the relay runs the streams (ROUTER_CONFIG,
// src/main.ts), or the same parts built on the store by `npm run cli -- router` (standalone.ts).
// Either way events come down through the relay's write rules, signature check, write-policy plugin
// and group-committing writer, and go up from the one stream of committed changes.
import type pg from 'pg';
import type { Registry } from 'prom-client';
import type { Logger } from '../../log.js';
import type { SignatureVerifier } from '../../nostr/verifier.js';
import type { Policy } from '../../policy/policy.js';
import type { WritePlugin } from '../../policy/write-plugin.js';
import type { ChangeStream } from '../../store/changes.js';
import type { ChangeFeed } from '../../store/feed.js';
import type { WebhookOutbox } from '../../store/outbox.js';
import type { EventWriter } from '../../store/writer.js';

export interface RouterHost {
  pool: pg.Pool;
  log: Logger;
  /** The relay's write rules, checked with the import session (no connection, nobody authenticated). */
  policy: Policy;
  verifier: SignatureVerifier;
  /** WRITE_POLICY_PLUGIN, when set: told sourceType Stream and the remote's URL. */
  writePlugin: WritePlugin | undefined;
  /** How long pluginDown and pluginUp may take over an event (WRITE_POLICY_TIMEOUT_MS). */
  pluginTimeoutMs: number;
  /** Group commit: deduplicates, and announces what it stored on `changes`. */
  writer: EventWriter;
  /** What every writer committed (this process's, and through `feed` every other's): `up` listens. */
  changes: ChangeStream;
  /** Other processes' commits; its reads tell when everything committed so far has been announced. */
  feed: Pick<ChangeFeed, 'nextRead' | 'requestRead'>;
  /** Webhooks for ephemeral events passed on (stored events are queued by the writer). */
  outbox: WebhookOutbox;
  /** Where the router's metrics go. */
  registry: Registry;
}

/** Timings a test or benchmark may shorten; the defaults are strfry's (reconnect) and the router's own. */
export interface RouterTimings {
  /** The wait before connecting again, drawn at random from [min, max] ms (strfry: 5-10 s). */
  reconnectMs: [number, number];
  /** How often each link records its position. */
  checkpointMs: number;
  /** How often the configuration file is looked at for changes (hot reconfig). */
  reloadMs: number;
  /** A ping this often; a remote that has not answered by the next is cut off. */
  keepAliveMs: number;
}

export const DEFAULT_TIMINGS: RouterTimings = { reconnectMs: [5000, 10_000], checkpointMs: 5000, reloadMs: 1000, keepAliveMs: 30_000 };
