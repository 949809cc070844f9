// The web of trust (WOT_ROOTS) computed in PostgreSQL from the stored follow lists, and kept current
// for one relay process: computed before the relay serves, again shortly after a member whose follows
// count stores a new kind 3 (from any process: the change stream), and every WOT_REFRESH_SECONDS.
//
// The computation walks out from the roots one follow at a time, in one REPEATABLE READ snapshot, in
// a temporary table: each step joins the newest members to their follow list (kind 3 is replaceable,
// so the store holds one per author: events_replace_key) and its `p` tags (event_tags' primary key),
// and adds the pubkeys not yet in the web. A recursive CTE cannot do that: its recursive term may
// read only the previous step's rows, so it cannot leave out pubkeys already reached and walks them
// again at every depth. With WOT_MIN_FOLLOWERS, each step also adds the new members' follows to a
// tally of followers per pubkey, and a pubkey joins once its tally reaches the threshold: followers
// are counted among the members of the steps before, so pubkeys that follow each other cannot vouch
// for one another, and only members' lists extend the web.
import type pg from 'pg';
import type { Logger } from '../log.js';
import { KIND_CONTACTS } from '../nostr/kinds.js';
import type { WebOfTrust, WebOfTrustSettings, WebSnapshot } from '../policy/web-of-trust.js';
import type { Change, ChangeStream } from './changes.js';

/** One step's statement time at most: on 100,000 follow lists of 300 pubkeys, depth 3 takes seconds (docs/benchmarks.md). */
const STATEMENT_TIMEOUT = '300s';

/** The `p` tags of the current follow lists of the members `$1` steps from the roots. */
const FOLLOWS = `
    FROM wot_members m
    JOIN events e ON e.pubkey = m.pubkey AND e.kind = ${KIND_CONTACTS} AND e.d_tag = ''
    JOIN event_tags t ON t.event_id = e.id AND t.name = 'p'
   WHERE m.hop = $1`;

/**
 * Only values that are pubkeys (decode would fail on any other), checked once per distinct value
 * (OFFSET 0 keeps PostgreSQL from checking every tag row instead), and not as `^[0-9a-f]{64}$`:
 * PostgreSQL's regular expressions take ~6 µs a value over a bounded repetition, ten times this
 * test; checked that way on every row, the step reading 12M follows took 200 s instead of 5.
 */
const PUBKEY = "length(value) = 64 AND value !~ '[^0-9a-f]'";

/** Not a member yet. (An index on wot_members would cost more to fill than this hash anti-join.) */
const NEW = 'NOT EXISTS (SELECT FROM wot_members w WHERE w.pubkey = followed.pubkey)';

/** One step without a threshold: whoever the newest members follow. */
const STEP = `
  INSERT INTO wot_members (pubkey, hop)
  SELECT pubkey, $1 + 1
    FROM (SELECT decode(value, 'hex') AS pubkey FROM (SELECT DISTINCT t.value ${FOLLOWS} OFFSET 0) f WHERE ${PUBKEY}) followed
   WHERE ${NEW}`;

/** One step with a threshold: the newest members' follows tallied, and whoever reaches `$2` followers. */
const COUNTED_STEP = `
  WITH tallied AS (
    INSERT INTO wot_tally (pubkey, followers)
    SELECT decode(value, 'hex'), followers
      FROM (SELECT t.value, count(*) AS followers ${FOLLOWS} GROUP BY t.value OFFSET 0) followed
     WHERE ${PUBKEY}
    ON CONFLICT (pubkey) DO UPDATE SET followers = wot_tally.followers + excluded.followers
    RETURNING pubkey, followers
  )
  INSERT INTO wot_members (pubkey, hop)
  SELECT pubkey, $1 + 1 FROM tallied followed WHERE followers >= $2 AND ${NEW}`;

/** Followers a pubkey needs to join `hop` steps from the roots: a root's follow needs only that root. */
const followersNeeded = (settings: WebOfTrustSettings, hop: number) => (hop <= 1 ? 1 : Math.max(1, settings.minFollowers));

/** Computes the web as the database holds it now. */
export async function computeWebOfTrust(pool: pg.Pool, settings: WebOfTrustSettings): Promise<WebSnapshot> {
  const started = Date.now();
  const client = await pool.connect();
  try {
    // One snapshot: a follow list replaced halfway through cannot be counted in both versions.
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await client.query(`SET LOCAL statement_timeout = '${STATEMENT_TIMEOUT}'`);
    await client.query('CREATE TEMPORARY TABLE wot_members (pubkey bytea NOT NULL, hop integer NOT NULL) ON COMMIT DROP');
    await client.query("INSERT INTO wot_members (pubkey, hop) SELECT DISTINCT decode(r, 'hex'), 0 FROM unnest($1::text[]) r", [settings.roots]);
    const counted = settings.minFollowers > 1;
    if (counted) await client.query('CREATE TEMPORARY TABLE wot_tally (pubkey bytea PRIMARY KEY, followers integer NOT NULL) ON COMMIT DROP');
    // No ANALYZE of wot_members between steps: without statistics the planner takes each step's
    // members for few and reads their lists through event_tags' primary key, which costs what the
    // lists hold; with them, it scanned the whole of event_tags at depth 3 (docs/benchmarks.md), a
    // cost that grows with every other tag the relay stores.
    for (let hop = 0; hop < settings.depth; hop++) {
      const added = counted ? await client.query(COUNTED_STEP, [hop, followersNeeded(settings, hop + 1)]) : await client.query(STEP, [hop]);
      if (!added.rowCount) break;
    }
    const { rows } = await client.query<[string, boolean]>({
      text: "SELECT encode(pubkey, 'hex'), hop < $1 FROM wot_members",
      values: [settings.depth],
      rowMode: 'array',
    });
    await client.query('COMMIT');
    const members = new Set<string>();
    const extending = new Set<string>();
    for (const [pubkey, extends_] of rows) {
      members.add(pubkey);
      if (extends_) extending.add(pubkey);
    }
    return { members, extending, computedAt: Date.now(), durationMs: Date.now() - started };
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

export interface WebOfTrustWatchOptions {
  /** WOT_REFRESH_SECONDS. */
  refreshSeconds: number;
  /**
   * How long after a follow list that counts the web is computed again, at least; what arrives
   * meanwhile joins that computation. Never less than the last computation took, so that follow
   * lists arriving all the time keep PostgreSQL computing half the time at most.
   */
  delayMs?: number;
  /** How long after a failed computation it is tried again. */
  retryMs?: number;
}

/** What the metrics and the status page show. */
export interface WebOfTrustState {
  members: number;
  /** ms since the epoch; 0 before the first computation. */
  computedAt: number;
  durationMs: number;
  computations: number;
  failures: number;
  refusals: number;
}

const DELAY_MS = 1000;
const RETRY_MS = 10_000;

/**
 * Keeps `web` current for one relay process. One computation at a time: a follow list that arrives
 * while one runs (its snapshot may predate it) makes one more after it, however many arrive.
 */
export class WebOfTrustWatch {
  private computations = 0;
  private failures = 0;
  private running: Promise<void> | undefined;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private periodic: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;
  private stopped = false;

  constructor(
    private readonly web: WebOfTrust,
    private readonly pool: pg.Pool,
    private readonly changes: ChangeStream,
    private readonly log: Logger,
    private readonly options: WebOfTrustWatchOptions,
  ) {}

  /** Computes the web (a failure here fails the start: there is no earlier web to keep), then watches. */
  async start(): Promise<this> {
    // Listening first: a follow list stored while the first computation runs makes a second.
    this.unsubscribe = this.changes.subscribe((change) => this.observe(change));
    this.running = this.compute();
    try {
      await this.running;
    } finally {
      this.running = undefined;
    }
    this.log.info({ members: this.web.size, ms: this.web.current!.durationMs }, 'web of trust computed');
    if (this.stopped) return this;
    this.periodic = setInterval(() => this.schedule(0), this.options.refreshSeconds * 1000).unref();
    this.computeAgainIfAsked();
    return this;
  }

  state(): WebOfTrustState {
    const current = this.web.current;
    return {
      members: this.web.size,
      computedAt: current?.computedAt ?? 0,
      durationMs: current?.durationMs ?? 0,
      computations: this.computations,
      failures: this.failures,
      refusals: this.web.refusals,
    };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.unsubscribe?.();
    clearTimeout(this.timer);
    clearInterval(this.periodic);
    await this.running;
  }

  /**
   * A new follow list from a member whose follows count (a member further out changes nothing), or
   * any follow list while the first computation runs.
   */
  private observe(change: Change): void {
    if (change.type !== 'stored') return;
    const extending = this.web.current?.extending;
    const counts = (pubkey: string) => extending === undefined || extending.has(pubkey);
    if (!change.events.some((p) => p.event.kind === KIND_CONTACTS && counts(p.event.pubkey))) return;
    this.schedule(Math.max(this.options.delayMs ?? DELAY_MS, this.web.current?.durationMs ?? 0));
  }

  /** Computes again in `ms`, unless a computation is already due: a burst costs one. */
  private schedule(ms: number): void {
    if (this.stopped || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.refresh();
    }, ms).unref();
  }

  private refresh(): void {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.compute()
      .then(
        () => this.log.debug({ members: this.web.size, ms: this.web.current!.durationMs }, 'web of trust computed'),
        (err) => {
          // The web in force stays: an outage must not open the relay to everyone, nor close it.
          this.failures++;
          this.log.warn({ err: (err as Error).message }, 'web of trust: computing failed, the previous web stays in force');
          this.schedule(this.options.retryMs ?? RETRY_MS);
        },
      )
      .finally(() => {
        this.running = undefined;
        this.computeAgainIfAsked();
      });
  }

  private computeAgainIfAsked(): void {
    if (!this.again) return;
    this.again = false;
    this.schedule(0);
  }

  private async compute(): Promise<void> {
    const snapshot = await computeWebOfTrust(this.pool, this.web.settings);
    this.computations++;
    this.web.current = snapshot;
  }
}
