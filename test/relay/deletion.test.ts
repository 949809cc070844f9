// NIP-09 deletion requests (kind 5), protocol.md section 2: e tags delete the author's own events,
// a tags delete versions up to the request's created_at, the request itself is kept and served,
// and a deleted event stays deleted.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { TestClient } from '../support/client.js';
import { newSigner, now, type Signer } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let client: TestClient;
beforeAll(async () => {
  relay = await startTestRelay();
  client = await TestClient.connect(relay.url);
});
afterAll(async () => {
  client.close();
  await relay.close();
});

const T = now() - 10_000;
const BLOCKED = expect.stringMatching(/^blocked: /);

async function publishOk(e: NostrEvent): Promise<void> {
  expect(await client.publish(e)).toEqual([true, '']);
}

const deletion = (s: Signer, tags: string[][], created_at = now()) => s.sign({ kind: 5, tags, created_at, content: 'oops' });

async function rows(table: 'events' | 'event_tags', id: string): Promise<number> {
  const column = table === 'events' ? 'id' : 'event_id';
  const { rows } = await relay.db.pool.query(`SELECT count(*)::int AS n FROM ${table} WHERE ${column} = $1`, [Buffer.from(id, 'hex')]);
  return rows[0].n;
}

describe('deletion by e tag', () => {
  it('deletes the author\'s own event: it is no longer served nor stored', async () => {
    const alice = newSigner();
    const note = alice.sign({ created_at: T });
    await publishOk(note);
    await publishOk(deletion(alice, [['e', note.id], ['k', '1']]));
    expect(await client.fetch('d', { ids: [note.id] })).toEqual([]);
    expect(await client.fetch('d', { authors: [alice.pubkey], kinds: [1] })).toEqual([]);
    expect(await rows('events', note.id)).toBe(0);
  });

  it('deletes several events named in one request', async () => {
    const alice = newSigner();
    const notes = [0, 1, 2].map((i) => alice.sign({ created_at: T + i }));
    for (const n of notes) await publishOk(n);
    await publishOk(deletion(alice, [['e', notes[0].id], ['e', notes[2].id]]));
    expect(await client.fetch('d', { authors: [alice.pubkey], kinds: [1] })).toEqual([notes[1]]);
  });

  it('removes the deleted event\'s event_tags rows', async () => {
    const alice = newSigner();
    const note = alice.sign({ created_at: T, tags: [['t', 'gone'], ['p', alice.pubkey]] });
    await publishOk(note);
    expect(await rows('event_tags', note.id)).toBe(2);
    await publishOk(deletion(alice, [['e', note.id]]));
    expect(await rows('event_tags', note.id)).toBe(0);
    expect(await client.fetch('d', { '#p': [alice.pubkey], kinds: [1] })).toEqual([]);
  });

  it('stores the deletion request itself and serves it like a regular event', async () => {
    const alice = newSigner();
    const note = alice.sign({ created_at: T });
    await publishOk(note);
    const del = deletion(alice, [['e', note.id]]);
    await publishOk(del);
    expect(await client.fetch('d', { ids: [del.id] })).toEqual([del]);
    expect(await client.fetch('d', { kinds: [5], authors: [alice.pubkey] })).toEqual([del]);
    expect(await client.fetch('d', { kinds: [5], '#e': [note.id] })).toEqual([del]);
  });

  it('does not delete another author\'s event', async () => {
    const [alice, mallory] = [newSigner(), newSigner()];
    const note = alice.sign({ created_at: T });
    await publishOk(note);
    await publishOk(deletion(mallory, [['e', note.id]]));
    expect(await client.fetch('d', { ids: [note.id] })).toEqual([note]);
  });

  it('does not let another author block an event before it is published', async () => {
    const [alice, mallory] = [newSigner(), newSigner()];
    const note = alice.sign({ created_at: T });
    await publishOk(deletion(mallory, [['e', note.id]]));
    await publishOk(note);
    expect(await client.fetch('d', { ids: [note.id] })).toEqual([note]);
  });

  it('a deleted event published again is refused with "blocked:" and not served', async () => {
    const alice = newSigner();
    const note = alice.sign({ created_at: T });
    await publishOk(note);
    await publishOk(deletion(alice, [['e', note.id]]));
    expect(await client.publish(note)).toEqual([false, BLOCKED]);
    expect(await client.fetch('d', { ids: [note.id] })).toEqual([]);
  });

  it('an event whose deletion arrived first is refused with "blocked:"', async () => {
    const alice = newSigner();
    const note = alice.sign({ created_at: T });
    await publishOk(deletion(alice, [['e', note.id]]));
    expect(await client.publish(note)).toEqual([false, BLOCKED]);
    expect(await client.fetch('d', { ids: [note.id] })).toEqual([]);
  });

  it('a kind 5 cannot delete a kind 5', async () => {
    const alice = newSigner();
    const note = alice.sign({ created_at: T });
    await publishOk(note);
    const first = deletion(alice, [['e', note.id]], T + 1);
    await publishOk(first);
    await publishOk(deletion(alice, [['e', first.id]], T + 2));
    expect(await client.fetch('d', { ids: [first.id] })).toEqual([first]);
    expect(await client.fetch('d', { ids: [note.id] })).toEqual([]); // the first request is still in force
  });

  it('the deletion request is broadcast live, and later queries no longer return the deleted event', async () => {
    const alice = newSigner();
    const watcher = await TestClient.connect(relay.url);
    const note = alice.sign({ created_at: T });
    await publishOk(note);
    const del = deletion(alice, [['e', note.id]]);
    await watcher.query('w', { authors: [alice.pubkey] });
    await publishOk(del);
    await watcher.sync();
    expect(watcher.liveEvents('w')).toEqual([del]); // the request itself is broadcast
    expect(await watcher.fetch('again', { authors: [alice.pubkey] })).toEqual([del]);
    watcher.close();
  });
});

describe('deletion by a tag', () => {
  const kind = 30023;
  const address = (s: Signer, d: string) => `${kind}:${s.pubkey}:${d}`;

  it('deletes the stored version when it is not newer than the request', async () => {
    const alice = newSigner();
    const v = alice.sign({ kind, created_at: T, tags: [['d', 'post']] });
    await publishOk(v);
    await publishOk(deletion(alice, [['a', address(alice, 'post')]], T + 5));
    expect(await client.fetch('d', { authors: [alice.pubkey], kinds: [kind] })).toEqual([]);
    expect(await rows('events', v.id)).toBe(0);
  });

  it('deletes a version with exactly the request\'s created_at', async () => {
    const alice = newSigner();
    const v = alice.sign({ kind, created_at: T + 5, tags: [['d', 'post']] });
    await publishOk(v);
    await publishOk(deletion(alice, [['a', address(alice, 'post')]], T + 5));
    expect(await client.fetch('d', { authors: [alice.pubkey], kinds: [kind] })).toEqual([]);
  });

  it('keeps a stored version newer than the request', async () => {
    const alice = newSigner();
    const newer = alice.sign({ kind, created_at: T + 10, tags: [['d', 'post']] });
    await publishOk(newer);
    await publishOk(deletion(alice, [['a', address(alice, 'post')]], T + 5));
    expect(await client.fetch('d', { authors: [alice.pubkey], kinds: [kind] })).toEqual([newer]);
  });

  it('refuses a version not newer than the request with "blocked:", and accepts a newer one', async () => {
    const alice = newSigner();
    await publishOk(deletion(alice, [['a', address(alice, 'post')]], T + 5));
    expect(await client.publish(alice.sign({ kind, created_at: T + 5, tags: [['d', 'post']] }))).toEqual([false, BLOCKED]);
    const newer = alice.sign({ kind, created_at: T + 6, tags: [['d', 'post']] });
    await publishOk(newer);
    expect(await client.fetch('d', { authors: [alice.pubkey], kinds: [kind] })).toEqual([newer]);
  });

  it('touches only the named d value', async () => {
    const alice = newSigner();
    const keep = alice.sign({ kind, created_at: T, tags: [['d', 'keep']] });
    await publishOk(keep);
    await publishOk(alice.sign({ kind, created_at: T, tags: [['d', 'drop']] }));
    await publishOk(deletion(alice, [['a', address(alice, 'drop')]], T + 5));
    expect(await client.fetch('d', { authors: [alice.pubkey], kinds: [kind] })).toEqual([keep]);
  });

  it('deletes a normal replaceable event named "kind:pubkey:" (empty d)', async () => {
    const alice = newSigner();
    await publishOk(alice.sign({ kind: 10002, created_at: T }));
    await publishOk(deletion(alice, [['a', `10002:${alice.pubkey}:`]], T + 5));
    expect(await client.fetch('d', { authors: [alice.pubkey], kinds: [10002] })).toEqual([]);
  });

  it('does not delete another author\'s address', async () => {
    const [alice, mallory] = [newSigner(), newSigner()];
    const v = alice.sign({ kind, created_at: T, tags: [['d', 'post']] });
    await publishOk(v);
    await publishOk(deletion(mallory, [['a', address(alice, 'post')]], T + 5));
    expect(await client.fetch('d', { authors: [alice.pubkey], kinds: [kind] })).toEqual([v]);
    // nor block its re-publication
    const v2 = alice.sign({ kind, created_at: T + 1, tags: [['d', 'post']] });
    await publishOk(v2);
  });
});

describe('an event and its deletion published at the same time', () => {
  /** 30 pairs, each event and its deletion sent at once on two connections: whichever commits first, the event ends up deleted. */
  async function race(make: (s: Signer) => { target: NostrEvent; del: NostrEvent }): Promise<void> {
    const pairs = Array.from({ length: 30 }, () => make(newSigner()));
    const [c1, c2] = await Promise.all([TestClient.connect(relay.url), TestClient.connect(relay.url)]);
    for (const { target, del } of pairs) await Promise.all([c1.publish(target), c2.publish(del)]);
    const targets = pairs.map((p) => p.target.id);
    expect(await client.fetch('race', { ids: targets })).toEqual([]);
    const { rows } = await relay.db.pool.query('SELECT count(*)::int AS n FROM events WHERE id = ANY($1::bytea[])', [targets.map((id) => Buffer.from(id, 'hex'))]);
    expect(rows[0].n).toBe(0);
    c1.close();
    c2.close();
  }

  it('by e tag: the event ends up deleted', async () => {
    await race((s) => {
      const target = s.sign({ created_at: T });
      return { target, del: deletion(s, [['e', target.id]]) };
    });
  });

  it('by a tag: the event ends up deleted', async () => {
    await race((s) => {
      const target = s.sign({ kind: 30023, created_at: T, tags: [['d', 'post']] });
      return { target, del: deletion(s, [['a', `30023:${s.pubkey}:post`]]) };
    });
  });
});

describe('NIP-59 gift wraps', () => {
  it('the recipient named in a wrap\'s p tag can delete it', async () => {
    const [recipient, throwaway] = [newSigner(), newSigner()];
    const wrap = throwaway.sign({ kind: 1059, created_at: T, tags: [['p', recipient.pubkey]] });
    await publishOk(wrap);
    await publishOk(deletion(recipient, [['e', wrap.id]]));
    expect(await client.fetch('d', { ids: [wrap.id] })).toEqual([]);
  });

  it('a wrap arriving after its recipient\'s deletion request is refused, as the author\'s own event would be', async () => {
    const [recipient, throwaway] = [newSigner(), newSigner()];
    const wrap = throwaway.sign({ kind: 1059, created_at: T, tags: [['p', recipient.pubkey]] });
    await publishOk(deletion(recipient, [['e', wrap.id]]));
    expect(await client.publish(wrap)).toEqual([false, BLOCKED]);
    expect(await client.fetch('d2', { ids: [wrap.id] })).toEqual([]);
  });
});
