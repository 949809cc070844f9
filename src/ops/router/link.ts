// One stream's connection to one remote, for as long as the stream lists it: connect (timeout:
// connectionTimeout), open the live subscription (down) and the live feed (up), catch up from the
// positions (catch-up.ts), then stay live, recording the positions every few seconds; when the
// connection ends, wait 5-10 s (jittered, as strfry) and start again. One WebSocket carries both
// directions of a `both` stream, as in strfry.
//
// Positions move only on proof (positions.ts): down, a ping's pong, after which everything received
// before it is settled; up, the remote's OK for everything queued before a snapshot of the
// transaction horizon had been announced on the change stream. Only the connection that proved a
// position records it: the same connection, still open when the position is saved, and for up the
// same publisher with no event meant for this remote left unqueued since the checkpoint began (a
// gap: an event dropped because the connection was ending, or one pluginUp could not decide). A
// checkpoint that outlives its connection records nothing, and the next connection catches up from
// the last position recorded.
import { randomBytes } from 'node:crypto';
import type { Logger } from '../../log.js';
import { toMatchable } from '../../nostr/filter.js';
import { askPlugin } from '../../admission/admit.js';
import type { NostrEvent } from '../../nostr/event.js';
import type { PluginSource, WritePlugin } from '../../policy/write-plugin.js';
import type { PreparedEvent } from '../../store/prepared-event.js';
import { Publisher } from '../publisher.js';
import { fetchRelayInformation, RemoteError, RemoteRelay, remoteMessageLimit } from '../relay-client.js';
import { catchUp } from './catch-up.js';
import type { StreamConfig } from './config.js';
import type { RouterHost, RouterTimings } from './host.js';
import { IntakeError, type Intake, type StreamGate } from './intake.js';
import type { RouterMetrics } from './metrics.js';
import { nowSeconds, readPosition, savePosition, startingPosition, transactionHorizon, type Position, type PositionDirection } from './positions.js';

/** The router-wide settings a link reads at each use, so a hot reconfig applies from the next one. */
export interface RouterSettings {
  connectionTimeout: number;
  verbose: boolean;
  catchUpMargin: number;
}

/** What every link of a router shares. */
export interface RouterRuntime {
  host: RouterHost;
  intake: Intake;
  metrics: RouterMetrics;
  timings: RouterTimings;
  settings: RouterSettings;
  log: Logger;
}

/** What a link asks of its stream (stream.ts), read at each use: pluginDown and pluginUp may be replaced. */
export interface LinkOwner {
  readonly config: StreamConfig;
  readonly gate: StreamGate;
  readonly pluginUp: WritePlugin | undefined;
  /** Resolves once every change announced so far has been offered to the links (pluginUp decided). */
  upSettled(): Promise<void>;
}

/** strfry tells pluginUp that the event is a stored one (sourceType "Stored", docs/plugins.md). */
export const storedSource: PluginSource = { type: 'Stored', info: '' };

/** pluginUp's verdict on an event to send: accepted or not; a plugin that keeps failing throws IntakeError (no position may pass it). */
export async function passesPluginUp(pluginUp: WritePlugin, event: NostrEvent): Promise<boolean> {
  const verdict = await askPlugin(pluginUp, event, storedSource, 'retry');
  if (verdict.fault) throw new IntakeError(`pluginUp ${pluginUp.command}: ${verdict.msg}`);
  return verdict.action === 'accept';
}

/** Events received and not yet settled past which we stop reading the socket (and resume below LOW). */
const DOWN_HIGH = 2000;
const DOWN_LOW = 500;
/** Events queued to send past which a catch-up waits. */
const UP_HIGH = 2000;
/**
 * How events go up (publisher.ts): a remote that says `rate-limited:` ("slower", not "no") gets the
 * event again for as long as the connection lasts, since skipping it would leave a gap; `error:` a
 * few times (the remote's trouble may pass), then it counts as refused.
 */
const UP_SENDING = { maxWindow: 200, firstPauseMs: 250, rateLimitRetries: Infinity, errorRetries: 8 };

/** What a checkpoint began on: a position is recorded only if it still holds when saving (disproof()). */
interface Proof {
  remote: RemoteRelay;
  publisher: Publisher | undefined;
  gaps: number;
}

/** Settlement counted in arrival order: `settledThrough` = n means events 1..n have all settled. */
class InOrder {
  total = 0;
  settledThrough = 0;
  private readonly done = new Set<number>();
  private readonly watchers: Array<{ n: number; resolve: () => void }> = [];

  /** `work` settles the event; one that rejects is never counted (the connection is dropped for it). */
  add(work: Promise<unknown>, onSettled: () => void): void {
    const seq = ++this.total;
    work.then(
      () => {
        this.done.add(seq);
        while (this.done.delete(this.settledThrough + 1)) this.settledThrough++;
        for (let i = this.watchers.length - 1; i >= 0; i--)
          if (this.watchers[i].n <= this.settledThrough) this.watchers.splice(i, 1)[0].resolve();
        onSettled();
      },
      () => undefined,
    );
  }

  get inFlight(): number {
    return this.total - this.settledThrough;
  }

  settled(n: number): Promise<void> {
    if (n <= this.settledThrough) return Promise.resolve();
    return new Promise((resolve) => this.watchers.push({ n, resolve }));
  }
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });

export class Link {
  private readonly stopping = new AbortController();
  private running: Promise<void> | undefined;
  private readonly positions: Partial<Record<PositionDirection, Position>> = {};
  private readonly lastEvent: Partial<Record<PositionDirection, number>> = {};
  private remote: RemoteRelay | undefined;
  private publisher: Publisher | undefined;
  private down: InOrder | undefined;
  /** Events meant for this remote that were never queued to it (see the top of this file). */
  private gaps = 0;
  private readonly untrack: Array<() => void> = [];
  private readonly log: Logger;

  constructor(
    private readonly owner: LinkOwner,
    readonly url: string,
    private readonly rt: RouterRuntime,
  ) {
    this.log = rt.log.child({ stream: owner.config.name, url });
    for (const direction of this.directions())
      this.untrack.push(
        rt.metrics.track({
          stream: owner.config.name,
          url,
          direction,
          through: () => this.positions[direction]?.through,
          lastEvent: () => this.lastEvent[direction],
        }),
      );
  }

  private get name(): string {
    return this.owner.config.name;
  }

  private directions(): PositionDirection[] {
    const dir = this.owner.config.dir;
    return dir === 'both' ? ['down', 'up'] : [dir];
  }

  /** Up: the link takes live events (its connection is open). */
  get upOpen(): boolean {
    return this.publisher !== undefined && !this.remote?.ended;
  }

  start(): this {
    this.running ??= this.run();
    return this;
  }

  /** Closes the connection and stops reconnecting. Positions stay as last recorded. */
  async stop(): Promise<void> {
    this.stopping.abort();
    await this.remote?.close();
    // A connection still being opened (to a host that does not answer) is closed once it opens.
    await Promise.race([this.running, new Promise((r) => setTimeout(r, 3000).unref())]);
    for (const untrack of this.untrack) untrack();
    this.rt.metrics.forget(this.name, this.url);
  }

  private async run(): Promise<void> {
    const signal = this.stopping.signal;
    // The positions, made now for a stream seen for the first time (it is caught up from its start).
    while (!signal.aborted) {
      try {
        await this.loadPositions();
        break;
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, 'router: cannot read the stream positions, trying again');
        await sleep(this.reconnectDelay(), signal);
      }
    }
    while (!signal.aborted) {
      try {
        await this.session();
      } catch (err) {
        if (!signal.aborted) this.log.warn({ err: (err as Error).message }, 'router: connection ended');
      }
      if (signal.aborted) break;
      await sleep(this.reconnectDelay(), signal);
    }
  }

  private reconnectDelay(): number {
    const [min, max] = this.rt.timings.reconnectMs;
    return min + Math.random() * (max - min);
  }

  private async loadPositions(): Promise<void> {
    const { pool } = this.rt.host;
    for (const direction of this.directions()) {
      if (this.positions[direction]) continue;
      let position = await readPosition(pool, this.name, this.url, direction);
      if (!position) {
        position = await startingPosition(pool, direction);
        await savePosition(pool, this.name, this.url, direction, position);
      }
      this.positions[direction] = position;
    }
  }

  private async session(): Promise<void> {
    const { rt, url } = this;
    const signal = this.stopping.signal;
    const timeoutMs = rt.settings.connectionTimeout * 1000;
    const dir = this.owner.config.dir;
    const infoRequest = fetchRelayInformation(url, Math.min(timeoutMs, 10_000));
    let remote: RemoteRelay;
    try {
      remote = await RemoteRelay.connect(url, timeoutMs, {
        keepAliveMs: rt.timings.keepAliveMs,
        maxMessageBytes: this.owner.config.maxMessageBytes ?? remoteMessageLimit(rt.host.maxMessageBytes),
      });
    } catch (err) {
      rt.metrics.connection(this.name, url, 'failed');
      throw err;
    }
    if (signal.aborted) {
      await remote.close();
      return;
    }
    this.remote = remote;
    rt.metrics.connection(this.name, url, 'opened');
    rt.metrics.setConnected(this.name, url, true);
    this.log.info('router: connected');
    /** Settles with `work`, or rejects when the connection ends or the link stops first. */
    const whileOpen = <T>(work: Promise<T>): Promise<T> =>
      new Promise<T>((resolve, reject) => {
        if (remote.ended) return reject(remote.ended);
        if (signal.aborted) return reject(new Error('stopped'));
        const offEnd = remote.onEnd((err) => finish(() => reject(err)));
        const onStop = () => finish(() => reject(new Error('stopped')));
        signal.addEventListener('abort', onStop, { once: true });
        work.then(
          (value) => finish(() => resolve(value)),
          (err) => finish(() => reject(err)),
        );
        function finish(settle: () => void) {
          offEnd();
          signal.removeEventListener('abort', onStop);
          settle();
        }
      });
    /** Waits `ms`, or less if the connection ends or the link stops. */
    const pause = (ms: number) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(done, ms);
        const offEnd = remote.onEnd(done);
        signal.addEventListener('abort', done, { once: true });
        function done() {
          clearTimeout(timer);
          offEnd();
          signal.removeEventListener('abort', done);
          resolve();
        }
      });
    const offs: Array<() => void> = [];
    try {
      if (dir !== 'up') {
        const down = (this.down = new InOrder());
        const subId = `router-${randomBytes(4).toString('hex')}`;
        offs.push(
          remote.listen((m) => {
            if (m[1] !== subId) {
              if (m[0] === 'NOTICE') this.log.warn({ notice: m[1] }, 'router: NOTICE from the remote');
              return;
            }
            if (m[0] === 'EVENT') this.takeDown(remote, down, m[2], false);
            else if (m[0] === 'CLOSED') {
              this.log.warn({ reason: m[2] }, 'router: the remote closed the live subscription; reconnecting');
              remote.terminate();
            }
          }),
        );
        // strfry's implicit "limit": 0: the live subscription brings only new events; the catch-up the rest.
        remote.send(['REQ', subId, { ...this.owner.config.filter, limit: 0 }]);
      }
      if (dir !== 'down') {
        this.publisher = new Publisher(remote, {
          ...UP_SENDING,
          timeoutMs,
          onAnswer: (id, outcome, reason) => {
            rt.metrics.eventUp(this.name, url, outcome);
            this.lastEvent.up = nowSeconds();
            if (outcome === 'refused') this.log.info({ id, reason }, 'router: the remote refused an event');
            else if (rt.settings.verbose) this.log.info({ id, outcome }, 'router: event sent');
          },
        });
      }

      const info = await infoRequest;
      await whileOpen(
        catchUp({
          remote,
          info,
          filter: this.owner.config.filter,
          down: this.down && {
            position: this.positions.down!,
            take: (event) => this.takeDown(remote, this.down!, event, true),
            drained: () => this.downDrained(),
          },
          up: this.publisher && { position: this.positions.up!, offer: (events) => this.offerCatchUp(events) },
          margin: rt.settings.catchUpMargin,
          timeoutMs,
          pool: rt.host.pool,
          log: this.log,
          report: (direction, method, events) => {
            rt.metrics.catchUp(this.name, url, direction, method, events);
            this.log.info({ direction, method, events }, 'router: caught up');
          },
        }),
      );
      // Live: record the positions every few seconds while the connection lasts.
      while (!remote.ended && !signal.aborted) {
        await pause(rt.timings.checkpointMs);
        if (remote.ended || signal.aborted) break;
        await whileOpen(this.checkpoint(remote));
      }
    } finally {
      for (const off of offs) off();
      this.publisher?.close();
      this.publisher = undefined;
      if (!remote.ended) await remote.close();
      rt.metrics.setConnected(this.name, url, false);
      if (!signal.aborted) rt.metrics.connection(this.name, url, 'lost');
      this.log.info({ why: remote.ended?.message }, 'router: disconnected');
    }
  }

  /** One event from the remote (live or catch-up) into the write path, counted in arrival order. */
  private takeDown(remote: RemoteRelay, down: InOrder, event: unknown, catchingUp: boolean): void {
    const { rt, url } = this;
    const work = rt.intake.take(event, url, this.owner.gate).then(
      (result) => {
        rt.metrics.eventDown(this.name, url, result.outcome);
        this.lastEvent.down = nowSeconds();
        const id = result.event?.id;
        if (result.outcome === 'rejected' || result.outcome === 'invalid') this.log.debug({ id, reason: result.reason }, 'router: event refused');
        else if (rt.settings.verbose && result.outcome === 'stored') this.log.info({ id, catchingUp }, 'router: event stored');
      },
      (err) => {
        // Not the event's fault: drop the connection; the next one's catch-up fetches it again.
        const message = (err as Error).message;
        if (err instanceof IntakeError) this.log.warn({ err: message }, 'router: an event could not be stored; reconnecting to fetch it again');
        else this.log.error({ err: message, stack: (err as Error).stack }, 'router: storing an event failed; reconnecting to fetch it again');
        remote.terminate();
        throw err;
      },
    );
    down.add(work, () => {
      if (down.inFlight < DOWN_LOW) remote.resume();
    });
    if (down.inFlight > DOWN_HIGH) remote.pause();
  }

  private async downDrained(): Promise<void> {
    const down = this.down!;
    if (down.inFlight > DOWN_HIGH) await down.settled(down.total - DOWN_LOW);
  }

  /** Ends the current connection (the link reconnects and catches up). */
  drop(): void {
    this.remote?.terminate();
  }

  /** Live: an event committed here, matched by the stream's filter and passed by pluginUp (stream.ts). */
  offerUp(event: PreparedEvent): void {
    if (this.rt.intake.cameFrom(event.event.id, this.url)) return; // it came from there
    const publisher = this.publisher;
    if (!publisher || publisher.ended) return this.missed();
    publisher.enqueue(event.event.id, event.raw);
  }

  /** An event meant for this remote will not be queued to it: no checkpoint in progress may record past it. */
  missed(): void {
    this.gaps++;
  }

  /** Catch-up: events read from our store, through the filter and pluginUp here, with backpressure. */
  private async offerCatchUp(events: PreparedEvent[]): Promise<void> {
    const publisher = this.publisher!;
    const { gate, pluginUp } = this.owner;
    const matching = events.filter((p) => gate.matches(toMatchable(p.event, p.tags)));
    const passes = pluginUp ? await Promise.all(matching.map((p) => passesPluginUp(pluginUp, p.event))) : undefined;
    matching.forEach((p, i) => {
      if (passes && !passes[i]) return;
      this.offerUp(p);
    });
    if (publisher.backlog > UP_HIGH && !(await publisher.completed(publisher.queuedTotal - UP_HIGH / 2)))
      throw new RemoteError(`sending stopped: ${publisher.ended}`);
  }

  /** Records the positions this connection has proved (see the top of this file and positions.ts). */
  private async checkpoint(remote: RemoteRelay): Promise<void> {
    const { pool } = this.rt.host;
    const work: Array<Promise<void>> = [];
    const down = this.down;
    const publisher = this.publisher;
    const proof: Proof = { remote, publisher, gaps: this.gaps };
    if (this.owner.config.dir !== 'up' && down) {
      work.push(
        (async () => {
          const through = nowSeconds();
          await remote.ping(); // every frame the remote sent before answering has arrived
          await down.settled(down.total);
          await this.save('down', { through }, proof);
        })(),
      );
    }
    if (publisher) {
      work.push(
        (async () => {
          const through = nowSeconds();
          const txid = await transactionHorizon(pool);
          // Everything committed below txid is announced by a feed read that starts now (other
          // processes' commits) or was by our writer (it announces its commit as it learns of it, a
          // round trip before that read ends); then offered to this link once pluginUp has decided.
          const read = this.rt.host.feed.nextRead();
          this.rt.host.feed.requestRead();
          await read;
          await new Promise((r) => setImmediate(r));
          await this.owner.upSettled();
          await publisher.completed(publisher.queuedTotal); // false if it ended first: disproof() says so
          await this.save('up', { through, txid }, proof);
        })(),
      );
    }
    await Promise.all(work);
  }

  /** Why what a checkpoint began on no longer proves its position, or undefined while it does. */
  private disproof(direction: PositionDirection, proof: Proof): string | undefined {
    if (proof.remote.ended || proof.remote !== this.remote) return 'its connection ended';
    if (direction === 'up' && proof.publisher !== this.publisher) return 'its connection ended';
    if (direction === 'up' && proof.gaps !== this.gaps) return 'an event meant for this remote was not queued to it (the connection was ending, or pluginUp failed)';
    return undefined;
  }

  /** A position that is not proved, or cannot be saved, stays at the last one saved: later, never wrong. */
  private async save(direction: PositionDirection, position: Position, proof: Proof): Promise<void> {
    const why = this.disproof(direction, proof);
    if (why) {
      this.log.info({ direction, why }, 'router: position not recorded');
      return;
    }
    try {
      await savePosition(this.rt.host.pool, this.name, this.url, direction, position);
      this.positions[direction] = position;
    } catch (err) {
      this.log.warn({ err: (err as Error).message, direction }, 'router: could not record the position');
    }
  }
}
