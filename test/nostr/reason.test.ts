// Reply reasons (NIP-01 OK/CLOSED prefixes; NIP-42 adds auth-required): one builder per prefix.
import { describe, expect, it } from 'vitest';
import * as reason from '../../src/nostr/reason.js';

describe('reply reasons', () => {
  it('builds "<prefix>: <text>" for every prefix', () => {
    expect(reason.invalid('bad')).toBe('invalid: bad');
    expect(reason.rateLimited('slow down')).toBe('rate-limited: slow down');
    expect(reason.authRequired('log in')).toBe('auth-required: log in');
    expect(reason.restricted('not you')).toBe('restricted: not you');
    expect(reason.blocked('no')).toBe('blocked: no');
  });

  it('reads the prefix back, and nothing from text that does not start with one', () => {
    expect(reason.prefixOf('auth-required: we need to know who you are')).toBe('auth-required');
    expect(reason.prefixOf('duplicate: already have this event')).toBe('duplicate');
    expect(reason.prefixOf('something: else')).toBeUndefined();
    expect(reason.prefixOf('no colon')).toBeUndefined();
  });
});
