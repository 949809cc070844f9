// NIP-01 wire messages: parsing what a client sends and encoding what the relay sends.
import * as reason from './reason.js';

export type ClientMessage =
  | { type: 'EVENT'; event: unknown }
  | { type: 'REQ'; subId: string; filters: unknown[] }
  | { type: 'COUNT'; subId: string; filters: unknown[] }
  | { type: 'CLOSE'; subId: string }
  | { type: 'AUTH'; event: unknown }
  | { type: 'NEG-OPEN'; subId: string; filter: unknown; message: string }
  | { type: 'NEG-MSG'; subId: string; message: string }
  | { type: 'NEG-CLOSE'; subId: string };

export type ParsedMessage = { ok: true; message: ClientMessage } | { ok: false; notice: string };

const fail = (notice: string): ParsedMessage => ({ ok: false, notice });

/** Parses one text frame. Anything malformed becomes a NOTICE reason; nothing here throws. */
export function parseClientMessage(text: string): ParsedMessage {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    return fail(reason.invalid('message is not valid JSON'));
  }
  if (!Array.isArray(data) || typeof data[0] !== 'string')
    return fail(reason.invalid('message must be a JSON array starting with a string'));
  const [verb, ...rest] = data;
  switch (verb) {
    case 'EVENT':
      if (rest.length !== 1) return fail(reason.invalid('EVENT takes exactly one event'));
      return { ok: true, message: { type: 'EVENT', event: rest[0] } };
    case 'REQ':
    case 'COUNT':
      if (typeof rest[0] !== 'string') return fail(reason.invalid(`${verb} needs a subscription id string`));
      return { ok: true, message: { type: verb, subId: rest[0], filters: rest.slice(1) } };
    case 'AUTH':
      if (rest.length !== 1) return fail(reason.invalid('AUTH takes exactly one event'));
      return { ok: true, message: { type: 'AUTH', event: rest[0] } };
    case 'CLOSE':
      if (typeof rest[0] !== 'string') return fail(reason.invalid('CLOSE needs a subscription id string'));
      return { ok: true, message: { type: 'CLOSE', subId: rest[0] } };
    // NIP-77 negentropy: the hex message is checked by relay/negentropy.ts, which answers NEG-ERR.
    case 'NEG-OPEN':
      if (typeof rest[0] !== 'string' || typeof rest[2] !== 'string' || rest.length !== 3)
        return fail(reason.invalid('NEG-OPEN takes a subscription id, one filter and a hex message'));
      return { ok: true, message: { type: 'NEG-OPEN', subId: rest[0], filter: rest[1], message: rest[2] } };
    case 'NEG-MSG':
      if (typeof rest[0] !== 'string' || typeof rest[1] !== 'string' || rest.length !== 2)
        return fail(reason.invalid('NEG-MSG takes a subscription id and a hex message'));
      return { ok: true, message: { type: 'NEG-MSG', subId: rest[0], message: rest[1] } };
    case 'NEG-CLOSE':
      if (typeof rest[0] !== 'string') return fail(reason.invalid('NEG-CLOSE needs a subscription id string'));
      return { ok: true, message: { type: 'NEG-CLOSE', subId: rest[0] } };
    default:
      return fail(reason.invalid(`unknown message type ${JSON.stringify(verb).slice(0, 40)}`));
  }
}

/** `raw` is the stored canonical JSON of the event: sent as is, never re-serialised. */
export function eventMessage(subId: string, raw: string): string {
  return `["EVENT",${JSON.stringify(subId)},${raw}]`;
}

export function okMessage(eventId: string, accepted: boolean, message = ''): string {
  return JSON.stringify(['OK', eventId, accepted, message]);
}

export function eoseMessage(subId: string): string {
  return JSON.stringify(['EOSE', subId]);
}

export function closedMessage(subId: string, message: string): string {
  return JSON.stringify(['CLOSED', subId, message]);
}

export function noticeMessage(text: string): string {
  return JSON.stringify(['NOTICE', text]);
}

/** NIP-42: the challenge a client signs into its AUTH event. */
export function authMessage(challenge: string): string {
  return JSON.stringify(['AUTH', challenge]);
}

/** NIP-45: the count, and the HyperLogLog registers (nostr/hll.ts) when the filters have an offset. */
export function countMessage(subId: string, count: number, hll?: string): string {
  return JSON.stringify(['COUNT', subId, hll === undefined ? { count } : { count, hll }]);
}

/** NIP-77: a negentropy message (hex) for the session `subId`. */
export function negMessage(subId: string, hex: string): string {
  return JSON.stringify(['NEG-MSG', subId, hex]);
}

/** NIP-77: the session `subId` has ended, and why (`blocked:`, `closed:`, `invalid:` …). */
export function negErrorMessage(subId: string, why: string): string {
  return JSON.stringify(['NEG-ERR', subId, why]);
}
