// The stream of committed changes: a committed batch announces exactly what it newly stored (no
// duplicate, nothing refused, nothing it replaced or deleted itself), in arrival order, after the
// commit; ephemeral events pass through; a failing listener does not starve the others.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChangeStream, type Change } from '../../src/store/changes.js';
import type { Database } from '../../src/store/database.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatchStored } from '../../src/store/write.js';
import { EventWriter } from '../../src/store/writer.js';
import { newSigner } from '../support/keys.js';
import { openTestStore, silentLog } from '../ops/helpers.js';

const alice = newSigner();
let db: Database;
beforeAll(async () => {
  db = await openTestStore();
});
afterAll(() => db?.close());

const ids = (events: Array<{ event: { id: string } }>) => events.map((p) => p.event.id);

describe('writeBatchStored', () => {
  it('names the events the batch newly stored, in arrival order', async () => {
    const [a, b] = [alice.sign({ content: 'a' }), alice.sign({ content: 'b' })];
    const { stored } = await writeBatchStored(db.pool, [a, b].map(prepareEvent));
    expect(ids(stored)).toEqual([a.id, b.id]);
  });

  it('leaves out duplicates, refused events, a version the batch replaced, and an event it deleted', async () => {
    const old = alice.sign({ content: 'old' });
    await writeBatchStored(db.pool, [prepareEvent(old)]);
    const v1 = alice.sign({ kind: 0, created_at: 1000, content: 'v1' });
    const v2 = alice.sign({ kind: 0, created_at: 2000, content: 'v2' });
    const stale = alice.sign({ kind: 0, created_at: 500, content: 'stale' });
    const doomed = alice.sign({ content: 'doomed' });
    const deletion = alice.sign({ kind: 5, tags: [['e', doomed.id]] });
    const { results, stored } = await writeBatchStored(db.pool, [old, v1, v2, stale, doomed, deletion].map(prepareEvent));
    expect(results.map((r) => r.status)).toEqual(['duplicate', 'stored', 'stored', 'rejected', 'stored', 'stored']);
    expect(ids(stored)).toEqual([v2.id, deletion.id]);
  });
});

describe('ChangeStream', () => {
  it('announces after the current turn, and a failing listener does not keep the change from the others', async () => {
    const errors: unknown[] = [];
    const stream = new ChangeStream((err) => errors.push(err));
    const seen: Change[] = [];
    stream.subscribe(() => {
      throw new Error('listener bug');
    });
    stream.subscribe((c) => seen.push(c));
    const change: Change = { type: 'ephemeral', event: prepareEvent(alice.sign({ kind: 20001 })), source: 'local' };
    stream.publish(change);
    expect(seen).toEqual([]); // not synchronously: the publisher's OK goes first
    await new Promise((r) => setImmediate(r));
    expect(seen).toEqual([change]);
    expect(errors).toHaveLength(1);
  });

  it('is told by the writer what each committed batch stored, after the writers\' promises settle', async () => {
    const stream = new ChangeStream();
    const writer = new EventWriter(db.pool, silentLog, { changes: stream });
    const order: string[] = [];
    stream.subscribe((c) => order.push(`change:${c.type === 'stored' ? c.events.length : 'e'}`));
    const events = [alice.sign({ content: 'w1' }), alice.sign({ content: 'w2' })];
    await Promise.all(events.map((e) => writer.submit(prepareEvent(e)).then(() => order.push('ok'))));
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual(['ok', 'ok', 'change:2']);
    const dup = await writer.submit(prepareEvent(events[0]));
    expect(dup.status).toBe('duplicate');
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual(['ok', 'ok', 'change:2']); // nothing new was stored: nothing announced
  });
});
