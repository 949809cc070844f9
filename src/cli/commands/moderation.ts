// ban / unban / allow / disallow / list: the NIP-86 management actions for an operator on the
// machine, without a signing key (store/moderation.ts: the very same actions the API runs). Every
// relay process on the database applies a change within a second. moderation: the queue NIP-56
// reports feed (store/reports.ts), and the decisions that clear it.
import { isAddressOrCidr } from '../../config.js';
import { eventIdFromText, pubkeyFromText } from '../../nostr/nip19.js';
import { isoSeconds } from '../../policy/moderation.js';
import * as memberships from '../../store/memberships.js';
import * as moderation from '../../store/moderation.js';
import * as reports from '../../store/reports.js';
import type { Command } from '../command.js';
import { formatCount, openStore, parseOptions, UsageError } from './shared.js';

const KEY_INPUT = 'a pubkey (64 hex, npub, nprofile or nsec)';
const ID_INPUT = 'an event id (64 hex, note or nevent)';

function pubkeyArg(value: string | undefined): string {
  const pk = value === undefined ? undefined : pubkeyFromText(value);
  if (!pk) throw new UsageError(`expected ${KEY_INPUT}, got ${JSON.stringify(value ?? '')}`);
  return pk;
}

function eventArg(value: string | undefined): string {
  const id = value === undefined ? undefined : eventIdFromText(value);
  if (!id) throw new UsageError(`expected ${ID_INPUT}, got ${JSON.stringify(value ?? '')}`);
  return id;
}

function ipArg(value: string | undefined): string {
  if (value === undefined || !isAddressOrCidr(value)) throw new UsageError(`expected an IP address or a CIDR block, got ${JSON.stringify(value ?? '')}`);
  return value;
}

function kindArg(value: string | undefined): number {
  if (value === undefined || !/^\d{1,5}$/.test(value) || Number(value) > 65535) throw new UsageError(`expected a kind from 0 to 65535, got ${JSON.stringify(value ?? '')}`);
  return Number(value);
}

/** --days N or --until DATE (ISO 8601, or unix seconds) of `allow pubkey`: a membership that ends. */
function membershipArg(days: string | undefined, until: string | undefined): memberships.MembershipChange | undefined {
  if (days !== undefined && until !== undefined) throw new UsageError('give --days or --until, not both');
  if (days !== undefined) {
    const n = Number(days);
    if (!/^\d+$/.test(days) || n < 1 || n > memberships.MAX_MEMBERSHIP_DAYS) throw new UsageError(`--days must be an integer from 1 to ${memberships.MAX_MEMBERSHIP_DAYS}, got ${JSON.stringify(days)}`);
    return { days: n };
  }
  if (until !== undefined) {
    const ms = /^\d+$/.test(until) ? Number(until) * 1000 : Date.parse(until);
    if (!Number.isFinite(ms)) throw new UsageError(`--until must be a date (2027-03-01, 2027-03-01T12:00:00Z) or unix seconds, got ${JSON.stringify(until)}`);
    return { until: Math.floor(ms / 1000) };
  }
  return undefined;
}

/** "  until 2027-03-01T00:00:00Z" (", expired" once past) for an entry that ends; "" otherwise. */
function untilText(expiresAt: number | null | undefined, now: number): string {
  if (expiresAt === null || expiresAt === undefined) return '';
  return `  until ${isoSeconds(expiresAt)}${expiresAt <= now ? ' (expired)' : ''}`;
}

const FOOTER = `Every relay process on the same database applies a change within a second. The same
actions are the NIP-86 management API's (POST to the relay's URL, authenticated by ADMIN_PUBKEYS).`;

export const banCommand: Command = {
  name: 'ban',
  help: `usage: npm run cli -- ban pubkey <pubkey> [--reason TEXT] [--purge]
       npm run cli -- ban event <id> [--reason TEXT]
       npm run cli -- ban ip <address or CIDR> [--reason TEXT]

pubkey  the key's new events are refused with "blocked:" (also by imports); <pubkey> is
        ${KEY_INPUT}. --purge also deletes every event of that key already stored.
event   the event is deleted from the store and refused with "blocked:" if sent again.
ip      new connections from it are refused (HTTP 403) and its open ones are closed. A CIDR
        block (10.0.0.0/8, 2001:db8::/32) blocks every address in it.

${FOOTER}`,
  async run(args, { config, log }) {
    const { values, positionals } = parseOptions(args, { reason: { type: 'string' }, purge: { type: 'boolean', default: false } }, true);
    const [what, value, extra] = positionals;
    if (extra !== undefined || !['pubkey', 'event', 'ip'].includes(what ?? '')) throw new UsageError('usage: ban pubkey|event|ip <value> [--reason TEXT]');
    if (values.purge && what !== 'pubkey') throw new UsageError('--purge goes with ban pubkey');
    const db = await openStore(config, log);
    try {
      if (what === 'pubkey') {
        const pk = pubkeyArg(value);
        await moderation.banPubkey(db.pool, pk, values.reason);
        console.log(`banned pubkey ${pk}`);
        if (values.purge) console.log(`purged ${formatCount(await moderation.purgePubkey(db.pool, pk))} stored events of it`);
      } else if (what === 'event') {
        const id = eventArg(value);
        const { removed } = await moderation.banEvent(db.pool, id, values.reason);
        console.log(`banned event ${id}${removed ? ' (removed from the store)' : ' (it was not stored)'}`);
      } else {
        await moderation.blockIp(db.pool, ipArg(value), values.reason);
        console.log(`blocked ${value}`);
      }
      return 0;
    } finally {
      await db.close();
    }
  },
};

export const unbanCommand: Command = {
  name: 'unban',
  help: `usage: npm run cli -- unban pubkey|event|ip <value>

Lifts the ban (purged events stay deleted: they can be published again). Exits 1 when there was
no such ban.

${FOOTER}`,
  async run(args, { config, log }) {
    const { positionals } = parseOptions(args, {}, true);
    const [what, value, extra] = positionals;
    if (extra !== undefined || !['pubkey', 'event', 'ip'].includes(what ?? '')) throw new UsageError('usage: unban pubkey|event|ip <value>');
    const db = await openStore(config, log);
    try {
      const lifted =
        what === 'pubkey'
          ? await moderation.unbanPubkey(db.pool, pubkeyArg(value))
          : what === 'event'
            ? await moderation.unbanEvent(db.pool, eventArg(value))
            : await moderation.unblockIp(db.pool, ipArg(value));
      console.log(lifted ? `unbanned ${what} ${value}` : `no ban on ${what} ${value}`);
      return lifted ? 0 : 1;
    } finally {
      await db.close();
    }
  },
};

export const allowCommand: Command = {
  name: 'allow',
  help: `usage: npm run cli -- allow pubkey <pubkey> [--reason TEXT] [--days N | --until DATE]
       npm run cli -- allow kind <kind>

pubkey  once the list is not empty, the relay accepts events only from its pubkeys (and gift
        wraps addressed to them); others get "restricted:". <pubkey> is ${KEY_INPUT}.
        Without --days or --until the membership has no end.
        --days N      adds N days to whichever is later, now or the current end (a membership
                      without end keeps none); a new pubkey gets N days from now.
        --until DATE  sets the end (2027-03-01, 2027-03-01T12:00:00Z or unix seconds).
        An expired member stays on the list, refused with "restricted: your membership expired".
kind    once the list is not empty, the relay accepts only these kinds; others get "blocked:".

${FOOTER}`,
  async run(args, { config, log }) {
    const { values, positionals } = parseOptions(args, { reason: { type: 'string' }, days: { type: 'string' }, until: { type: 'string' } }, true);
    const [what, value, extra] = positionals;
    if (extra !== undefined || !['pubkey', 'kind'].includes(what ?? '')) throw new UsageError('usage: allow pubkey|kind <value>');
    const change = membershipArg(values.days, values.until);
    if (change && what !== 'pubkey') throw new UsageError('--days and --until go with allow pubkey');
    const pubkey = what === 'pubkey' ? pubkeyArg(value) : undefined;
    const db = await openStore(config, log);
    try {
      if (pubkey && change) {
        const now = Math.floor(Date.now() / 1000);
        const until = await memberships.changeMembership(db.pool, pubkey, change, now, values.reason);
        console.log(`allowed ${what} ${value}${until === null ? ' (its membership has no end)' : untilText(until, now)}`);
        return 0;
      }
      if (pubkey) await moderation.allowPubkey(db.pool, pubkey, values.reason);
      else await moderation.allowKind(db.pool, kindArg(value));
      console.log(`allowed ${what} ${value}`);
      return 0;
    } finally {
      await db.close();
    }
  },
};

export const disallowCommand: Command = {
  name: 'disallow',
  help: `usage: npm run cli -- disallow pubkey|kind <value>

Exits 1 when it was not on the list. An empty list allows everyone (every kind) again.

${FOOTER}`,
  async run(args, { config, log }) {
    const { positionals } = parseOptions(args, {}, true);
    const [what, value, extra] = positionals;
    if (extra !== undefined || !['pubkey', 'kind'].includes(what ?? '')) throw new UsageError('usage: disallow pubkey|kind <value>');
    const db = await openStore(config, log);
    try {
      const removed = what === 'pubkey' ? await moderation.unallowPubkey(db.pool, pubkeyArg(value)) : await moderation.disallowKind(db.pool, kindArg(value));
      console.log(removed ? `disallowed ${what} ${value}` : `${what} ${value} was not allowed`);
      return removed ? 0 : 1;
    } finally {
      await db.close();
    }
  },
};

const LISTS = ['banned-pubkeys', 'allowed-pubkeys', 'banned-events', 'allowed-kinds', 'blocked-ips'] as const;

export const listCommand: Command = {
  name: 'list',
  help: `usage: npm run cli -- list [${LISTS.join('|')}] [--json]

Without a list name, every list. One entry per line, with its reason; an allowed pubkey whose
membership ends, with its end (and "(expired)" once past; --json: expires_at in unix seconds).`,
  async run(args, { config, log }) {
    const { values, positionals } = parseOptions(args, { json: { type: 'boolean', default: false } }, true);
    const wanted = positionals.length ? positionals : [...LISTS];
    for (const name of wanted) if (!(LISTS as readonly string[]).includes(name)) throw new UsageError(`unknown list "${name}": ${LISTS.join(', ')}`);
    const db = await openStore(config, log);
    try {
      type Entry = { key: string; reason: string | null; expires_at?: number };
      const read: Record<(typeof LISTS)[number], () => Promise<Entry[] | number[]>> = {
        'banned-pubkeys': () => moderation.list.bannedPubkeys(db.pool),
        'allowed-pubkeys': async () =>
          (await moderation.list.allowedPubkeys(db.pool)).map(({ key, reason, expiresAt }) => ({ key, reason, ...(expiresAt === null ? {} : { expires_at: expiresAt }) })),
        'banned-events': () => moderation.list.bannedEvents(db.pool),
        'allowed-kinds': () => moderation.list.allowedKinds(db.pool),
        'blocked-ips': () => moderation.list.blockedIps(db.pool),
      };
      const out: Record<string, unknown> = {};
      for (const name of wanted as Array<(typeof LISTS)[number]>) out[name] = await read[name]();
      if (values.json) console.log(JSON.stringify(out, null, 2));
      else {
        const now = Math.floor(Date.now() / 1000);
        for (const [name, entries] of Object.entries(out) as Array<[string, Array<Entry | number>]>) {
          console.log(`${name} (${entries.length})`);
          for (const e of entries) console.log(typeof e === 'number' ? `  ${e}` : `  ${e.key}${untilText(e.expires_at, now)}${e.reason ? `  ${e.reason}` : ''}`);
        }
      }
      return 0;
    } finally {
      await db.close();
    }
  },
};

export const moderationCommand: Command = {
  name: 'moderation',
  help: `usage: npm run cli -- moderation queue [--json]
       npm run cli -- moderation allow <event id>
       npm run cli -- moderation dismiss <pubkey>

queue    what NIP-56 reports from trusted reporters (ADMIN_PUBKEYS, the allowed pubkeys, the web of
         trust when it is on) have put before an admin: reported events stored here, then reported
         pubkeys, each with the reporters, the report types and when it was first reported.
allow    keeps a reported event (NIP-86 allowevent): its entry is cleared, a ban on it lifted, and
         an event withheld by REPORTS_HIDE_AT is served again. <event id> is ${ID_INPUT}.
dismiss  keeps a reported pubkey (dismisspubkeyreports): its entry is cleared. <pubkey> is
         ${KEY_INPUT}.

To remove instead: ban event <id> (deleted, refused if sent again) or ban pubkey <pubkey>; either
clears the entry. Those already counted cannot bring a kept event or pubkey back; a trusted reporter
new to it can. ${FOOTER.replace(/\n/g, ' ')}`,
  async run(args, { config, log }) {
    const { values, positionals } = parseOptions(args, { json: { type: 'boolean', default: false } }, true);
    const [action, value, extra] = positionals;
    const arity = action === 'queue' ? 1 : 2;
    if (!['queue', 'allow', 'dismiss'].includes(action ?? '') || positionals.length !== arity || extra !== undefined)
      throw new UsageError('usage: moderation queue [--json] | moderation allow <event id> | moderation dismiss <pubkey>');
    const db = await openStore(config, log);
    try {
      if (action === 'allow') {
        const id = eventArg(value);
        const cleared = await reports.keepEvent(db.pool, id);
        console.log(cleared ? `kept event ${id}: its reports are cleared` : `event ${id} was not in the queue (a ban on it is lifted)`);
        return 0;
      }
      if (action === 'dismiss') {
        const pk = pubkeyArg(value);
        const cleared = await reports.clearReports(db.pool, 'pubkey', pk);
        console.log(cleared ? `kept pubkey ${pk}: its reports are cleared` : `pubkey ${pk} was not in the queue`);
        return 0;
      }
      const queue = await reports.listQueue(db.pool);
      if (values.json) {
        const entries = queue.map((e) => ({ target: e.target, id: e.id, reason: e.reason, reporters: e.reporters, first_reported: e.firstReported.toISOString() }));
        console.log(JSON.stringify(entries, null, 2));
        return 0;
      }
      for (const target of ['event', 'pubkey'] as const) {
        const entries = queue.filter((e) => e.target === target);
        console.log(`${target === 'event' ? 'events' : 'pubkeys'} needing moderation (${entries.length})`);
        for (const e of entries) console.log(`  ${e.id}  first reported ${e.firstReported.toISOString()}  ${e.reason}`);
      }
      return 0;
    } finally {
      await db.close();
    }
  },
};
