// node dist/bench/signed-events.js --events N > events.jsonl: the seed corpus (bench/lib/corpus.ts),
// but really signed, one event JSON per line, for benchmarking `import` with signature verification
// (the seeded database's signatures are random bytes). Each corpus author gets a deterministic key.
// Signing uses libsecp256k1 (tiny-secp256k1): 100,000 events take about 20 s on one core.
import { createHash } from 'node:crypto';
import { parseArgs } from 'node:util';
import * as secp from 'tiny-secp256k1';
import { canonicalEventJson, computeEventId } from '../src/nostr/event.js';
import { generateCorpus, type Manifest } from './lib/corpus.js';

const HELP = `usage: node dist/bench/signed-events.js [--events N] [--seed N] > events.jsonl

options:
  --events N   events to write (default 100000)
  --seed N     corpus seed (default 7; differs from bench:seed's default so ids do not collide)
  --end T      created_at of the newest event, unix seconds (default: now - 1 day)`;

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '100000' },
    seed: { type: 'string', default: '7' },
    end: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log(HELP);
  process.exit(0);
}
const events = Number(values.events);
const seed = Number(values.seed);
const end = Number(values.end ?? Math.floor(Date.now() / 1000) - 86_400);
const manifest: Manifest = { seed, events, authors: [], hashtags: [], popularNotes: [], articles: [], sampleIds: [], start: 0, end: 0 };

const keys = new Map<string, { secret: Uint8Array; pubkey: string }>();
function keyFor(corpusPubkey: string) {
  let key = keys.get(corpusPubkey);
  if (!key) {
    const secret = createHash('sha256').update(`bench-secret:${corpusPubkey}`).digest();
    key = { secret, pubkey: Buffer.from(secp.xOnlyPointFromScalar(secret)).toString('hex') };
    keys.set(corpusPubkey, key);
  }
  return key;
}

const authors = Math.max(100, Math.min(100_000, Math.floor(events / 10)));
const aux = new Uint8Array(32);
let out = '';
let written = 0;
const started = Date.now();
for (const e of generateCorpus({ events, seed, authors, days: 365, end }, manifest)) {
  const key = keyFor(e.pubkey);
  const unsigned = { pubkey: key.pubkey, created_at: e.created_at, kind: e.kind, tags: e.tags, content: e.content };
  const id = computeEventId(unsigned);
  const sig = Buffer.from(secp.signSchnorr(Buffer.from(id, 'hex'), key.secret, aux)).toString('hex');
  out += canonicalEventJson({ id, ...unsigned, sig }) + '\n';
  if (++written % 1000 === 0) {
    process.stdout.write(out);
    out = '';
  }
  if (written % 20000 === 0) process.stderr.write(`${written}/${events} signed (${Math.round(written / ((Date.now() - started) / 1000))}/s)\n`);
}
process.stdout.write(out);
process.stderr.write(`${written} events signed in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
