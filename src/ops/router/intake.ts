// Events coming down from remotes, on their way into our store: the stream's filter, then the one
// admission path every event takes (admission/admit.ts), as a source of its own: the relay's write
// rules (as for an import: no connection, nobody authenticated), id and signature, the stream's
// pluginDown, WRITE_POLICY_PLUGIN (sourceType Stream, the remote's URL), then the writer
// (deduplicated, fanned out, webhooks, other processes). An ephemeral event is passed on as the relay
// passes one on, never stored.
//
// Every event ends settled (stored, duplicate, refused by a rule or a plugin, invalid) or throws
// IntakeError when something that is not the event's fault (the database, a full writer, a plugin
// that keeps failing) kept it out: the link then drops its connection, and the next connection's
// catch-up fetches the event again. A position never moves past an event that was not settled.
import type { Admission, Outcome } from '../../admission/admit.js';
import { streamSource } from '../../admission/source.js';
import { parseEvent, type NostrEvent } from '../../nostr/event.js';
import { compileFilter, toMatchable, type Matcher } from '../../nostr/filter.js';
import type { WritePlugin } from '../../policy/write-plugin.js';
import type { DownOutcome } from './metrics.js';

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

/** The router's count of each admission outcome: an ephemeral event passed on counts as stored, a shadowReject as rejected. */
const DOWN_OUTCOME: Record<Exclude<Outcome, 'fault'>, DownOutcome> = {
  stored: 'stored',
  passed: 'stored',
  duplicate: 'duplicate',
  shadowed: 'rejected',
  invalid: 'invalid',
  refused: 'rejected',
  rejected: 'rejected',
};

export class Intake {
  /** Which remotes each recent event came from: `up` never sends an event back where it came from. */
  readonly origins = new RecentIds<string[]>(50_000);
  /** Ids recently stored, or found already stored: a second copy (another remote, a catch-up) skips the plugins. */
  private readonly have = new RecentIds(50_000);

  constructor(private readonly admission: Admission) {}

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

    const answer = await this.admission.admitEvent(event, streamSource(url, gate.pluginDown));
    if (answer.outcome === 'fault') throw new IntakeError(`could not take event ${event.id}: ${answer.reason}`);
    if (answer.outcome === 'stored' || answer.outcome === 'duplicate') this.have.set(event.id, true);
    return { outcome: DOWN_OUTCOME[answer.outcome], reason: answer.reason || undefined, event };
  }
}
