// npm run bench:vanish: a NIP-62 request to vanish from a large account. Seeds N events of one pubkey
// (one tag row each, written by SQL: no signatures needed for this), then stores the kind 62 through
// the relay's write path while another connection keeps writing single-event batches of another
// pubkey, and reports the request's transaction time and that writer's longest wait.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { parseConfig } from '../src/config.js';
import { createLogger } from '../src/log.js';
import { computeEventId, type NostrEvent } from '../src/nostr/event.js';
import { openDatabase } from '../src/store/database.js';
import { prepareEvent } from '../src/store/prepared-event.js';
import { writeBatchStored } from '../src/store/write.js';
import { loadAverage, machineDescription } from './load/system.js';

const { values } = parseArgs({ options: { events: { type: 'string', default: '1000000' }, help: { type: 'boolean', default: false } } });
if (values.help) {
  console.log('usage: npm run bench:vanish -- [--events N]   (default 1000000; a fresh embedded database in a temporary folder)');
  process.exit(0);
}
const n = Number(values.events);
const dataDir = await mkdtemp(path.join(tmpdir(), 'pgrelay-vanish-'));
const db = await openDatabase(parseConfig({ DATA_DIR: dataDir, LOG_LEVEL: 'silent', DB_POOL_SIZE: '4' }), createLogger('silent'));
const fake = (base: Omit<NostrEvent, 'id' | 'sig'>): NostrEvent => ({ id: computeEventId(base), ...base, sig: 'c'.repeat(128) });
try {
  console.log(`${machineDescription()}; load average ${loadAverage().toFixed(1)}`);
  const pubkey = 'ab'.repeat(32);
  const t0 = 1_700_000_000;
  let started = performance.now();
  for (let from = 0; from < n; from += 200_000) {
    const to = Math.min(n, from + 200_000);
    const id = `decode(md5(i::text) || md5((i + 1)::text || 'x'), 'hex')`;
    await db.pool.query(`INSERT INTO events (id, pubkey, kind, created_at, raw) SELECT ${id}, decode($1, 'hex'), 1, $2 - i, '{}' FROM generate_series($3::int, $4::int - 1) i`, [pubkey, t0, from, to]);
    await db.pool.query(`INSERT INTO event_tags (event_id, name, value, kind, created_at) SELECT ${id}, 't', 'tag' || (i % 100), 1, $1 - i FROM generate_series($2::int, $3::int - 1) i`, [t0, from, to]);
  }
  await db.pool.query('VACUUM ANALYZE events');
  await db.pool.query('VACUUM ANALYZE event_tags');
  console.log(`seeded ${n} events of one pubkey in ${((performance.now() - started) / 1000).toFixed(1)} s`);

  let stop = false;
  const waits: number[] = [];
  const otherWriter = (async () => {
    for (let i = 0; !stop; i++) {
      const e = fake({ pubkey: 'cd'.repeat(32), created_at: t0 + i, kind: 1, tags: [], content: 'another writer' });
      const at = performance.now();
      await writeBatchStored(db.pool, [prepareEvent(e)]);
      waits.push(performance.now() - at);
    }
  })();
  await new Promise((r) => setTimeout(r, 1000));
  const before = waits.length;
  const request = fake({ pubkey, created_at: t0 + 10, kind: 62, tags: [['relay', 'ALL_RELAYS']], content: '' });
  started = performance.now();
  const { results } = await writeBatchStored(db.pool, [prepareEvent(request)]);
  const took = performance.now() - started;
  await new Promise((r) => setTimeout(r, 500));
  stop = true;
  await otherWriter;
  const during = waits.slice(before).sort((a, b) => a - b);
  const { rows } = await db.pool.query<{ count: string }>(`SELECT count(*) FROM events WHERE pubkey = decode($1, 'hex')`, [pubkey]);
  console.log(`request: ${results[0].status}; its transaction ${(took / 1000).toFixed(2)} s; events of the pubkey left: ${rows[0].count} (the request)`);
  console.log(`another connection's single-event writes meanwhile: ${during.length}, p50 ${during[during.length >> 1].toFixed(2)} ms, longest ${during.at(-1)!.toFixed(1)} ms`);
} finally {
  await db.close();
  await rm(dataDir, { recursive: true, force: true });
}
