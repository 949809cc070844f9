// Events coming down from remotes, on their way into our store, in the order the brief of a write
// path gives them: the stream's filter, pluginDown, the relay's write rules (as for an import: no
// connection, nobody authenticated), id and signature, WRITE_POLICY_PLUGIN (sourceType Stream, the
// remote's URL), then the writer (deduplicated, fanned out, webhooks, other processes). An ephemeral
// event is passed on as the relay passes one on, never stored.
//
// Every event ends settled (stored, duplicate, refused by a rule or a plugin, invalid) or throws
// IntakeError when something that is not the event's fault (the database, a full writer, a plugin
// that keeps failing) kept it out: the link then drops its connection, and the next connection's
// catch-up fetches the event again. A position never moves past an event that was not settled.
import { parseEvent, type NostrEvent } from '../../nostr/event.js';
import { compileFilter, toMatchable, type Matcher } from '../../nostr/filter.js';
import { isEphemeral } from '../../nostr/kinds.js';
import { checkWrite } from '../../policy/policy.js';
import { importSession } from '../../policy/session.js';
import type { PluginSource, PluginVerdict, WritePlugin } from '../../policy/write-plugin.js';
import { prepareEvent } from '../../store/prepared-event.js';
import { WriterBusyError } from '../../store/writer.js';
import type { RouterHost } from './host.js';
import type { DownOutcome } from './metrics.js';
import { nowSeconds } from './positions.js';

export class IntakeError extends Error {}

export interface DownResult {
  outcome: DownOutcome;
  /** Why it was refused (rejected, invalid). */
  reason?: string;
  event?: NostrEvent;
}

/** What a stream adds to the path: its filter and its pluginDown. */
export interface StreamGate {
  matches: Matcher;
  pluginDown: WritePlugin | undefined;
}

/** A set that forgets its oldest entries past `max` (insertion order). */
export class RecentIds<V = true> {
  private readonly map = new Map<string, V>();
  constructor(private readonly max: number) {}
  get(id: string): V | undefined {
    return this.map.get(id);
  }
  has(id: string): boolean {
    return this.map.has(id);
  }
  set(id: string, value: V): void {
    this.map.delete(id);
    this.map.set(id, value);
    if (this.map.size > this.max) this.map.delete(this.map.keys().next().value!);
  }
}

/** Plugin verdicts that are a fault (the plugin down, timed out, or busy), not a decision about the event. */
const isFault = (v: PluginVerdict) => v.action === 'reject' && (v.msg.startsWith('error:') || v.msg.startsWith('rate-limited:'));
const FAULT_RETRIES = 5;
const WRITER_BUSY_RETRIES = 40;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class Intake {
  /** Which remotes each recent event came from: `up` never sends an event back where it came from. */
  readonly origins = new RecentIds<string[]>(50_000);
  /** Ids recently stored, or found already stored: a second copy (another remote, a catch-up) skips the plugins. */
  private readonly have = new RecentIds(50_000);

  constructor(private readonly host: RouterHost) {}

  /** Compiles a stream's filter for matching here. */
  static gate(filter: Parameters<typeof compileFilter>[0], pluginDown: WritePlugin | undefined): StreamGate {
    return { matches: compileFilter(filter), pluginDown };
  }

  /** An event committed here (seen on the change stream): when a remote sends it back, nothing is asked. */
  storedHere(id: string): void {
    this.have.set(id, true);
  }

  cameFrom(id: string, url: string): boolean {
    return this.origins.get(id)?.includes(url) ?? false;
  }

  /** Takes one event a remote sent (as parsed JSON) through the write path. */
  async take(input: unknown, url: string, gate: StreamGate): Promise<DownResult> {
    const parsed = parseEvent(input);
    if (!parsed.ok) return { outcome: 'invalid', reason: parsed.reason };
    const event = parsed.value;
    const from = this.origins.get(event.id);
    if (!from) this.origins.set(event.id, [url]);
    else if (!from.includes(url)) from.push(url);
    if (this.have.has(event.id)) return { outcome: 'duplicate', event };
    if (!gate.matches(toMatchable(event))) return { outcome: 'rejected', reason: "blocked: not matched by the stream's filter", event };

    const source: PluginSource = { type: 'Stream', info: url };
    if (gate.pluginDown) {
      const verdict = await pluginVerdict(gate.pluginDown, event, source);
      if (verdict.action !== 'accept') return { outcome: 'rejected', reason: `pluginDown: ${verdict.action}${verdict.msg ? ` ${verdict.msg}` : ''}`, event };
    }
    const refusal = checkWrite(this.host.policy, event, importSession, nowSeconds());
    if (refusal) return { outcome: 'rejected', reason: refusal, event };
    const invalid = await this.host.verifier.verify(event);
    if (invalid) return { outcome: 'invalid', reason: invalid, event };
    if (this.host.writePlugin) {
      const verdict = await pluginVerdict(this.host.writePlugin, event, source);
      if (verdict.action !== 'accept') return { outcome: 'rejected', reason: `write policy plugin: ${verdict.action}${verdict.msg ? ` ${verdict.msg}` : ''}`, event };
    }

    const prepared = prepareEvent(event);
    if (isEphemeral(event.kind)) {
      const { outbox, pool, changes } = this.host;
      await outbox.enqueueEphemeral(pool, prepared).catch((err) => {
        throw new IntakeError(`could not queue webhooks for an ephemeral event: ${(err as Error).message}`);
      });
      changes.publish({ type: 'ephemeral', event: prepared, source: 'local' });
      return { outcome: 'stored', event };
    }
    for (let attempt = 0; ; attempt++) {
      try {
        const result = await this.host.writer.submit(prepared);
        if (result.status === 'rejected') return { outcome: 'rejected', reason: result.reason, event };
        this.have.set(event.id, true);
        return { outcome: result.status, event };
      } catch (err) {
        // A full queue is the relay being busy: wait and offer it again.
        if (err instanceof WriterBusyError && attempt < WRITER_BUSY_RETRIES) {
          await sleep(Math.min(1000, 25 << Math.min(attempt, 6)));
          continue;
        }
        throw new IntakeError(`could not store an event: ${(err as Error).message}`);
      }
    }
  }
}

/** A plugin's verdict; a fault (the plugin restarting, busy) is asked again a few times, then is an IntakeError. */
export async function pluginVerdict(plugin: WritePlugin, event: NostrEvent, source: PluginSource): Promise<PluginVerdict> {
  for (let attempt = 0; ; attempt++) {
    const verdict = await plugin.decide(event, source);
    if (!isFault(verdict)) return verdict;
    if (attempt >= FAULT_RETRIES) throw new IntakeError(`plugin ${plugin.command}: ${verdict.msg}`);
    await sleep(200 << attempt);
  }
}
