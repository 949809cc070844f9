// The batch planner must give every event the outcome it would get if the events were written one
// by one in arrival order: batching is invisible to clients.
import { describe, expect, it } from 'vitest';
import { DELETED_BY_AUTHOR, NEWER_VERSION_STORED, planBatch, type StoredFacts } from '../../src/store/plan-batch.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { newSigner, now } from '../support/keys.js';

const empty = (): StoredFacts => ({ existingIds: new Set(), deletedIds: new Map(), deletedAddresses: new Map(), current: new Map(), vanished: new Map() });
const alice = newSigner();
const bob = newSigner();
const t = now() - 1000;

describe('planBatch', () => {
  it('stores new regular events and answers a repeated id in the same batch as a duplicate', () => {
    const a = prepareEvent(alice.sign({ content: 'a' }));
    const b = prepareEvent(alice.sign({ content: 'b' }));
    const plan = planBatch([a, b, a], empty());
    expect(plan.results.map((r) => r.status)).toEqual(['stored', 'stored', 'duplicate']);
    expect(plan.inserts).toEqual([a, b]);
  });

  it('answers an already stored id as a duplicate', () => {
    const a = prepareEvent(alice.sign({ content: 'a' }));
    const facts = empty();
    facts.existingIds.add(a.event.id);
    expect(planBatch([a], facts).results).toEqual([{ status: 'duplicate' }]);
  });

  it('keeps only the newest of two versions of a replaceable event in one batch (older first)', () => {
    const older = prepareEvent(alice.sign({ kind: 0, created_at: t, content: 'old' }));
    const newer = prepareEvent(alice.sign({ kind: 0, created_at: t + 1, content: 'new' }));
    const plan = planBatch([older, newer], empty());
    // One by one: the older one is stored, then replaced by the newer one.
    expect(plan.results.map((r) => r.status)).toEqual(['stored', 'stored']);
    expect(plan.inserts).toEqual([newer]);
  });

  it('refuses the older of two versions when it arrives after the newer one in the same batch', () => {
    const older = prepareEvent(alice.sign({ kind: 0, created_at: t, content: 'old' }));
    const newer = prepareEvent(alice.sign({ kind: 0, created_at: t + 1, content: 'new' }));
    const plan = planBatch([newer, older], empty());
    expect(plan.results).toEqual([{ status: 'stored' }, { status: 'rejected', reason: NEWER_VERSION_STORED }]);
    expect(plan.inserts).toEqual([newer]);
  });

  it('breaks a created_at tie in a batch towards the lowest id', () => {
    const [x, y] = [alice.sign({ kind: 3, created_at: t, content: 'x' }), alice.sign({ kind: 3, created_at: t, content: 'y' })].map(prepareEvent);
    const [low, high] = x.event.id < y.event.id ? [x, y] : [y, x];
    expect(planBatch([high, low], empty()).inserts).toEqual([low]);
    expect(planBatch([low, high], empty()).results[1]).toEqual({ status: 'rejected', reason: NEWER_VERSION_STORED });
  });

  it('replaces the stored current version with a newer one from the batch', () => {
    const newer = prepareEvent(alice.sign({ kind: 10002, created_at: t + 5 }));
    const facts = empty();
    facts.current.set(`10002:${alice.pubkey}:`, { id: 'f'.repeat(64), createdAt: t });
    const plan = planBatch([newer], facts);
    expect(plan.results).toEqual([{ status: 'stored' }]);
    expect(plan.replacedIds).toEqual(['f'.repeat(64)]);
  });

  it('deletes a stored current version named by a deletion before the inserts, so an older version can take its key', () => {
    const deletion = prepareEvent(alice.sign({ kind: 5, created_at: t + 10, tags: [['e', 'f'.repeat(64)]] }));
    const older = prepareEvent(alice.sign({ kind: 10002, created_at: t - 5 }));
    const facts = empty();
    facts.current.set(`10002:${alice.pubkey}:`, { id: 'f'.repeat(64), createdAt: t });
    const plan = planBatch([deletion, older], facts);
    expect(plan.results).toEqual([{ status: 'stored' }, { status: 'stored' }]);
    expect(plan.replacedIds).toEqual(['f'.repeat(64)]);
    expect(plan.inserts.map((p) => p.event.id)).toEqual([deletion.event.id, older.event.id]);
  });

  it('keys addressable events by d tag, so different d values coexist in a batch', () => {
    const one = prepareEvent(alice.sign({ kind: 30023, tags: [['d', 'one']] }));
    const two = prepareEvent(alice.sign({ kind: 30023, tags: [['d', 'two']] }));
    expect(planBatch([one, two], empty()).inserts).toEqual([one, two]);
  });

  it('drops earlier batch events that a later deletion request of the same author names', () => {
    const note = prepareEvent(alice.sign({ content: 'oops' }));
    const deletion = prepareEvent(alice.sign({ kind: 5, tags: [['e', note.event.id]] }));
    const plan = planBatch([note, deletion], empty());
    expect(plan.results.map((r) => r.status)).toEqual(['stored', 'stored']);
    expect(plan.inserts).toEqual([deletion]);
    expect(plan.deletions[0].ids).toEqual([note.event.id]);
  });

  it('refuses an event that an earlier deletion request in the batch names', () => {
    const note = prepareEvent(alice.sign({ content: 'later' }));
    const deletion = prepareEvent(alice.sign({ kind: 5, tags: [['e', note.event.id]] }));
    expect(planBatch([deletion, note], empty()).results[1]).toEqual({ status: 'rejected', reason: DELETED_BY_AUTHOR });
  });

  it('ignores a deletion request by another author', () => {
    const note = prepareEvent(alice.sign({ content: 'mine' }));
    const deletion = prepareEvent(bob.sign({ kind: 5, tags: [['e', note.event.id]] }));
    expect(planBatch([deletion, note], empty()).inserts).toEqual([deletion, note]);
    expect(planBatch([note, deletion], empty()).inserts).toEqual([note, deletion]);
  });

  it('deletes an address only up to the request created_at: a newer version in the batch survives', () => {
    const old = prepareEvent(alice.sign({ kind: 30000, created_at: t, tags: [['d', 'list']] }));
    const deletion = prepareEvent(alice.sign({ kind: 5, created_at: t + 10, tags: [['a', `30000:${alice.pubkey}:list`]] }));
    const stale = prepareEvent(alice.sign({ kind: 30000, created_at: t + 5, tags: [['d', 'list']] }));
    const fresh = prepareEvent(alice.sign({ kind: 30000, created_at: t + 20, tags: [['d', 'list']] }));
    const plan = planBatch([old, deletion, stale, fresh], empty());
    expect(plan.results.map((r) => r.status)).toEqual(['stored', 'stored', 'rejected', 'stored']);
    expect(plan.inserts).toEqual([deletion, fresh]);
  });

  it('never lets a deletion request delete another deletion request', () => {
    const first = prepareEvent(alice.sign({ kind: 5, tags: [['e', 'a'.repeat(64)]] }));
    const second = prepareEvent(alice.sign({ kind: 5, tags: [['e', first.event.id]] }));
    expect(planBatch([first, second], empty()).inserts).toEqual([first, second]);
  });

  it('refuses an event named by a stored deletion request of its author, and only of its author', () => {
    const note = prepareEvent(alice.sign({ content: 'gone' }));
    const facts = empty();
    facts.deletedIds.set(note.event.id, new Set([bob.pubkey]));
    expect(planBatch([note], facts).results).toEqual([{ status: 'stored' }]);
    facts.deletedIds.get(note.event.id)!.add(alice.pubkey);
    expect(planBatch([note], facts).results).toEqual([{ status: 'rejected', reason: DELETED_BY_AUTHOR }]);
  });

  it("refuses a gift wrap named by its recipient's deletion earlier in the batch, as it removes one stored before", () => {
    const throwaway = newSigner();
    const wrap = prepareEvent(throwaway.sign({ kind: 1059, created_at: t, tags: [['p', bob.pubkey]] }));
    const del = prepareEvent(bob.sign({ kind: 5, created_at: t + 1, tags: [['e', wrap.event.id]] }));
    expect(planBatch([del, wrap], empty()).results).toEqual([{ status: 'stored' }, { status: 'rejected', reason: DELETED_BY_AUTHOR }]);
    // Someone neither author nor recipient cannot delete it.
    const other = prepareEvent(alice.sign({ kind: 5, created_at: t + 1, tags: [['e', wrap.event.id]] }));
    expect(planBatch([other, wrap], empty()).results.map((r) => r.status)).toEqual(['stored', 'stored']);
  });
});
