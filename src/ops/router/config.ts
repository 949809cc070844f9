// The router's configuration: strfry's router file (docs/router.md), as taoCONFIG or JSON
// (config-parser.ts), checked field by field. Every mistake is one line naming the file, the line and
// column, the field and what it should be; unknown fields are refused (a misspelt `filter` would
// otherwise stream everything).
import { readFileSync } from 'node:fs';
import { parseFilter, type Filter } from '../../nostr/filter.js';
import { ConfigSyntaxError, parseConfigText, toPlain, type Node, type Place } from './config-parser.js';

export type Direction = 'down' | 'up' | 'both';

export interface StreamConfig {
  name: string;
  dir: Direction;
  urls: string[];
  /** The filter as written, without `limit` (the router asks for none): sent in REQ and NEG-OPEN. */
  filter: Record<string, unknown>;
  /** The same filter, parsed, to match events here. */
  matcher: Filter;
  /** strfry plugins (docs/plugins.md): a path, or a shell command when it has a space. */
  pluginDown: string | undefined;
  pluginUp: string | undefined;
  /**
   * pgrelay's own field (strfry ignores it): the largest message taken from this stream's remotes, in
   * bytes; a larger one cuts the connection. Unset: remoteMessageLimit() of the relay's MAX_MESSAGE_BYTES.
   */
  maxMessageBytes: number | undefined;
}

export interface RouterConfig {
  /** Seconds to open a connection, and to wait for any answer the router awaits. strfry's default: 20. */
  connectionTimeout: number;
  /** Log every event moved (info) rather than only at debug. strfry's default: true. */
  verbose: boolean;
  /**
   * pgrelay's own field: seconds before a stream's position that a catch-up reconciles from (see
   * positions.ts for what it covers). strfry ignores fields it does not know, so a file with it still
   * runs there.
   */
  catchUpMargin: number;
  streams: StreamConfig[];
}

export const DEFAULT_CONNECTION_TIMEOUT = 20;
export const DEFAULT_CATCH_UP_MARGIN = 600;
/** A stream's maxMessageBytes: at least MAX_MESSAGE_BYTES's own minimum, at most 1 GiB. */
const MIN_MESSAGE_BYTES = 1024;
const MAX_MESSAGE_BYTES = 1 << 30;

/** Filter limits for a stream's filter: an operator's, so generous. */
const STREAM_FILTER_LIMITS = { maxValuesPerArray: 100_000, defaultLimit: 0, maxLimit: 0 };

export class RouterConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RouterConfigError';
  }
}

/** Reads and checks a router configuration file; throws RouterConfigError with one line. */
export function loadRouterConfig(file: string): RouterConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new RouterConfigError(`router config ${file}: cannot read it (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  return parseRouterConfig(text, file);
}

/** Checks a router configuration's text; `file` names it in errors. */
export function parseRouterConfig(text: string, file: string): RouterConfig {
  let root: Node & { kind: 'object' };
  try {
    root = parseConfigText(text);
  } catch (err) {
    if (err instanceof ConfigSyntaxError) throw new RouterConfigError(`router config ${file}:${err.message}`);
    throw err;
  }
  const fail = (place: Place, field: string, problem: string): never => {
    throw new RouterConfigError(`router config ${file}:${place.line}:${place.column}: ${field} ${problem}`);
  };

  const config: RouterConfig = { connectionTimeout: DEFAULT_CONNECTION_TIMEOUT, verbose: true, catchUpMargin: DEFAULT_CATCH_UP_MARGIN, streams: [] };
  let streams: (Node & { kind: 'object' }) | undefined;
  for (const [key, node] of root.members) {
    if (key === 'connectionTimeout') config.connectionTimeout = integer(node, key, 1, 3600, 'seconds', fail);
    else if (key === 'catchUpMargin') config.catchUpMargin = integer(node, key, 0, 365 * 86_400, 'seconds', fail);
    else if (key === 'verbose') {
      if (node.kind !== 'boolean') fail(node.place, key, `must be true or false (got ${shown(node)})`);
      config.verbose = (node as { value: boolean }).value;
    } else if (key === 'streams') {
      if (node.kind !== 'object') fail(node.place, key, `must be a section of streams, e.g. streams { name { dir = "down" urls = [ "wss://…" ] } } (got ${shown(node)})`);
      streams = node as Node & { kind: 'object' };
    } else fail(root.names?.get(key) ?? node.place, key, 'is not a router setting (known: connectionTimeout, verbose, catchUpMargin, streams)');
  }
  if (!streams) throw new RouterConfigError(`router config ${file}: no "streams" section (strfry docs/router.md: streams { name { dir = "down" urls = [ "wss://…" ] } })`);

  for (const [name, node] of streams.members) {
    const field = `streams.${name}`;
    if (node.kind !== 'object') fail(node.place, field, `must be a section with dir and urls (got ${shown(node)})`);
    const section = node as Node & { kind: 'object' };
    let dir: Direction | undefined;
    let urls: string[] | undefined;
    let filter: Record<string, unknown> = {};
    let matcher: Filter = { tags: [], limit: 0 };
    let pluginDown: string | undefined;
    let pluginUp: string | undefined;
    let maxMessageBytes: number | undefined;
    for (const [key, value] of section.members) {
      const at = `${field}.${key}`;
      if (key === 'dir') {
        if (value.kind !== 'string' || !['up', 'down', 'both'].includes(value.value)) fail(value.place, at, `must be "up", "down" or "both" (got ${shown(value)})`);
        dir = (value as { value: Direction }).value;
      } else if (key === 'urls') {
        if (value.kind !== 'array' || value.items.length === 0) fail(value.place, at, `must be a non-empty array of relay URLs, e.g. [ "wss://relay.example.com" ] (got ${shown(value)})`);
        urls = [];
        for (const item of (value as Node & { kind: 'array' }).items) {
          if (item.kind !== 'string' || !isRelayUrl(item.value)) fail(item.place, at, `holds ${shown(item)}, not a relay URL (ws:// or wss://)`);
          const url = (item as { value: string }).value;
          if (urls.includes(url)) fail(item.place, at, `lists ${JSON.stringify(url)} twice`);
          urls.push(url);
        }
      } else if (key === 'filter') {
        if (value.kind !== 'object') fail(value.place, at, `must be one NIP-01 filter object, e.g. { "kinds": [0, 3] } (got ${shown(value)})`);
        const plain = toPlain(value) as Record<string, unknown>;
        if ('search' in plain) fail(value.place, at, 'may not use "search" (relays do not stream by search)');
        delete plain.limit; // strfry sends its own "limit": 0
        const parsed = parseFilter(plain, STREAM_FILTER_LIMITS);
        if (!parsed.ok) fail(value.place, at, `is not a usable filter: ${parsed.reason}`);
        filter = plain;
        matcher = (parsed as { value: Filter }).value;
      } else if (key === 'pluginDown' || key === 'pluginUp') {
        if (value.kind !== 'string') fail(value.place, at, `must be a path or a shell command in quotes (got ${shown(value)})`);
        const command = (value as { value: string }).value.trim();
        if (key === 'pluginDown') pluginDown = command || undefined;
        else pluginUp = command || undefined;
      } else if (key === 'maxMessageBytes') maxMessageBytes = integer(value, at, MIN_MESSAGE_BYTES, MAX_MESSAGE_BYTES, 'bytes', fail);
      else fail(section.names?.get(key) ?? value.place, at, 'is not a stream setting (known: dir, urls, filter, pluginDown, pluginUp, maxMessageBytes)');
    }
    const at = streams.names?.get(name) ?? section.place;
    if (!dir) fail(at, field, 'has no dir (up, down or both)');
    if (!urls) fail(at, field, 'has no urls');
    config.streams.push({ name, dir: dir!, urls: urls!, filter, matcher, pluginDown, pluginUp, maxMessageBytes });
  }
  return config;
}

function integer(node: Node, field: string, min: number, max: number, unit: string, fail: (place: Place, field: string, problem: string) => never): number {
  if (node.kind !== 'number' || !Number.isInteger(node.value) || node.value < min || node.value > max)
    fail(node.place, field, `must be a whole number of ${unit} from ${min} to ${max} (got ${shown(node)})`);
  return (node as { value: number }).value;
}

function isRelayUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return (url.protocol === 'ws:' || url.protocol === 'wss:') && url.hostname !== '';
  } catch {
    return false;
  }
}

function shown(node: Node): string {
  switch (node.kind) {
    case 'object':
      return 'a section';
    case 'array':
      return 'an array';
    case 'string':
      return JSON.stringify(node.value);
    case 'null':
      return 'null';
    default:
      return String(node.value);
  }
}

/** Whether a change from `a` to `b` needs the stream's connections opened again (strfry: dir and filter). */
export function needsReconnect(a: StreamConfig, b: StreamConfig): boolean {
  return a.dir !== b.dir || canonical(a.filter) !== canonical(b.filter);
}

function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (typeof value === 'object' && value !== null)
    return `{${Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(value);
}
