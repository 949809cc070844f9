import type pg from 'pg';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import type { Limits } from './limits.js';
import type { SubscriptionIndex } from './subscriptions.js';

/** The state shared by every connection of one relay process. */
export interface RelayContext {
  config: Config;
  limits: Limits;
  pool: pg.Pool;
  log: Logger;
  subscriptions: SubscriptionIndex;
  /** Writes not yet answered: shutdown waits for them so no accepted event is lost. */
  inflightWrites: Set<Promise<unknown>>;
  closing: boolean;
}

export const nowSeconds = () => Math.floor(Date.now() / 1000);
