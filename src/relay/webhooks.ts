// Webhook delivery: claims queued deliveries (store/webhook-queue.ts) in batches and POSTs them to
// their endpoints, signed like Standard Webhooks (webhook-signature.ts). Every relay process runs one;
// FOR UPDATE SKIP LOCKED keeps them from claiming the same row. A delivery is deleted only after a
// 2xx; otherwise it comes back after an exponential backoff with jitter (or the receiver's
// Retry-After), and is marked dead once older than WEBHOOK_MAX_AGE_SECONDS. An endpoint that keeps
// failing has its circuit opened for a while, so a dead receiver costs the others nothing. HTTP goes
// through one undici Pool per origin (keep-alive, WEBHOOK_CONCURRENCY connections): no connection per
// request, so no ephemeral-port exhaustion.
import type { Pool as HttpPool } from 'undici';
import type pg from 'pg';
import type { Logger } from '../log.js';
import type { ChangeStream } from '../store/changes.js';
import { isUnavailable } from '../store/pg-errors.js';
import {
  claimDeliveries, completeDeliveries, failDeliveries, postponeDeliveries, readEndpoints, readGeneration, renewLeases, type Claim, type ClaimedDelivery, type EndpointRow,
} from '../store/webhook-queue.js';
import { secretKey, signatureHeaders } from './webhook-signature.js';

export interface WebhookSettings {
  /** Connections (requests in flight) per endpoint origin. */
  concurrency: number;
  timeoutMs: number;
  /** A delivery older than this is dead (kept for `webhook deliveries --dead`, never sent again). */
  maxAgeMs: number;
  /** Deliveries claimed at once. */
  claimBatch?: number;
  /** How often an idle worker looks at the queue (it is also woken by every commit). */
  pollMs?: number;
  /** How long a claim stays hidden unless renewed (WEBHOOK_LEASE_MS, default LEASE_MS); renewed every third of it. */
  leaseMs?: number;
  /** Told each outcome (metrics). */
  onOutcome?: (outcome: 'delivered' | 'failed' | 'dead', n: number) => void;
  /** Told the queue's size and age every SAMPLE_MS (metrics). */
  onSample?: (sample: QueueSample) => void;
}

export interface QueueSample {
  queued: number;
  dead: number;
  oldestSeconds: number;
}

const SAMPLE_MS = 5000;

/**
 * Claims are leases of LEASE_MS, renewed every third of it while their requests run: the claims of a
 * process that dies (SIGKILL, a lost host) come back within one lease, to another process or to the
 * next start. Hiding a claim for as long as it might take at worst held a crashed process's
 * deliveries back that long (135 s at the defaults). Leases rather than owners that prove they are
 * alive (a session advisory lock, a heartbeat row): no schema, no reaper, no process identity; a
 * process hung with its connections open loses its claims too, where a session lock would keep them;
 * a PostgreSQL restart drops every session lock at once, and a transaction-mode pooler cannot hold
 * one. The cost: while requests are in flight, one UPDATE of their rows (a claim at most) every
 * LEASE_MS / 3. The risk: a renewal two thirds of a lease late (the event loop or the database
 * stalled ~7 s) lets another process claim the rows and send them again: at least once, as ever.
 * Leases run on the database's clock, not the hosts'.
 */
const LEASE_MS = 10_000;
/** Writing a claim's outcomes, at worst: waits for a pool connection, a renewal, the statement timeout. */
const OUTCOME_SLACK_MS = 30_000;

const FIRST_RETRY_MS = 1000;
const MAX_RETRY_MS = 10 * 60_000;
/**
 * Consecutive failures that open an endpoint's circuit: its deliveries then wait, unsent, for
 * CIRCUIT_OPEN_MS; after that they are tried again, and if they fail the circuit opens for twice as
 * long (up to CIRCUIT_MAX_OPEN_MS). A flaky receiver (some requests succeed) never trips it; a dead one
 * costs a claim of its deliveries per period instead of a request per delivery and retry.
 */
const CIRCUIT_FAILURES = 10;
const CIRCUIT_OPEN_MS = 5_000;
const CIRCUIT_MAX_OPEN_MS = 60_000;

/** The backoff before attempt `attempts + 1`: exponential, capped, with full jitter in its upper half. */
export function retryDelay(attempts: number, random = Math.random): number {
  const ceiling = Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** Math.min(attempts - 1, 20));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

/** Retry-After as seconds or an HTTP date, in milliseconds from now; undefined if absent or unreadable. */
export function retryAfterMs(value: string | string[] | undefined, now = Date.now()): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (!v) return undefined;
  if (/^\d+$/.test(v.trim())) return Number(v.trim()) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

interface Circuit {
  failures: number;
  openUntil: number;
  openMs: number;
}

/** What one POST carries: one delivery, or up to the endpoint's batch size as a JSON array. */
function body(deliveries: ClaimedDelivery[], batched: boolean): string {
  if (!batched) return `{"type":"event","data":${deliveries[0].payload}}`;
  return `{"type":"events","data":[${deliveries.map((d) => d.payload).join(',')}]}`;
}

/**
 * Waits for every one, then throws the first failure: a claim is let go (no longer renewed) only once
 * all its requests have ended.
 */
async function settleAll(promises: Promise<void>[]): Promise<void> {
  const failed = (await Promise.allSettled(promises)).find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
}

export class WebhookWorker {
  private running = false;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  private generation: string | undefined;
  private endpoints = new Map<number, EndpointRow>();
  private readonly pools = new Map<string, HttpPool>();
  private readonly circuits = new Map<number, Circuit>();
  private unsubscribe: (() => void) | undefined;
  /** The claims whose requests are running, renewed until their outcome is written; `until`: see deliverSome. */
  private readonly held = new Map<string, { claim: Claim; until: number }>();
  private renewing: Promise<void> = Promise.resolve();
  private renewalRunning = false;
  private renewer: NodeJS.Timeout | undefined;
  readonly stats = { delivered: 0, failed: 0, dead: 0, requests: 0, renewed: 0 };

  constructor(
    private readonly pool: pg.Pool,
    private readonly log: Logger,
    private readonly settings: WebhookSettings,
    changes?: ChangeStream,
  ) {
    // A commit (this process's or, through the feed, another's) may have queued deliveries.
    this.unsubscribe = changes?.subscribe((change) => {
      if (change.type === 'stored') this.wake?.();
    });
  }

  private sampler: NodeJS.Timeout | undefined;

  private get leaseMs(): number {
    return this.settings.leaseMs ?? LEASE_MS;
  }

  start(): this {
    this.running = true;
    this.loop = this.run();
    this.renewer = setInterval(() => this.renew(), this.leaseMs / 3);
    this.renewer.unref();
    if (this.settings.onSample) {
      this.sampler = setInterval(() => void this.sample(), SAMPLE_MS);
      this.sampler.unref();
      void this.sample();
    }
    return this;
  }

  private async sample(): Promise<void> {
    try {
      const { rows } = await this.pool.query<{ queued: number; dead: number; oldest: number | null }>(
        `SELECT count(*) FILTER (WHERE NOT dead)::int AS queued, count(*) FILTER (WHERE dead)::int AS dead,
                extract(epoch FROM now() - min(created_at) FILTER (WHERE NOT dead))::float8 AS oldest FROM webhook_deliveries`,
      );
      this.settings.onSample?.({ queued: rows[0].queued, dead: rows[0].dead, oldestSeconds: rows[0].oldest ?? 0 });
    } catch (err) {
      this.log.debug({ err: (err as Error).message }, 'webhook queue sample failed');
    }
  }

  async stop(): Promise<void> {
    this.running = false;
    clearInterval(this.sampler);
    this.unsubscribe?.();
    this.wake?.();
    await this.loop; // renewing the leases of the requests it waits for
    clearInterval(this.renewer);
    await this.renewing;
    await Promise.all([...this.pools.values()].map((p) => p.close()));
  }

  private async run(): Promise<void> {
    const pollMs = this.settings.pollMs ?? 500;
    let unavailable = false;
    while (this.running) {
      let claimed: ClaimedDelivery[] = [];
      try {
        claimed = await this.deliverSome();
        if (unavailable) this.log.info('webhooks: the database answers again; delivering');
        unavailable = false;
      } catch (err) {
        // The database restarting or failing over: said once, and the queue waits (it is in the database).
        if (!isUnavailable(err)) this.log.error({ err: (err as Error).message }, 'webhook delivery failed');
        else if (!unavailable) this.log.warn({ err: (err as Error).message }, 'webhooks: the database is unavailable; deliveries wait');
        unavailable = isUnavailable(err);
      }
      if (claimed.length === 0 && this.running) await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, pollMs);
        this.wake = () => (clearTimeout(timer), resolve());
      });
      this.wake = undefined;
    }
  }

  /** One round: claim, send per endpoint, record the outcomes. Returns what was claimed. */
  private async deliverSome(): Promise<ClaimedDelivery[]> {
    const generation = await readGeneration(this.pool);
    if (generation !== this.generation) ({ generation: this.generation, endpoints: this.endpoints } = await readEndpoints(this.pool));
    const claimBatch = this.settings.claimBatch ?? 100;
    const claimed = await claimDeliveries(this.pool, claimBatch, this.leaseMs);
    // Renewed no longer than the claim can take: each request times out WEBHOOK_TIMEOUT_MS after the
    // claim (those queued behind `concurrency` too), then the outcomes are written. A claim held past
    // that is stuck, and its rows come back as if its process had died.
    const until = Date.now() + this.settings.timeoutMs + OUTCOME_SLACK_MS;
    for (const d of claimed) this.held.set(d.id, { claim: d, until });
    try {
      const byEndpoint = new Map<number, ClaimedDelivery[]>();
      for (const d of claimed) (byEndpoint.get(d.endpointId) ?? byEndpoint.set(d.endpointId, []).get(d.endpointId)!).push(d);
      await settleAll([...byEndpoint].map(([id, deliveries]) => this.deliverTo(id, deliveries)));
    } finally {
      // An outcome that could not be written leaves its rows to come back when their lease lapses.
      for (const d of claimed) this.held.delete(d.id);
    }
    return claimed;
  }

  /** Extends the leases of the claims still held; a tick that finds the last renewal still running skips. */
  private renew(): void {
    if (this.held.size === 0 || this.renewalRunning) return;
    const now = Date.now();
    const claims = [...this.held.values()].filter((h) => h.until > now).map((h) => h.claim);
    if (claims.length === 0) return;
    this.renewalRunning = true;
    this.renewing = renewLeases(this.pool, claims, this.leaseMs).then(
      (n) => void (this.stats.renewed += n),
      (err) => this.log.warn({ err: (err as Error).message, deliveries: claims.length }, 'webhook lease renewal failed'),
    ).finally(() => (this.renewalRunning = false));
  }

  /**
   * Stops renewing these claims before their outcome is written, and waits for a renewal under way:
   * one landing after a failure would overwrite its backoff with a lease, and one running beside a
   * DELETE of the same rows could deadlock with it.
   */
  private async release(claims: Claim[]): Promise<void> {
    for (const c of claims) this.held.delete(c.id);
    await this.renewing;
  }

  private async deliverTo(endpointId: number, deliveries: ClaimedDelivery[]): Promise<void> {
    const endpoint = this.endpoints.get(endpointId);
    // Removed meanwhile (its deliveries went with it), or added since the endpoints were read (they
    // come back when their lease lapses, and the next round reads the endpoints again).
    if (!endpoint) return;
    const circuit = this.circuits.get(endpointId);
    if (circuit && circuit.openUntil > Date.now()) {
      await this.release(deliveries);
      return postponeDeliveries(this.pool, deliveries, circuit.openUntil - Date.now());
    }
    const batched = endpoint.batchSize > 1;
    const posts: ClaimedDelivery[][] = [];
    for (let i = 0; i < deliveries.length; i += endpoint.batchSize) posts.push(deliveries.slice(i, i + endpoint.batchSize));
    await settleAll(posts.map((post) => this.post(endpoint, post, batched)));
  }

  /** undici, loaded with the first request (a third of a second at start that most relays never need). */
  private static undici: Promise<{ Pool: typeof HttpPool }> | undefined;

  private async httpPool(url: URL): Promise<HttpPool> {
    let pool = this.pools.get(url.origin);
    if (!pool) {
      const { Pool } = await (WebhookWorker.undici ??= import('undici'));
      pool = this.pools.get(url.origin); // another request may have made it meanwhile
      if (pool) return pool;
      pool = new Pool(url.origin, { connections: this.settings.concurrency, keepAliveTimeout: 30_000, headersTimeout: this.settings.timeoutMs, bodyTimeout: this.settings.timeoutMs });
      this.pools.set(url.origin, pool);
    }
    return pool;
  }

  private async post(endpoint: EndpointRow, deliveries: ClaimedDelivery[], batched: boolean): Promise<void> {
    const url = new URL(endpoint.url);
    const text = body(deliveries, batched);
    // Stable across retries: the delivery's id (a batch: its first and last ids and its size).
    const id = batched ? `msg_${deliveries[0].id}_${deliveries[deliveries.length - 1].id}_${deliveries.length}` : `msg_${deliveries[0].id}`;
    const headers: Record<string, string> = { 'content-type': 'application/json', 'user-agent': 'pgrelay-webhooks' };
    if (endpoint.secret) Object.assign(headers, signatureHeaders(id, Math.floor(Date.now() / 1000), text, secretKey(endpoint.secret)));
    let failure: string | undefined;
    let retryAfter: number | undefined;
    this.stats.requests++;
    try {
      const res = await (await this.httpPool(url)).request({
        path: url.pathname + url.search,
        method: 'POST',
        headers,
        body: text,
        signal: AbortSignal.timeout(this.settings.timeoutMs),
      });
      await res.body.dump();
      if (res.statusCode < 200 || res.statusCode >= 300) {
        failure = `HTTP ${res.statusCode}`;
        retryAfter = retryAfterMs(res.headers['retry-after']);
      }
    } catch (err) {
      failure = (err as Error).message || String(err);
    }
    if (failure === undefined) {
      this.circuits.delete(endpoint.id);
      this.stats.delivered += deliveries.length;
      this.settings.onOutcome?.('delivered', deliveries.length);
      await this.release(deliveries);
      return completeDeliveries(this.pool, deliveries);
    }
    this.stats.failed += deliveries.length;
    const circuit = this.circuits.get(endpoint.id) ?? { failures: 0, openUntil: 0, openMs: 0 };
    circuit.failures++;
    if (circuit.failures >= CIRCUIT_FAILURES && circuit.openUntil <= Date.now()) {
      circuit.openMs = circuit.openMs ? Math.min(circuit.openMs * 2, CIRCUIT_MAX_OPEN_MS) : CIRCUIT_OPEN_MS;
      circuit.openUntil = Date.now() + circuit.openMs;
      this.log.warn({ endpoint: endpoint.id, url: endpoint.url, seconds: circuit.openMs / 1000, error: failure }, 'webhook endpoint failing: paused');
    }
    this.circuits.set(endpoint.id, circuit);
    const now = Date.now();
    const dead = deliveries.filter((d) => now - d.createdAt.getTime() > this.settings.maxAgeMs);
    const retry = deliveries.filter((d) => !dead.includes(d));
    await this.release(deliveries);
    if (dead.length) {
      this.stats.dead += dead.length;
      this.settings.onOutcome?.('dead', dead.length);
      this.log.warn({ endpoint: endpoint.id, deliveries: dead.length, error: failure }, 'webhook deliveries dead (older than WEBHOOK_MAX_AGE_SECONDS)');
      await failDeliveries(this.pool, dead, failure, 0, true);
    }
    if (retry.length) this.settings.onOutcome?.('failed', retry.length);
    const attempts = Math.max(...deliveries.map((d) => d.attempts));
    await failDeliveries(this.pool, retry, failure, retryAfter ?? retryDelay(attempts));
  }
}
