// Graceful shutdown: relay.close() while events are being published. Every event that got OK true
// is in the database afterwards (OK true means durable), and sockets are closed with 1001 (going away).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
beforeAll(async () => {
  relay = await startTestRelay();
});
afterAll(async () => {
  await relay.db.close(); // the relay itself is closed by the test
});

const oks = (c: TestClient) => c.messages.filter((m) => m[0] === 'OK') as Array<['OK', string, boolean, string]>;

describe('graceful shutdown', () => {
  it('answers in-flight writes before closing: OK true exactly for the stored events; sockets close with 1001', async () => {
    const author = newSigner();
    const publishers = await Promise.all([1, 2, 3, 4, 5].map(() => TestClient.connect(relay.url)));
    const subscriber = await TestClient.connect(relay.url);
    await subscriber.query('live', { authors: [author.pubkey] });

    // Each publisher keeps 5 events outstanding, sending the next one on every answer, so events
    // keep arriving before, during and after the shutdown starts.
    let sent = 0;
    for (const [p, c] of publishers.entries()) {
      let next = 0;
      const sendNext = () => {
        if (c.ws.readyState !== c.ws.OPEN) return;
        c.send(['EVENT', author.sign({ content: `${p}/${next++}` })]);
        sent++;
      };
      c.ws.on('message', (data) => {
        if (String(data).startsWith('["OK"')) sendNext();
      });
      for (let i = 0; i < 5; i++) sendNext();
    }
    // Shut down once every publisher has had a few answers, so writes are certainly in flight.
    await Promise.all(publishers.map((c) => c.waitFor(() => oks(c).length >= 20)));
    await relay.relay.close();

    for (const c of [...publishers, subscriber]) expect((await c.closed()).code).toBe(1001);

    const accepted = publishers.flatMap((c) => oks(c).filter((m) => m[2]).map((m) => m[1]));
    const refused = publishers.flatMap((c) => oks(c).filter((m) => !m[2]));
    expect(accepted.length).toBeGreaterThanOrEqual(15);
    for (const [, , , reason] of refused) expect(reason).toMatch(/^error: /);

    const { rows } = await relay.db.pool.query(`SELECT encode(id, 'hex') AS id FROM events WHERE pubkey = $1`, [Buffer.from(author.pubkey, 'hex')]);
    const stored = new Set(rows.map((r) => r.id));
    expect(accepted.filter((id) => !stored.has(id))).toEqual([]);
    expect(refused.filter(([, id]) => stored.has(id))).toEqual([]);
    // and nothing was stored without its OK: writes in flight at shutdown were answered first
    expect([...stored].filter((id) => !accepted.includes(id))).toEqual([]);
  });

  it('accepts no new connections afterwards', async () => {
    await expect(TestClient.connect(relay.url)).rejects.toThrow();
  });
});
