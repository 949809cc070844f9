// The router's configuration file, read as strfry reads it: taoCONFIG (taocpp/config's format, a
// superset of JSON), of which this parser takes the part strfry's docs and example files use:
//
//   - JSON itself: every JSON file whose top level is an object;
//   - the top-level braces may be left out; commas between members and array elements are optional,
//     and one trailing comma is allowed;
//   - `name = value` as well as `name: value`; `name { … }` and `name [ … ]` without a separator add
//     to what the name holds already (objects merged, arrays joined), else assign; a name assigned
//     again takes the last value;
//   - names: C identifiers (`connectionTimeout`, `pluginDown`), 'single' or "double" quoted
//     strings, dotted paths (`streams.friends.dir = "down"`);
//   - values: strings ('single' or "double" quoted, JSON escapes), JSON numbers (an optional leading
//     +), true, false, null, arrays, objects;
//   - comments: `#` and `//` to the end of the line, `/* … */`.
//
// Not taken (each refused with its line and column, never misread): additions (`+`, `+=`), `delete`,
// `*`, references and extensions in parentheses (`(include "file")`, `(env "X")`), binary values
// ($…), JAXN's non-finite and hexadecimal numbers.

/** A position in the file, both 1-based. */
export interface Place {
  line: number;
  column: number;
}

/** A value and where it was written: what the validation (config.ts) cites in its errors. */
export type Node =
  | { kind: 'object'; place: Place; members: Map<string, Node>; names?: Map<string, Place>; added?: Set<string> }
  | { kind: 'array'; place: Place; items: Node[] }
  | { kind: 'string'; place: Place; value: string }
  | { kind: 'number'; place: Place; value: number }
  | { kind: 'boolean'; place: Place; value: boolean }
  | { kind: 'null'; place: Place };

export class ConfigSyntaxError extends Error {
  constructor(
    readonly place: Place,
    readonly problem: string,
  ) {
    super(`${place.line}:${place.column}: ${problem}`);
    this.name = 'ConfigSyntaxError';
  }
}

const IDENTIFIER_START = /[A-Za-z_]/;
const IDENTIFIER_PART = /[A-Za-z0-9_]/;
const NUMBER = /[+-]?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const ESCAPES: Record<string, string> = { '"': '"', "'": "'", '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

/** Parses a whole file into its top-level object. */
export function parseConfigText(text: string): Node & { kind: 'object' } {
  return new Parser(text).file();
}

/** The node as plain JSON data (places dropped). */
export function toPlain(node: Node): unknown {
  switch (node.kind) {
    case 'object':
      return Object.fromEntries([...node.members].map(([k, v]) => [k, toPlain(v)]));
    case 'array':
      return node.items.map(toPlain);
    case 'null':
      return null;
    default:
      return node.value;
  }
}

class Parser {
  private at = 0;
  private readonly lineStarts: number[] = [0];

  constructor(private readonly text: string) {
    for (let i = 0; i < text.length; i++) if (text[i] === '\n') this.lineStarts.push(i + 1);
    if (text.charCodeAt(0) === 0xfeff) this.at = 1; // a byte order mark
  }

  file(): Node & { kind: 'object' } {
    this.skip();
    const place = this.place();
    let root: Node & { kind: 'object' };
    if (this.peek() === '{') {
      root = this.object();
    } else {
      root = { kind: 'object', place, members: new Map() };
      this.members(root, undefined);
    }
    this.skip();
    if (this.at < this.text.length) this.fail(`unexpected ${this.describe()} after the end of the configuration`);
    return root;
  }

  // --- structure -----------------------------------------------------------------------------------

  /** Members until `close` (or the end of the file for the implicit top-level object). */
  private members(into: Node & { kind: 'object' }, close: '}' | undefined): void {
    for (;;) {
      this.skip();
      const c = this.peek();
      if (c === undefined) {
        if (close) this.fail(`missing "${close}" (the object opened at ${into.place.line}:${into.place.column} is not closed)`);
        return;
      }
      if (c === close) return;
      if (c === '}' || c === ']') this.fail(`unexpected "${c}": no ${c === '}' ? 'section' : 'array'} is open here`);
      this.member(into);
      this.skip();
      if (this.peek() === ',') {
        this.at++;
        this.skip();
        if (this.peek() === ',') this.fail('two commas in a row');
      }
    }
  }

  private member(into: Node & { kind: 'object' }): void {
    const namePlace = this.place();
    const path = this.name();
    this.skip();
    const c = this.peek();
    let value: Node;
    let add = false;
    if (c === '=' || c === ':') {
      this.at++;
      this.skip();
      value = this.value();
    } else if (c === '+' && this.text[this.at + 1] === '=') {
      this.fail('"+=" (taoCONFIG additions) is not supported here: write the whole value with "="');
    } else if (c === '{' || c === '[') {
      // taoCONFIG: `name { … }` adds to what the name holds (objects merge, arrays join).
      value = this.value();
      add = true;
    } else {
      this.fail(`expected "=", ":" or "{" after the name "${path.join('.')}", found ${this.describe()}`);
    }
    this.assign(into, path, value, add, namePlace);
    this.skip();
    if (this.peek() === '+') this.fail('"+" (taoCONFIG additions) is not supported here: write the whole value');
  }

  private assign(into: Node & { kind: 'object' }, path: string[], value: Node, add: boolean, namePlace: Place): void {
    let target = into;
    for (const key of path.slice(0, -1)) {
      let next = target.members.get(key);
      if (next === undefined || next.kind !== 'object') {
        next = { kind: 'object', place: value.place, members: new Map() };
        target.members.set(key, next);
        (target.names ??= new Map()).set(key, namePlace);
      }
      target = next;
    }
    const key = path[path.length - 1];
    (target.names ??= new Map()).set(key, namePlace);
    const existing = target.members.get(key);
    if (add && existing?.kind === 'object' && value.kind === 'object') {
      // Members the added object defined with "=" replace; those it added to, add in turn.
      for (const [k, v] of value.members) this.assign(existing, [k], v, value.added?.has(k) ?? false, value.names?.get(k) ?? v.place);
    } else if (add && existing?.kind === 'array' && value.kind === 'array') {
      existing.items.push(...value.items);
    } else {
      target.members.set(key, value);
    }
    if (add) (target.added ??= new Set()).add(key);
    else target.added?.delete(key);
  }

  /** A member name: one or more parts joined by dots. */
  private name(): string[] {
    const parts = [this.namePart()];
    while (this.peek() === '.') {
      this.at++;
      parts.push(this.namePart());
    }
    return parts;
  }

  private namePart(): string {
    const c = this.peek();
    if (c === '"' || c === "'") return this.string();
    if (c !== undefined && IDENTIFIER_START.test(c)) {
      const start = this.at;
      while (this.at < this.text.length && IDENTIFIER_PART.test(this.text[this.at])) this.at++;
      return this.text.slice(start, this.at);
    }
    if (c === '(') this.fail('references and extensions in parentheses (taoCONFIG) are not supported here');
    if (c === '*') this.fail('"*" (taoCONFIG patterns) is not supported here');
    this.fail(`expected a name, found ${this.describe()}`);
  }

  private value(): Node {
    const place = this.place();
    const c = this.peek();
    if (c === '{') return this.object();
    if (c === '[') return this.array();
    if (c === '"' || c === "'") return { kind: 'string', place, value: this.string() };
    if (c !== undefined && /[-+0-9]/.test(c)) return { kind: 'number', place, value: this.number() };
    if (c !== undefined && IDENTIFIER_START.test(c)) {
      const start = this.at;
      while (this.at < this.text.length && IDENTIFIER_PART.test(this.text[this.at])) this.at++;
      const word = this.text.slice(start, this.at);
      if (word === 'true' || word === 'false') return { kind: 'boolean', place, value: word === 'true' };
      if (word === 'null') return { kind: 'null', place };
      this.at = start;
      if (word === 'delete') this.fail('"delete" (taoCONFIG) is not supported here: leave the member out');
      this.fail(`expected a value, found the bare word "${word}" (strings need quotes)`);
    }
    if (c === '(') this.fail('references and extensions in parentheses (taoCONFIG) are not supported here');
    if (c === '$') this.fail('binary values ($…) are not supported here');
    this.fail(`expected a value, found ${this.describe()}`);
  }

  private object(): Node & { kind: 'object' } {
    const node: Node & { kind: 'object' } = { kind: 'object', place: this.place(), members: new Map() };
    this.at++; // {
    this.members(node, '}');
    this.at++; // }
    return node;
  }

  private array(): Node & { kind: 'array' } {
    const node: Node & { kind: 'array' } = { kind: 'array', place: this.place(), items: [] };
    this.at++; // [
    for (;;) {
      this.skip();
      const c = this.peek();
      if (c === undefined) this.fail(`missing "]" (the array opened at ${node.place.line}:${node.place.column} is not closed)`);
      if (c === ']') break;
      node.items.push(this.value());
      this.skip();
      if (this.peek() === '+') this.fail('"+" (taoCONFIG additions) is not supported here: write the whole value');
      if (this.peek() === ',') {
        this.at++;
        this.skip();
        if (this.peek() === ',') this.fail('two commas in a row');
      }
    }
    this.at++; // ]
    return node;
  }

  // --- atoms ---------------------------------------------------------------------------------------

  private string(): string {
    const quote = this.text[this.at];
    const start = this.place();
    this.at++;
    let out = '';
    for (;;) {
      const c = this.text[this.at];
      if (c === undefined || c === '\n') {
        this.at = this.offsetOf(start);
        this.fail('a string is not closed before the end of its line');
      }
      this.at++;
      if (c === quote) return out;
      if (c !== '\\') {
        out += c;
        continue;
      }
      const e = this.text[this.at];
      if (e === 'u') {
        const hex = this.text.slice(this.at + 1, this.at + 5);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.fail('"\\u" needs four hexadecimal digits');
        out += String.fromCharCode(parseInt(hex, 16));
        this.at += 5;
      } else if (e !== undefined && e in ESCAPES) {
        out += ESCAPES[e];
        this.at++;
      } else {
        this.at--;
        this.fail(`unknown escape "\\${e ?? ''}" in a string`);
      }
    }
  }

  private number(): number {
    NUMBER.lastIndex = this.at;
    const m = NUMBER.exec(this.text);
    if (!m) this.fail(`expected a number, found ${this.describe()}`);
    const after = this.text[this.at + m[0].length];
    if (after !== undefined && /[A-Za-z0-9_.]/.test(after)) this.fail(`not a number this file may hold: "${this.text.slice(this.at, this.at + m[0].length + 1)}…" (decimal JSON numbers only)`);
    this.at += m[0].length;
    return Number(m[0]);
  }

  /** Whitespace and comments. */
  private skip(): void {
    for (;;) {
      const c = this.text[this.at];
      if (c === ' ' || c === '\t' || c === '\n' || c === '\r') this.at++;
      else if (c === '#' || (c === '/' && this.text[this.at + 1] === '/')) {
        while (this.at < this.text.length && this.text[this.at] !== '\n') this.at++;
      } else if (c === '/' && this.text[this.at + 1] === '*') {
        const end = this.text.indexOf('*/', this.at + 2);
        if (end < 0) this.fail('a "/*" comment is not closed');
        this.at = end + 2;
      } else return;
    }
  }

  // --- positions and errors ------------------------------------------------------------------------

  private peek(): string | undefined {
    return this.text[this.at];
  }

  private place(offset = this.at): Place {
    let lo = 0;
    let hi = this.lineStarts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.lineStarts[mid] <= offset) lo = mid;
      else hi = mid - 1;
    }
    return { line: lo + 1, column: offset - this.lineStarts[lo] + 1 };
  }

  private offsetOf(place: Place): number {
    return this.lineStarts[place.line - 1] + place.column - 1;
  }

  private describe(): string {
    const c = this.peek();
    if (c === undefined) return 'the end of the file';
    return JSON.stringify(c);
  }

  private fail(problem: string): never {
    throw new ConfigSyntaxError(this.place(), problem);
  }
}
