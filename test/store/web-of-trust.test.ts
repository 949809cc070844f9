// The web of trust in PostgreSQL: who is how many follows from the roots along the stored follow
// lists, and the watch that keeps one process's web current: one computation per burst of follow
// lists, and the last web kept in force while the database cannot be reached.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { WebOfTrust, type WebOfTrustSettings } from '../../src/policy/web-of-trust.js';
import { ChangeStream } from '../../src/store/changes.js';
import { prepareEvent, type PreparedEvent } from '../../src/store/prepared-event.js';
import { computeWebOfTrust, WebOfTrustWatch } from '../../src/store/web-of-trust.js';
import { writeBatchStored } from '../../src/store/write.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now, type Signer } from '../support/keys.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import { until } from '../support/wait.js';

const log = createLogger('silent');
let url: string;
let pool: pg.Pool;
let listTime = now() - 1000;

const followList = (signer: Signer, ...followed: Array<Signer | string>): NostrEvent =>
  signer.sign({ kind: 3, created_at: listTime++, content: '', tags: followed.map((f) => ['p', typeof f === 'string' ? f : f.pubkey]) });
/** Stores follow lists as the writer would, and says what it stored on `changes`, as the writer does. */
async function store(lists: NostrEvent[], changes?: ChangeStream): Promise<PreparedEvent[]> {
  const { stored } = await writeBatchStored(pool, lists.map(prepareEvent));
  changes?.publish({ type: 'stored', events: stored, source: 'local' });
  return stored;
}
const settings = (roots: Signer[], depth: number, minFollowers = 0): WebOfTrustSettings => ({ roots: roots.map((r) => r.pubkey), depth, minFollowers });
const pubkeys = (...signers: Signer[]) => new Set(signers.map((s) => s.pubkey));

beforeAll(async () => {
  url = await createTestDatabase();
  pool = new pg.Pool({ connectionString: url, max: 4 });
});
afterAll(async () => {
  await pool?.end();
});

describe('computing the web', () => {
  const [root, a, b, c] = [newSigner(), newSigner(), newSigner(), newSigner()];
  beforeAll(() => store([followList(root, a), followList(a, b, root), followList(b, c)]));

  it('holds the roots alone at depth 0, adds a follow per step, and stops at WOT_DEPTH', async () => {
    expect((await computeWebOfTrust(pool, settings([root], 0))).members).toEqual(pubkeys(root));
    expect((await computeWebOfTrust(pool, settings([root], 1))).members).toEqual(pubkeys(root, a));
    expect((await computeWebOfTrust(pool, settings([root], 2))).members).toEqual(pubkeys(root, a, b));
    expect((await computeWebOfTrust(pool, settings([root], 5))).members).toEqual(pubkeys(root, a, b, c));
  });

  it('says whose follow lists count: the members nearer the roots than WOT_DEPTH', async () => {
    expect((await computeWebOfTrust(pool, settings([root], 2))).extending).toEqual(pubkeys(root, a));
    expect((await computeWebOfTrust(pool, settings([root], 0))).extending).toEqual(new Set());
  });

  it('counts a root with no follow list, and a root followed by another, once', async () => {
    const lone = newSigner();
    const web = await computeWebOfTrust(pool, settings([root, lone, a], 1));
    expect(web.members).toEqual(pubkeys(root, lone, a, b));
  });

  it('skips p tags that are not lowercase hex pubkeys', async () => {
    const odd = newSigner();
    const d = newSigner();
    await store([followList(odd, d.pubkey.toUpperCase(), 'npub1notakey', d.pubkey.slice(1), d)]);
    expect((await computeWebOfTrust(pool, settings([odd], 1))).members).toEqual(pubkeys(odd, d));
  });

  it('follows only the current follow list of each pubkey', async () => {
    const [owner, old, current] = [newSigner(), newSigner(), newSigner()];
    await store([followList(owner, old)]);
    await store([followList(owner, current)]);
    expect((await computeWebOfTrust(pool, settings([owner], 1))).members).toEqual(pubkeys(owner, current));
  });
});

describe('keeping the web current', () => {
  it('computes once for a burst of follow lists from members', async () => {
    const [root, a, b, c] = [newSigner(), newSigner(), newSigner(), newSigner()];
    await store([followList(root, a)]);
    const changes = new ChangeStream();
    const web = new WebOfTrust(settings([root], 2));
    const watch = await new WebOfTrustWatch(web, pool, changes, log, { refreshSeconds: 3600 }).start();
    try {
      expect(watch.state()).toMatchObject({ members: 2, computations: 1 });
      // Two commits announced in one turn, as a busy relay's writer announces them.
      const first = await store([followList(a, b)]);
      const second = await store([followList(root, a, c)]);
      changes.publish({ type: 'stored', events: first, source: 'local' });
      changes.publish({ type: 'stored', events: second, source: 'local' });
      await until(() => web.has(b.pubkey) && web.has(c.pubkey), 'both new follows join the web');
      expect(watch.state()).toMatchObject({ members: 4, computations: 2, failures: 0 });
    } finally {
      await watch.stop();
    }
  });

  describe('while the database cannot be reached', () => {
    let proxy: TcpProxy;
    let proxied: pg.Pool;
    beforeAll(async () => {
      proxy = await startTcpProxy(url);
      const target = new URL(url);
      target.port = new URL(proxy.url).port;
      proxied = new pg.Pool({ connectionString: target.toString(), max: 2 });
      proxied.on('error', () => undefined);
    });
    afterAll(async () => {
      await proxied?.end();
      await proxy?.close();
    });

    it('keeps the last web in force, and computes again once the database is back', async () => {
      const [root, a, b] = [newSigner(), newSigner(), newSigner()];
      await store([followList(root, a)]);
      const changes = new ChangeStream();
      const web = new WebOfTrust(settings([root], 1));
      const watch = await new WebOfTrustWatch(web, proxied, changes, log, { refreshSeconds: 3600, delayMs: 0, retryMs: 50 }).start();
      try {
        proxy.cut();
        await store([followList(root, a, b)], changes);
        await until(() => watch.state().failures >= 1, 'a computation fails');
        expect(web.current!.members).toEqual(pubkeys(root, a));
        proxy.restore();
        await until(() => web.has(b.pubkey), 'the web is computed again');
        expect(web.current!.members).toEqual(pubkeys(root, a, b));
      } finally {
        proxy.restore();
        await watch.stop();
      }
    });
  });
});
