// The machine-readable prefixes of OK and CLOSED messages (NIP-01; NIP-42 adds auth-required), one
// builder each, so every refusal the relay sends is "<prefix>: <human text>".

export const PREFIXES = ['duplicate', 'pow', 'blocked', 'rate-limited', 'invalid', 'restricted', 'mute', 'error', 'auth-required', 'unsupported', 'closed'] as const;
export type Prefix = (typeof PREFIXES)[number];
export type Reason = `${Prefix}: ${string}`;

const build =
  (prefix: Prefix) =>
  (text: string): Reason =>
    `${prefix}: ${text}`;

export const duplicate = build('duplicate');
export const pow = build('pow');
export const blocked = build('blocked');
export const rateLimited = build('rate-limited');
export const invalid = build('invalid');
export const restricted = build('restricted');
export const mute = build('mute');
export const error = build('error');
export const authRequired = build('auth-required');
export const unsupported = build('unsupported');
/** NIP-77 NEG-ERR: the relay ended a negentropy session (idle too long). */
export const closed = build('closed');

/** The prefix a reason starts with, if it is one of ours. */
export function prefixOf(reason: string): Prefix | undefined {
  const colon = reason.indexOf(':');
  const prefix = colon < 0 ? '' : reason.slice(0, colon);
  return (PREFIXES as readonly string[]).includes(prefix) ? (prefix as Prefix) : undefined;
}
