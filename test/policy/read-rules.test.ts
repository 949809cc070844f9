// The read rules as functions of filters and a session: which shape a filter's limit is capped by,
// which REQs a rule may narrow, and kinds hidden by two rules in either order. Their effect on a
// running relay is test/relay/read-rules.test.ts.
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { parseFilter, type Filter } from '../../src/nostr/filter.js';
import { checkRead, policyFrom } from '../../src/policy/policy.js';
import { hideKinds } from '../../src/policy/private-kinds.js';
import { limitShapeOf } from '../../src/policy/read-rules.js';
import type { Session } from '../../src/policy/session.js';

const limits = { maxValuesPerArray: 1000, defaultLimit: 500, maxLimit: 5000 };
const filter = (input: object): Filter => {
  const parsed = parseFilter(input, limits);
  if (!parsed.ok) throw new Error(parsed.reason);
  return parsed.value;
};
const hex = (c: string) => c.repeat(64);
const nobody: Session = { origin: 'connection', address: '127.0.0.1', pubkeys: new Set() };

describe('limit shapes', () => {
  it('are the first of ids, search, authors, tags, kinds a filter has, else time', () => {
    expect(limitShapeOf(filter({ ids: [hex('a')], search: 'x', authors: [hex('b')], kinds: [1] }))).toBe('ids');
    expect(limitShapeOf(filter({ search: 'x', authors: [hex('b')], '#t': ['y'] }))).toBe('search');
    expect(limitShapeOf(filter({ authors: [hex('b')], '#t': ['y'], kinds: [1] }))).toBe('authors');
    expect(limitShapeOf(filter({ '#t': ['y'], kinds: [1] }))).toBe('tags');
    expect(limitShapeOf(filter({ kinds: [1] }))).toBe('kinds');
    expect(limitShapeOf(filter({ since: 1, until: 2 }))).toBe('time');
    expect(limitShapeOf(filter({}))).toBe('time');
  });
});

describe('checkRead', () => {
  const policy = policyFrom(parseConfig({ READ_LIMIT_CAPS: 'default:10', RESTRICTED_READ_KINDS: '' }));

  it('caps limits for a REQ only, not for COUNT or NEG-OPEN', () => {
    const asked = [filter({ kinds: [1], limit: 5000 })];
    expect(checkRead(policy, asked, nobody, 'REQ')).toMatchObject({ ok: true, filters: [{ limit: 10 }], narrowedBy: ['limitCaps'] });
    expect(checkRead(policy, asked, nobody, 'COUNT')).toEqual({ ok: true, filters: asked });
    expect(checkRead(policy, asked, nobody, 'NEG-OPEN')).toEqual({ ok: true, filters: asked });
  });

  it('names the rule that refused', () => {
    const strict = policyFrom(parseConfig({ READ_REFUSE_BROAD: 'true' }));
    expect(checkRead(strict, [filter({ limit: 1 })], nobody)).toMatchObject({ ok: false, rule: 'broadFilter', reason: expect.stringMatching(/^blocked: /) });
  });
});

describe('hideKinds', () => {
  it('adds kinds to those a filter already hides, in either order', () => {
    const dms = new Set([4, 1059]);
    const articles = new Set([30023]);
    const f = filter({ authors: [hex('c')] });
    const one = hideKinds(hideKinds(f, dms, nobody.pubkeys), articles, nobody.pubkeys);
    const other = hideKinds(hideKinds(f, articles, nobody.pubkeys), dms, nobody.pubkeys);
    expect([...one.privateKinds!.kinds].sort()).toEqual([1059, 30023, 4]);
    expect([...other.privateKinds!.kinds].sort()).toEqual([1059, 30023, 4]);
    expect(one.privateKinds!.readers).toBe(nobody.pubkeys);
  });
});
