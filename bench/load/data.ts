// Data the k6 scripts load (k6 cannot sign BIP-340 or reach the database): the REQ mix drawn from
// the seeded corpus' manifest, signed events for the publish scenario (cached and extended on
// demand, since signing costs ~0.1–1 ms each) and the scheduled events of the fanout scenario.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import * as secp from 'tiny-secp256k1';
import { canonicalEventJson, computeEventId, type NostrEvent } from '../../src/nostr/event.js';
import { words, type Manifest } from '../lib/corpus.js';
import { prng } from '../lib/random.js';
import { queryShapes } from '../lib/shapes.js';

/** The mix the issue asks for: feed by authors, #p mentions, thread by #e, profiles, hashtags. */
export const DEFAULT_QUERY_SHAPES = ['home-feed', 'seed-150p', 'thread', 'profiles', 'hashtag'];

export interface MixEntry {
  shape: string;
  /** The REQ's filters as JSON text without the surrounding brackets: k6 splices it into the message. */
  filters: string;
}

/** `count` REQs, the shapes in equal turns, each with freshly drawn values. */
export function queryMix(manifest: Manifest, shapeNames: string[], count: number, seed = 11): MixEntry[] {
  const all = queryShapes(manifest, seed);
  const shapes = shapeNames.map((name) => {
    const shape = all.find((s) => s.name === name);
    if (!shape) throw new Error(`unknown query shape ${name} (known: ${all.map((s) => s.name).join(', ')})`);
    return shape;
  });
  return Array.from({ length: count }, (_, i) => {
    const shape = shapes[i % shapes.length];
    return { shape: shape.name, filters: JSON.stringify(shape.filters()).slice(1, -1) };
  });
}

export interface Signer {
  pubkey: string;
  sign(unsigned: Omit<NostrEvent, 'id' | 'sig' | 'pubkey'>): NostrEvent;
}

/** A deterministic key (from a label), so the load-test authors are recognisable and removable. */
export function signer(label: string): Signer {
  const secret = createHash('sha256').update(`pgrelay-load:${label}`).digest();
  const pubkey = Buffer.from(secp.xOnlyPointFromScalar(secret)).toString('hex');
  return {
    pubkey,
    sign(u) {
      const unsigned = { pubkey, ...u };
      const id = computeEventId(unsigned);
      const sig = Buffer.from(secp.signSchnorr(Buffer.from(id, 'hex'), secret, createHash('sha256').update(id).digest())).toString('hex');
      return { id, ...unsigned, sig };
    },
  };
}

export const PUBLISH_AUTHORS = 200;
export const publishSigners = (): Signer[] => Array.from({ length: PUBLISH_AUTHORS }, (_, i) => signer(`publisher-${i}`));

/**
 * Kind-1 notes of about 1 KB (the size of the perf-notes ingest figures) with a `p`, a `t` and,
 * for every other note, an `e` tag: each message is the complete `["EVENT",{…}]` text, with the
 * id first so k6 can read it at a fixed offset.
 */
export function publishMessages(from: number, count: number, createdAt: number, signers = publishSigners()): string[] {
  const random = prng(1000 + from);
  const out: string[] = [];
  for (let i = from; i < from + count; i++) {
    const author = signers[i % signers.length];
    const tags = [['p', signers[(i * 7 + 3) % signers.length].pubkey], ['t', `loadtest${i % 20}`]];
    if (i % 2 === 1) tags.push(['e', createHash('sha256').update(`target:${i >> 4}`).digest('hex')]);
    const event = author.sign({ kind: 1, created_at: createdAt, tags, content: `load test note ${i}: ${words(random, 800)}` });
    out.push(`["EVENT",${canonicalEventJson(event)}]`);
  }
  return out;
}

/** The publish cache: a JSON array of EVENT messages, extended (never rewritten) when a run needs more. */
export async function ensurePublishEvents(file: string, needed: number, say: (s: string) => void): Promise<number> {
  let messages: string[] = existsSync(file) ? JSON.parse(await readFile(file, 'utf8')) : [];
  if (messages.length >= needed) return messages.length;
  const missing = needed - messages.length;
  say(`signing ${missing} events for the publish scenario (cached in ${file})…`);
  const started = Date.now();
  // Created "now": accepted by any CREATED_AT_PAST_SECONDS window at first use.
  messages = messages.concat(publishMessages(messages.length, missing, Math.floor(Date.now() / 1000)));
  await writeFile(file + '.tmp', JSON.stringify(messages));
  await rename(file + '.tmp', file);
  say(`signed ${missing} events in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return messages.length;
}

/**
 * The fanout scenario's events: one per 1000/rate ms for `seconds`, tagged with this run's tag (the
 * subscribers' filter) and carrying the planned send offset in their content, since a k6
 * subscriber cannot share memory with the publisher: delivery latency = arrival − (T0 + offset).
 */
export function fanoutMessages(runTag: string, rate: number, seconds: number): string[] {
  const author = signer(`fanout-${runTag}`);
  const createdAt = Math.floor(Date.now() / 1000);
  const random = prng(7);
  const count = Math.max(1, Math.round(rate * seconds));
  return Array.from({ length: count }, (_, i) => {
    const offset = Math.round((i * 1000) / rate);
    const event = author.sign({ kind: 1, created_at: createdAt, tags: [['t', runTag]], content: `fanout ${i} ${offset} ${words(random, 200)}` });
    return `["EVENT",${canonicalEventJson(event)}]`;
  });
}
