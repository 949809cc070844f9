// npm run bench:webhooks: the webhook queue (store/webhook-queue.ts) measured on its own, as PGMQ
// publishes its figures: rows enqueued in batches of 100 (as the writer's outbox does, one INSERT per
// batch), then claimed 100 at a time (FOR UPDATE SKIP LOCKED, visibility timeout) and deleted, by one
// and by two workers at once. A fresh embedded database in a temporary folder.
// (End-to-end delivery at increasing publish rates, with failing and absent receivers, is not here yet.)
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { parseConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { openDatabase } from '../src/store/database.js';
import { changeEndpoints } from '../src/store/outbox.js';
import { claimDeliveries, completeDeliveries } from '../src/store/webhook-queue.js';
import { loadAverage, machineDescription } from './load/system.js';

const { values } = parseArgs({
  options: { rows: { type: 'string', default: '200000' }, batch: { type: 'string', default: '100' }, help: { type: 'boolean', default: false } },
});
if (values.help) {
  console.log('usage: npm run bench:webhooks -- [--rows N] [--batch N]   (defaults 200000 rows, batches of 100)');
  process.exit(0);
}
const rows = Number(values.rows);
const batch = Number(values.batch);
const dataDir = await mkdtemp(path.join(tmpdir(), 'pgrelay-webhooks-'));
const db = await openDatabase(parseConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'silent', DB_POOL_SIZE: '4' }), createLogger('silent'));
const payload = JSON.stringify({ id: 'a'.repeat(64), pubkey: 'b'.repeat(64), created_at: 1_700_000_000, kind: 1, tags: [], content: 'x'.repeat(300), sig: 'c'.repeat(128) });

async function enqueue(endpoint: number): Promise<number> {
  const started = performance.now();
  const ids = Array.from({ length: batch }, (_, i) => Buffer.from(i.toString(16).padStart(64, '0'), 'hex'));
  for (let done = 0; done < rows; done += batch)
    await db.pool.query('INSERT INTO webhook_deliveries (endpoint_id, event_id, payload) SELECT $1, id, $3 FROM unnest($2::bytea[]) id', [endpoint, ids, payload]);
  return rows / ((performance.now() - started) / 1000);
}

/** Claims and deletes until the queue is empty, with `workers` loops at once; rows/s. */
async function drain(workers: number): Promise<number> {
  const started = performance.now();
  let total = 0;
  await Promise.all(
    Array.from({ length: workers }, async () => {
      for (;;) {
        const claimed = await claimDeliveries(db.pool, batch, 60_000);
        if (claimed.length === 0) return;
        await completeDeliveries(db.pool, claimed.map((d) => d.id));
        total += claimed.length;
      }
    }),
  );
  if (total !== rows) throw new Error(`drained ${total} of ${rows}`);
  return rows / ((performance.now() - started) / 1000);
}

try {
  console.log(`${machineDescription()}; load average ${loadAverage().toFixed(1)}`);
  const endpoint = await changeEndpoints(db.pool, async (c) => (await c.query<{ id: number }>(`INSERT INTO webhook_endpoints (url, filters) VALUES ('http://127.0.0.1:1/', '[{}]') RETURNING id`)).rows[0].id);
  const results: string[] = [];
  for (const workers of [1, 2]) {
    const enqueued = await enqueue(endpoint);
    await db.pool.query('VACUUM ANALYZE webhook_deliveries');
    const drained = await drain(workers);
    results.push(`| ${workers} | ${rows.toLocaleString('en-US')} | ${Math.round(enqueued).toLocaleString('en-US')} | ${Math.round(drained).toLocaleString('en-US')} |`);
  }
  console.log(`\nbatches of ${batch}; payload ${payload.length} bytes; load average after ${loadAverage().toFixed(1)}\n`);
  console.log('| drain workers | rows | enqueued rows/s | claimed + deleted rows/s |');
  console.log('|---:|---:|---:|---:|');
  for (const r of results) console.log(r);
} finally {
  await db.close();
  await rm(dataDir, { recursive: true, force: true });
}
