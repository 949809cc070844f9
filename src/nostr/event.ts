// A Nostr event: its shape (NIP-01 "Events and signatures"), canonical serialisation, id and signature.
// Pure functions, no I/O: the ingest path and the operator commands share them.
import { createHash } from 'node:crypto';
import { verifySchnorr } from './schnorr.js';
import { z } from 'zod';
import * as reason from './reason.js';

export const HEX64 = /^[0-9a-f]{64}$/;

/** 1 at the char code of each lowercase hex digit. */
const HEX_DIGIT = new Uint8Array(128);
for (const c of '0123456789abcdef') HEX_DIGIT[c.charCodeAt(0)] = 1;

/**
 * The bits of `digits` (at most 7) lowercase hex digits of s at `at`; any other character counts as
 * its low four bits (callers that need exactness compare the whole string after).
 */
export function hexBits(s: string, at: number, digits: number): number {
  let n = 0;
  for (let i = at; i < at + digits; i++) {
    const c = s.charCodeAt(i);
    n = (n << 4) | ((c <= 57 ? c - 48 : c - 87) & 15);
  }
  return n;
}

/**
 * HEX64.test(x) for a string, in ~40 % of the time (a table per character, not a regular
 * expression): a REQ's filters can carry thousands of ids, authors and #e/#p values.
 */
export function isHex64(x: string): boolean {
  if (x.length !== 64) return false;
  for (let i = 0; i < 64; i++) {
    const c = x.charCodeAt(i);
    if (c > 127 || HEX_DIGIT[c] === 0) return false;
  }
  return true;
}
const HEX128 = /^[0-9a-f]{128}$/;

/** A string that is not well-formed UTF-16 would hash differently in other implementations. */
const wellFormed = z.string().refine((s) => s.isWellFormed(), 'contains a lone UTF-16 surrogate');

const eventSchema = z.object({
  id: z.string().regex(HEX64, 'id must be 64 lowercase hex characters'),
  pubkey: z.string().regex(HEX64, 'pubkey must be 64 lowercase hex characters'),
  created_at: z.number().int().min(0),
  kind: z.number().int().min(0).max(65535),
  tags: z.array(z.array(wellFormed).min(1, 'a tag needs at least one element')),
  content: wellFormed,
  sig: z.string().regex(HEX128, 'sig must be 128 lowercase hex characters'),
});

export type NostrEvent = z.infer<typeof eventSchema>;

export type Checked<T> = { ok: true; value: T } | { ok: false; reason: string };

/** The id a client's EVENT claims, if it is a string: what an OK or a refusal answers to. */
export function claimedId(input: unknown): string | undefined {
  const id = (input as { id?: unknown } | null)?.id;
  return typeof id === 'string' ? id : undefined;
}

/** Shape check. Extra fields are dropped: the relay stores and serves the seven NIP-01 fields only. */
export function parseEvent(input: unknown): Checked<NostrEvent> {
  const result = eventSchema.safeParse(input);
  if (result.success) return { ok: true, value: result.data };
  const issue = result.error.issues[0];
  const where = issue.path.length ? issue.path.join('.') + ': ' : '';
  return { ok: false, reason: reason.invalid(`${where}${issue.message}`) };
}

/** NIP-01 id serialisation; JSON.stringify escapes exactly as the spec requires (protocol.md 1.2). */
export function serializeForId(e: Omit<NostrEvent, 'id' | 'sig'>): string {
  return JSON.stringify([0, e.pubkey, e.created_at, e.kind, e.tags, e.content]);
}

export function computeEventId(e: Omit<NostrEvent, 'id' | 'sig'>): string {
  return createHash('sha256').update(serializeForId(e), 'utf8').digest('hex');
}

/** BIP-340 over the 32 raw id bytes, with libsecp256k1 (schnorr.ts: native or WASM). An invalid pubkey point is a failure. */
export function verifySignature(e: NostrEvent): boolean {
  return verifySchnorr(Buffer.from(e.id, 'hex'), Buffer.from(e.pubkey, 'hex'), Buffer.from(e.sig, 'hex'));
}

export const ID_MISMATCH = reason.invalid('event id does not match the sha256 of its serialization');

/** Recomputes the id (never trusts the client's) and then checks the signature. */
export function checkIdAndSignature(e: NostrEvent): string | undefined {
  return idAndSignatureFault(e, serializeForId(e));
}

const BAD_SIGNATURE = reason.invalid('bad signature');

/** checkIdAndSignature with the id's serialisation already made (eventJsons). */
export function idAndSignatureFault(e: NostrEvent, forId: string): string | undefined {
  if (createHash('sha256').update(forId, 'utf8').digest('hex') !== e.id) return ID_MISMATCH;
  if (!verifySignature(e)) return BAD_SIGNATURE;
  return undefined;
}


/**
 * Both serialisations of an event at once, the one its id hashes (serializeForId) and the one the
 * relay stores (canonicalEventJson), from one serialisation of its tags and content, the bulk of
 * both: the ingest path needs the two for every event. The hex fields need no escaping, and the
 * integers print as JSON.stringify prints them.
 */
export function eventJsons(e: NostrEvent): { forId: string; raw: string } {
  const tags = JSON.stringify(e.tags);
  const content = JSON.stringify(e.content);
  return {
    forId: `[0,"${e.pubkey}",${e.created_at},${e.kind},${tags},${content}]`,
    raw: `{"id":"${e.id}","pubkey":"${e.pubkey}","created_at":${e.created_at},"kind":${e.kind},"tags":${tags},"content":${content},"sig":"${e.sig}"}`,
  };
}

/** An event checked and serialised by the verifier (verifier.ts): what storing it needs besides. */
export interface Verdict {
  /** The `invalid:` reason, or undefined when the id and signature are right. */
  invalid?: string;
  /** canonicalEventJson of the event, when it is valid. */
  raw?: string;
  /** Its NIP-50 words as a binary tsvector (search.ts searchBinary), null when it has none; when it is valid. */
  search?: Uint8Array | null;
}

/** The JSON the relay stores and sends back verbatim: the seven fields in a fixed order. */
export function canonicalEventJson(e: NostrEvent): string {
  return JSON.stringify({
    id: e.id,
    pubkey: e.pubkey,
    created_at: e.created_at,
    kind: e.kind,
    tags: e.tags,
    content: e.content,
    sig: e.sig,
  });
}

/** NIP-13: leading zero bits of the id. */
export function powDifficulty(id: string): number {
  let bits = 0;
  for (const ch of id) {
    const nibble = parseInt(ch, 16);
    if (nibble === 0) {
      bits += 4;
      continue;
    }
    return bits + Math.clz32(nibble) - 28;
  }
  return bits;
}
