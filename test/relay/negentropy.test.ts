// NIP-77 negentropy over the real relay and database: exact have/need against our initiator and an
// independent client (@nostr-dev-kit/sync), frame limits, the record maximum, idle sessions, read
// rules (no one syncs other people's DMs), malformed input, and session bookkeeping.
import { Negentropy, NegentropyStorage } from '@nostr-dev-kit/sync';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { NegentropyInitiator, NegentropySet } from '../../src/nostr/negentropy.js';
import { TestClient, type RelayMessage } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { until } from '../support/wait.js';

let relay: TestRelay;
let client: TestClient;
beforeAll(async () => {
  relay = await startTestRelay({ NEGENTROPY_MAX_RECORDS: '3000', NEGENTROPY_FRAME_SIZE_LIMIT: '4096', NEGENTROPY_IDLE_SECONDS: '1', NEGENTROPY_MAX_SESSIONS: '3' });
  client = await TestClient.connect(relay.url);
});
afterAll(async () => {
  client?.close();
  await relay?.close();
});

const alice = newSigner();
const bob = newSigner();
let n = 0;
const neg = () => `neg${++n}`;

/** Publishes in chunks well under MAX_PENDING_EVENTS, each acknowledged before the next. */
async function publishAll(events: NostrEvent[]): Promise<void> {
  for (let i = 0; i < events.length; i += 200) {
    const chunk = events.slice(i, i + 200);
    const from = client.mark;
    for (const e of chunk) client.send(['EVENT', e]);
    for (const e of chunk) expect((await client.waitFor((m) => m[0] === 'OK' && m[1] === e.id, 10_000, from))[2]).toBe(true);
  }
}

/** The next NEG-MSG or NEG-ERR for `subId` after message index `from`. */
async function nextNeg(subId: string, from: number, c = client): Promise<RelayMessage> {
  return c.waitFor((m) => (m[0] === 'NEG-MSG' || m[0] === 'NEG-ERR') && m[1] === subId, 10_000, from);
}

/** Runs a whole reconciliation with our initiator; returns have/need and the largest relay message. */
async function reconcile(filter: object, mine: NostrEvent[], frameSizeLimit = 0, c = client) {
  const subId = neg();
  const initiator = new NegentropyInitiator(NegentropySet.fromRecords(mine.map((e) => ({ timestamp: e.created_at, id: e.id }))), frameSizeLimit);
  const have: string[] = [];
  const need: string[] = [];
  let largest = 0;
  let rounds = 0;
  let from = c.mark;
  let out = initiator.initiate();
  c.send(['NEG-OPEN', subId, filter, out.toString('hex')]);
  for (;;) {
    const reply = await nextNeg(subId, from, c);
    from = c.messages.indexOf(reply) + 1;
    if (reply[0] === 'NEG-ERR') throw new Error(`NEG-ERR ${reply[2]}`);
    largest = Math.max(largest, (reply[2] as string).length / 2);
    rounds++;
    const r = initiator.reconcile(Buffer.from(reply[2] as string, 'hex'));
    have.push(...r.have);
    need.push(...r.need);
    if (!r.next) break;
    out = r.next;
    c.send(['NEG-MSG', subId, out.toString('hex')]);
  }
  c.send(['NEG-CLOSE', subId]);
  return { have: have.sort(), need: need.sort(), largest, rounds };
}
const sorted = (events: NostrEvent[]) => events.map((e) => e.id).sort();

async function negentropyRecords(): Promise<number> {
  const text = await (await fetch(`${relay.url.replace('ws', 'http')}/metrics`)).text();
  return Number(/^pgrelay_negentropy_records (\d+)$/m.exec(text)![1]);
}

describe('NIP-77 negentropy', () => {
  const t = now() - 10_000;
  // Equal timestamps are common in real data: bounds then need id prefixes.
  const stored = Array.from({ length: 1200 }, (_, i) => alice.sign({ content: `stored ${i}`, created_at: t + Math.floor(i / 7) }));
  const onlyOnRelay = stored.filter((_, i) => i % 10 === 3);
  const onlyMine = Array.from({ length: 150 }, (_, i) => bob.sign({ content: `mine ${i}`, created_at: t + Math.floor(i / 3) }));
  const mine = [...stored.filter((e) => !onlyOnRelay.includes(e)), ...onlyMine];

  beforeAll(async () => {
    await publishAll(stored);
  });

  it('finds exactly what each side lacks, within the frame size limit', async () => {
    const r = await reconcile({ kinds: [1], since: t - 1 }, mine, 4096);
    expect(r.need).toEqual(sorted(onlyOnRelay));
    expect(r.have).toEqual(sorted(onlyMine));
    expect(r.largest).toBeLessThanOrEqual(4096); // NEGENTROPY_FRAME_SIZE_LIMIT
    expect(r.rounds).toBeGreaterThan(1);
  });

  it('finishes in one round when both sides hold the same events', async () => {
    const r = await reconcile({ authors: [alice.pubkey] }, stored);
    expect(r).toMatchObject({ have: [], need: [], rounds: 1 });
  });

  it('interoperates with an independent client (@nostr-dev-kit/sync)', async () => {
    const storage = new NegentropyStorage();
    for (const e of mine) storage.insert(e.created_at, e.id);
    storage.seal();
    const ne = new Negentropy(storage, 50_000);
    const subId = neg();
    let from = client.mark;
    let msg: Uint8Array = await ne.initiate();
    const have: string[] = [];
    const need: string[] = [];
    const hex = (m: unknown) => (typeof m === 'string' ? m : Buffer.from(m as Uint8Array).toString('hex'));
    client.send(['NEG-OPEN', subId, { kinds: [1], since: t - 1 }, hex(msg)]);
    for (;;) {
      const reply = await nextNeg(subId, from);
      from = client.messages.indexOf(reply) + 1;
      expect(reply[0]).toBe('NEG-MSG');
      const r = await ne.reconcile(Buffer.from(reply[2] as string, 'hex'));
      have.push(...r.have.map(hex));
      need.push(...r.need.map(hex));
      if (r.nextMessage === undefined) break;
      msg = r.nextMessage;
      client.send(['NEG-MSG', subId, hex(msg)]);
    }
    client.send(['NEG-CLOSE', subId]);
    expect(need.sort()).toEqual(sorted(onlyOnRelay));
    expect(have.sort()).toEqual(sorted(onlyMine));
  });

  it('refuses a filter matching more than NEGENTROPY_MAX_RECORDS with NEG-ERR blocked:, never a truncated set', async () => {
    const extra = Array.from({ length: 1900 }, (_, i) => bob.sign({ kind: 30078, content: '', tags: [['d', `x${i}`]], created_at: t }));
    await publishAll(extra);
    const subId = neg();
    const from = client.mark;
    client.send(['NEG-OPEN', subId, {}, '61']);
    const reply = await nextNeg(subId, from);
    expect(reply[0]).toBe('NEG-ERR');
    expect(reply[2]).toMatch(/^blocked: the filter matches more than 3000 events/);
    // A limit keeps the newest events and is accepted.
    const limited = await reconcile({ kinds: [1], limit: 10 }, []);
    expect(limited.need).toHaveLength(10);
  });

  it('closes an idle session with NEG-ERR closed:, and a NEG-MSG for it is refused', async () => {
    const subId = neg();
    let from = client.mark;
    client.send(['NEG-OPEN', subId, { kinds: [1] }, '61']);
    expect((await nextNeg(subId, from))[0]).toBe('NEG-MSG');
    from = client.mark;
    const idle = await nextNeg(subId, from);
    expect(idle).toEqual(['NEG-ERR', subId, 'closed: no NEG-MSG for 1 seconds']);
    from = client.mark;
    client.send(['NEG-MSG', subId, '61']);
    expect(await nextNeg(subId, from)).toEqual(['NEG-ERR', subId, 'closed: no open negentropy session with this id']);
  });

  it('applies the read rules: DMs are synced only by their author or recipient', async () => {
    const dm = alice.sign({ kind: 4, tags: [['p', bob.pubkey]], content: 'secret?iv=x', created_at: t - 4000 });
    const note = alice.sign({ kind: 1, content: 'public', created_at: t - 5000 });
    await publishAll([dm, note]);
    const filter = { kinds: [1, 4], until: t - 3000, since: t - 5000 };
    // Not authenticated: the note only, never the DM.
    expect((await reconcile(filter, [])).need).toEqual([note.id]);
    // A DM-only filter asks for AUTH.
    const subId = neg();
    const from = client.mark;
    client.send(['NEG-OPEN', subId, { kinds: [4] }, '61']);
    expect(await nextNeg(subId, from)).toEqual(['NEG-ERR', subId, expect.stringMatching(/^auth-required: /)]);
    // The recipient, authenticated, gets both.
    const asBob = await TestClient.connect(relay.url);
    try {
      expect(await asBob.auth(bob)).toEqual([true, '']);
      expect((await reconcile(filter, [], 0, asBob)).need.sort()).toEqual([dm.id, note.id].sort());
    } finally {
      asBob.close();
    }
  });

  it('answers malformed input with NEG-ERR invalid: and an unknown version with its own', async () => {
    const cases: Array<[string, RegExp]> = [
      ['6', /^invalid: the negentropy message must be hex$/],
      ['zz', /^invalid: the negentropy message must be hex$/],
      ['6100', /^invalid: malformed negentropy message/], // a bound with no mode
      ['61000003', /^invalid: malformed negentropy message/], // mode 3 does not exist
    ];
    for (const [hex, why] of cases) {
      const subId = neg();
      const from = client.mark;
      client.send(['NEG-OPEN', subId, { kinds: [1] }, hex]);
      const reply = await nextNeg(subId, from);
      expect(reply[0]).toBe('NEG-ERR');
      expect(reply[2]).toMatch(why);
    }
    const subId = neg();
    const from = client.mark;
    client.send(['NEG-OPEN', subId, { kinds: [1] }, '62']);
    expect(await nextNeg(subId, from)).toEqual(['NEG-MSG', subId, '61']);
    client.send(['NEG-CLOSE', subId]);
    const bad = neg();
    const mark = client.mark;
    client.send(['NEG-OPEN', bad, { kinds: 'x' }, '61']);
    expect(await nextNeg(bad, mark)).toEqual(['NEG-ERR', bad, 'invalid: "kinds" must be an array']);
  });

  it('bounds sessions per connection; NEG-CLOSE frees one and a NEG-OPEN on an open id replaces it', async () => {
    const c = await TestClient.connect(relay.url);
    try {
      const ids = ['a', 'b', 'c'];
      for (const id of ids) {
        const from = c.mark;
        c.send(['NEG-OPEN', id, { kinds: [1] }, '61']);
        expect((await nextNeg(id, from, c))[0]).toBe('NEG-MSG');
      }
      let from = c.mark;
      c.send(['NEG-OPEN', 'a', { kinds: [1] }, '61']); // replaces a: still three
      expect((await nextNeg('a', from, c))[0]).toBe('NEG-MSG');
      from = c.mark;
      c.send(['NEG-OPEN', 'd', { kinds: [1] }, '61']);
      expect(await nextNeg('d', from, c)).toEqual(['NEG-ERR', 'd', 'blocked: at most 3 negentropy sessions per connection']);
      c.send(['NEG-CLOSE', 'b']);
      from = c.mark;
      c.send(['NEG-OPEN', 'd', { kinds: [1] }, '61']);
      expect((await nextNeg('d', from, c))[0]).toBe('NEG-MSG');
      // The records the three open sessions hold, as /metrics reports them; none once the socket closes.
      const kind1 = await relay.db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events WHERE kind = 1');
      expect(await negentropyRecords()).toBe(3 * kind1.rows[0].n);
      c.close();
      await until(async () => (await negentropyRecords()) === 0, 'the sessions released');
    } finally {
      c.close();
    }
  });

  it('gives NEG-MSG rounds their own budget: a burst of 500, then NEG-ERR rate-limited:', async () => {
    const c = await TestClient.connect(relay.url);
    try {
      const from = c.mark;
      c.send(['NEG-OPEN', 'r', { kinds: [1] }, '61']);
      await nextNeg('r', from, c);
      for (let i = 0; i < 520; i++) c.send(['NEG-MSG', 'r', '61']);
      const refused = await c.waitFor((m) => m[0] === 'NEG-ERR' && m[1] === 'r', 10_000, from);
      expect(refused[2]).toBe('rate-limited: more than 50 negentropy rounds a second on this connection');
      const answered = c.messages.slice(from).filter((m) => m[0] === 'NEG-MSG').length;
      expect(answered).toBeGreaterThanOrEqual(501); // the NEG-OPEN's reply and at least the burst
      expect(answered).toBeLessThan(521);
    } finally {
      c.close();
    }
  });

  it('is listed in NIP-11', async () => {
    const info = (await (await fetch(relay.url.replace('ws', 'http'), { headers: { Accept: 'application/nostr+json' } })).json()) as { supported_nips: number[] };
    expect(info.supported_nips).toEqual(expect.arrayContaining([50, 62, 77]));
  });
});

describe('NIP-77 limits across the process', () => {
  it('refuses a session that would hold more records than NEGENTROPY_MAX_TOTAL_RECORDS, until others end', async () => {
    const small = await startTestRelay({ NEGENTROPY_MAX_TOTAL_RECORDS: '5' });
    const [c1, c2] = [await TestClient.connect(small.url), await TestClient.connect(small.url)];
    try {
      const author = newSigner();
      for (const e of Array.from({ length: 4 }, (_, i) => author.sign({ content: `${i}` }))) expect(await c1.publish(e)).toEqual([true, '']);
      const open = async (c: TestClient, id: string) => {
        const from = c.mark;
        c.send(['NEG-OPEN', id, { authors: [author.pubkey] }, '61']);
        return nextNeg(id, from, c);
      };
      expect((await open(c1, 'x'))[0]).toBe('NEG-MSG');
      expect(await open(c2, 'y')).toEqual(['NEG-ERR', 'y', 'blocked: too many events in sync sessions on this relay right now, try again later']);
      c1.send(['NEG-CLOSE', 'x']);
      await c1.sync();
      expect((await open(c2, 'y'))[0]).toBe('NEG-MSG');
    } finally {
      c1.close();
      c2.close();
      await small.close();
    }
  });
});
