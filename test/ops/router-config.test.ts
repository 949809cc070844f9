// The router's configuration file: strfry's own (taoCONFIG, as its docs/router.md writes it) and
// JSON read to the same streams; the taoCONFIG forms strfry's files use; every mistake refused with
// one line naming the file, line and column; which changes reconnect a stream.
import { describe, expect, it } from 'vitest';
import { parseConfigText, toPlain } from '../../src/ops/router/config-parser.js';
import { needsReconnect, parseRouterConfig, RouterConfigError, type RouterConfig } from '../../src/ops/router/config.js';

// strfry docs/router.md, "Example", verbatim (its indentation removed).
const STRFRY_EXAMPLE = `connectionTimeout = 20

verbose = false

streams {
    ## Stream down events from our friend relays

    friends {
        dir = "down"
        pluginDown = "/home/user/spam-filter.js"

        urls = [
            "wss://nos.lol"
            "wss://relayable.org"
        ]
    }

    ## Bi-directional streaming within our cluster

    cluster {
        dir = "both"

        urls = [
            "wss://eu.example.com"
            "wss://na.example.com"
        ]
    }

    ## Backup profiles and contact lists to our directory node

    directory {
        dir = "up"
        filter = { "kinds": [0, 3] }

        urls = [
            "ws://internal-directory.example.com"
        ]
    }
}
`;

const parse = (text: string) => parseRouterConfig(text, 'router.conf');
const streams = (config: RouterConfig) => config.streams.map(({ name, dir, urls, filter, pluginDown, pluginUp }) => ({ name, dir, urls, filter, pluginDown, pluginUp }));

function refusal(text: string): string {
  try {
    parse(text);
  } catch (err) {
    expect(err).toBeInstanceOf(RouterConfigError);
    expect((err as Error).message).not.toContain('\n');
    return (err as Error).message;
  }
  throw new Error('the configuration was accepted');
}

describe('router config', () => {
  it("reads strfry's example from docs/router.md as strfry does", () => {
    const config = parse(STRFRY_EXAMPLE);
    expect(config).toMatchObject({ connectionTimeout: 20, verbose: false, catchUpMargin: 600 });
    expect(streams(config)).toEqual([
      { name: 'friends', dir: 'down', urls: ['wss://nos.lol', 'wss://relayable.org'], filter: {}, pluginDown: '/home/user/spam-filter.js', pluginUp: undefined },
      { name: 'cluster', dir: 'both', urls: ['wss://eu.example.com', 'wss://na.example.com'], filter: {}, pluginDown: undefined, pluginUp: undefined },
      { name: 'directory', dir: 'up', urls: ['ws://internal-directory.example.com'], filter: { kinds: [0, 3] }, pluginDown: undefined, pluginUp: undefined },
    ]);
    expect(config.streams[2].matcher.kinds).toEqual([0, 3]);
  });

  it('reads the same configuration written as JSON', () => {
    const json = JSON.stringify({
      connectionTimeout: 20,
      verbose: false,
      streams: {
        friends: { dir: 'down', pluginDown: '/home/user/spam-filter.js', urls: ['wss://nos.lol', 'wss://relayable.org'] },
        cluster: { dir: 'both', urls: ['wss://eu.example.com', 'wss://na.example.com'] },
        directory: { dir: 'up', filter: { kinds: [0, 3] }, urls: ['ws://internal-directory.example.com'] },
      },
    });
    expect(streams(parse(json))).toEqual(streams(parse(STRFRY_EXAMPLE)));
    expect(parse(json)).toMatchObject({ connectionTimeout: 20, verbose: false });
  });

  it('defaults as strfry: connectionTimeout 20, verbose true, filter {}', () => {
    const config = parse('streams { s { dir = "down" urls = ["ws://a.example"] } }');
    expect(config).toMatchObject({ connectionTimeout: 20, verbose: true, catchUpMargin: 600 });
    expect(config.streams[0].filter).toEqual({});
  });

  it('takes the taoCONFIG forms: commas or none, a trailing comma, ":" or "=", three kinds of comment, quoted names, dotted names', () => {
    const text = `
      // a C++ comment
      /* a block
         comment */
      "connectionTimeout": 5,   # shell comment
      catchUpMargin: 120,
      streams {
        'with spaces' { dir: 'up', urls: [ "ws://a.example", "ws://b.example", ], }
        other { dir = "down" urls = [ "ws://c.example" ] filter = { "kinds": [1] "#t": ["nostr"], "limit": 10 } }
      }
      streams.dotted.dir = "both"
      streams.dotted.urls = [ "wss://d.example/path" ]
    `;
    const config = parse(text);
    expect(config).toMatchObject({ connectionTimeout: 5, catchUpMargin: 120 });
    expect(streams(config)).toEqual([
      { name: 'with spaces', dir: 'up', urls: ['ws://a.example', 'ws://b.example'], filter: {}, pluginDown: undefined, pluginUp: undefined },
      // "limit" is the router's own business (strfry sends "limit": 0): dropped.
      { name: 'other', dir: 'down', urls: ['ws://c.example'], filter: { kinds: [1], '#t': ['nostr'] }, pluginDown: undefined, pluginUp: undefined },
      { name: 'dotted', dir: 'both', urls: ['wss://d.example/path'], filter: {}, pluginDown: undefined, pluginUp: undefined },
    ]);
  });

  it('merges a section written twice, a later "=" replaces, arrays written without "=" join (taoCONFIG additions)', () => {
    const value = toPlain(
      parseConfigText(`
        a { x = 1  y { p = 1 } }
        a { z = 2  y { q = 2 } }
        b = { x = 1 }
        b = { y = 2 }
        list [ 1 2 ]
        list [ 3 ]
        s = "it\\"s \\u00e9"
      `),
    );
    expect(value).toEqual({ a: { x: 1, y: { p: 1, q: 2 }, z: 2 }, b: { y: 2 }, list: [1, 2, 3], s: 'it"s é' });
  });

  it('refuses each mistake with one line: the file, line and column, the field, what it should be', () => {
    expect(refusal('streams { s { dir = "sideways" urls = ["ws://a.example"] } }')).toBe(
      'router config router.conf:1:21: streams.s.dir must be "up", "down" or "both" (got "sideways")',
    );
    expect(refusal('streams {\n  s {\n    dir = "down"\n    urls = ["ws://a.example"]\n    filters = { "kinds": [1] }\n  }\n}')).toBe(
      'router config router.conf:5:5: streams.s.filters is not a stream setting (known: dir, urls, filter, pluginDown, pluginUp, maxMessageBytes)',
    );
    expect(refusal('streams { s { dir = "down" urls = [] } }')).toMatch(/^router config router\.conf:1:35: streams\.s\.urls must be a non-empty array/);
    expect(refusal('streams { s { dir = "down" urls = ["https://a.example"] } }')).toMatch(/1:36: streams\.s\.urls holds "https:\/\/a\.example", not a relay URL/);
    expect(refusal('streams { s { dir = "down" urls = ["ws://a.example" "ws://a.example"] } }')).toMatch(/1:53: streams\.s\.urls lists "ws:\/\/a\.example" twice/);
    expect(refusal('streams { s { dir = "down" urls = ["ws://a.example"] filter = { "kinds": 1 } } }')).toMatch(/1:63: streams\.s\.filter is not a usable filter: invalid: "kinds" must be an array/);
    expect(refusal('streams { s { dir = "down" urls = ["ws://a.example"] filter = { "search": "x" } } }')).toMatch(/streams\.s\.filter may not use "search"/);
    expect(refusal('streams { s { urls = ["ws://a.example"] } }')).toBe('router config router.conf:1:11: streams.s has no dir (up, down or both)');
    expect(refusal('connectionTimeout = 0\nstreams {}')).toMatch(/^router config router\.conf:1:21: connectionTimeout must be a whole number of seconds from 1 to 3600 \(got 0\)$/);
    expect(refusal('verbose = "yes"\nstreams {}')).toMatch(/1:11: verbose must be true or false \(got "yes"\)/);
    expect(refusal('verbose = false')).toBe('router config router.conf: no "streams" section (strfry docs/router.md: streams { name { dir = "down" urls = [ "wss://…" ] } })');
    expect(refusal('relay { port = 7777 }\nstreams {}')).toMatch(/1:1: relay is not a router setting/);
  });

  it("reads a stream's maxMessageBytes (pgrelay's own key, which strfry ignores); unset, the relay's bound applies", () => {
    const config = parse('streams {\n  s { dir = "down" urls = ["ws://a.example"] maxMessageBytes = 65536 }\n  t { dir = "up" urls = ["ws://b.example"] }\n}');
    expect(config.streams.map((s) => [s.name, s.maxMessageBytes])).toEqual([
      ['s', 65536],
      ['t', undefined],
    ]);
    expect(parse('{"streams": {"s": {"dir": "both", "urls": ["ws://a.example"], "maxMessageBytes": 2097152}}}').streams[0].maxMessageBytes).toBe(2097152);
  });

  it('refuses a maxMessageBytes that is not a whole number of bytes from 1024 to 1 GiB, with the line and column', () => {
    expect(refusal('streams { s { dir = "down" urls = ["ws://a.example"] maxMessageBytes = 512 } }')).toBe(
      'router config router.conf:1:72: streams.s.maxMessageBytes must be a whole number of bytes from 1024 to 1073741824 (got 512)',
    );
    expect(refusal('streams { s { dir = "down" urls = ["ws://a.example"] maxMessageBytes = 1.5 } }')).toMatch(/1:72: streams\.s\.maxMessageBytes must be a whole number of bytes/);
    expect(refusal('streams { s { dir = "down" urls = ["ws://a.example"] maxMessageBytes = "1 MB" } }')).toMatch(/1:72: streams\.s\.maxMessageBytes must be a whole number of bytes .*\(got "1 MB"\)/);
    expect(refusal('streams { s { dir = "down" urls = ["ws://a.example"] maxMessageBytes = 2147483648 } }')).toMatch(/from 1024 to 1073741824 \(got 2147483648\)/);
  });

  it('refuses syntax it does not take, and broken syntax, with the line and column', () => {
    expect(refusal('streams {\n  s {\n    dir = "down\n  }\n}')).toBe('router config router.conf:3:11: a string is not closed before the end of its line');
    expect(refusal('streams {\n  s { dir = "down" urls = ["ws://a.example"]\n')).toMatch(/^router config router\.conf:3:1: missing "}" \(the object opened at 2:5 is not closed\)$/);
    expect(refusal('connectionTimeout += 1\nstreams {}')).toMatch(/1:19: "\+=" \(taoCONFIG additions\) is not supported here/);
    expect(refusal('(include "other.conf")\nstreams {}')).toMatch(/1:1: references and extensions in parentheses \(taoCONFIG\) are not supported here/);
    expect(refusal('streams { s { dir = down } }')).toMatch(/1:21: expected a value, found the bare word "down" \(strings need quotes\)/);
    expect(refusal('connectionTimeout = 0x14\nstreams {}')).toMatch(/1:21: not a number this file may hold/);
    expect(refusal('streams { s { dir = "down",, } }')).toMatch(/1:28: two commas in a row/);
    expect(refusal('streams { } }')).toMatch(/1:13: unexpected "}": no section is open here/);
  });

  it("reconnects a stream only when its dir or filter changes (strfry's rule); urls and plugins change in place", () => {
    const [a] = parse('streams { s { dir = "down" urls = ["ws://a.example"] filter = { "kinds": [1, 3] } } }').streams;
    const [urls] = parse('streams { s { dir = "down" urls = ["ws://a.example" "ws://b.example"] filter = { "kinds": [1, 3] } pluginDown = "x.js" } }').streams;
    const [reordered] = parse('streams { s { filter = { "kinds": [1, 3] } urls = ["ws://a.example"] dir = "down" } }').streams;
    const [dir] = parse('streams { s { dir = "both" urls = ["ws://a.example"] filter = { "kinds": [1, 3] } } }').streams;
    const [filter] = parse('streams { s { dir = "down" urls = ["ws://a.example"] filter = { "kinds": [1] } } }').streams;
    expect(needsReconnect(a, urls)).toBe(false);
    expect(needsReconnect(a, reordered)).toBe(false);
    expect(needsReconnect(a, dir)).toBe(true);
    expect(needsReconnect(a, filter)).toBe(true);
    // A new bound applies from the stream's next connection.
    const [bound] = parse('streams { s { dir = "down" urls = ["ws://a.example"] filter = { "kinds": [1, 3] } maxMessageBytes = 65536 } }').streams;
    expect(needsReconnect(a, bound)).toBe(false);
  });
});
