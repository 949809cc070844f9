// The router's Prometheus metrics, per stream and remote (labels bounded by the configuration), in
// the registry it is given: the relay's (GET /metrics) when the relay runs the streams, one of its
// own in `npm run cli -- router`, which logs a summary line instead.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { PublishOutcome } from '../publisher.js';
import type { PositionDirection } from './positions.js';

export type DownOutcome = 'stored' | 'duplicate' | 'rejected' | 'invalid';
/** An event sent up: its final answer from the remote (publisher.ts). */
export type UpOutcome = PublishOutcome;
export type CatchUpMethod = 'negentropy' | 'req' | 'txid';

/** What a link reports when Prometheus scrapes: its position's time and its last event's, per direction. */
export interface LinkClock {
  stream: string;
  url: string;
  direction: PositionDirection;
  /** The position's `through` (unix seconds), undefined before it is read. */
  through(): number | undefined;
  /** When an event last moved in this direction (unix seconds), undefined if none yet. */
  lastEvent(): number | undefined;
}

const byRegistry = new WeakMap<Registry, RouterMetrics>();

export class RouterMetrics {
  /** One set per registry: a router started again in the same process (hot restart, leadership) reuses it. */
  static in(registry: Registry): RouterMetrics {
    let metrics = byRegistry.get(registry);
    if (!metrics) byRegistry.set(registry, (metrics = new RouterMetrics(registry)));
    return metrics;
  }

  private readonly connected: Gauge<'stream' | 'url'>;
  private readonly connections: Counter<'stream' | 'url' | 'result'>;
  private readonly down: Counter<'stream' | 'url' | 'outcome'>;
  private readonly up: Counter<'stream' | 'url' | 'outcome'>;
  private readonly catchUps: Counter<'stream' | 'url' | 'direction' | 'method'>;
  private readonly catchUpEvents: Counter<'stream' | 'url' | 'direction'>;
  private readonly clocks = new Set<LinkClock>();

  private constructor(registry: Registry) {
    const registers = [registry];
    this.connected = new Gauge({ name: 'pgrelay_router_connected', help: 'Router: 1 while the connection to the remote is open', labelNames: ['stream', 'url'], registers });
    this.connections = new Counter({
      name: 'pgrelay_router_connections_total',
      help: 'Router: connection attempts to each remote, by result (opened, failed, lost)',
      labelNames: ['stream', 'url', 'result'],
      registers,
    });
    this.down = new Counter({
      name: 'pgrelay_router_events_down_total',
      help: 'Router: events received from a remote, by outcome (stored, duplicate, rejected by a rule or plugin, invalid)',
      labelNames: ['stream', 'url', 'outcome'],
      registers,
    });
    this.up = new Counter({
      name: 'pgrelay_router_events_up_total',
      help: "Router: events sent to a remote, by its answer (accepted, duplicate, refused)",
      labelNames: ['stream', 'url', 'outcome'],
      registers,
    });
    this.catchUps = new Counter({
      name: 'pgrelay_router_catchups_total',
      help: 'Router: catch-ups run after (re)connecting, by method (negentropy, req since, txid: what was committed here since the position)',
      labelNames: ['stream', 'url', 'direction', 'method'],
      registers,
    });
    this.catchUpEvents = new Counter({
      name: 'pgrelay_router_catchup_events_total',
      help: 'Router: events a catch-up moved (down: fetched; up: sent)',
      labelNames: ['stream', 'url', 'direction'],
      registers,
    });
    const clocks = this.clocks;
    new Gauge({
      name: 'pgrelay_router_lag_seconds',
      help: "Router: age of the stream's position with this remote (how far back a catch-up would start, before the margin)",
      labelNames: ['stream', 'url', 'direction'],
      registers,
      collect() {
        this.reset();
        const now = Date.now() / 1000;
        for (const c of clocks) {
          const through = c.through();
          if (through !== undefined) this.set({ stream: c.stream, url: c.url, direction: c.direction }, Math.max(0, now - through));
        }
      },
    });
    new Gauge({
      name: 'pgrelay_router_last_event_age_seconds',
      help: 'Router: seconds since an event last moved with this remote in this direction',
      labelNames: ['stream', 'url', 'direction'],
      registers,
      collect() {
        this.reset();
        const now = Date.now() / 1000;
        for (const c of clocks) {
          const last = c.lastEvent();
          if (last !== undefined) this.set({ stream: c.stream, url: c.url, direction: c.direction }, Math.max(0, now - last));
        }
      },
    });
  }

  setConnected(stream: string, url: string, open: boolean): void {
    this.connected.set({ stream, url }, open ? 1 : 0);
  }

  connection(stream: string, url: string, result: 'opened' | 'failed' | 'lost'): void {
    this.connections.inc({ stream, url, result });
  }

  eventDown(stream: string, url: string, outcome: DownOutcome): void {
    this.down.inc({ stream, url, outcome });
  }

  eventUp(stream: string, url: string, outcome: UpOutcome): void {
    this.up.inc({ stream, url, outcome });
  }

  catchUp(stream: string, url: string, direction: PositionDirection, method: CatchUpMethod, events: number): void {
    this.catchUps.inc({ stream, url, direction, method });
    if (events > 0) this.catchUpEvents.inc({ stream, url, direction }, events);
  }

  track(clock: LinkClock): () => void {
    this.clocks.add(clock);
    return () => this.clocks.delete(clock);
  }

  /** A link that is gone: its series go with it. */
  forget(stream: string, url: string): void {
    this.connected.remove({ stream, url });
  }
}
