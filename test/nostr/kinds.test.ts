// NIP-01 kind classes, checked at every range boundary (protocol.md 1.5).
import { describe, expect, it } from 'vitest';
import { isAddressable, isEphemeral, isReplaceable, kindClass, type KindClass } from '../../src/nostr/kinds.js';

describe('kindClass', () => {
  it.each<[number, KindClass]>([
    [0, 'replaceable'],
    [1, 'regular'],
    [2, 'regular'],
    [3, 'replaceable'],
    [4, 'regular'],
    [5, 'regular'], // NIP-09 deletion requests are stored like regular events
    [44, 'regular'],
    [45, 'regular'], // unlisted 45..999 are regular
    [999, 'regular'],
    [1000, 'regular'],
    [9999, 'regular'],
    [10000, 'replaceable'],
    [19999, 'replaceable'],
    [20000, 'ephemeral'],
    [22242, 'ephemeral'],
    [29999, 'ephemeral'],
    [30000, 'addressable'],
    [39999, 'addressable'],
    [40000, 'regular'], // unlisted 40000..65535 are regular
    [65535, 'regular'],
  ])('classifies kind %i as %s', (kind, cls) => {
    expect(kindClass(kind)).toBe(cls);
  });
});

describe('class predicates', () => {
  it.each([0, 3, 10000, 19999])('isReplaceable(%i) alone is true', (kind) => {
    expect([isReplaceable(kind), isEphemeral(kind), isAddressable(kind)]).toEqual([true, false, false]);
  });

  it.each([20000, 29999])('isEphemeral(%i) alone is true', (kind) => {
    expect([isReplaceable(kind), isEphemeral(kind), isAddressable(kind)]).toEqual([false, true, false]);
  });

  it.each([30000, 39999])('isAddressable(%i) alone is true', (kind) => {
    expect([isReplaceable(kind), isEphemeral(kind), isAddressable(kind)]).toEqual([false, false, true]);
  });

  it.each([1, 2, 9999, 40000])('no predicate holds for regular kind %i', (kind) => {
    expect([isReplaceable(kind), isEphemeral(kind), isAddressable(kind)]).toEqual([false, false, false]);
  });
});
