// NIP-50 search: the words of an event and of a query, defined once here so that PostgreSQL (which
// stores each searchable event's words as a tsvector and answers REQs through a GIN index) and the
// live matcher (which checks new events in memory) find exactly the same events.
//
// We tokenize ourselves instead of letting PostgreSQL's parser do it: the stored tsvector is built
// from our tokens (tsvectorLiteral / tsvectorBinary) and the query is sent as a tsquery literal, so
// both sides agree by construction. Choices, for what full-text search does badly:
// - Words are runs of letters, marks, digits and `_`, lowercased after NFKC; a word of any length
//   counts (PostgreSQL's own parser has no minimum either).
// - Scripts written without spaces (Han, Hiragana, Katakana, Hangul, Thai, Lao, Khmer, Myanmar) are
//   cut into overlapping pairs of characters, the last character of a run alone: a query for any
//   run of two or more characters is the phrase of its pairs, and one character matches as a prefix.
//   This is the classic bigram approach to CJK search, served by the same GIN index; no trigram index.
// - Host names (`example.com`, `nostr.band`) are a word of their own as well as their parts.
// - Hashtags: an event's `t` tags are part of its words, and `#nostr` in a query is the word `nostr`.
import type { NostrEvent } from './event.js';

/** The kinds whose words are indexed: notes, profiles, threads, comments, highlights, articles, listings. */
export const SEARCHABLE_KINDS: ReadonlySet<number> = new Set([0, 1, 11, 1111, 9802, 30023, 30402]);

/** Longest accepted `search` value, in characters; longer is refused as invalid. */
export const MAX_SEARCH_LENGTH = 512;
/** At most this many words are kept from one query. */
const MAX_QUERY_TERMS = 32;
/** PostgreSQL's tsvector limits: positions run to 16383 and a lexeme keeps at most 256 of them. */
const MAX_POSITION = 16383;
const MAX_POSITIONS_PER_LEXEME = 256;
/** Longer tokens (base64, long hex) are skipped; a 64-character hex id or a bech32 npub still counts. */
const MAX_TOKEN_LENGTH = 128;
/** A document stops growing here, well inside PostgreSQL's 1 MB tsvector limit. */
const MAX_DOCUMENT_BYTES = 256 * 1024;

/** ISO 639-1 codes for `language:xx`, and the PostgreSQL text-search configuration (stemmer) of each. */
export const SEARCH_LANGUAGES: Readonly<Record<string, string>> = {
  ar: 'arabic', ca: 'catalan', da: 'danish', de: 'german', el: 'greek', en: 'english', es: 'spanish', eu: 'basque',
  fi: 'finnish', fr: 'french', ga: 'irish', hi: 'hindi', hu: 'hungarian', hy: 'armenian', id: 'indonesian',
  it: 'italian', lt: 'lithuanian', nb: 'norwegian', ne: 'nepali', nl: 'dutch', nn: 'norwegian', no: 'norwegian',
  pt: 'portuguese', ro: 'romanian', ru: 'russian', sr: 'serbian', sv: 'swedish', ta: 'tamil', tr: 'turkish', yi: 'yiddish',
};

const SPACELESS = /[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}\p{scx=Thai}\p{scx=Lao}\p{scx=Khmer}\p{scx=Myanmar}]/u;
const SPACELESS_RUNS = /([\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}\p{scx=Thai}\p{scx=Lao}\p{scx=Khmer}\p{scx=Myanmar}]+)/u;
// A host name (two or more dotted parts, the last with a letter), or a word.
const TOKENS = /[\p{L}\p{M}\p{N}_-]*[\p{L}\p{M}\p{N}_](?:\.[\p{L}\p{M}\p{N}_-]*[\p{L}\p{M}\p{N}_])+|[\p{L}\p{M}\p{N}_]+/gu;
const WORD = /[\p{L}\p{M}\p{N}_]+/gu;
const ASCII = /^[\x00-\x7f]*$/;
const ASCII_WORD = /[a-z0-9_]+/g;
// What every host name holds: a dot between word characters (TOKENS' first branch needs one).
const DOTTED = /[\p{L}\p{M}\p{N}_-]\.[\p{L}\p{M}\p{N}_-]/u;

/** One token of a text: its lexeme, its position (1-based), and whether it came from a spaceless run. */
interface Token {
  lexeme: string;
  position: number;
  spaceless: boolean;
  /** A host name kept whole (its parts follow at the same positions). */
  host?: boolean;
}

/**
 * The tokens of a text. A host name yields the whole name and then its parts, the name at its first
 * part's position; `whole` (for queries) keeps only the name.
 */
function tokenize(text: string, whole: boolean, maxPosition = MAX_POSITION): Token[] {
  const out: Token[] = [];
  let position = 0;
  const push = (lexeme: string, spaceless: boolean, at = ++position): void => {
    if (lexeme.length <= MAX_TOKEN_LENGTH && at <= maxPosition) out.push({ lexeme, position: at, spaceless });
  };
  // ASCII is its own NFKC form, holds no spaceless script, and its words are runs of [a-z0-9_]: the
  // common case, answered without Unicode-aware expressions (a third of the time per note).
  const ascii = ASCII.test(text);
  const normalized = ascii ? text.toLowerCase() : text.normalize('NFKC').toLowerCase();
  // Most texts hold no spaceless script: their words then need no splitting (the hot path on insert).
  const hasSpaceless = !ascii && SPACELESS.test(normalized);
  const words = (part: string): void => {
    for (const [word] of part.matchAll(WORD)) {
      if (!hasSpaceless) {
        push(word, false);
        continue;
      }
      for (const piece of word.split(SPACELESS_RUNS)) {
        if (piece === '') continue;
        if (!SPACELESS.test(piece)) {
          push(piece, false);
          continue;
        }
        const chars = [...piece];
        for (let i = 0; i + 1 < chars.length; i++) push(chars[i] + chars[i + 1], true);
        // The last character alone, so that each one starts some token; a query's pairs already hold it.
        if (!whole || chars.length === 1) push(chars[chars.length - 1], true);
      }
    }
  };
  if (!hasSpaceless && !DOTTED.test(normalized)) {
    // No host name is possible either: every token is a plain word.
    for (const [word] of normalized.matchAll(ascii ? ASCII_WORD : WORD)) {
      if (position >= maxPosition) break;
      push(word, false);
    }
    return out;
  }
  for (const [match] of normalized.matchAll(TOKENS)) {
    if (position >= maxPosition) break;
    if (!match.includes('.')) {
      // No dot: the match is one run of word characters.
      if (hasSpaceless) words(match);
      else push(match, false);
      continue;
    }
    if (!/\p{L}/u.test(match.slice(match.lastIndexOf('.')))) {
      words(match);
      continue;
    }
    if (whole) {
      if (match.length <= MAX_TOKEN_LENGTH) out.push({ lexeme: match, position: ++position, spaceless: false, host: true });
      continue;
    }
    const at = position + 1;
    push(match, false, at);
    words(match);
  }
  return out;
}

/** An event's searchable words: lexeme → ascending positions, as PostgreSQL stores them in a tsvector. */
export type SearchDocument = Map<string, number[]>;

/** The text of an event that search reads, or undefined for kinds that are not searchable. */
export function searchText(event: NostrEvent): string | undefined {
  if (!SEARCHABLE_KINDS.has(event.kind)) return undefined;
  const parts: string[] = [];
  if (event.kind === 0) {
    // A profile's content is JSON: its names and description are what people search for.
    try {
      const profile = JSON.parse(event.content) as Record<string, unknown>;
      for (const key of ['name', 'display_name', 'nip05', 'about'])
        if (typeof profile[key] === 'string') parts.push(profile[key] as string);
    } catch {
      parts.push(event.content);
    }
  } else {
    for (const tag of event.tags) if ((tag[0] === 'title' || tag[0] === 'summary') && typeof tag[1] === 'string') parts.push(tag[1]);
    parts.push(event.content);
  }
  for (const tag of event.tags) if (tag[0] === 't' && typeof tag[1] === 'string') parts.push(tag[1]);
  return parts.join('\n');
}

/** The document of an event, or undefined when it is not searchable or has no words. */
export function searchDocument(event: NostrEvent): SearchDocument | undefined {
  const text = searchText(event);
  if (text === undefined) return undefined;
  const doc: SearchDocument = new Map();
  let bytes = 0;
  for (const t of tokenize(text, false)) {
    let positions = doc.get(t.lexeme);
    if (!positions) {
      bytes += Buffer.byteLength(t.lexeme) + 8;
      if (bytes > MAX_DOCUMENT_BYTES) break;
      doc.set(t.lexeme, (positions = []));
    }
    if (positions.length < MAX_POSITIONS_PER_LEXEME && positions[positions.length - 1] !== t.position) positions.push(t.position);
  }
  return doc.size > 0 ? doc : undefined;
}

/**
 * tsvectorBinary(searchDocument(event)), or null when that has no words: what events.search is
 * given, in PostgreSQL's binary format (sent as such: nothing for its tsvectorin to parse). The
 * verifier's threads make it for every event stored; plain ASCII text without host names (most
 * notes) is read by asciiSearchBinary in about half the time tokens and a Map take (6.7 against
 * 11.3 µs for a 1 KB note of random words, 8 against 19 of the corpus's words).
 */
export function searchBinary(event: NostrEvent): Buffer | null {
  const text = searchText(event);
  if (text === undefined) return null;
  const plain = asciiSearchBinary(text);
  if (plain !== undefined) return plain;
  const doc = searchDocument(event);
  return doc ? tsvectorBinary(doc) : null;
}

// asciiSearchBinary's tables, grown as texts need and kept between calls (each thread has its own).
let slots = new Int32Array(1024);
let words = new Int32Array(5 * 512);
let links = new Int32Array(2 * 512);

/**
 * searchBinary for a text of ASCII characters without a host name (no dot between two word
 * characters), in one pass over its characters: words are runs of [a-z0-9_] once lowercased, each
 * takes a position, a word longer than MAX_TOKEN_LENGTH is skipped, and the document keeps
 * tokenize's and searchDocument's limits. Distinct words are found by a hash of their characters
 * (no string is made per word); the binary form lists them in order of first appearance, as
 * tsvectorBinary does. undefined: the text is not such a text (a non-ASCII character, a host name).
 */
function asciiSearchBinary(text: string): Buffer | null | undefined {
  const n = text.length;
  // A word ends at every other character at most: distinct words and positions fit in `most`.
  const most = Math.min((n >>> 1) + 1, MAX_POSITION);
  let tableSize = slots.length;
  while (tableSize < most * 2) tableSize *= 2;
  if (tableSize !== slots.length) slots = new Int32Array(tableSize);
  else slots.fill(0);
  if (words.length < most * 5) words = new Int32Array(most * 5);
  if (links.length < most * 2) links = new Int32Array(most * 2);
  const table = slots, mask = tableSize - 1;
  // Per distinct word w, at 5w: its start in the text, its length, its count of positions, and the
  // first and last link of its positions (link k: position at 2k, next link at 2k+1, -1 at the end).
  const word = words, link = links;
  let distinct = 0, used = 0, position = 0, bytes = 0, size = 4;
  let start = -1, hash = 0, full = false;
  for (let i = 0; i <= n; i++) {
    const c = i < n ? text.charCodeAt(i) : 32;
    if (c >= 0x80) return undefined;
    const lower = WORD_CHAR[c];
    if (lower !== 0) {
      if (start < 0) {
        start = i;
        hash = 0x811c9dc5;
      }
      hash = Math.imul(hash ^ lower, 0x01000193);
      continue;
    }
    if (c === 46 && i > 0 && i + 1 < n && isHostChar(text.charCodeAt(i - 1)) && isHostChar(text.charCodeAt(i + 1))) return undefined;
    if (start < 0) continue;
    const from = start, length = i - start;
    start = -1;
    // Full: the rest is only read for what makes it another kind of text.
    if (full) continue;
    if (position >= MAX_POSITION) {
      full = true;
      continue;
    }
    const at = ++position;
    if (length > MAX_TOKEN_LENGTH) continue;
    let slot = (hash ^ (hash >>> 15)) & mask;
    let w = table[slot] - 1;
    while (w >= 0 && !(word[5 * w + 1] === length && sameWord(text, word[5 * w], from, length))) {
      slot = (slot + 1) & mask;
      w = table[slot] - 1;
    }
    if (w < 0) {
      bytes += length + 8;
      if (bytes > MAX_DOCUMENT_BYTES) {
        full = true;
        continue;
      }
      w = distinct++;
      table[slot] = w + 1;
      word[5 * w] = from;
      word[5 * w + 1] = length;
      word[5 * w + 2] = 0;
      word[5 * w + 3] = used;
      size += length + 3;
    } else {
      if (word[5 * w + 2] >= MAX_POSITIONS_PER_LEXEME) continue;
      link[2 * word[5 * w + 4] + 1] = used;
    }
    link[2 * used] = at;
    link[2 * used + 1] = -1;
    word[5 * w + 4] = used++;
    word[5 * w + 2]++;
    size += 2;
  }
  if (distinct === 0) return null;
  const out = Buffer.allocUnsafeSlow(size); // its own memory: a thread sends it back without a pool's slab
  let at = out.writeInt32BE(distinct, 0);
  for (let w = 0; w < distinct; w++) {
    const from = word[5 * w], to = from + word[5 * w + 1], count = word[5 * w + 2];
    for (let i = from; i < to; i++) out[at++] = WORD_CHAR[text.charCodeAt(i)];
    out[at++] = 0;
    out[at++] = count >>> 8;
    out[at++] = count & 0xff;
    for (let k = word[5 * w + 3]; k >= 0; k = link[2 * k + 1]) {
      out[at++] = link[2 * k] >>> 8;
      out[at++] = link[2 * k] & 0xff;
    }
  }
  return out;
}

/** For each ASCII character: itself lowercased when it is a word character ([0-9A-Za-z_]), else 0. */
const WORD_CHAR = new Uint8Array(128);
for (let c = 0; c < 128; c++) {
  const lower = c >= 65 && c <= 90 ? c | 32 : c;
  if ((lower >= 97 && lower <= 122) || (c >= 48 && c <= 57) || c === 95) WORD_CHAR[c] = lower;
}

/** DOTTED's classes for ASCII: a word character or `-`. */
const isHostChar = (c: number) => (c < 128 && WORD_CHAR[c] !== 0) || c === 45;

/** Whether text[a, a+length) and text[b, b+length) are the same word once lowercased (both are words). */
function sameWord(text: string, a: number, b: number, length: number): boolean {
  for (let i = 0; i < length; i++) if (WORD_CHAR[text.charCodeAt(a + i)] !== WORD_CHAR[text.charCodeAt(b + i)]) return false;
  return true;
}

const NEEDS_ESCAPE = /['\\]/;
const quote = (lexeme: string) => (NEEDS_ESCAPE.test(lexeme) ? `'${lexeme.replace(/\\/g, '\\\\').replace(/'/g, "''")}'` : `'${lexeme}'`);

/** A document as tsvector input text (`'word':1,4 'other':2`), for a `::tsvector` cast. */
export function tsvectorLiteral(doc: SearchDocument): string {
  const parts: string[] = [];
  for (const [lexeme, positions] of doc) parts.push(`${quote(lexeme)}:${positions.join(',')}`);
  return parts.join(' ');
}

/**
 * A document in PostgreSQL's binary tsvector format (tsvectorrecv: a binary COPY's field, an array
 * element of the writer's parameters): entry count (int32), then per lexeme its NUL-terminated UTF-8
 * text, its position count (uint16) and positions (uint16). The lexemes go in the document's order:
 * tsvectorrecv puts them in its own (byte) order as it reads them, in C, which costs it less than
 * sorting them here costs the verifier's threads (~4 µs a note).
 */
export function tsvectorBinary(doc: SearchDocument): Buffer {
  let size = 4;
  for (const [lexeme, positions] of doc) size += Buffer.byteLength(lexeme, 'utf8') + 3 + 2 * positions.length;
  const out = Buffer.allocUnsafeSlow(size); // its own memory: a thread sends it back without a pool's slab
  let at = out.writeInt32BE(doc.size, 0);
  for (const [lexeme, positions] of doc) {
    at += out.write(lexeme, at, 'utf8');
    out[at++] = 0;
    out[at++] = positions.length >>> 8;
    out[at++] = positions.length & 0xff;
    for (const p of positions) {
      out[at++] = p >>> 8;
      out[at++] = p & 0xff;
    }
  }
  return out;
}

// ---- Queries ----

/** A word of a query as typed (one word, or a quoted phrase), before stemming. */
interface QueryItem {
  text: string;
  negated: boolean;
}

/** A search as parsed: clauses ANDed together, each one item or several joined by OR. */
export interface ParsedSearch {
  clauses: QueryItem[][];
  /** The text-search configuration `language:xx` picked (a stemmer), or 'simple' (none). */
  config: string;
}

/** Extensions NIP-50 names that we read; every other `key:value` token is ignored (NIP-50). */
const EXTENSION = /^([a-z_]+):(\S+)$/;

/**
 * Parses a NIP-50 search string: words, "quoted phrases", -exclusions, `OR` between items, and
 * `key:value` extensions (`language:xx` picks the stemmer; the others are ignored, as NIP-50 asks).
 */
export function parseSearch(input: string): ParsedSearch {
  let config = 'simple';
  const clauses: QueryItem[][] = [];
  let joinNext = false;
  let terms = 0;
  for (const [, negation, phrase, bare] of input.matchAll(/(-?)(?:"([^"]*)"?|(\S+))/g)) {
    if (bare === 'OR' && !negation) {
      joinNext = clauses.length > 0;
      continue;
    }
    const extension = bare === undefined || negation ? null : EXTENSION.exec(bare);
    // `nostr:npub1…` (NIP-21) and URLs are words, not extensions.
    if (extension && extension[1] !== 'nostr' && !extension[2].startsWith('/')) {
      if (extension[1] === 'language') config = SEARCH_LANGUAGES[extension[2].toLowerCase()] ?? 'simple';
      continue;
    }
    if (++terms > MAX_QUERY_TERMS) break;
    const item = { text: phrase ?? bare, negated: negation === '-' };
    const last = clauses[clauses.length - 1];
    // OR joins positive items; an exclusion is always a clause of its own.
    if (joinNext && !item.negated && last && !last[0].negated) last.push(item);
    else clauses.push([item]);
    joinNext = false;
  }
  return { clauses, config };
}

/** The words of a parsed search that a stemmer must see (what prepareSearch sends to PostgreSQL). */
export function wordsToStem(parsed: ParsedSearch): string[] {
  if (parsed.config === 'simple') return [];
  const words = new Set<string>();
  for (const clause of parsed.clauses)
    for (const item of clause) for (const t of tokenize(item.text, true)) if (!t.spaceless && !t.host) words.add(t.lexeme);
  return [...words];
}

/**
 * One element of a phrase: its lexemes (any of them matches), whether they match as prefixes, and
 * its distance from the previous element.
 */
interface PhraseElement {
  lexemes: string[];
  prefix: boolean;
  distance: number;
}
type Phrase = PhraseElement[];

/** A search ready to run: the tsquery text for PostgreSQL and the same test in memory. */
export interface CompiledSearch {
  tsquery: string;
  matches(doc: SearchDocument | undefined): boolean;
}

/**
 * Compiles a parsed search. `stems` maps each word of wordsToStem to its stem, or null for a stop
 * word (dropped); a stemmed word then matches any word it begins (`'run':*` finds "running").
 * Returns null when the search has no positive word left: it matches nothing.
 */
export function compileSearch(parsed: ParsedSearch, stems: ReadonlyMap<string, string | null> = new Map()): CompiledSearch | null {
  const stemmed = parsed.config !== 'simple';
  const phraseOf = (text: string): Phrase => {
    const out: Phrase = [];
    let previous = 0;
    for (const t of tokenize(text, true)) {
      let lexemes = [t.lexeme];
      let prefix = false;
      if (t.spaceless) prefix = [...t.lexeme].length === 1; // one character: any pair it starts
      else if (stemmed && !t.host) {
        const stem = stems.get(t.lexeme);
        if (!stem) continue; // a stop word
        // A stem need not begin the word: English gives "happi" for "happy", German "haus" for
        // "häuser". The word itself then matches too, or the search would miss the word it names.
        lexemes = t.lexeme.startsWith(stem) ? [stem] : [stem, t.lexeme];
        prefix = true;
      }
      out.push({ lexemes, prefix, distance: out.length === 0 ? 0 : t.position - previous });
      previous = t.position;
    }
    return out;
  };
  const clauses = parsed.clauses
    .map((clause) => clause.map((item) => ({ phrase: phraseOf(item.text), negated: item.negated })).filter((i) => i.phrase.length > 0))
    .filter((clause) => clause.length > 0);
  if (!clauses.some((clause) => !clause[0].negated)) return null;

  const phraseSql = (p: Phrase): string => {
    const elementSql = (e: PhraseElement): string => {
      const alternatives = e.lexemes.map((l) => quote(l) + (e.prefix ? ':*' : ''));
      return alternatives.length === 1 ? alternatives[0] : `(${alternatives.join(' | ')})`;
    };
    const parts = p.map((e, i) => (i === 0 ? '' : ` <${e.distance}> `) + elementSql(e));
    return p.length === 1 ? parts[0] : `(${parts.join('')})`;
  };
  const tsquery = clauses
    .map((clause) => {
      const items = clause.map((i) => (i.negated ? '!' : '') + phraseSql(i.phrase));
      return items.length === 1 ? items[0] : `(${items.join(' | ')})`;
    })
    .join(' & ');

  return {
    tsquery,
    matches: (doc) => doc !== undefined && clauses.every((clause) => clause.some((i) => phraseMatches(i.phrase, doc) !== i.negated)),
  };
}

/** The positions of a phrase element in a document (of every lexeme one of its lexemes begins, for a prefix). */
function positionsOf(e: PhraseElement, doc: SearchDocument): number[] {
  if (!e.prefix) return doc.get(e.lexemes[0]) ?? []; // only a stemmed word has two lexemes, and it is a prefix
  const all: number[] = [];
  for (const [lexeme, positions] of doc) if (e.lexemes.some((l) => lexeme.startsWith(l))) all.push(...positions);
  return all;
}

/** PostgreSQL's phrase semantics: some position p of the first element with each next one at p + distances. */
function phraseMatches(phrase: Phrase, doc: SearchDocument): boolean {
  let current = new Set(positionsOf(phrase[0], doc));
  for (let i = 1; i < phrase.length && current.size > 0; i++) {
    const next = new Set<number>();
    const here = new Set(positionsOf(phrase[i], doc));
    for (const p of current) if (here.has(p + phrase[i].distance)) next.add(p + phrase[i].distance);
    current = next;
  }
  return current.size > 0;
}
