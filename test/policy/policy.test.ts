// The policy: ordered lists of small named write rules, one list for the relay and the importers.
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config.js';
import { checkRead, checkWrite, policyFrom } from '../../src/policy/policy.js';
import { importSession } from '../../src/policy/session.js';
import { parseFilter } from '../../src/nostr/filter.js';
import { newSigner, now } from '../support/keys.js';

const signer = newSigner();

describe('write rules', () => {
  it('are small named functions, checked in order: the first refusal is the answer', () => {
    const policy = policyFrom(parseConfig({ MAX_EVENT_TAGS: '1', MAX_CONTENT_LENGTH: '1' }));
    expect(policy.write.every((rule) => rule.name.length > 0)).toBe(true);
    const both = signer.sign({ tags: [['t', 'a'], ['t', 'b']], content: 'too long' });
    expect(checkWrite(policy, both, importSession, now())).toBe('invalid: more than 1 tags');
    const contentOnly = signer.sign({ content: 'too long' });
    expect(checkWrite(policy, contentOnly, importSession, now())).toBe('invalid: content longer than 1 characters');
    expect(checkWrite(policy, signer.sign({ content: 'x' }), importSession, now())).toBeUndefined();
  });

  it('add the proof-of-work rule only when a difficulty is configured', () => {
    const names = (env: Record<string, string>) => policyFrom(parseConfig(env)).write.map((r) => r.name);
    expect(names({})).not.toContain('notEnoughWork');
    expect(names({ MIN_POW_DIFFICULTY: '8' })).toContain('notEnoughWork');
  });

  it('see the session, which for an import has no connection and nobody authenticated', () => {
    expect(importSession.address).toBeUndefined();
    expect(importSession.pubkeys.size).toBe(0);
    expect(Object.isFrozen(importSession)).toBe(true);
  });
});

describe('read rules', () => {
  it('leave filters as they are when no rule narrows them', () => {
    const policy = policyFrom(parseConfig({}));
    const filter = parseFilter({ kinds: [1] }, policy.limits);
    if (!filter.ok) throw new Error(filter.reason);
    const result = checkRead({ ...policy, read: [] }, [filter.value], importSession);
    expect(result).toEqual({ ok: true, filters: [filter.value] });
  });
});
