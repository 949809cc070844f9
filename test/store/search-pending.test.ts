import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.js';
import { ChangeStream } from '../../src/store/changes.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { SearchIndexMerger } from '../../src/store/search-pending.js';
import { EventWriter } from '../../src/store/writer.js';
import { createTestDatabase } from '../support/database.js';
import { newSigner } from '../support/keys.js';
import { until } from '../support/wait.js';

let pool: pg.Pool;
const log = createLogger('silent');
beforeAll(async () => {
  pool = new pg.Pool({ connectionString: await createTestDatabase(), max: 4 });
});
afterAll(async () => {
  await pool.end();
});

/** Pages of the pending list merged by this call: 0 when nothing was pending. */
const mergeNow = async () => Number((await pool.query("SELECT gin_clean_pending_list('events_search'::regclass) AS pages")).rows[0].pages);

function writerWithMerger() {
  const changes = new ChangeStream();
  const merger = new SearchIndexMerger(pool, log);
  changes.subscribe((change) => merger.observe(change));
  return { writer: new EventWriter(pool, log, { changes }), merger };
}

describe('the search index pending list', () => {
  it('is left to the relay: the index merges it itself only past 16 MB', async () => {
    const { rows } = await pool.query("SELECT reloptions FROM pg_class WHERE relname = 'events_search'");
    expect(rows[0].reloptions).toContain('gin_pending_list_limit=16384');
  });

  it('grows with searchable events stored by a writer nobody merges for', async () => {
    const alice = newSigner();
    const writer = new EventWriter(pool, log);
    await Promise.all(Array.from({ length: 50 }, (_, i) => writer.submit(prepareEvent(alice.sign({ content: `unmerged words ${i}` })))));
    expect(await mergeNow()).toBeGreaterThan(0);
  });

  it('is merged beside the writer once 4,000 searchable events are stored, with nothing left pending', async () => {
    const bob = newSigner();
    const { writer, merger } = writerWithMerger();
    const events = Array.from({ length: 4000 }, (_, i) => prepareEvent(bob.sign({ content: `word${i} another${i % 97} text`, created_at: 1_700_000_000 + i })));
    await Promise.all(events.map((p) => writer.submit(p)));
    await until(() => merger.stats.merges >= 1, 'a merge');
    await merger.stop();
    expect(await mergeNow()).toBe(0);
    const found = await pool.query("SELECT count(*)::int AS n FROM events WHERE search @@ 'word3999'::tsquery");
    expect(found.rows[0].n).toBe(1);
  });

  it('is merged after a few searchable events too, a second after the first', async () => {
    const carol = newSigner();
    const { writer, merger } = writerWithMerger();
    await Promise.all([1, 2, 3].map((i) => writer.submit(prepareEvent(carol.sign({ content: `a few words ${i}` })))));
    await until(() => merger.stats.merges >= 1, 'a merge');
    await merger.stop();
    expect(await mergeNow()).toBe(0);
  });

  it('is not merged for events without words to index', async () => {
    const dave = newSigner();
    const { writer, merger } = writerWithMerger();
    await Promise.all([1, 2, 3].map((i) => writer.submit(prepareEvent(dave.sign({ kind: 7, content: '+', tags: [['e', String(i).repeat(64)]] })))));
    await writer.drain();
    await new Promise((r) => setImmediate(r));
    await merger.stop();
    expect(merger.stats.merges).toBe(0);
  });
});
