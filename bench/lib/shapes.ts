// The REQ shapes a real client mix sends, drawn from a seeded corpus' manifest. Shared by the query
// benchmark and the k6 load scripts so both measure the same requests.
import { words, type Manifest } from './corpus.js';
import { prng } from './random.js';

export type Filter = Record<string, unknown>;

export interface Shape {
  name: string;
  description: string;
  /** A fresh set of filters for each call, varied so caches do not make every run identical. */
  filters(): Filter[];
  /** Only when named (--shapes): not among bench:query's shapes by default. */
  onlyWhenNamed?: boolean;
}

/** `n` distinct authors spread over popularity ranks (a few very active, many occasional). */
export function spreadAuthors(m: Manifest, n: number, random: () => number): string[] {
  const chosen = new Set<string>();
  while (chosen.size < Math.min(n, m.authors.length)) {
    const rank = Math.floor(Math.pow(random(), 2) * m.authors.length); // biased towards popular ranks
    chosen.add(m.authors[rank]);
  }
  return [...chosen];
}

export function queryShapes(m: Manifest, seed = 7): Shape[] {
  const random = prng(seed);
  const pickOne = <T>(list: T[], top = list.length) => list[Math.floor(random() * Math.min(top, list.length))];
  const seedQuery = (): Filter => ({ kinds: [1], '#p': spreadAuthors(m, 150, random), limit: 500 });
  const feed = (authors = 500): Filter => ({ authors: spreadAuthors(m, authors, random), kinds: [1, 6], limit: 500 });
  const thread = (): Filter => ({ '#e': [pickOne(m.popularNotes, 20)], kinds: [1, 7] });
  const profiles = (authors = 300): Filter => ({ kinds: [0], authors: spreadAuthors(m, authors, random) });
  const hashtag = (): Filter => ({ '#t': [pickOne(m.hashtags, 10)], limit: 100 });
  const articles = (): Filter => {
    const picked = Array.from({ length: 10 }, () => pickOne(m.articles));
    return { kinds: [30023], authors: [...new Set(picked.map((a) => a.pubkey))], '#d': [...new Set(picked.map((a) => a.d))] };
  };
  return [
    { name: 'seed-150p', description: '{"kinds":[1],"#p":[150 pubkeys],"limit":500}', filters: () => [seedQuery()] },
    { name: 'home-feed', description: '{"authors":[500],"kinds":[1,6],"limit":500}', filters: () => [feed()] },
    { name: 'thread', description: '{"#e":[popular note],"kinds":[1,7]}', filters: () => [thread()] },
    { name: 'profiles', description: '{"kinds":[0],"authors":[300]}', filters: () => [profiles()] },
    // The lighter mix the comparison with other relays uses (docs/benchmarks.md, "Against strfry and nostream").
    { name: 'feed-300', description: '{"authors":[300],"kinds":[1,6],"limit":500}', filters: () => [feed(300)], onlyWhenNamed: true },
    { name: 'profiles-100', description: '{"kinds":[0],"authors":[100]}', filters: () => [profiles(100)], onlyWhenNamed: true },
    {
      name: 'ids-100',
      description: '{"ids":[100 ids]}',
      filters: () => [{ ids: Array.from({ length: 100 }, () => pickOne(m.sampleIds)).filter((v, i, a) => a.indexOf(v) === i) }],
    },
    { name: 'hashtag', description: '{"#t":[popular tag],"limit":100}', filters: () => [hashtag()] },
    { name: 'global', description: '{"kinds":[1],"limit":50}', filters: () => [{ kinds: [1], limit: 50 }] },
    {
      name: 'time-window',
      description: '{"kinds":[1,6,7],"since":T-3600,"until":T,"limit":500}',
      filters: () => {
        const until = m.end - Math.floor(random() * 86400 * 30);
        return [{ kinds: [1, 6, 7], since: until - 3600, until, limit: 500 }];
      },
    },
    { name: 'addressable', description: '{"kinds":[30023],"authors":[…],"#d":[…]}', filters: () => [articles()] },
    { name: 'three-filters', description: 'thread + hashtag + profiles in one REQ', filters: () => [thread(), hashtag(), profiles()] },
    {
      name: 'two-tag-letters',
      description: '{"#e":[5 popular notes],"#p":[20 pubkeys]}',
      filters: () => [{ '#e': Array.from({ length: 5 }, () => pickOne(m.popularNotes)), '#p': spreadAuthors(m, 20, random) }],
    },
    // Drawn from their own generator, so the shapes above see the same values as before.
    ...searchShapes(m, seed + 1000),
  ];
}

/**
 * The words the corpus writes notes, articles and profile descriptions with (corpus.ts `words`),
 * most frequent first: measured on a fixed sample of that generator, so the list is deterministic.
 * They are drawn uniformly from a short list, so each one is in most notes; rarer words come from
 * hashtags (a long Zipf tail, and an event's `t` tags are among its search words).
 */
export function noteVocabulary(sampleChars = 200_000): Array<{ word: string; share: number }> {
  const counts = new Map<string, number>();
  let total = 0;
  for (const w of words(prng(1), sampleChars).split(' ')) {
    counts.set(w, (counts.get(w) ?? 0) + 1);
    total++;
  }
  return [...counts]
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
    .map(([word, n]) => ({ word, share: n / total }));
}

/**
 * NIP-50 shapes, `search-*`, limit 50 (a search page) unless said. Frequencies on the 1M corpus:
 * a common note word is in ~36% of all events (~360k), a top hashtag that notes do not use as a
 * word in 3k–12k, a hashtag of rank 150–199 in 150–200; ten times as many at 10M.
 */
export function searchShapes(m: Manifest, seed: number): Shape[] {
  const random = prng(seed);
  const pick = <T>(list: T[]) => list[Math.floor(random() * list.length)];
  const vocabulary = noteVocabulary().map((v) => v.word);
  const inNotes = new Set(vocabulary);
  const common = vocabulary.filter((w) => w.length >= 4).slice(0, 5); // the most frequent words of four letters or more
  const twoCommon = (): [string, string] => {
    const a = pick(common);
    const rest = common.filter((w) => w !== a);
    return [a, pick(rest)];
  };
  const hashtagWords = m.hashtags.filter((t) => !inNotes.has(t)); // by popularity rank
  const mid = hashtagWords.slice(0, 3);
  const rare = hashtagWords.slice(-50);
  // Plurals whose English stem is the word itself (not `…y`, `…s`, `…x`, which the stemmer rewrites).
  const plurals = common.filter((w) => /[^sxy]$/.test(w)).map((w) => w + 's');
  const SEARCH_LIMIT = 50;
  return [
    { name: 'search-rare', description: '{"search":"<hashtag of rank 150-199>","limit":50}', filters: () => [{ search: pick(rare), limit: SEARCH_LIMIT }] },
    { name: 'search-mid', description: '{"search":"<top hashtag, not a note word>","limit":50}', filters: () => [{ search: pick(mid), limit: SEARCH_LIMIT }] },
    { name: 'search-common', description: '{"search":"<common note word>","limit":50}', filters: () => [{ search: pick(common), limit: SEARCH_LIMIT }] },
    { name: 'search-and', description: '{"search":"<common> <common>","limit":50}', filters: () => [{ search: twoCommon().join(' '), limit: SEARCH_LIMIT }] },
    {
      name: 'search-phrase',
      description: '{"search":"\\"<common> <common>\\"","limit":50}',
      filters: () => [{ search: `"${twoCommon().join(' ')}"`, limit: SEARCH_LIMIT }],
    },
    {
      name: 'search-exclude',
      description: '{"search":"<top hashtag> -<common>","limit":50}',
      filters: () => [{ search: `${pick(mid)} -${pick(common)}`, limit: SEARCH_LIMIT }],
    },
    {
      name: 'search-language',
      description: '{"search":"<common>s language:en","limit":50} (stemmed, prefix match)',
      filters: () => [{ search: `${pick(plurals)} language:en`, limit: SEARCH_LIMIT }],
    },
    {
      name: 'search-recent',
      description: '{"kinds":[1],"since":end-1..7 days,"search":"<common>","limit":50}',
      filters: () => [{ kinds: [1], since: m.end - Math.floor(86400 * (1 + 6 * random())), search: pick(common), limit: SEARCH_LIMIT }],
    },
    {
      name: 'search-authors',
      description: '{"authors":[100],"search":"<common>","limit":50}',
      filters: () => [{ authors: spreadAuthors(m, 100, random), search: pick(common), limit: SEARCH_LIMIT }],
    },
    {
      // corpus.ts names a profile `user<author rank>`: one match (or none, for an author without one).
      name: 'search-profile',
      description: '{"kinds":[0],"search":"user<rank < 1000>"}',
      filters: () => [{ kinds: [0], search: `user${Math.floor(random() * 1000)}` }],
    },
  ];
}
