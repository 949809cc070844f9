// NIP-01 ephemeral events (kinds 20000-29999): fanned out to live subscriptions, acknowledged with
// OK true, never stored (protocol.md 1.5).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let publisher: TestClient;
let listener: TestClient;
beforeAll(async () => {
  relay = await startTestRelay();
  publisher = await TestClient.connect(relay.url);
  listener = await TestClient.connect(relay.url);
});
afterAll(async () => {
  publisher.close();
  listener.close();
  await relay.close();
});

async function rowsFor(id: string): Promise<number> {
  const { rows } = await relay.db.pool.query('SELECT count(*)::int AS n FROM events WHERE id = $1', [Buffer.from(id, 'hex')]);
  return rows[0].n;
}

describe('ephemeral events', () => {
  it.each([20000, 21000, 29999])('kind %i is delivered live to a matching subscription and acknowledged with OK true', async (kind) => {
    const s = newSigner();
    await listener.query(`eph-${kind}`, { authors: [s.pubkey] });
    const e = s.sign({ kind, content: 'now or never' });
    const [ok] = await publisher.publish(e);
    expect(ok).toBe(true);
    await listener.sync();
    expect(listener.liveEvents(`eph-${kind}`)).toEqual([e]);
    listener.send(['CLOSE', `eph-${kind}`]);
  });

  it('is never stored: a REQ finds nothing and the events table has no row', async () => {
    const s = newSigner();
    const e = s.sign({ kind: 20001 });
    expect((await publisher.publish(e))[0]).toBe(true);
    expect(await publisher.fetch('stored?', { ids: [e.id] })).toEqual([]);
    expect(await publisher.fetch('stored?', { authors: [s.pubkey], kinds: [20001] })).toEqual([]);
    expect(await rowsFor(e.id)).toBe(0);
  });

  it('is accepted with OK true even when no one is listening', async () => {
    const e = newSigner().sign({ kind: 20002 });
    expect((await publisher.publish(e))[0]).toBe(true);
    expect(await rowsFor(e.id)).toBe(0);
  });

  it('is not delivered to subscriptions that do not match it', async () => {
    const [s, other] = [newSigner(), newSigner()];
    await listener.query('other-author', { authors: [other.pubkey] });
    await listener.query('other-kind', { authors: [s.pubkey], kinds: [20003] });
    await publisher.publish(s.sign({ kind: 20004 }));
    await listener.sync();
    expect(listener.liveEvents('other-author')).toEqual([]);
    expect(listener.liveEvents('other-kind')).toEqual([]);
    listener.send(['CLOSE', 'other-author']);
    listener.send(['CLOSE', 'other-kind']);
  });

  it('is checked like any event: a bad signature is refused and not delivered', async () => {
    const s = newSigner();
    await listener.query('bad-sig', { authors: [s.pubkey] });
    const e = s.sign({ kind: 20005 });
    const forged = { ...e, content: 'changed' };
    expect(await publisher.publish(forged)).toEqual([false, expect.stringMatching(/^invalid: /)]);
    await listener.sync();
    expect(listener.liveEvents('bad-sig')).toEqual([]);
    listener.send(['CLOSE', 'bad-sig']);
  });

  it('is delivered to a subscription opened with limit 0 and to one on the publisher\'s own connection', async () => {
    const s = newSigner();
    await listener.query('eph-l0', { kinds: [20006], authors: [s.pubkey], limit: 0 });
    await publisher.query('eph-self', { authors: [s.pubkey] });
    const e = s.sign({ kind: 20006 });
    await publisher.publish(e);
    await Promise.all([listener.sync(), publisher.sync()]);
    expect(listener.liveEvents('eph-l0')).toEqual([e]);
    expect(publisher.liveEvents('eph-self')).toEqual([e]);
    listener.send(['CLOSE', 'eph-l0']);
    publisher.send(['CLOSE', 'eph-self']);
  });
});
