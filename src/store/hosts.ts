// DATABASE_URL as libpq reads it: several hosts, and `target_session_attrs` to say which of them to
// use (`postgres://u:p@h1:5432,h2:5433,h3:5434/nostr?target_session_attrs=read-write`). node-postgres
// takes one host only, so every connection the relay opens goes through a HostFinder: it asks each
// server its role (pg_is_in_recovery, transaction_read_only), connects to the first that fits, and
// looks again when that server fails or stops fitting. That follows whatever the cluster's own tools
// decided (Patroni promoting a replica); nothing here elects anything.
//
// A server can fail without closing its sockets (frozen, or its host unreachable): queries then hang
// without an error. With several hosts, a watchdog asks the current server every second on a fresh
// connection; when another server is found to be the one to use, every connection still open to the
// old one is cut, so what waited on it (a write batch, the live feed's read) fails and is retried there.
import pg from 'pg';

import { hostName, parseDatabaseUrl, type DatabaseAddress, type Host, type SessionAttrs } from './database-url.js';

export { parseDatabaseUrl, describeHosts, type DatabaseAddress, type Host, type SessionAttrs } from './database-url.js';

interface Role {
  standby: boolean;
  readOnly: boolean;
}

const ROLE_SQL = `SELECT pg_is_in_recovery() AS standby, current_setting('transaction_read_only') = 'on' AS "readOnly"`;

function fits(attrs: SessionAttrs, role: Role): boolean {
  switch (attrs) {
    case 'read-write':
      return !role.readOnly;
    case 'primary':
      return !role.standby;
    case 'read-only':
      return role.readOnly;
    case 'standby':
      return role.standby;
    default:
      return true;
  }
}

const ATTRS_WORDS: Record<SessionAttrs, string> = {
  any: 'reachable',
  'read-write': 'writable',
  primary: 'a primary',
  'read-only': 'read-only',
  standby: 'a standby',
  'prefer-standby': 'reachable',
};

/** No server fits: carries the first server's error code (ECONNREFUSED …) so start-up messages stay precise. */
export class NoServerError extends Error {
  constructor(
    message: string,
    readonly code: string | undefined,
  ) {
    super(message);
  }
}

/** How long a probe of one server may take (connect and role query). */
const PROBE_TIMEOUT_MS = 3000;
/** A search that found nothing is not repeated sooner than this: callers share its answer. */
const FAILED_FIND_REUSE_MS = 200;
const WATCH_MS = 1000;
/** The current server unanswering for this long is treated as gone, even before another fits. */
const UNANSWERED_CUT_MS = 6000;

export interface FinderEvents {
  /** The server in use changed (not at the first connection): a failover or switchover. */
  onChange?: (from: Host, to: Host) => void;
}

export class HostFinder {
  private current: Host | undefined;
  private finding: Promise<Host> | undefined;
  private failedFind: { at: number; err: Error } | undefined;
  /** Connections open through this finder, with the server each is on. */
  private readonly open = new Map<pg.Client, Host>();
  private watchTimer: NodeJS.Timeout | undefined;
  private unansweredSince: number | undefined;
  /** How many times the server in use changed. */
  changes = 0;
  /** False while no server fits (the last search found none, or the current one stopped answering). */
  reachable = true;
  private readonly listeners: Array<(from: Host, to: Host) => void> = [];

  constructor(
    readonly address: DatabaseAddress,
    private readonly baseConfig: pg.ClientConfig,
  ) {}

  get attrs(): SessionAttrs {
    return this.address.attrs;
  }

  /** host:port of the server in use, if one is known. */
  get serving(): string | undefined {
    return this.current && hostName(this.current);
  }

  onChange(listener: (from: Host, to: Host) => void): void {
    this.listeners.push(listener);
  }

  /** The server to connect to: the one in use, or the result of a search. */
  target(): Promise<Host> {
    return this.current ? Promise.resolve(this.current) : this.find();
  }

  /** The server `host` failed a connection or no longer fits: the next connection looks again. */
  failed(host: Host): void {
    if (this.current && sameHost(this.current, host)) this.current = undefined;
  }

  /** Asks every server its role, at once, and picks the first in the URL's order that fits. */
  find(): Promise<Host> {
    if (this.failedFind && Date.now() - this.failedFind.at < FAILED_FIND_REUSE_MS) return Promise.reject(this.failedFind.err);
    return (this.finding ??= this.search().finally(() => (this.finding = undefined)));
  }

  private async search(): Promise<Host> {
    const { hosts, attrs } = this.address;
    type Probe = { h: Host; role: Role } | { h: Host; err: Error & { code?: string } };
    const pending = hosts.map((h) => this.probe(h).then((role): Probe => ({ h, role }), (err: Error & { code?: string }): Probe => ({ h, err })));
    // Without waiting for servers that answer slowly (a frozen one answers nothing): the writable
    // server is the only one, so the first to say it is wins; otherwise the first that fits in the
    // URL's order, taken once every earlier one has been ruled out.
    const probes: Array<Probe | undefined> = hosts.map(() => undefined);
    const wanted = (p: Probe) => 'role' in p && (attrs === 'prefer-standby' ? p.role.standby : fits(attrs, p.role));
    const onlyOne = attrs === 'read-write' || attrs === 'primary';
    let pick = await new Promise<Probe | undefined>((resolve) => {
      let left = hosts.length;
      pending.forEach((promise, i) =>
        promise.then((p) => {
          probes[i] = p;
          left--;
          if (onlyOne && wanted(p)) return resolve(p);
          const first = probes.findIndex((q) => q === undefined || wanted(q));
          if (first >= 0 && probes[first] !== undefined) resolve(probes[first]);
          else if (left === 0) resolve(undefined);
        }),
      );
    });
    if (!pick && attrs === 'prefer-standby') pick = probes.find((p) => p !== undefined && 'role' in p);
    if (!pick) {
      const answered = probes.filter((p): p is Probe => p !== undefined);
      const reasons = answered.map((p) => `${hostName(p.h)}: ${'err' in p ? p.err.message : p.role.standby ? 'a standby' : 'read-only'}`).join('; ');
      const firstError = answered.find((p): p is { h: Host; err: Error & { code?: string } } => 'err' in p)?.err;
      const err = new NoServerError(hosts.length > 1 ? `no database server is ${ATTRS_WORDS[attrs]} (${reasons})` : (firstError?.message ?? reasons), firstError?.code);
      this.failedFind = { at: Date.now(), err };
      this.reachable = false;
      throw err;
    }
    this.failedFind = undefined;
    this.reachable = true;
    this.use(pick.h);
    return pick.h;
  }

  private use(next: Host): void {
    const previous = this.lastUsed;
    this.current = next;
    this.lastUsed = next;
    this.unansweredSince = undefined;
    if (!previous || sameHost(previous, next)) return;
    this.changes++;
    // Connections still open to the server left behind (frozen, or demoted and still answering) are
    // cut: what waits on them fails now and is retried on the new one.
    for (const [client, host] of this.open) if (sameHost(host, previous)) cut(client);
    for (const listener of this.listeners) listener(previous, next);
  }

  private lastUsed: Host | undefined;

  private async probe(h: Host): Promise<Role> {
    const client = new pg.Client({ ...this.baseConfig, connectionTimeoutMillis: PROBE_TIMEOUT_MS, query_timeout: PROBE_TIMEOUT_MS });
    // Set on the client: in its config, the connection string's host would win.
    client.host = h.host;
    client.port = h.port;
    client.on('error', () => undefined);
    try {
      await client.connect();
      return (await client.query<Role>(ROLE_SQL)).rows[0];
    } finally {
      // A frozen server would hold end() open: the socket is dropped instead.
      cut(client);
    }
  }

  /** Connects `client` (a FinderClient) to the server in use, checking its role. */
  async connect(client: pg.Client, connectOnce: () => Promise<unknown>): Promise<void> {
    const target = await this.target();
    client.host = target.host;
    client.port = target.port;
    try {
      await connectOnce();
    } catch (err) {
      this.failed(target);
      throw err;
    }
    if (this.attrs !== 'any' && this.attrs !== 'prefer-standby') {
      let role: Role;
      try {
        role = (await client.query<Role>(ROLE_SQL)).rows[0];
      } catch (err) {
        this.failed(target);
        cut(client);
        throw err;
      }
      if (!fits(this.attrs, role)) {
        this.failed(target);
        cut(client);
        throw new NoServerError(`the database server at ${hostName(target)} is no longer ${ATTRS_WORDS[this.attrs]}; looking for the one that is`, '25006');
      }
    }
    this.open.set(client, target);
    client.once('end', () => this.open.delete(client));
    this.watch();
  }

  /** With several hosts: every second, whether the server in use still answers and fits. */
  private watch(): void {
    if (this.watchTimer || this.address.hosts.length < 2 || this.attrs === 'any') return;
    const tick = async () => {
      const current = this.current ?? this.lastUsed;
      if (current && this.open.size > 0) {
        const ok = await this.probe(current).then((role) => fits(this.attrs, role), () => false);
        if (ok) this.unansweredSince = undefined;
        else {
          this.unansweredSince ??= Date.now();
          this.failed(current);
          this.reachable = false;
          // Another server fits: use it (and cut the old connections). None yet: past a few seconds
          // of silence, the old connections are cut anyway, so nothing waits on them for long.
          await this.find().catch(() => undefined);
          if (this.unansweredSince !== undefined && Date.now() - this.unansweredSince > UNANSWERED_CUT_MS)
            for (const [client, host] of this.open) if (sameHost(host, current)) cut(client);
        }
      }
      this.watchTimer = setTimeout(() => void tick(), WATCH_MS).unref();
    };
    this.watchTimer = setTimeout(() => void tick(), WATCH_MS).unref();
  }

  stop(): void {
    clearTimeout(this.watchTimer);
  }
}

const sameHost = (a: Host, b: Host) => a.host === b.host && a.port === b.port;

/** Drops a client's socket without the goodbye a frozen server would never answer. */
function cut(client: pg.Client): void {
  (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
}

const finders = new Map<string, HostFinder>();

/** The finder for a URL, shared by every pool and client on it in this process. */
export function finderFor(url: string): HostFinder {
  let finder = finders.get(url);
  if (!finder) {
    const address = parseDatabaseUrl(url);
    finder = new HostFinder(address, { connectionString: address.base });
    finders.set(url, finder);
  }
  return finder;
}

/** Whether connections to `url` need a finder (several hosts or a role to check). */
export function needsFinder(url: string): boolean {
  const { hosts, attrs } = parseDatabaseUrl(url);
  return hosts.length > 1 || attrs !== 'any';
}

/** A pg.Client class whose connect() goes through the URL's finder (for pg.Pool's `Client` option). */
export function finderClient(url: string): typeof pg.Client {
  const finder = finderFor(url);
  return class FinderClient extends pg.Client {
    override connect(): Promise<pg.Client>;
    override connect(callback: (err: Error | null, c?: pg.Client) => void): void;
    override connect(callback?: (err: Error | null, c?: pg.Client) => void): Promise<pg.Client> | void {
      const done = finder.connect(this, () => super.connect()).then(() => this);
      if (!callback) return done;
      done.then(
        (c) => callback(null, c),
        (err: Error) => callback(err),
      );
    }
  } as typeof pg.Client;
}

/** Options for pg.Client / pg.Pool on `url`, whatever its form. */
export function connectionOptions(url: string): { connectionString: string; Client?: typeof pg.Client } {
  if (!needsFinder(url)) return { connectionString: url };
  return { connectionString: parseDatabaseUrl(url).base, Client: finderClient(url) };
}

/** A client on `url` (several hosts: the one that fits), not yet connected. */
export function newClient(url: string, options: Omit<pg.ClientConfig, 'connectionString'> = {}): pg.Client {
  const { connectionString, Client = pg.Client } = connectionOptions(url);
  return new Client({ ...options, connectionString });
}

/** The single-host URL of the server `url` leads to now (for knex, which opens its own connections). */
export async function currentUrl(url: string): Promise<string> {
  if (!needsFinder(url)) return url;
  const finder = finderFor(url);
  return finder.address.urlFor(await finder.target());
}
