// NIP-56: what a kind 1984 report names, and with which report type.
import { describe, expect, it } from 'vitest';
import { reportTargets } from '../../src/nostr/report.js';

const note = 'a'.repeat(64);
const other = 'b'.repeat(64);
const author = 'c'.repeat(64);

describe('reportTargets', () => {
  it('names the reported notes (e tags), with the type each tag gives', () => {
    expect(reportTargets([['e', note, 'spam'], ['e', other, 'illegal'], ['p', author]])).toEqual([
      { target: 'event', id: note, type: 'spam' },
      { target: 'event', id: other, type: 'illegal' },
    ]);
  });

  it('names the pubkeys (p tags) when it names no note', () => {
    expect(reportTargets([['p', author, 'impersonation']])).toEqual([{ target: 'pubkey', id: author, type: 'impersonation' }]);
  });

  it('gives an e tag without a type the type of the x tag, else of the p tag, else other', () => {
    expect(reportTargets([['e', note], ['p', author, 'nudity']])).toEqual([{ target: 'event', id: note, type: 'nudity' }]);
    expect(reportTargets([['x', 'f'.repeat(64), 'malware'], ['e', note], ['p', author, 'spam']])).toEqual([{ target: 'event', id: note, type: 'malware' }]);
    expect(reportTargets([['e', note], ['p', author]])).toEqual([{ target: 'event', id: note, type: 'other' }]);
  });

  it('counts a type it does not know as other, whatever its case', () => {
    expect(reportTargets([['e', note, 'SPAM'], ['e', other, 'rude']])).toEqual([
      { target: 'event', id: note, type: 'spam' },
      { target: 'event', id: other, type: 'other' },
    ]);
  });

  it('ignores values that are not 64 lowercase hex, and repeats', () => {
    expect(reportTargets([['e', 'not-an-id', 'spam'], ['e', note.toUpperCase(), 'spam'], ['p', author, 'spam'], ['p', author, 'spam']])).toEqual([
      { target: 'pubkey', id: author, type: 'spam' },
    ]);
    expect(reportTargets([['t', 'spam']])).toEqual([]);
  });
});
