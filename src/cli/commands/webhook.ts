// webhook: the operator's side of webhooks. Endpoints are added, paused and removed here
// (store/webhook-endpoints.ts); every relay process on the database enqueues for the new endpoints from the
// next batch it writes, and the delivery workers send the queue.
import type pg from 'pg';
import * as webhooks from '../../store/webhook-endpoints.js';
import { parseEndpointFilters } from '../../store/outbox.js';
import { parseDuration } from '../../store/retention.js';
import type { Command } from '../command.js';
import { formatCount, intOption, openStore, parseOptions, stopOnSignals, UsageError } from './shared.js';

const SUBCOMMANDS = ['add', 'list', 'pause', 'resume', 'remove', 'deliveries', 'replay', 'redeliver'] as const;
type Subcommand = (typeof SUBCOMMANDS)[number];

const USAGE = `usage: npm run cli -- webhook add <url> --filter JSON [--filter JSON ...] [--secret whsec_...] [--batch N]
       npm run cli -- webhook list [--json]
       npm run cli -- webhook pause|resume|remove <id>
       npm run cli -- webhook deliveries <id> [--limit N] [--dead]
       npm run cli -- webhook replay <id> --since <unix time or age: 1h, 2d>
       npm run cli -- webhook redeliver <id>`;

function idArg(value: string | undefined): number {
  if (value === undefined || !/^\d{1,9}$/.test(value) || Number(value) < 1) throw new UsageError(`expected an endpoint id (see webhook list), got ${JSON.stringify(value ?? '')}`);
  return Number(value);
}

/** Every --filter: a JSON object or an array of them, concatenated. */
function filtersArg(values: string[] | undefined): unknown[] {
  if (!values?.length) throw new UsageError('give at least one --filter (a NIP-01 filter as JSON, e.g. \'{"kinds":[1]}\')');
  const filters: unknown[] = [];
  for (const text of values) {
    let input: unknown;
    try {
      input = JSON.parse(text);
    } catch {
      throw new UsageError(`--filter is not valid JSON: ${text}`);
    }
    if (Array.isArray(input)) filters.push(...input);
    else filters.push(input);
  }
  return filters;
}

/** A unix time (digits only) or an age before now (30m, 1h, 2d). */
export function sinceArg(value: string | undefined, now = Math.floor(Date.now() / 1000)): number {
  if (value === undefined) throw new UsageError('replay needs --since (a unix time, or an age such as 1h or 2d)');
  if (/^\d+$/.test(value)) return Number(value);
  try {
    return Math.max(0, now - parseDuration(value));
  } catch {
    throw new UsageError(`--since: expected a unix time or an age such as 90m, 1h, 2d (got ${JSON.stringify(value)})`);
  }
}

function formatAge(seconds: number | null): string {
  if (seconds === null) return '-';
  if (seconds < 120) return `${Math.round(seconds)}s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m`;
  if (seconds < 172_800) return `${Math.round(seconds / 3600)}h`;
  return `${Math.round(seconds / 86_400)}d`;
}

function notFound(id: number): number {
  console.error(`no webhook endpoint ${id} (see webhook list)`);
  return 1;
}

export const webhookCommand: Command = {
  name: 'webhook',
  help: `${USAGE}

add         adds an endpoint: events stored from now on that match one of its NIP-01 filters are
            queued for it (in the transaction that stores them) and POSTed to <url> (http or https).
            --filter takes a filter object or an array of them, and may be repeated.
            --secret whsec_<base64> signs the requests (Standard Webhooks); without it one is
            generated and printed once. --batch N: events per request, 1-${webhooks.MAX_BATCH_SIZE} (default 1).
            Prints the endpoint's id.
list        every endpoint: id, URL, paused or active, batch size, filters, and its queue: deliveries
            waiting, dead ones, and the age of the oldest waiting one. --json for JSON.
pause       stops deliveries to the endpoint; events go on being queued for it.
resume      starts them again.
remove      removes the endpoint and its queue (says how many deliveries were dropped).
deliveries  the endpoint's waiting deliveries, oldest first (--dead: the dead ones), up to --limit
            (default 50).
replay      queues again every stored, unexpired event with created_at >= --since that the
            endpoint's filters match. --since is a unix time or an age (90m, 1h, 2d, 1w).
redeliver   makes the endpoint's dead deliveries live again, from their first attempt.

Every relay process on the same database uses a changed endpoint from the next events it stores.

examples:
  npm run cli -- webhook add https://example.com/hook --filter '{"kinds":[1],"#t":["nostr"]}'
  npm run cli -- webhook replay 1 --since 2d`,
  async run(args, { config, log }) {
    const { values, positionals } = parseOptions(
      args,
      {
        filter: { type: 'string', multiple: true },
        secret: { type: 'string' },
        batch: { type: 'string' },
        limit: { type: 'string' },
        dead: { type: 'boolean', default: false },
        since: { type: 'string' },
        json: { type: 'boolean', default: false },
      },
      true,
    );
    const [sub, arg, extra] = positionals;
    if (!(SUBCOMMANDS as readonly string[]).includes(sub ?? '')) throw new UsageError(sub === undefined ? USAGE : `unknown subcommand "${sub}"\n${USAGE}`);
    const what = sub as Subcommand;
    const takes: Record<Subcommand, string[]> = {
      add: ['filter', 'secret', 'batch'],
      list: ['json'],
      pause: [],
      resume: [],
      remove: [],
      deliveries: ['limit', 'dead'],
      replay: ['since'],
      redeliver: [],
    };
    for (const [name, value] of Object.entries(values))
      if (value !== undefined && value !== false && !takes[what].includes(name)) throw new UsageError(`--${name} does not go with webhook ${what}`);
    if (what === 'list' ? arg !== undefined : extra !== undefined) throw new UsageError(`too many arguments\n${USAGE}`);

    // Everything the command line says is checked before the database is opened.
    let run: (pool: pg.Pool) => Promise<number>;
    if (what === 'add') {
      if (arg === undefined) throw new UsageError('webhook add needs the endpoint URL');
      const badUrl = webhooks.checkEndpointUrl(arg);
      if (badUrl) throw new UsageError(badUrl);
      const filters = filtersArg(values.filter);
      const parsed = parseEndpointFilters(filters);
      if (!parsed.ok) throw new UsageError(`--filter: ${parsed.reason}`);
      const badSecret = values.secret === undefined ? undefined : webhooks.checkSecret(values.secret);
      if (badSecret) throw new UsageError(`--secret: ${badSecret}`);
      const batchSize = intOption(values.batch, 'batch', 1, 1);
      if (batchSize > webhooks.MAX_BATCH_SIZE) throw new UsageError(`--batch must be at most ${webhooks.MAX_BATCH_SIZE}`);
      run = async (pool) => {
        const secret = values.secret ?? webhooks.generateSecret();
        const id = await webhooks.addEndpoint(pool, { url: arg, filters, secret, batchSize });
        console.log(`added webhook endpoint ${id}`);
        if (values.secret === undefined) console.log(`secret: ${secret}\n(shown once: give it to the receiver, which checks the signatures with it)`);
        return 0;
      };
    } else if (what === 'list') {
      run = async (pool) => {
        const endpoints = await webhooks.listEndpoints(pool);
        if (values.json) {
          console.log(JSON.stringify(endpoints, null, 2));
          return 0;
        }
        if (endpoints.length === 0) console.log('no webhook endpoints');
        for (const e of endpoints) {
          console.log(`${e.id}  ${e.url}  ${e.paused ? 'paused' : 'active'}  batch ${e.batchSize}${e.hasSecret ? '' : '  unsigned'}`);
          console.log(`    filters: ${JSON.stringify(e.filters)}`);
          console.log(`    queued: ${formatCount(e.queued)}  dead: ${formatCount(e.dead)}  oldest queued: ${formatAge(e.oldestQueuedSeconds)}`);
        }
        return 0;
      };
    } else {
      const id = idArg(arg);
      if (what === 'pause' || what === 'resume') {
        run = async (pool) => {
          if (!(await webhooks.setPaused(pool, id, what === 'pause'))) return notFound(id);
          console.log(`${what === 'pause' ? 'paused' : 'resumed'} webhook endpoint ${id}`);
          return 0;
        };
      } else if (what === 'remove') {
        run = async (pool) => {
          const dropped = await webhooks.removeEndpoint(pool, id);
          if (!dropped) return notFound(id);
          console.log(`removed webhook endpoint ${id}: dropped ${formatCount(dropped.queued)} queued deliveries${dropped.dead ? ` and ${formatCount(dropped.dead)} dead ones` : ''}`);
          return 0;
        };
      } else if (what === 'deliveries') {
        const limit = intOption(values.limit, 'limit', 1, 50);
        run = async (pool) => {
          if (!(await webhooks.endpointExists(pool, id))) return notFound(id);
          const rows = await webhooks.listDeliveries(pool, id, { limit, dead: values.dead });
          const label = values.dead ? 'dead' : 'queued';
          if (rows.length === 0) console.log(`no ${label} deliveries for endpoint ${id}`);
          else console.log(`${label} deliveries for endpoint ${id} (oldest first${rows.length === limit ? `, first ${limit}` : ''}):`);
          for (const d of rows) {
            console.log(`${d.id}  event ${d.eventId}  attempts ${d.attempts}  created ${d.createdAt.toISOString()}  visible ${d.visibleAt.toISOString()}`);
            if (d.lastError) console.log(`    last error: ${d.lastError}`);
          }
          return 0;
        };
      } else if (what === 'replay') {
        const since = sinceArg(values.since);
        run = async (pool) => {
          const stop = stopOnSignals(log);
          try {
            const result = await webhooks.replayEndpoint(pool, id, { since, signal: stop.signal });
            if (!result) return notFound(id);
            console.log(
              `replay since ${since} (${new Date(since * 1000).toISOString()}): enqueued ${formatCount(result.enqueued)} deliveries for endpoint ${id} (${formatCount(result.scanned)} stored events read)`,
            );
            if (!result.complete) console.log('stopped early: what was enqueued stays queued');
            return 0;
          } finally {
            stop.dispose();
          }
        };
      } else {
        run = async (pool) => {
          if (!(await webhooks.endpointExists(pool, id))) return notFound(id);
          const n = await webhooks.redeliverDead(pool, id);
          console.log(`redelivering ${formatCount(n)} dead deliveries for endpoint ${id}`);
          return 0;
        };
      }
    }

    const db = await openStore(config, log);
    try {
      return await run(db.pool);
    } finally {
      await db.close();
    }
  },
};
