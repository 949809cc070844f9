// The router's host as src/main.ts builds it from a relay's context (ROUTER_CONFIG).
import type { RouterHost } from '../../src/ops/router/host.js';
import type { TestRelay } from './relay.js';

export function routerHostOf(relay: TestRelay): RouterHost {
  const ctx = relay.relay.context;
  return {
    pool: ctx.pool,
    log: ctx.log,
    admission: ctx.admission,
    pluginTimeoutMs: 5000,
    maxMessageBytes: ctx.config.MAX_MESSAGE_BYTES,
    changes: ctx.changes,
    feed: ctx.feed,
    registry: ctx.metrics.registry,
  };
}
