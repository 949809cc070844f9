// NIP-01 wire messages: what a client may send, and the exact shape of what the relay sends.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  authMessage, closedMessage, countMessage, eoseMessage, eventMessage, noticeMessage, okMessage, parseClientMessage,
} from '../../src/nostr/messages.js';

const parse = (message: unknown) => parseClientMessage(typeof message === 'string' ? message : JSON.stringify(message));

describe('parseClientMessage', () => {
  it('reads ["EVENT", event]', () => {
    expect(parse(['EVENT', { id: 'x' }])).toEqual({ ok: true, message: { type: 'EVENT', event: { id: 'x' } } });
  });

  it('passes an EVENT payload on unchecked, for the event parser to judge', () => {
    expect(parse(['EVENT', 42])).toEqual({ ok: true, message: { type: 'EVENT', event: 42 } });
  });

  it.each([
    ['no event', ['EVENT']],
    ['two events', ['EVENT', {}, {}]],
  ])('refuses EVENT with %s', (_, message) => {
    expect(parse(message)).toEqual({ ok: false, notice: 'invalid: EVENT takes exactly one event' });
  });

  it.each(['REQ', 'COUNT'] as const)('reads [%s, id, ...filters]', (verb) => {
    expect(parse([verb, 'sub', { kinds: [1] }, { limit: 1 }])).toEqual({
      ok: true,
      message: { type: verb, subId: 'sub', filters: [{ kinds: [1] }, { limit: 1 }] },
    });
  });

  it.each(['REQ', 'COUNT'] as const)('reads %s without filters, leaving the refusal to the connection', (verb) => {
    expect(parse([verb, 'sub'])).toEqual({ ok: true, message: { type: verb, subId: 'sub', filters: [] } });
  });

  it.each(['REQ', 'COUNT'] as const)('passes an empty %s id on, for the connection to refuse with CLOSED', (verb) => {
    expect(parse([verb, '', {}])).toMatchObject({ ok: true, message: { subId: '' } });
  });

  it.each([
    ['REQ', 'a number', ['REQ', 1, {}]],
    ['REQ', 'null', ['REQ', null, {}]],
    ['REQ', 'missing', ['REQ']],
    ['COUNT', 'an object', ['COUNT', {}, {}]],
    ['COUNT', 'missing', ['COUNT']],
  ])('refuses %s whose subscription id is %s', (verb, _, message) => {
    expect(parse(message)).toEqual({ ok: false, notice: `invalid: ${verb} needs a subscription id string` });
  });

  it('reads ["CLOSE", id]', () => {
    expect(parse(['CLOSE', 'sub'])).toEqual({ ok: true, message: { type: 'CLOSE', subId: 'sub' } });
  });

  it.each([
    ['missing', ['CLOSE']],
    ['a number', ['CLOSE', 1]],
  ])('refuses CLOSE whose id is %s', (_, message) => {
    expect(parse(message)).toEqual({ ok: false, notice: 'invalid: CLOSE needs a subscription id string' });
  });

  it('reads ["AUTH", event] (NIP-42), leaving the event to the connection', () => {
    expect(parse(['AUTH', { kind: 22242 }])).toEqual({ ok: true, message: { type: 'AUTH', event: { kind: 22242 } } });
  });

  it.each([
    ['no event', ['AUTH']],
    ['two events', ['AUTH', {}, {}]],
  ])('refuses AUTH with %s', (_, message) => {
    expect(parse(message)).toEqual({ ok: false, notice: 'invalid: AUTH takes exactly one event' });
  });

  it.each(['NEG-SYNC', 'auth', 'req', 'Event', ''])('refuses the unknown verb %j', (verb) => {
    expect(parse([verb, 'x'])).toMatchObject({ ok: false, notice: expect.stringMatching(/^invalid: unknown message type/) });
  });

  it('reads NIP-77 NEG-OPEN, NEG-MSG and NEG-CLOSE, and refuses malformed ones', () => {
    expect(parse(['NEG-OPEN', 'n', { kinds: [1] }, '61'])).toEqual({ ok: true, message: { type: 'NEG-OPEN', subId: 'n', filter: { kinds: [1] }, message: '61' } });
    expect(parse(['NEG-MSG', 'n', '61'])).toEqual({ ok: true, message: { type: 'NEG-MSG', subId: 'n', message: '61' } });
    expect(parse(['NEG-CLOSE', 'n'])).toEqual({ ok: true, message: { type: 'NEG-CLOSE', subId: 'n' } });
    for (const bad of [['NEG-OPEN', 'n', {}], ['NEG-OPEN', 'n', {}, 61], ['NEG-OPEN', 1, {}, '61'], ['NEG-MSG', 'n'], ['NEG-MSG', 'n', 5], ['NEG-CLOSE']])
      expect(parse(bad)).toMatchObject({ ok: false, notice: expect.stringMatching(/^invalid: NEG-/) });
  });

  it('keeps the notice for an unknown verb short', () => {
    const r = parse(['X'.repeat(10000)]);
    expect(!r.ok && r.notice.length).toBeLessThan(100);
  });

  it.each(['', '[', 'EVENT', '["REQ",]', '{"0":"REQ"}x'])('refuses %j, which is not JSON', (text) => {
    expect(parseClientMessage(text)).toEqual({ ok: false, notice: 'invalid: message is not valid JSON' });
  });

  it.each([
    ['an object', { 0: 'REQ' }],
    ['a string', '"REQ"'],
    ['a number', 1],
    ['null', null],
    ['an empty array', []],
    ['an array starting with a number', [1, 'sub']],
    ['an array starting with an array', [['REQ'], 'sub']],
  ])('refuses %s, which is not a verb-led array', (_, message) => {
    expect(parse(message)).toEqual({ ok: false, notice: 'invalid: message must be a JSON array starting with a string' });
  });

  it('never throws, whatever the text', () => {
    fc.assert(fc.property(fc.string({ unit: 'binary' }), (text) => void parseClientMessage(text)), { numRuns: 500 });
  });

  it('never throws on any JSON value, and answers ok or a notice', () => {
    const verb = fc.constantFrom('EVENT', 'REQ', 'COUNT', 'CLOSE', 'AUTH');
    const message = fc.oneof(fc.jsonValue(), fc.tuple(verb, fc.jsonValue()), fc.array(fc.oneof(verb, fc.jsonValue()), { maxLength: 4 }));
    fc.assert(
      fc.property(message, (m) => {
        const r = parseClientMessage(JSON.stringify(m));
        expect(r.ok ? typeof r.message.type : typeof r.notice).toBe('string');
      }),
      { numRuns: 500 },
    );
  });
});

describe('relay messages', () => {
  it('embeds the stored event JSON verbatim in EVENT', () => {
    const raw = '{"id":"x","content":"a\\u0000/\u2028"}';
    expect(eventMessage('sub', raw)).toBe(`["EVENT","sub",${raw}]`);
  });

  it('JSON-escapes the subscription id in EVENT', () => {
    expect(JSON.parse(eventMessage('a"b\\', '{}'))).toEqual(['EVENT', 'a"b\\', {}]);
  });

  it('always gives OK four elements, with "" as the default message', () => {
    expect(JSON.parse(okMessage('id', true))).toEqual(['OK', 'id', true, '']);
  });

  it('gives OK false its prefixed reason', () => {
    expect(JSON.parse(okMessage('id', false, 'invalid: bad signature'))).toEqual(['OK', 'id', false, 'invalid: bad signature']);
  });

  it('encodes EOSE', () => {
    expect(JSON.parse(eoseMessage('sub'))).toEqual(['EOSE', 'sub']);
  });

  it('encodes CLOSED with its reason', () => {
    expect(JSON.parse(closedMessage('sub', 'error: shutting down'))).toEqual(['CLOSED', 'sub', 'error: shutting down']);
  });

  it('encodes NOTICE', () => {
    expect(JSON.parse(noticeMessage('hello'))).toEqual(['NOTICE', 'hello']);
  });

  it('encodes the AUTH challenge (NIP-42)', () => {
    expect(JSON.parse(authMessage('c1'))).toEqual(['AUTH', 'c1']);
  });

  it('encodes COUNT as {"count": n} (NIP-45)', () => {
    expect(countMessage('sub', 3)).toBe('["COUNT","sub",{"count":3}]');
  });
});
