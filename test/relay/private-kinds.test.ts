// Private kinds (RESTRICTED_READ_KINDS, default 4 and 1059): DMs and gift wraps are served only to a
// connection on which their author or a p-tagged pubkey is authenticated (NIP-42), in REQ, COUNT and
// live delivery alike; a REQ that can only match private kinds asks for AUTH.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { ids, unique } from '../support/events.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

const alice = newSigner(); // sends a DM to bob
const bob = newSigner();
const carol = newSigner(); // a third party
const wrapper = newSigner(); // NIP-59: gift wraps are signed by a throwaway key

let relay: TestRelay;
const clients: TestClient[] = [];
async function connect(as?: ReturnType<typeof newSigner>): Promise<TestClient> {
  const c = await TestClient.connect(relay.url);
  clients.push(c);
  if (as) expect(await c.auth(as)).toEqual([true, '']);
  return c;
}

const dm = alice.sign({ kind: 4, tags: [['p', bob.pubkey]], content: 'ciphertext?iv=x' });
const wrap = wrapper.sign({ kind: 1059, tags: [['p', bob.pubkey]], content: 'sealed' });
const note = alice.sign({ kind: 1, content: unique('public') });

beforeAll(async () => {
  relay = await startTestRelay();
  const c = await connect(alice);
  for (const e of [dm, wrap, note]) expect(await c.publish(e)).toEqual([true, '']);
});
afterAll(async () => {
  clients.forEach((c) => c.close());
  await relay.close();
});

describe('private kinds in REQ and COUNT', () => {
  it('answers a REQ or COUNT that can only match private kinds, from nobody, with CLOSED auth-required:', async () => {
    const anonymous = await connect();
    expect(await anonymous.refused('dms', { kinds: [4] })).toMatch(/^auth-required: /);
    expect(await anonymous.refused('inbox', { kinds: [4, 1059], '#p': [bob.pubkey] })).toMatch(/^auth-required: /);
    await expect(anonymous.count('n', { kinds: [1059] })).rejects.toThrow(/CLOSED: auth-required: /);
  });

  it('leaves private events out of a broader REQ and COUNT from nobody', async () => {
    const anonymous = await connect();
    expect(ids(await anonymous.fetch('by-alice', { authors: [alice.pubkey] }))).toEqual([note.id]);
    expect(ids(await anonymous.fetch('to-bob', { '#p': [bob.pubkey] }))).toEqual([]);
    expect(await anonymous.fetch('by-id', { ids: [dm.id, wrap.id] })).toEqual([]);
    expect(await anonymous.count('n', { authors: [alice.pubkey] })).toBe(1);
    expect(await anonymous.count('n2', { ids: [dm.id, wrap.id, note.id] })).toBe(1);
  });

  it('hides them from a third party even when authenticated, however the filter asks', async () => {
    const c = await connect(carol);
    expect(await c.fetch('a', { kinds: [4] })).toEqual([]);
    expect(await c.fetch('b', { kinds: [4], '#p': [bob.pubkey] })).toEqual([]);
    expect(await c.fetch('c', { ids: [dm.id, wrap.id] })).toEqual([]);
    expect(await c.fetch('d', { kinds: [1059], authors: [wrapper.pubkey] })).toEqual([]);
    expect(await c.count('n', { kinds: [4, 1059] })).toBe(0);
  });

  it('shows a DM to its sender and to its recipient after AUTH', async () => {
    const sender = await connect(alice);
    expect(await sender.fetch('out', { kinds: [4] })).toEqual([dm]);
    expect(await sender.count('n', { kinds: [4] })).toBe(1);
    const recipient = await connect(bob);
    expect(await recipient.fetch('in', { kinds: [4], '#p': [bob.pubkey] })).toEqual([dm]);
    expect(await recipient.fetch('all', { kinds: [4] })).toEqual([dm]);
    expect(await recipient.count('n', { kinds: [4] })).toBe(1);
  });

  it('shows a gift wrap only to the pubkey in its p tag, not to the key that signed it', async () => {
    const recipient = await connect(bob);
    expect(await recipient.fetch('w', { kinds: [1059], '#p': [bob.pubkey] })).toEqual([wrap]);
    expect(await recipient.count('n', { kinds: [1059] })).toBe(1);
    const signerOnly = await connect(alice);
    expect(await signerOnly.fetch('w', { kinds: [1059] })).toEqual([]);
  });

  it('keeps each filter\'s limit when private and public kinds mix', async () => {
    const recipient = await connect(bob);
    const both = await recipient.fetch('mix', { kinds: [1, 4, 1059], limit: 2 });
    expect(both).toHaveLength(2);
    const all = await recipient.fetch('mix-all', { kinds: [1, 4, 1059] });
    expect(new Set(ids(all))).toEqual(new Set([dm.id, wrap.id, note.id]));
  });
});

describe('private kinds in live delivery', () => {
  it('delivers a new DM live to the recipient and the sender, never to a third party or nobody', async () => {
    const recipient = await connect(bob);
    const sender = await connect(alice);
    const third = await connect(carol);
    const anonymous = await connect();
    await recipient.query('live', { kinds: [4] });
    await sender.query('live', { authors: [alice.pubkey] });
    await third.query('live', { '#p': [bob.pubkey] });
    await anonymous.query('live', { authors: [alice.pubkey] });
    const fresh = alice.sign({ kind: 4, tags: [['p', bob.pubkey]], content: unique('dm') });
    expect(await sender.publish(fresh)).toEqual([true, '']);
    await recipient.waitFor((m) => m[0] === 'EVENT' && m[1] === 'live' && (m[2] as { id: string }).id === fresh.id);
    await sender.waitFor((m) => m[0] === 'EVENT' && m[1] === 'live' && (m[2] as { id: string }).id === fresh.id);
    await third.sync();
    await anonymous.sync();
    expect(third.liveEvents('live')).toEqual([]);
    expect(anonymous.liveEvents('live')).toEqual([]);
  });

  it('widens live delivery when the recipient authenticates after subscribing', async () => {
    const c = await connect();
    await c.query('live', { authors: [alice.pubkey] });
    expect(await c.auth(bob)).toEqual([true, '']);
    const publisher = await connect(alice);
    const fresh = alice.sign({ kind: 4, tags: [['p', bob.pubkey]], content: unique('dm') });
    expect(await publisher.publish(fresh)).toEqual([true, '']);
    await c.waitFor((m) => m[0] === 'EVENT' && m[1] === 'live' && (m[2] as { id: string }).id === fresh.id);
  });
});

describe('RESTRICTED_READ_KINDS', () => {
  it('= (empty) serves every kind to everyone, as before', async () => {
    const open = await startTestRelay({ RESTRICTED_READ_KINDS: '' });
    try {
      const c = await TestClient.connect(open.url);
      expect(await c.publish(dm)).toEqual([true, '']);
      expect(await c.fetch('dms', { kinds: [4] })).toEqual([dm]);
      c.close();
    } finally {
      await open.close();
    }
  });

  it('makes other kinds private when listed (here 30078, app data)', async () => {
    const custom = await startTestRelay({ RESTRICTED_READ_KINDS: '30078' });
    try {
      const c = await TestClient.connect(custom.url);
      expect(await c.auth(alice)).toEqual([true, '']);
      const data = alice.sign({ kind: 30078, tags: [['d', 'settings']], content: '{}' });
      expect(await c.publish(data)).toEqual([true, '']);
      expect(await c.publish(dm)).toEqual([true, '']);
      const other = await TestClient.connect(custom.url);
      expect(await other.fetch('dms', { kinds: [4] })).toEqual([dm]);
      expect(await other.refused('app', { kinds: [30078] })).toMatch(/^auth-required: /);
      expect(await c.fetch('app', { kinds: [30078] })).toEqual([data]);
      c.close();
      other.close();
    } finally {
      await custom.close();
    }
  });
});
