import type { Knex } from 'knex';

// The router's positions (src/ops/router/positions.ts): for each stream, remote and direction, how
// far it is known to have moved every event, so that after a disconnect or a restart it catches up
// from there instead of leaving a gap. Beside ops_checkpoints, the other resumable positions.
// - `through`: unix seconds on our clock. down: every event the remote sent on the live subscription
//   before then is stored here (or was refused); up: every event committed here before then was
//   acknowledged by the remote (or refused by it, the filter or pluginUp). A catch-up reconciles
//   from `through` minus a margin.
// - `txid` (up only): every transaction below it had finished at `through`, and the events they
//   stored were acknowledged: a catch-up sends what transactions from it on stored, whatever their
//   created_at (events.txid is the arrival order; see 20261226000001_live_feed).
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    CREATE TABLE router_positions (
      stream     text        NOT NULL,
      url        text        NOT NULL,
      direction  text        NOT NULL CHECK (direction IN ('down', 'up')),
      through    bigint      NOT NULL,
      txid       xid8,
      updated_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (stream, url, direction)
    );
  `);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('DROP TABLE IF EXISTS router_positions;');
}
