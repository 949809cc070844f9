// The router as a process of its own (`npm run cli -- router`) with WOT_ROOTS: what it brings down
// goes through the web as the relay keeps it, current with follow lists other processes commit.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { streamSource } from '../../src/admission/source.js';
import { parseConfig } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { openStandaloneHost, type StandaloneHost } from '../../src/ops/router/standalone.js';
import { openDatabase, type Database } from '../../src/store/database.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatchStored } from '../../src/store/write.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner, now, type Signer } from '../support/keys.js';
import { until } from '../support/wait.js';

const [root, member, stranger, newcomer] = [newSigner(), newSigner(), newSigner(), newSigner()];
let listTime = now() - 100;
const followList = (...followed: Signer[]) => root.sign({ kind: 3, created_at: listTime++, tags: followed.map((f) => ['p', f.pubkey]), content: '' });
const storeElsewhere = (e: NostrEvent) => writeBatchStored(db.pool, [prepareEvent(e)]);
const bringDown = (e: NostrEvent) => host.admission.admit(e, streamSource('wss://remote.example.com', undefined));

let db: Database;
let host: StandaloneHost;

beforeAll(async () => {
  const config = parseConfig({ DATABASE_URL: await createTestDatabase(), WOT_ROOTS: root.pubkey, LOG_LEVEL: 'silent', VERIFY_THREADS: '1' });
  const log = createLogger('silent');
  db = await openDatabase(config, log);
  await storeElsewhere(followList(member));
  host = await openStandaloneHost(config, db, log);
});
afterAll(async () => {
  await host?.close();
  await db?.close();
});

describe('the router process with a web of trust', () => {
  it("stores a member's event and refuses an outsider's", async () => {
    expect(await bringDown(member.sign({ content: 'in' }))).toMatchObject({ outcome: 'stored' });
    expect(await bringDown(stranger.sign({ content: 'out' }))).toMatchObject({ outcome: 'refused', reason: "blocked: not in this relay's web of trust" });
  });

  it('takes in a pubkey a root follows in a list another process committed', async () => {
    await storeElsewhere(followList(member, newcomer));
    await until(async () => (await bringDown(newcomer.sign({ content: 'let in?' }))).outcome === 'stored', "the newcomer's event is stored");
  });
});
