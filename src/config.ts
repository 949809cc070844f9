// The one place configuration is read: environment variables (and `.env`), validated with zod.
// Every variable is documented in .env.example; a bad value stops start-up naming the variable.
import { existsSync } from 'node:fs';
import { isIP } from 'node:net';
import { z } from 'zod';
import { pubkeyFromText } from './nostr/nip19.js';

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
const exemptList = z
  .string()
  .optional()
  .refine((v) => items(v).every((x) => /^[0-9a-f]{64}$/.test(x) || isAddressOrCidr(x)), 'comma-separated hex pubkeys, IP addresses or CIDR blocks')
  .transform(items);

const postgresUrl = z.url({ protocol: /^postgres(ql)?$/ });
const urlList = z
  .string()
  .optional()
  .refine((v) => items(v).every((x) => postgresUrl.safeParse(x).success), 'comma-separated postgres:// URLs')
  .transform(items);

const schema = z.object({
  HOST: z.string().min(1).default('127.0.0.1'),
  PORT: int(0, 65535).default(8008),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),

  // Database: an external server, or an embedded PostgreSQL kept in DATA_DIR.
  DATABASE_URL: optionalText.pipe(postgresUrl.optional()),
  DATA_DIR: z.string().min(1).default('./data'),
  EMBEDDED_PG_PORT: int(0, 65535).default(0),
  DB_POOL_SIZE: int(1, 500).default(16),
  QUERY_TIMEOUT_MS: int(100).default(5000),

  // NIP-11 relay information.
  RELAY_NAME: z.string().default('pgrelay'),
  RELAY_DESCRIPTION: z.string().default('A Nostr relay on PostgreSQL with normalized tag indexes.'),
  RELAY_PUBKEY: optionalText.pipe(z.string().regex(/^[0-9a-f]{64}$/).optional()),
  RELAY_CONTACT: optionalText,
  RELAY_URL: optionalText.pipe(z.string().regex(/^(wss?|https?):\/\/[^\s/?#]+[^\s]*$/, 'a relay URL such as wss://relay.example.com').optional()),

  // Limits: enforced, and announced in NIP-11 `limitation`.
  MAX_MESSAGE_BYTES: int(1024).default(131072),
  MAX_SUBSCRIPTIONS: int(1).default(20),
  MAX_FILTERS: int(1).default(10),
  MAX_LIMIT: int(1).default(5000),
  DEFAULT_LIMIT: int(1).default(500),
  MAX_SUBID_LENGTH: int(1, 64).default(64),
  MAX_EVENT_TAGS: int(1).default(2000),
  MAX_CONTENT_LENGTH: int(1).default(102400),
  MAX_FILTER_VALUES: int(1).default(1000),
  CREATED_AT_FUTURE_SECONDS: int(0).default(900),
  CREATED_AT_PAST_SECONDS: int(0).default(0),
  MIN_POW_DIFFICULTY: int(0, 256).default(0),

  // NIP-77 negentropy sync (src/relay/negentropy.ts).
  NEGENTROPY_MAX_RECORDS: int(0, 10_000_000).default(1_000_000),
  NEGENTROPY_MAX_SESSIONS: int(1, 100).default(4),
  NEGENTROPY_MAX_TOTAL_RECORDS: int(0).default(4_000_000),
  NEGENTROPY_IDLE_SECONDS: int(1).default(60),
  NEGENTROPY_FRAME_SIZE_LIMIT: z.union([z.literal(0), int(4096)]).default(60_000),

  // Webhooks (src/relay/webhooks.ts): endpoints are managed with `npm run cli -- webhook`.
  WEBHOOK_DELIVERY: bool.default(true),
  WEBHOOK_CONCURRENCY: int(1, 256).default(8),
  WEBHOOK_TIMEOUT_MS: int(100).default(10_000),
  WEBHOOK_MAX_AGE_SECONDS: int(1).default(86_400),

  // Ingest pipeline.
  VERIFY_THREADS: z.union([z.literal('auto'), int(0, 64)]).default('auto'),
  WRITE_BATCH_SIZE: int(1, 10000).default(500),
  WRITE_QUEUE_MAX: int(1).default(20000),
  WRITE_CONCURRENCY: int(1, 16).default(1),
  MAX_PENDING_EVENTS: int(1).default(500),

  // Connections and maintenance.
  MAX_BUFFERED_BYTES: int(1024).default(8 * 1024 * 1024),
  EXPIRY_SWEEP_SECONDS: int(1).default(60),
  // Retention (src/store/retention.ts): off unless RETENTION_OLDER_THAN is set.
  RETENTION_OLDER_THAN: optionalText.pipe(z.string().regex(/^\d+[smhdw]$/, 'a duration such as 30d, 12h, 90m').optional()),
  RETENTION_KINDS: optionalText.pipe(
    z.string().regex(/^\d{1,5}(,\d{1,5})*$/, 'comma-separated kinds, e.g. 1,7').refine((v) => v.split(',').every((k) => Number(k) <= 65535), 'kinds are 0-65535').optional(),
  ),
  RETENTION_INCLUDE_REPLACEABLE: bool.default(false),
  RETENTION_INTERVAL_SECONDS: int(1).default(3600),
  SHUTDOWN_TIMEOUT_MS: int(0).default(10000),

  // On the public internet: TLS, proxies, NIP-42 AUTH, private kinds, rate limits.
  TLS_CERT_FILE: optionalText,
  TLS_KEY_FILE: optionalText,
  TRUSTED_PROXIES: cidrList,
  TRUST_PROXY: bool.default(false), // deprecated: TRUSTED_PROXIES=127.0.0.0/8,::1/128
  AUTH_REQUIRED: z.enum(['none', 'writes', 'all']).default('none'),
  RESTRICTED_READ_KINDS: kindList.default([4, 1059]),
  RATE_LIMIT_EVENTS_PER_SECOND: rate.default(10),
  RATE_LIMIT_EVENTS_BURST: int(0).default(100),
  RATE_LIMIT_REQS_PER_SECOND: rate.default(10),
  RATE_LIMIT_REQS_BURST: int(0).default(100),
  RATE_LIMIT_CONNECTIONS_PER_MINUTE: rate.default(60),
  RATE_LIMIT_CONNECTIONS_BURST: int(0).default(30),
  MAX_CONNECTIONS_PER_ADDRESS: int(0).default(100),
  RATE_LIMIT_DISCONNECT_AFTER: int(0).default(100),
  RATE_LIMIT_EXEMPT: exemptList,

  // The operator's console: NIP-86 management API, /metrics, the status page.
  ADMIN_PUBKEYS: pubkeyList,
  METRICS_TOKEN: optionalText.pipe(z.string().min(16, 'at least 16 characters').optional()),
  STATUS_PAGE: bool.default(true),

  // Scale-out (docs/scaling.md): processes on this host, read replicas.
  WORKERS: z.union([z.literal('auto'), int(1, 256)]).default(1),
  READ_DATABASE_URL: urlList,
  READ_REPLICA_MAX_LAG_MS: int(0).default(5000),
  READ_REPLICA_WAIT_MS: int(0, 10_000).default(50),

  // The hot tier (store/hot): the newest events in memory, answering REQs inside its window.
  HOT_TIER_MB: z.union([z.literal('auto'), int(0, 1_000_000)]).default('auto'),
});

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
  if (Boolean(config.TLS_CERT_FILE) !== Boolean(config.TLS_KEY_FILE))
    throw new ConfigError('invalid configuration:\n  TLS_CERT_FILE and TLS_KEY_FILE: set both (wss://) or neither (ws://)');
  return config;
}

/** Reads `.env` (variables already set in the environment win) and then process.env. */
export function loadConfig(envFile = '.env'): Config {
  if (existsSync(envFile)) process.loadEnvFile(envFile);
  return parseConfig(process.env);
}
