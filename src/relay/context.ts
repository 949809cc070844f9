import type pg from 'pg';
import type { Config } from '../config.js';
import type { Logger } from '../log.js';
import type { EventWriter } from '../store/writer.js';
import type { Limits } from './limits.js';
import type { SubscriptionIndex } from './subscriptions.js';
import type { SignatureVerifier } from './verifier.js';

/** The state shared by every connection of one relay process. */
export interface RelayContext {
  config: Config;
  limits: Limits;
  pool: pg.Pool;
  log: Logger;
  subscriptions: SubscriptionIndex;
  verifier: SignatureVerifier;
  /** Group commit; shutdown drains it, so every event it took gets its OK. */
  writer: EventWriter;
  closing: boolean;
}

export const nowSeconds = () => Math.floor(Date.now() / 1000);
