// One stream of the configuration: its links (one per URL), its plugins, and, for `up` and `both`,
// its place on the committed-change stream: every event committed here (by clients, imports, other
// processes, other streams) that its filter matches and pluginUp passes is offered to each open
// link, which sends it unless it came from that very remote.
import { toMatchable } from '../../nostr/filter.js';
import type { WritePlugin } from '../../policy/write-plugin.js';
import type { Change } from '../../store/changes.js';
import type { PreparedEvent } from '../../store/prepared-event.js';
import { importWritePlugin } from '../import-plugin.js';
import type { StreamConfig } from './config.js';
import { Intake, type StreamGate } from './intake.js';
import { Link, passesPluginUp, type LinkOwner, type RouterRuntime } from './link.js';

export class Stream implements LinkOwner {
  config: StreamConfig;
  gate: StreamGate;
  pluginUp: WritePlugin | undefined;
  private readonly links = new Map<string, Link>();
  /** pluginUp's decisions in the order the changes came (resolved when none is pending). */
  private upChain: Promise<void> = Promise.resolve();
  private unsubscribe: (() => void) | undefined;

  constructor(
    config: StreamConfig,
    private readonly rt: RouterRuntime,
  ) {
    this.config = config;
    this.gate = Intake.gate(config.matcher, this.plugin(config.pluginDown, 'pluginDown'));
    this.pluginUp = this.plugin(config.pluginUp, 'pluginUp');
  }

  start(): this {
    if (this.config.dir !== 'down') this.unsubscribe = this.rt.host.changes.subscribe((change) => this.onChange(change));
    for (const url of this.config.urls) this.links.set(url, new Link(this, url, this.rt).start());
    return this;
  }

  /** A change that keeps dir and filter: URLs added or removed, plugins replaced; the other links stay connected. */
  async update(next: StreamConfig): Promise<void> {
    const previous = this.config;
    this.config = next;
    if (next.pluginDown !== previous.pluginDown) {
      const old = this.gate.pluginDown;
      this.gate = { ...this.gate, pluginDown: this.plugin(next.pluginDown, 'pluginDown') };
      if (old) void this.retire(old);
    }
    if (next.pluginUp !== previous.pluginUp) {
      const old = this.pluginUp;
      this.pluginUp = this.plugin(next.pluginUp, 'pluginUp');
      if (old) void this.retire(old);
    }
    const gone = [...this.links.keys()].filter((url) => !next.urls.includes(url));
    for (const url of next.urls) if (!this.links.has(url)) this.links.set(url, new Link(this, url, this.rt).start());
    await Promise.all(
      gone.map(async (url) => {
        const link = this.links.get(url)!;
        this.links.delete(url);
        await link.stop();
      }),
    );
  }

  async stop(): Promise<void> {
    this.unsubscribe?.();
    await Promise.all([...this.links.values()].map((link) => link.stop()));
    this.links.clear();
    await this.upChain;
    await Promise.all([this.gate.pluginDown?.close(), this.pluginUp?.close()]);
  }

  upSettled(): Promise<void> {
    return this.upChain;
  }

  /** A replaced plugin answers the events it was given (within its timeout), then is closed. */
  private async retire(plugin: WritePlugin): Promise<void> {
    const deadline = Date.now() + this.rt.host.pluginTimeoutMs + 1000;
    while (plugin.state().inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    await plugin.close();
  }

  private plugin(command: string | undefined, role: string): WritePlugin | undefined {
    // The links bound what they hand it (backpressure), so it queues rather than answer busy.
    return importWritePlugin(command, this.rt.host.pluginTimeoutMs, this.rt.log.child({ stream: this.config.name, plugin: role }));
  }

  private onChange(change: Change): void {
    if (change.type === 'removed') return;
    const links = [...this.links.values()].filter((l) => l.upOpen);
    if (links.length === 0) return; // a link not open catches up from its position when it opens
    const events = (change.type === 'stored' ? change.events : [change.event]).filter((p) => this.gate.matches(toMatchable(p.event, p.tags)));
    if (events.length === 0) return;
    // A remote we send it to will send it back on its live subscription: known here, it costs nothing then.
    if (change.type === 'stored') for (const p of events) this.rt.intake.storedHere(p.event.id);
    const pluginUp = this.pluginUp;
    if (!pluginUp) return this.offer(events);
    // Decided together, offered in order: the chain keeps one batch behind the one before.
    const verdicts = Promise.all(events.map((p) => passesPluginUp(pluginUp, p.event)));
    verdicts.catch(() => undefined); // handled in the chain
    this.upChain = this.upChain
      .then(() => verdicts)
      .then(
        (passes) => this.offer(events.filter((_, i) => passes[i])),
        (err) => {
          // pluginUp kept failing: no verdict, so no position may pass these events. The open
          // connections miss them and are dropped; each catches up from its last position when it reopens.
          this.rt.log.warn({ err: (err as Error).message, stream: this.config.name }, 'router: pluginUp failed; reconnecting to send these events later');
          for (const link of links) {
            link.missed();
            link.drop();
          }
        },
      );
  }

  private offer(events: PreparedEvent[]): void {
    for (const link of this.links.values()) for (const p of events) link.offerUp(p);
  }
}
