// What the router runs on: the relay's own write side when the relay runs the streams (ROUTER_CONFIG,
// src/main.ts), or the same built by `npm run cli -- router` (standalone.ts, with
// admission/write-side.ts). Either way events come down through the one admission path (the relay's
// write rules, signature check, pluginDown, WRITE_POLICY_PLUGIN, the group-committing writer) and go
// up from the one stream of committed changes.
import type pg from 'pg';
import type { Registry } from 'prom-client';
import type { Admission } from '../../admission/admit.js';
import type { Logger } from '../../log.js';
import type { ChangeStream } from '../../store/changes.js';
import type { ChangeFeed } from '../../store/feed.js';

export interface RouterHost {
  pool: pg.Pool;
  log: Logger;
  /** Where events from remotes go in, as sourceType Stream (admission/source.ts streamSource). */
  admission: Admission;
  /** How long pluginDown and pluginUp may take over an event (WRITE_POLICY_TIMEOUT_MS). */
  pluginTimeoutMs: number;
  /** The relay's MAX_MESSAGE_BYTES: remotes' messages are bounded as its clients' are (relay-client.ts remoteMessageLimit), unless a stream says otherwise. */
  maxMessageBytes: number;
  /** What every writer committed (this process's, and through `feed` every other's): `up` listens. */
  changes: ChangeStream;
  /** Other processes' commits; its reads tell when everything committed so far has been announced. */
  feed: Pick<ChangeFeed, 'nextRead' | 'requestRead'>;
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
