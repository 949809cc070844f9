// Read replicas (READ_DATABASE_URL): the stored part of a REQ or COUNT runs on a streaming replica
// when that cannot miss anything; otherwise on the primary.
//
// The rule: a replica serves a query only if it has replayed the WAL up to this process's change
// stream position (changes.ts): every event committed up to there has been, or is being, sent to
// live subscribers, and everything after reaches them live. A subscription registered before its
// query thus gets every event once, from the replica or live; and since the writer moves the position
// past each commit before any OK is sent, a client always reads its own writes. A replica that is not
// there yet is given READ_REPLICA_WAIT_MS to catch up, then the primary answers. A replica that
// cannot be reached, or is more than READ_REPLICA_MAX_LAG_MS behind, is skipped without waiting.
import type pg from 'pg';
import type { Logger } from '../log.js';
import { describeHosts } from './hosts.js';
import { lsnValue } from './lsn.js';

export interface ReplicaSettings {
  maxLagMs: number;
  waitMs: number;
  /** How often each replica's replay position is checked. */
  checkMs?: number;
}

export type ReadTarget = 'primary' | 'replica';

interface Replica {
  /** host:port, for logs (never the password). */
  name: string;
  pool: pg.Pool;
  replay: bigint;
  checkedAt: number;
  reachable: boolean;
  checking: boolean;
}

/** A replica unheard of for this long is skipped. */
const STALE_MS = 3000;
const REPLAY_SQL = `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text AS lsn`;

export class ReadRouter {
  private readonly replicas: Replica[];
  /** The primary's position over time (as this process learns it), to tell how far behind a replica is. */
  private samples: Array<{ at: number; position: bigint }> = [];
  private next = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly primary: pg.Pool,
    replicas: Array<{ url: string; pool: pg.Pool }>,
    private readonly position: () => bigint,
    private readonly settings: ReplicaSettings,
    private readonly log: Logger,
    /** True while the primary cannot be read: any replica that answers is better than none. */
    private readonly primaryDown: () => boolean = () => false,
  ) {
    this.replicas = replicas.map((r) => ({ name: describeHosts(r.url), pool: r.pool, replay: 0n, checkedAt: 0, reachable: false, checking: false }));
  }

  get configured(): boolean {
    return this.replicas.length > 0;
  }

  /** The replicas (host:port) this process can reach now. */
  reachableReplicas(): string[] {
    return this.replicas.filter((r) => r.reachable).map((r) => r.name);
  }

  async start(): Promise<this> {
    if (!this.configured) return this;
    await Promise.all(this.replicas.map((r) => this.check(r)));
    this.timer = setInterval(() => {
      this.sample();
      for (const r of this.replicas) void this.check(r);
    }, this.settings.checkMs ?? 100);
    return this;
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await Promise.all(this.replicas.map((r) => r.pool.end().catch(() => undefined)));
  }

  /** Where the stored part of a query should run, decided now (after its subscription is live). */
  async route(): Promise<{ pool: pg.Pool; target: ReadTarget }> {
    const primary = { pool: this.primary, target: 'primary' as const };
    if (!this.configured) return primary;
    const required = this.position();
    const now = Date.now();
    if (this.primaryDown()) {
      // It may lack what this process read last from the primary; the primary answers nothing.
      const answering = this.replicas.filter((r) => r.reachable && now - r.checkedAt < STALE_MS);
      if (answering.length) return { pool: answering[this.next++ % answering.length].pool, target: 'replica' };
    }
    const usable = this.replicas.filter((r) => r.reachable && now - r.checkedAt < STALE_MS && this.lagMs(r, now) <= this.settings.maxLagMs);
    if (usable.length === 0) return primary;
    // Round-robin over the replicas that are far enough already.
    const ready = usable.filter((r) => r.replay >= required);
    if (ready.length) return { pool: ready[this.next++ % ready.length].pool, target: 'replica' };
    const best = usable.reduce((a, b) => (b.replay > a.replay ? b : a));
    const deadline = now + this.settings.waitMs;
    while (Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 5));
      if (!(await this.check(best))) break;
      if (best.replay >= required) return { pool: best.pool, target: 'replica' };
    }
    return primary;
  }

  /** Reads a replica's replay position; false when it cannot be reached. */
  private async check(r: Replica): Promise<boolean> {
    if (r.checking) return r.reachable;
    r.checking = true;
    try {
      const { rows } = await r.pool.query<{ lsn: string | null }>(REPLAY_SQL);
      const replay = lsnValue(rows[0].lsn);
      if (replay > r.replay) r.replay = replay;
      if (!r.reachable) this.log.info({ replica: r.name }, 'read replica in use');
      r.reachable = true;
      r.checkedAt = Date.now();
    } catch (err) {
      if (r.reachable) this.log.warn({ replica: r.name, err: (err as Error).message }, 'read replica unreachable: reads go elsewhere');
      r.reachable = false;
    } finally {
      r.checking = false;
    }
    return r.reachable;
  }

  private sample(): void {
    const at = Date.now();
    const position = this.position();
    if (this.samples.at(-1)?.position !== position) this.samples.push({ at, position });
    const keepFrom = at - this.settings.maxLagMs - 1000;
    while (this.samples.length > 1 && this.samples[0].at < keepFrom) this.samples.shift();
  }

  /** Since when the replica has been missing something the primary had: 0 when it is caught up. */
  private lagMs(r: Replica, now: number): number {
    if (r.replay >= this.position()) return 0;
    const firstAhead = this.samples.find((s) => s.position > r.replay);
    return firstAhead ? now - firstAhead.at : 0;
  }
}
