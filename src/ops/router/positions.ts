// Where each stream stands with each remote, per direction, kept in PostgreSQL (router_positions)
// so that a disconnect, the remote's restart or the router's own restart leaves no gap: the next
// connection first catches up from the position, then goes live.
//
// What a position says (all times are unix seconds on our clock):
//
// down, `through` = T: the live subscription was open at T (and the catch-up before it done), and
//   everything the remote sent on it before answering a ping we sent at T has been settled here
//   (stored, or refused by a rule or a plugin): a pong arrives after every frame sent before it
//   (link.ts). So every event the remote stored before T is here, but for one it had not yet passed
//   to its subscribers when it answered (its fan-out delay, milliseconds). The remote's arrival order
//   is unknown to us, so a catch-up asks for created_at >= T - margin (catchUpMargin, 600 s by
//   default), by negentropy or REQ `since`.
//   The margin covers an event that reached the remote at A >= T with created_at >= A - margin: one
//   published late or relayed from elsewhere within the margin, clocks (the author's, the remote's,
//   ours) apart by less than it, and the remote's fan-out delay. It cannot cover an event that
//   reached the remote more than `margin` seconds after its created_at while we were away (an old
//   event imported or synced into the remote, a backdated event): only a reconciliation over a wider
//   window (`npm run cli -- sync`) finds those. Ephemeral events are stored nowhere: what passed while
//   a connection was down is gone, on either side.
//
// up, `through` = T and `txid` = X: X is the xmin of a snapshot taken at T (every transaction below X
//   had ended), and every event those transactions stored that the stream sends (filter, pluginUp, not
//   from that remote) was acknowledged by the remote with OK (or refused by it for good). Our own
//   arrival order is known: events.txid. So a catch-up sends what transactions from X on stored,
//   whatever its created_at: nothing committed here is ever skipped, imports of old events included.
//   With negentropy it also reconciles created_at >= T - margin and sends what the remote lacks
//   there (say the remote lost events in a crash), skipping what it has.
//
// A position is recorded only by the connection that proved it, while it is still open (link.ts):
// one that ended while a checkpoint waited, or that missed an event meant for it, records nothing.
//
// Positions are recorded every few seconds (5 s by default) while a connection is live, so a crash
// costs a catch-up over a few more seconds, never an event. A stream seen for the first time gets a
// position at once (now), so it is caught up from its start even if its first connection takes long;
// it begins live, like strfry, plus the margin.
import type pg from 'pg';

export type PositionDirection = 'down' | 'up';

export interface Position {
  through: number;
  /** up only: the transaction horizon (xid8, as a decimal string). */
  txid?: string;
}

type Queryable = Pick<pg.Pool, 'query'>;

export const nowSeconds = () => Math.floor(Date.now() / 1000);

export async function readPosition(db: Queryable, stream: string, url: string, direction: PositionDirection): Promise<Position | undefined> {
  const { rows } = await db.query<{ through: string; txid: string | null }>(
    'SELECT through::text AS through, txid::text AS txid FROM router_positions WHERE stream = $1 AND url = $2 AND direction = $3',
    [stream, url, direction],
  );
  if (!rows[0]) return undefined;
  return { through: Number(rows[0].through), ...(rows[0].txid === null ? {} : { txid: rows[0].txid }) };
}

/** Saves a position; it only ever moves forward (two routers on one stream cannot move it back). */
export async function savePosition(db: Queryable, stream: string, url: string, direction: PositionDirection, position: Position): Promise<void> {
  await db.query(
    `INSERT INTO router_positions (stream, url, direction, through, txid, updated_at) VALUES ($1, $2, $3, $4, $5::xid8, now())
     ON CONFLICT (stream, url, direction) DO UPDATE
       SET through = GREATEST(router_positions.through, EXCLUDED.through),
           txid = GREATEST(router_positions.txid, EXCLUDED.txid),
           updated_at = now()`,
    [stream, url, direction, position.through, position.txid ?? null],
  );
}

/** The position a new stream starts from: now, and for up the current transaction horizon. */
export async function startingPosition(db: Queryable, direction: PositionDirection): Promise<Position> {
  if (direction === 'down') return { through: nowSeconds() };
  return { through: nowSeconds(), txid: await transactionHorizon(db) };
}

/** The xmin of a snapshot taken now: every transaction below it has ended (committed or not). */
export async function transactionHorizon(db: Queryable): Promise<string> {
  const { rows } = await db.query<{ xmin: string }>('SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin');
  return rows[0].xmin;
}

/** Every stored position (the CLI's --positions). */
export async function listPositions(db: Queryable): Promise<Array<{ stream: string; url: string; direction: PositionDirection; through: number; txid: string | null; updatedAt: Date }>> {
  const { rows } = await db.query<{ stream: string; url: string; direction: PositionDirection; through: string; txid: string | null; updated_at: Date }>(
    'SELECT stream, url, direction, through::text AS through, txid::text AS txid, updated_at FROM router_positions ORDER BY stream, url, direction',
  );
  return rows.map((r) => ({ stream: r.stream, url: r.url, direction: r.direction, through: Number(r.through), txid: r.txid, updatedAt: r.updated_at }));
}
