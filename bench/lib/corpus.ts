// A realistic relay corpus: authors with Zipf activity, a kind mix dominated by notes, reactions
// and reposts, replies and reactions that follow popular authors' notes, hashtags with a long tail,
// replaceable profiles/contacts/relay lists and addressable articles, spread over `days` days.
// Signatures are random bytes: the store does not re-verify, and query benchmarks need none.
import { createHash } from 'node:crypto';
import { computeEventId, type NostrEvent } from '../../src/nostr/event.js';
import { intBetween, prng, zipf } from './random.js';

export interface CorpusOptions {
  events: number;
  seed: number;
  authors: number;
  days: number;
  end: number; // unix seconds of the newest event
}

/** Facts about the corpus that query benchmarks draw their filters from. */
export interface Manifest {
  seed: number;
  events: number;
  authors: string[]; // by popularity rank, most active first (first 5,000)
  hashtags: string[]; // by popularity rank
  popularNotes: string[]; // ids of the most-referenced notes
  articles: Array<{ pubkey: string; d: string }>;
  sampleIds: string[];
  start: number;
  end: number;
}

const WORDS = 'the a relay note nostr zap key sign event filter query index fast slow post reply thread world hello gm pv bitcoin lightning client server tag pubkey love coffee music art photo dev code build ship'.split(' ');

/** Words drawn from `random` until the text reaches `chars` characters: content of a plausible size. */
export function words(random: () => number, chars: number): string {
  const out: string[] = [];
  for (let len = 0; len < chars; ) {
    const w = WORDS[Math.floor(random() * WORDS.length)];
    out.push(w);
    len += w.length + 1;
  }
  return out.join(' ');
}
const TOP_HASHTAGS = ['nostr', 'bitcoin', 'grownostr', 'zap', 'art', 'music', 'photography', 'dev', 'news', 'foodstr'];

function hexFrom(seed: string): string {
  return createHash('sha256').update(seed).digest('hex');
}

/** The pubkey of the author of this popularity rank (0: the most active) in the corpus of this seed. */
export const corpusAuthor = (seed: number, rank: number): string => hexFrom(`author:${seed}:${rank}`);

export function* generateCorpus(o: CorpusOptions, manifest: Manifest): Generator<NostrEvent> {
  const random = prng(o.seed);
  const authorRank = zipf(o.authors, 0.95, random);
  const hashtagRank = zipf(5000, 1.05, random);
  const pubkeys = Array.from({ length: o.authors }, (_, i) => corpusAuthor(o.seed, i));
  const hashtag = (rank: number) => TOP_HASHTAGS[rank] ?? `tag${rank}`;
  const recentNotes: string[][] = Array.from({ length: o.authors }, () => []); // per author, newest last
  const references = new Map<string, number>(); // e-references to notes of the 200 most active authors
  const replaceableDone = new Set<string>();
  const sampleIds: string[] = [];
  const start = o.end - o.days * 86400;
  const step = (o.end - start) / o.events;
  let articleCount = 0;

  const text = (min: number, max: number) => words(random, intBetween(random, min, max));
  /** A note to react to, reply to or repost: a recent note of an author picked by popularity. */
  const pickNote = (): { id: string; author: number } | undefined => {
    for (let tries = 0; tries < 4; tries++) {
      const author = authorRank();
      const notes = recentNotes[author];
      if (notes.length) return { id: notes[Math.floor(random() * notes.length)], author };
    }
    return undefined;
  };
  const reference = (note: { id: string; author: number }) => {
    if (note.author < 200) references.set(note.id, (references.get(note.id) ?? 0) + 1);
  };

  for (let i = 0; i < o.events; i++) {
    const created_at = Math.floor(start + i * step);
    const author = authorRank();
    const pubkey = pubkeys[author];
    let kind = 1;
    let content = '';
    const tags: string[][] = [];
    const r = random();
    const target = r < 0.5 ? undefined : pickNote();

    if (r >= 0.5 && r < 0.8 && target) {
      kind = 7;
      content = random() < 0.8 ? '+' : '🤙';
      tags.push(['e', target.id], ['p', pubkeys[target.author]]);
      reference(target);
    } else if (r >= 0.8 && r < 0.88 && target) {
      kind = 6;
      tags.push(['e', target.id, ''], ['p', pubkeys[target.author]]);
      reference(target);
    } else if (r >= 0.88 && r < 0.9) {
      kind = 9735;
      const zapped = target ?? pickNote();
      tags.push(['p', pubkeys[zapped?.author ?? authorRank()]], ['bolt11', 'lnbc' + hexFrom(`zap:${i}`).slice(0, 40)]);
      if (zapped) tags.push(['e', zapped.id]);
    } else if (r >= 0.9 && r < 0.91) {
      kind = 30023;
      const d = `article-${articleCount++}`;
      tags.push(['d', d], ['title', text(10, 40)], ['t', hashtag(hashtagRank())]);
      content = text(1500, 4000);
      if (manifest.articles.length < 500) manifest.articles.push({ pubkey, d });
    } else if (r >= 0.91 && r < 0.99) {
      kind = [0, 3, 10002][Math.floor(random() * 3)];
      if (replaceableDone.has(`${author}:${kind}`)) kind = 1;
      else {
        replaceableDone.add(`${author}:${kind}`);
        if (kind === 0) content = JSON.stringify({ name: `user${author}`, about: text(20, 120), picture: `https://example.com/${author}.png` });
        if (kind === 3) for (let n = intBetween(random, 10, 150), k = 0; k < n; k++) tags.push(['p', pubkeys[authorRank()]]);
        if (kind === 10002) tags.push(['r', 'wss://relay.example.com'], ['r', `wss://relay${author % 50}.example.net`, 'read']);
      }
    }
    if (kind === 1) {
      content = text(20, 400);
      if (target && random() < 0.5) {
        tags.push(['e', target.id, '', 'root'], ['p', pubkeys[target.author]]);
        reference(target);
      }
      if (random() < 0.2) for (let n = intBetween(random, 1, 3), k = 0; k < n; k++) tags.push(['p', pubkeys[authorRank()]]);
      if (random() < 0.25) for (let n = intBetween(random, 1, 3), k = 0; k < n; k++) tags.push(['t', hashtag(hashtagRank())]);
    }

    const unsigned = { pubkey, created_at, kind, tags, content };
    const id = computeEventId(unsigned);
    const event: NostrEvent = { id, ...unsigned, sig: hexFrom(`sig:${id}`) + hexFrom(`sig2:${id}`) };
    if (kind === 1) {
      const notes = recentNotes[author];
      notes.push(id);
      if (notes.length > 8) notes.shift();
    }
    if (sampleIds.length < 1000) sampleIds.push(id);
    else if (random() < 1000 / (i + 1)) sampleIds[Math.floor(random() * 1000)] = id;
    yield event;
  }

  manifest.authors = pubkeys.slice(0, 5000);
  manifest.hashtags = Array.from({ length: 200 }, (_, k) => hashtag(k));
  manifest.popularNotes = [...references.entries()].sort((a, b) => b[1] - a[1]).slice(0, 50).map(([id]) => id);
  manifest.sampleIds = sampleIds;
  manifest.start = start;
  manifest.end = o.end;
}
