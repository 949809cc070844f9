// NIP-45 HyperLogLog: COUNT replies carry the 256 registers of the matching events' authors, computed
// in SQL, equal to what nostr-tools' nip45 helpers compute from the same events, for the canonical
// queries (reactions, reposts, replies, quotes, comments, followers) and offsets from ids, addresses
// and other values; none when the filters have no tag key or disagree on the offset.
import { computeOffset, estimateCount, feedEvent, getFilterFirstTagValue, hllEncode, newHll } from 'nostr-tools/nip45';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { hllOffset } from '../../src/nostr/hll.js';
import { TestClient } from '../support/client.js';
import { newSigner, type Signer } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let relay: TestRelay;
let client: TestClient;
beforeAll(async () => {
  relay = await startTestRelay();
  client = await TestClient.connect(relay.url);
});
afterAll(async () => {
  client?.close();
  await relay?.close();
});

const signers: Signer[] = Array.from({ length: 60 }, () => newSigner());
/** The COUNT reply's object for `filters`. */
const countReply = (...filters: object[]) => client.countReply(`c${Math.random().toString(36).slice(2, 8)}`, ...filters);

/** What a client computes from the events themselves (nostr-tools). */
function expectedHll(filter: Record<string, unknown>, events: NostrEvent[]): string {
  const offset = computeOffset(getFilterFirstTagValue(filter as never)!);
  let hll = newHll();
  for (const e of events) hll = feedEvent(hll, e as never, offset);
  return hllEncode(hll);
}

async function publishAll(events: NostrEvent[]): Promise<void> {
  for (const e of events) expect(await client.publish(e)).toEqual([true, '']);
}

describe('NIP-45 HyperLogLog', () => {
  const target = newSigner().sign({ content: 'the note everyone reacts to' });
  const article = `30023:${signers[0].pubkey}:my-article`;

  it('agrees with nostr-tools on every canonical query', async () => {
    await publishAll([target]);
    const reactions = signers.map((s) => s.sign({ kind: 7, content: '+', tags: [['e', target.id]] }));
    // Several reactions by the same authors: counted as events, one author each in the sketch.
    const again = signers.slice(0, 10).map((s) => s.sign({ kind: 7, content: '🔥', tags: [['e', target.id]] }));
    const reposts = signers.slice(0, 20).map((s) => s.sign({ kind: 6, tags: [['e', target.id]] }));
    const replies = signers.slice(5, 35).map((s) => s.sign({ kind: 1, content: 'reply', tags: [['e', target.id]] }));
    const quotes = signers.slice(0, 12).map((s, i) => s.sign({ kind: i % 2 ? 1 : 1111, content: 'quote', tags: [['q', target.id]] }));
    const comments = signers.slice(30).map((s) => s.sign({ kind: 1111, content: 'comment', tags: [['E', target.id]] }));
    const followers = signers.slice(0, 40).map((s) => s.sign({ kind: 3, tags: [['p', target.pubkey]] }));
    const onArticle = signers.slice(0, 25).map((s) => s.sign({ kind: 7, tags: [['a', article]] }));
    const hashtag = signers.slice(0, 33).map((s) => s.sign({ kind: 1, tags: [['t', 'nostr']] }));
    await publishAll([...reactions, ...again, ...reposts, ...replies, ...quotes, ...comments, ...followers, ...onArticle, ...hashtag]);

    const cases: Array<[Record<string, unknown>, NostrEvent[]]> = [
      [{ '#e': [target.id], kinds: [7] }, [...reactions, ...again]],
      [{ '#e': [target.id], kinds: [6] }, reposts],
      [{ '#e': [target.id], kinds: [1] }, replies],
      [{ '#q': [target.id], kinds: [1, 1111] }, quotes],
      [{ '#E': [target.id], kinds: [1111] }, comments],
      [{ '#p': [target.pubkey], kinds: [3] }, followers],
      [{ '#a': [article], kinds: [7] }, onArticle], // offset from the address's pubkey
      [{ '#t': ['nostr'] }, hashtag], // offset from sha256 of the value
    ];
    for (const [filter, events] of cases) {
      const reply = await countReply(filter);
      expect(reply.count).toBe(events.length);
      expect(reply.hll).toMatch(/^[0-9a-f]{512}$/);
      expect(reply.hll).toBe(expectedHll(filter, events));
    }
    const reactionsReply = await countReply({ '#e': [target.id], kinds: [7] });
    expect(estimateCount(Uint8Array.from(Buffer.from(reactionsReply.hll!, 'hex')))).toBeGreaterThan(40);
  });

  it('uses the first #tag key in JSON order and its first value, as sent', async () => {
    const filter = { kinds: [7], '#p': [signers[1].pubkey, target.pubkey], '#e': [target.id] };
    expect(hllOffset(signers[1].pubkey)).toBe(computeOffset(signers[1].pubkey));
    const reply = await countReply(filter);
    expect(reply.hll).toBe(expectedHll(filter, [])); // nothing matches both: all registers zero
    expect(reply.hll).toBe('0'.repeat(512));
  });

  it('leaves hll out without a tag key, and when the filters disagree on the offset', async () => {
    expect(await countReply({ kinds: [7] })).toEqual({ count: expect.any(Number) });
    const other = newSigner().sign({ content: 'other' });
    // Two filters with the same offset get one sketch over the union.
    const sameOffset = signers.find((s) => hllOffset(s.pubkey) === hllOffset(target.id) && s.pubkey !== target.pubkey);
    if (sameOffset) expect((await countReply({ '#e': [target.id], kinds: [7] }, { '#e': [sameOffset.pubkey], kinds: [7] })).hll).toMatch(/^[0-9a-f]{512}$/);
    const differentOffset = [other.id, ...signers.map((s) => s.pubkey)].find((v) => hllOffset(v) !== hllOffset(target.id))!;
    expect(await countReply({ '#e': [target.id], kinds: [7] }, { '#e': [differentOffset], kinds: [7] })).toEqual({ count: expect.any(Number) });
    expect(await countReply({ '#e': [target.id], kinds: [7] }, { kinds: [6] })).toEqual({ count: expect.any(Number) });
  });
});
