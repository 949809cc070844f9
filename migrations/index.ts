// The migration list, in order. Imported statically so the same code runs from TypeScript (tests)
// and from the compiled build (relay, CLI) without knex loading files by extension.
import type { Knex } from 'knex';
import * as events from './20261122000001_events.js';
import * as opsCheckpoints from './20261201000001_ops_checkpoints.js';
import * as moderation from './20261224000001_moderation.js';
import * as liveFeed from './20261226000001_live_feed.js';
import * as vanish from './20261227000001_vanish.js';
import * as search from './20261228000001_search.js';
import * as webhooks from './20261229000001_webhooks.js';
import * as webhookReadyByEndpoint from './20261230000001_webhook_ready_by_endpoint.js';
import * as eventRemovals from './20261231000001_event_removals.js';
import * as routerPositions from './20270101000001_router_positions.js';
import * as searchPendingLimit from './20270102000001_search_pending_limit.js';
import * as eventsToastTarget from './20270103000001_events_toast_target.js';
import * as reports from './20270110000001_reports.js';
import * as memberships from './20270110000003_memberships.js';
import * as eventTagsCascadeTrigger from './20270111000001_event_tags_cascade_trigger.js';

export interface Migration {
  up(knex: Knex): Promise<void>;
  down(knex: Knex): Promise<void>;
  /** `transaction: false` for a migration that builds an index CONCURRENTLY. */
  config?: { transaction?: boolean };
}

export const migrations: Record<string, Migration> = {
  '20261122000001_events': events,
  '20261201000001_ops_checkpoints': opsCheckpoints,
  '20261224000001_moderation': moderation,
  '20261226000001_live_feed': liveFeed,
  '20261227000001_vanish': vanish,
  '20261228000001_search': search,
  '20261229000001_webhooks': webhooks,
  '20261230000001_webhook_ready_by_endpoint': webhookReadyByEndpoint,
  '20261231000001_event_removals': eventRemovals,
  '20270101000001_router_positions': routerPositions,
  '20270102000001_search_pending_limit': searchPendingLimit,
  '20270103000001_events_toast_target': eventsToastTarget,
  '20270110000001_reports': reports,
  '20270110000003_memberships': memberships,
  '20270111000001_event_tags_cascade_trigger': eventTagsCascadeTrigger,
};
