// NIP-50 `language:xx`: the query's words go through that language's stemmer in PostgreSQL (the
// snowball dictionaries it ships) before the search is compiled (nostr/search.ts compileSearch).
// Stems are remembered, so a word is sent once per process.
import type pg from 'pg';
import type { Filter } from '../nostr/filter.js';
import { compileSearch, wordsToStem } from '../nostr/search.js';

const STEM_CACHE_SIZE = 10_000;
const stemCache = new Map<string, string | null>(); // config + ' ' + word → stem, null for a stop word

/** Whether some filter has a search that needs prepareSearch before it can be queried or matched. */
export function needsPreparing(filters: Filter[]): boolean {
  return filters.some((f) => f.search && f.search.compiled === undefined);
}

/**
 * Compiles every `language:xx` search of the filters: one query for the words not seen before.
 * The stem of a word is the first lexeme PostgreSQL's configuration gives it; none (a stop word) drops it.
 */
export async function prepareSearch(pool: pg.Pool | pg.PoolClient, filters: Filter[]): Promise<void> {
  const pending = filters.filter((f) => f.search && f.search.compiled === undefined);
  const missing = new Map<string, Set<string>>(); // config → words
  const stems = new Map<string, string | null>(); // this call's: the cache may be cleared meanwhile
  for (const f of pending) {
    const { config } = f.search!.parsed;
    for (const word of wordsToStem(f.search!.parsed)) {
      const key = `${config} ${word}`;
      if (stemCache.has(key)) stems.set(key, stemCache.get(key)!);
      else (missing.get(config) ?? missing.set(config, new Set()).get(config)!).add(word);
    }
  }
  for (const [config, words] of missing) {
    const { rows } = await pool.query<{ word: string; stem: string | null }>(
      `SELECT w AS word, (SELECT lexeme FROM unnest(to_tsvector($1::regconfig, w)) ORDER BY positions[1] LIMIT 1) AS stem
         FROM unnest($2::text[]) w`,
      [config, [...words]],
    );
    if (stemCache.size + rows.length > STEM_CACHE_SIZE) stemCache.clear();
    for (const r of rows) {
      stemCache.set(`${config} ${r.word}`, r.stem);
      stems.set(`${config} ${r.word}`, r.stem);
    }
  }
  for (const f of pending) {
    const { parsed } = f.search!;
    const own = new Map(wordsToStem(parsed).map((w) => [w, stems.get(`${parsed.config} ${w}`) ?? null]));
    f.search!.compiled = compileSearch(parsed, own);
  }
}
