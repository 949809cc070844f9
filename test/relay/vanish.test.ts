// NIP-62 requests to vanish, against the real relay and database: a kind 62 naming this relay (or
// ALL_RELAYS) deletes every event of its pubkey up to its created_at, kind 5 included, and the gift
// wraps p-tagging it, in the transaction that stores it; those events can never be stored again (also
// through `import`); newer ones are accepted. A request for other relays changes nothing; one naming
// no relay is invalid; a kind 5 against a kind 62 does nothing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { withTransaction } from '../../src/store/write.js';
import { runCli } from '../support/cli.js';
import { TestClient } from '../support/client.js';
import { newSigner, now, type Signer } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

const RELAY_URL = 'wss://vanish.example';
let relay: TestRelay;
let client: TestClient;
beforeAll(async () => {
  relay = await startTestRelay({ RELAY_URL });
  client = await TestClient.connect(relay.url);
});
afterAll(async () => {
  client?.close();
  await relay?.close();
});

const t = now() - 1000;
const vanish = (s: Signer, relays: string[], createdAt = t) => s.sign({ kind: 62, created_at: createdAt, tags: relays.map((r) => ['relay', r]), content: 'goodbye' });
/** A NIP-59 gift wrap: signed by a throwaway key, addressed to `to`. */
const wrapTo = (to: Signer, createdAt: number) => newSigner().sign({ kind: 1059, created_at: createdAt, tags: [['p', to.pubkey]], content: 'sealed' });

async function publishAll(events: NostrEvent[]): Promise<void> {
  for (const e of events) expect(await client.publish(e), `kind ${e.kind}`).toEqual([true, '']);
}
const stored = async (filter: object) => (await client.fetch('q', { ...filter, limit: 5000 })).map((e) => e.id).sort();
const ids = (events: NostrEvent[]) => events.map((e) => e.id).sort();
/** Gift wraps are served only to their recipient: look in the database itself. */
async function wrapsInDatabase(to: Signer): Promise<string[]> {
  const { rows } = await relay.db.pool.query<{ id: string }>(
    `SELECT encode(event_id, 'hex') AS id FROM event_tags WHERE name = 'p' AND value = $1 AND kind = 1059`,
    [to.pubkey],
  );
  return rows.map((r) => r.id);
}

describe('NIP-62 request to vanish', () => {
  it('deletes every event of the pubkey up to the request, and the gift wraps to it, for good', async () => {
    const [alice, bob] = [newSigner(), newSigner()];
    const alicesEvents = [
      alice.sign({ kind: 1, created_at: t - 50, content: 'note' }),
      alice.sign({ kind: 0, created_at: t - 40, content: '{"name":"alice"}' }),
      alice.sign({ kind: 30023, created_at: t - 30, tags: [['d', 'post']], content: 'article' }),
      alice.sign({ kind: 62, created_at: t - 25, tags: [['relay', 'wss://elsewhere.example']], content: 'not here' }),
      alice.sign({ kind: 1, created_at: t, content: 'at the very second' }),
    ];
    alicesEvents.push(alice.sign({ kind: 5, created_at: t - 20, tags: [['e', alicesEvents[0].id]] }));
    const wrapsToAlice = [wrapTo(alice, t - 100), wrapTo(alice, t - 1)];
    const bobsEvents = [bob.sign({ kind: 1, created_at: t - 10, content: 'bob stays' }), wrapTo(bob, t - 5)];
    await publishAll([...alicesEvents.slice(1), alicesEvents[0], ...wrapsToAlice, ...bobsEvents].filter((e) => e.kind !== 5));
    await publishAll([alicesEvents[5]]); // the kind 5 (it deletes the first note)

    const request = vanish(alice, [`${RELAY_URL}/`]); // normalised like the NIP-42 relay tag
    await publishAll([request]);
    expect(await stored({ authors: [alice.pubkey] })).toEqual([request.id]);
    expect(await wrapsInDatabase(alice)).toEqual([]);
    expect(await wrapsInDatabase(bob)).toEqual([bobsEvents[1].id]);
    expect(await stored({ authors: [bob.pubkey] })).toEqual(ids([bobsEvents[0]]));

    // None of it can come back, through the relay...
    for (const e of [...alicesEvents, ...wrapsToAlice]) {
      const [accepted, why] = await client.publish(e);
      expect(accepted, `kind ${e.kind}`).toBe(false);
      expect(why).toMatch(/^blocked: .*NIP-62/);
    }
    // ...while newer events are welcome.
    const newer = [alice.sign({ kind: 1, created_at: t + 1, content: 'back' }), wrapTo(alice, t + 1)];
    await publishAll(newer);
    expect(await stored({ authors: [alice.pubkey] })).toEqual(ids([request, newer[0]]));
    expect(await wrapsInDatabase(alice)).toEqual([newer[1].id]);
  });

  it('honours ALL_RELAYS, ignores a request for other relays only, refuses one naming no relay', async () => {
    const [carol, dave] = [newSigner(), newSigner()];
    const carolsNote = carol.sign({ created_at: t - 10, content: 'carol' });
    const davesNote = dave.sign({ created_at: t - 10, content: 'dave' });
    await publishAll([carolsNote, davesNote]);

    const everywhere = vanish(carol, ['ALL_RELAYS']);
    await publishAll([everywhere]);
    expect(await stored({ authors: [carol.pubkey] })).toEqual([everywhere.id]);

    const elsewhere = vanish(dave, ['wss://another.example']);
    await publishAll([elsewhere]);
    expect(await stored({ authors: [dave.pubkey] })).toEqual(ids([davesNote, elsewhere]));

    const [accepted, why] = await client.publish(dave.sign({ kind: 62, content: 'no relay tag' }));
    expect(accepted).toBe(false);
    expect(why).toMatch(/^invalid: .*relay/);
  });

  it('is not undone by a kind 5', async () => {
    const erin = newSigner();
    const request = vanish(erin, [RELAY_URL]);
    await publishAll([request, erin.sign({ kind: 5, created_at: t + 10, tags: [['e', request.id], ['k', '62']] })]);
    expect(await stored({ ids: [request.id] })).toEqual([request.id]);
  });

  it('applies in imports: the input\'s earlier events go, later ones it covers are refused', async () => {
    const frank = newSigner();
    const before = frank.sign({ created_at: t - 10, content: 'before' });
    const request = vanish(frank, [RELAY_URL]);
    const covered = frank.sign({ created_at: t - 5, content: 'older, after the request in the input' });
    const newer = frank.sign({ created_at: t + 5, content: 'newer' });
    const jsonl = [before, request, covered, newer].map((e) => JSON.stringify(e)).join('\n') + '\n';
    const run = await runCli(['import', '-'], { DATABASE_URL: relay.db.url, RELAY_URL, LOG_LEVEL: 'warn' }, jsonl);
    expect(run.code, run.stderr).toBe(0);
    expect(await stored({ authors: [frank.pubkey] })).toEqual(ids([request, newer]));
    // And the tombstone holds for the relay afterwards.
    expect((await client.publish(before))[1]).toMatch(/^blocked: .*NIP-62/);
  });

  it('does not hold up other publishers while its deletion is under way: their OKs come first', async () => {
    const [big, other] = [newSigner(), newSigner()];
    const rows = 20_000;
    const id = `decode(md5($1::text || i::text) || md5($1::text || (i + 1)::text || 'x'), 'hex')`;
    await withTransaction(relay.db.pool, async (setup) => {
      await setup.query(`INSERT INTO events (id, pubkey, kind, created_at, raw) SELECT ${id}, decode($1::text, 'hex'), 1, $2::bigint - i, '{}' FROM generate_series(1, ${rows}) i`, [big.pubkey, t - 100]);
      await setup.query(`INSERT INTO event_tags (event_id, name, value, kind, created_at) SELECT ${id}, 't', 'x', 1, $2::bigint - i FROM generate_series(1, ${rows}) i`, [big.pubkey, t - 100]);
    });
    // One of the account's rows, locked by the test: the request's DELETE waits there, mid-way, for
    // as long as the test holds it, however fast or slow the machine is.
    const holder = await relay.db.pool.connect();
    const publisher = await TestClient.connect(relay.url);
    const answers: string[] = [];
    let requestOk: Promise<[boolean, string]> | undefined;
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM events WHERE pubkey = decode($1, 'hex') ORDER BY created_at LIMIT 1 FOR UPDATE`, [big.pubkey]);
      requestOk = client.publish(vanish(big, [RELAY_URL])).then((ok) => (answers.push('vanish'), ok));
      const deleting = async () => {
        const { rows: waiting } = await relay.db.pool.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO vanished%'`,
        );
        return waiting[0].n;
      };
      await expect.poll(deleting, { timeout: 20_000 }).toBe(1);
      const note = other.sign({ content: 'meanwhile' });
      expect(await publisher.publish(note)).toEqual([true, '']);
      answers.push('note');
      expect(await deleting()).toBe(1); // the deletion was still under way when the note was acknowledged
      expect(await client.count('n', { ids: [note.id] })).toBe(1);
    } finally {
      await holder.query('COMMIT');
      holder.release();
      publisher.close();
    }
    expect(await requestOk).toEqual([true, '']);
    expect(answers).toEqual(['note', 'vanish']);
    const { rows: left } = await relay.db.pool.query(`SELECT count(*)::int AS n FROM events WHERE pubkey = decode($1, 'hex')`, [big.pubkey]);
    expect(left).toEqual([{ n: 1 }]);
  }, 60_000);
});
