// NIP-77 negentropy: a connection's sync sessions. NEG-OPEN snapshots the (created_at, id) records
// its filter matches (the same filter checks and read rules as a REQ, so nobody syncs other
// people's DMs) and answers the client's first message; each NEG-MSG is answered from that snapshot
// (nostr/negentropy.ts respond). Bounded: records per session (NEGENTROPY_MAX_RECORDS, refused with
// `blocked:`, never truncated), sessions per connection, records held by the whole process, reply
// size (NEGENTROPY_FRAME_SIZE_LIMIT), and idle time (NEG-ERR `closed:`). After a NEG-ERR the session
// is gone. NEG ids are separate from REQ ids.
import type { Checked } from '../nostr/event.js';
import type { Filter } from '../nostr/filter.js';
import { negErrorMessage, negMessage } from '../nostr/messages.js';
import { NegentropyError, respond, type NegentropySet } from '../nostr/negentropy.js';
import * as reason from '../nostr/reason.js';
import { readNegentropySet } from '../store/negentropy.js';
import { needsPreparing, prepareSearch } from '../store/search.js';
import { nowSeconds, type RelayContext } from './context.js';
import { TokenBuckets } from './rate-limit.js';

/**
 * NEG-MSG rounds per connection: a burst of 500, then 50 a second. A sync is many quick rounds (1 %
 * of 1,000,000 events: ~150 at the default frame size), so rounds are not charged to the
 * connection's event budget; but each can cost a pass over its snapshot, so they have their own.
 */
const ROUNDS_BURST = 500;
const ROUNDS_PER_SECOND = 50;

interface Session {
  set: NegentropySet;
  idle: NodeJS.Timeout;
}

const HEX = /^(?:[0-9a-f]{2})*$/i;

export class NegentropySessions {
  private readonly sessions = new Map<string, Session>();
  /** Sessions whose snapshot is being read: a NEG-CLOSE or a newer NEG-OPEN removes the entry. */
  private readonly opening = new Map<string, number>();
  private turns = 0;
  private readonly rounds = new TokenBuckets(ROUNDS_PER_SECOND, ROUNDS_BURST, { maxKeys: 1 });

  constructor(
    private readonly ctx: RelayContext,
    private readonly send: (text: string) => void,
    /** The connection's filter checks and read rules, as for a REQ (limits for a snapshot: see open). */
    private readonly readFilter: (input: unknown, defaultLimit: number) => Checked<Filter>,
  ) {}

  async open(subId: string, filterInput: unknown, hex: string): Promise<void> {
    this.close(subId); // NIP-77: a NEG-OPEN on an open id replaces that session
    const { config, limits } = this.ctx;
    const max = config.NEGENTROPY_MAX_RECORDS;
    const fail = (why: string) => this.send(negErrorMessage(subId, why));
    if (max === 0) return fail(reason.blocked('negentropy sync is disabled on this relay'));
    if (subId.length === 0 || subId.length > limits.maxSubidLength)
      return fail(reason.invalid(`subscription id must be 1 to ${limits.maxSubidLength} characters`));
    if (this.sessions.size + this.opening.size >= config.NEGENTROPY_MAX_SESSIONS)
      return fail(reason.blocked(`at most ${config.NEGENTROPY_MAX_SESSIONS} negentropy sessions per connection`));
    if (!HEX.test(hex)) return fail(reason.invalid('the negentropy message must be hex'));
    // No limit in the filter means every matching event: one more than the maximum tells "too many".
    const filter = this.readFilter(filterInput, max + 1);
    if (!filter.ok) return fail(filter.reason);

    const turn = ++this.turns;
    this.opening.set(subId, turn);
    let snapshot: Awaited<ReturnType<typeof readNegentropySet>>;
    try {
      if (needsPreparing([filter.value])) await prepareSearch(this.ctx.pool, [filter.value]);
      const { pool, target } = await this.ctx.reads.route();
      this.ctx.metrics.read(target);
      snapshot = await readNegentropySet(pool, filter.value, nowSeconds(), max);
    } catch (err) {
      if (this.opening.get(subId) !== turn) return;
      this.opening.delete(subId);
      this.ctx.log.error({ err: (err as Error).message, subId }, 'reading a negentropy snapshot failed');
      return fail(reason.error('could not read the events to reconcile'));
    }
    if (this.opening.get(subId) !== turn) return; // closed or replaced meanwhile
    this.opening.delete(subId);
    if ('tooMany' in snapshot) return fail(reason.blocked(`the filter matches more than ${max} events: narrow it (since, until, authors, kinds)`));
    if (!this.ctx.negentropy.take(snapshot.set.size)) return fail(reason.blocked('too many events in sync sessions on this relay right now, try again later'));
    const session: Session = { set: snapshot.set, idle: this.idleTimer(subId) };
    this.sessions.set(subId, session);
    this.reply(subId, session, hex);
  }

  message(subId: string, hex: string): void {
    const session = this.sessions.get(subId);
    if (!session) return this.send(negErrorMessage(subId, reason.closed('no open negentropy session with this id')));
    if (!HEX.test(hex)) {
      this.close(subId);
      return this.send(negErrorMessage(subId, reason.invalid('the negentropy message must be hex')));
    }
    if (!this.rounds.take('', performance.now())) {
      this.close(subId);
      return this.send(negErrorMessage(subId, reason.rateLimited(`more than ${ROUNDS_PER_SECOND} negentropy rounds a second on this connection`)));
    }
    session.idle.refresh();
    this.reply(subId, session, hex);
  }

  /** Ends a session (NEG-CLOSE, a replacing NEG-OPEN, a NEG-ERR); no reply. */
  close(subId: string): void {
    this.opening.delete(subId);
    const session = this.sessions.get(subId);
    if (!session) return;
    clearTimeout(session.idle);
    this.ctx.negentropy.give(session.set.size);
    this.sessions.delete(subId);
  }

  dispose(): void {
    this.opening.clear();
    for (const subId of [...this.sessions.keys()]) this.close(subId);
  }

  private reply(subId: string, session: Session, hex: string): void {
    let out: Buffer;
    try {
      out = respond(session.set, Buffer.from(hex, 'hex'), this.ctx.config.NEGENTROPY_FRAME_SIZE_LIMIT);
    } catch (err) {
      if (!(err instanceof NegentropyError)) throw err;
      this.close(subId);
      return this.send(negErrorMessage(subId, reason.invalid(`malformed negentropy message: ${err.message}`)));
    }
    this.send(negMessage(subId, out.toString('hex')));
  }

  private idleTimer(subId: string): NodeJS.Timeout {
    const seconds = this.ctx.config.NEGENTROPY_IDLE_SECONDS;
    const timer = setTimeout(() => {
      this.close(subId);
      this.send(negErrorMessage(subId, reason.closed(`no NEG-MSG for ${seconds} seconds`)));
    }, seconds * 1000);
    timer.unref();
    return timer;
  }
}
