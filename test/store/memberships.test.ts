// Memberships in the store: how a change of days or of the end acts on the allow list, and how a
// payment processor's requests are applied once however often they arrive.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../../src/store/database.js';
import { admitMembership, changeMembership, DAY_SECONDS } from '../../src/store/memberships.js';
import { allowPubkey, list, loadModeration } from '../../src/store/moderation.js';
import { newSigner } from '../support/keys.js';
import { openTestStore } from '../ops/helpers.js';

const NOW = 1_800_000_000;
let db: Database;
const pk = () => newSigner().pubkey;
const endOf = async (pubkey: string) => (await list.allowedPubkeys(db.pool)).find((e) => e.key === pubkey)?.expiresAt;

beforeAll(async () => {
  db = await openTestStore();
});
afterAll(async () => {
  await db?.close();
});

describe('changing a membership', () => {
  it('gives a new pubkey the days from now', async () => {
    const p = pk();
    expect(await changeMembership(db.pool, p, { days: 30 }, NOW)).toBe(NOW + 30 * DAY_SECONDS);
    expect(await endOf(p)).toBe(NOW + 30 * DAY_SECONDS);
  });

  it('adds days to the current end when it is still ahead (an early renewal loses nothing)', async () => {
    const p = pk();
    await changeMembership(db.pool, p, { until: NOW + 5 * DAY_SECONDS }, NOW);
    expect(await changeMembership(db.pool, p, { days: 30 }, NOW)).toBe(NOW + 35 * DAY_SECONDS);
  });

  it('adds days to now when the membership has expired (a late renewal starts today)', async () => {
    const p = pk();
    await changeMembership(db.pool, p, { until: NOW - 100 * DAY_SECONDS }, NOW);
    expect(await changeMembership(db.pool, p, { days: 30 }, NOW)).toBe(NOW + 30 * DAY_SECONDS);
  });

  it('keeps a membership without end without end when days are added', async () => {
    const p = pk();
    await allowPubkey(db.pool, p, 'founder');
    expect(await changeMembership(db.pool, p, { days: 30 }, NOW)).toBeNull();
    expect((await list.allowedPubkeys(db.pool)).find((e) => e.key === p)).toEqual({ key: p, reason: 'founder', expiresAt: null });
  });

  it('replaces the end with an explicit one, earlier or later', async () => {
    const p = pk();
    await changeMembership(db.pool, p, { days: 365 }, NOW);
    expect(await changeMembership(db.pool, p, { until: NOW + DAY_SECONDS }, NOW)).toBe(NOW + DAY_SECONDS);
    expect(await endOf(p)).toBe(NOW + DAY_SECONDS);
  });

  it('makes the membership one without end when the pubkey is allowed plainly', async () => {
    const p = pk();
    await changeMembership(db.pool, p, { days: 30 }, NOW);
    await allowPubkey(db.pool, p);
    expect(await endOf(p)).toBeNull();
  });

  it('keeps the reason unless a new one is given', async () => {
    const p = pk();
    await changeMembership(db.pool, p, { days: 30 }, NOW, 'paid by card');
    await changeMembership(db.pool, p, { days: 30 }, NOW);
    expect((await list.allowedPubkeys(db.pool)).find((e) => e.key === p)?.reason).toBe('paid by card');
    await changeMembership(db.pool, p, { days: 30 }, NOW, 'gift');
    expect((await list.allowedPubkeys(db.pool)).find((e) => e.key === p)?.reason).toBe('gift');
  });

  it('puts the end into the snapshot the rules read, beside the allow list', async () => {
    const p = pk();
    const q = pk();
    await changeMembership(db.pool, p, { until: NOW - 1 }, NOW);
    await allowPubkey(db.pool, q);
    const { lists } = await loadModeration(db.pool);
    expect(lists.allowedPubkeys.has(p)).toBe(true);
    expect(lists.allowedUntil.get(p)).toBe(NOW - 1);
    expect(lists.allowedPubkeys.has(q)).toBe(true);
    expect(lists.allowedUntil.has(q)).toBe(false);
  });
});

describe("a payment processor's requests", () => {
  it('are applied the first time and answered as the first when repeated', async () => {
    const p = pk();
    const request = { requestId: `webhook:${p}`, pubkey: p, change: { days: 30 }, now: NOW };
    expect(await admitMembership(db.pool, request)).toEqual({ outcome: 'applied', expiresAt: NOW + 30 * DAY_SECONDS });
    expect(await admitMembership(db.pool, { ...request, now: NOW + 60 })).toEqual({ outcome: 'repeated', expiresAt: NOW + 30 * DAY_SECONDS });
    expect(await endOf(p)).toBe(NOW + 30 * DAY_SECONDS);
  });

  it('are applied once per payment reference, whatever request carries it', async () => {
    const p = pk();
    const first = { requestId: `webhook:a-${p}`, reference: `pay-${p}`, pubkey: p, change: { days: 30 }, now: NOW };
    expect((await admitMembership(db.pool, first)).outcome).toBe('applied');
    expect(await admitMembership(db.pool, { ...first, requestId: `nip98:b-${p}` })).toEqual({ outcome: 'repeated', expiresAt: NOW + 30 * DAY_SECONDS });
    expect(await endOf(p)).toBe(NOW + 30 * DAY_SECONDS);
  });

  it('are refused as a conflict when a request id or reference comes back with another pubkey or change', async () => {
    const p = pk();
    const first = { requestId: `webhook:c-${p}`, reference: `pay-c-${p}`, pubkey: p, change: { days: 30 }, now: NOW };
    await admitMembership(db.pool, first);
    expect(await admitMembership(db.pool, { ...first, change: { days: 31 } })).toEqual({ outcome: 'conflict' });
    expect(await admitMembership(db.pool, { ...first, pubkey: pk() })).toEqual({ outcome: 'conflict' });
    expect(await admitMembership(db.pool, { ...first, requestId: `webhook:d-${p}`, change: { until: NOW + 9 } })).toEqual({ outcome: 'conflict' });
    expect(await endOf(p)).toBe(NOW + 30 * DAY_SECONDS);
  });

  it('are applied once when copies of a request arrive at the same moment', async () => {
    const p = pk();
    const request = { requestId: `webhook:e-${p}`, pubkey: p, change: { days: 30 }, now: NOW };
    const outcomes = await Promise.all(Array.from({ length: 8 }, () => admitMembership(db.pool, request)));
    expect(outcomes.filter((o) => o.outcome === 'applied')).toHaveLength(1);
    expect(outcomes.filter((o) => o.outcome === 'repeated')).toHaveLength(7);
    expect(await endOf(p)).toBe(NOW + 30 * DAY_SECONDS);
  });

  it('each add their days: two payments, two months', async () => {
    const p = pk();
    await admitMembership(db.pool, { requestId: `webhook:f1-${p}`, pubkey: p, change: { days: 30 }, now: NOW });
    expect(await admitMembership(db.pool, { requestId: `webhook:f2-${p}`, pubkey: p, change: { days: 30 }, now: NOW + 10 })).toEqual({
      outcome: 'applied',
      expiresAt: NOW + 60 * DAY_SECONDS,
    });
  });
});
