// DATABASE_URL as libpq writes it: several hosts (`postgres://u:p@h1:5432,h2:5433/nostr`) and
// `target_session_attrs`, which node-postgres does not read. Parsing only (configuration checks it
// without loading a driver); hosts.ts connects.

export type SessionAttrs = 'any' | 'read-write' | 'read-only' | 'primary' | 'standby' | 'prefer-standby';
const SESSION_ATTRS: readonly SessionAttrs[] = ['any', 'read-write', 'read-only', 'primary', 'standby', 'prefer-standby'];

export interface Host {
  host: string;
  port: number;
}

export interface DatabaseAddress {
  hosts: Host[];
  attrs: SessionAttrs;
  /** The URL with its first host only and no target_session_attrs: node-postgres reads the rest of it. */
  base: string;
  /** The same URL on another of its hosts. */
  urlFor(host: Host): string;
}

export class DatabaseUrlError extends Error {}

export const hostName = (h: Host) => (h.host.includes(':') ? `[${h.host}]:${h.port}` : `${h.host}:${h.port}`);

/** `h1:5432,[::1]:5433,h3` → hosts, the port 5432 where none is given. */
function splitHosts(spec: string): Host[] {
  if (spec === '') return [{ host: 'localhost', port: 5432 }];
  return spec.split(',').map((part) => {
    const m = /^(\[[^\]]+\]|[^:]*)(?::(\d*))?$/.exec(part);
    if (!m || m[1] === '') throw new DatabaseUrlError(`DATABASE_URL: cannot read the host "${part}"`);
    const host = decodeURIComponent(m[1].replace(/^\[|\]$/g, ''));
    return { host, port: m[2] ? Number(m[2]) : 5432 };
  });
}

export function parseDatabaseUrl(url: string): DatabaseAddress {
  const m = /^(postgres(?:ql)?:\/\/)([^@/?#]*@)?([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/i.exec(url);
  // Not a URL node-postgres would read as one (a key=value string, a socket path): passed on as it is.
  if (!m) return { hosts: [], attrs: 'any', base: url, urlFor: () => url };
  const [, scheme, user = '', hostSpec, path, query = ''] = m;
  const hosts = splitHosts(hostSpec);
  let attrs: SessionAttrs = 'any';
  const kept: string[] = [];
  for (const param of query.slice(1).split('&').filter(Boolean)) {
    const [key, value = ''] = param.split('=');
    if (key !== 'target_session_attrs') kept.push(param);
    else if ((SESSION_ATTRS as readonly string[]).includes(decodeURIComponent(value))) attrs = decodeURIComponent(value) as SessionAttrs;
    else throw new DatabaseUrlError(`DATABASE_URL: target_session_attrs=${value} is not one of ${SESSION_ATTRS.join(', ')}`);
  }
  const urlFor = (h: Host) => `${scheme}${user}${hostName(h)}${path}${kept.length ? '?' + kept.join('&') : ''}`;
  return { hosts, attrs, base: urlFor(hosts[0]), urlFor };
}

/** Where a URL points, without its password: for messages and metrics. */
export function describeHosts(url: string): string {
  const { hosts } = parseDatabaseUrl(url);
  return hosts.length ? hosts.map(hostName).join(',') : '(connection string)';
}
