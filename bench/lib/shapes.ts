// The REQ shapes a real client mix sends, drawn from a seeded corpus' manifest. Shared by the query
// benchmark and the k6 load scripts so both measure the same requests.
import type { Manifest } from './corpus.js';
import { prng } from './random.js';

export type Filter = Record<string, unknown>;

export interface Shape {
  name: string;
  description: string;
  /** A fresh set of filters for each call, varied so caches do not make every run identical. */
  filters(): Filter[];
}

/** `n` distinct authors spread over popularity ranks (a few very active, many occasional). */
function spreadAuthors(m: Manifest, n: number, random: () => number): string[] {
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
  const feed = (): Filter => ({ authors: spreadAuthors(m, 500, random), kinds: [1, 6], limit: 500 });
  const thread = (): Filter => ({ '#e': [pickOne(m.popularNotes, 20)], kinds: [1, 7] });
  const profiles = (): Filter => ({ kinds: [0], authors: spreadAuthors(m, 300, random) });
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
  ];
}
