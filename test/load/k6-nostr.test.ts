// The k6/x/nostr reader (load/k6-nostr, load/query-native.js), run in the k6 that
// `npm run load:build-k6-nostr` builds: it must count exactly the EVENTs of its subscription up to
// their EOSE, and count a refusal, a stray message or a silent relay as what it is. Skipped where
// that k6 is not built (it needs Go; the core suite never does).
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { packageRoot } from '../../src/paths.js';
import { TestClient } from '../support/client.js';
import { skipWithout } from '../support/executables.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

const K6 = process.env.K6_NOSTR ?? path.join(packageRoot(), 'load', 'bin', 'k6-nostr');
const SCRIPT = path.join(packageRoot(), 'load', 'query-native.js');
const built = existsSync(K6);
const SKIPPED = process.env.K6_NOSTR
  ? `k6/x/nostr reader (skipped: K6_NOSTR=${process.env.K6_NOSTR} does not exist)`
  : 'k6/x/nostr reader (skipped: load/bin/k6-nostr is not built; run npm run load:build-k6-nostr, which needs Go)';

interface Run {
  exitCode: number;
  log: string;
  metrics: Record<string, Record<string, number>>;
}

let dir: string;

/** One k6 run of query-native.js with a mix of these filters (JSON text per REQ), as the load runner runs it. */
async function runK6(url: string, filters: string[], env: Record<string, string> = {}): Promise<Run> {
  const mix = path.join(dir, `mix-${Math.random().toString(36).slice(2)}.json`);
  const summary = `${mix}.summary.json`;
  await writeFile(mix, JSON.stringify(filters.map((f) => ({ shape: 'test', filters: f }))));
  const vars = { RELAY_URL: url, QUERY_MIX: mix, VUS: '2', DURATION: '1s', ...env };
  const args = ['run', '--quiet', '--no-color', '--summary-export', summary, ...Object.entries(vars).flatMap(([k, v]) => ['-e', `${k}=${v}`]), SCRIPT];
  const { exitCode, log } = await new Promise<{ exitCode: number; log: string }>((resolve) => {
    // Every CLOSED is logged: a fast relay answers thousands in a second, past execFile's 1 MB default.
    execFile(K6, args, { timeout: 60_000, maxBuffer: 256 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ exitCode: code, log: stdout + stderr });
    });
  });
  const metrics = existsSync(summary) ? (JSON.parse(await readFile(summary, 'utf8')) as { metrics: Run['metrics'] }).metrics : {};
  return { exitCode, log, metrics };
}

/**
 * A stand-in relay for what a real one does not do on demand: it answers each REQ with `answer`
 * (messages with SUB for the subscription id), or never when `answer` is undefined.
 */
async function scriptedRelay(answer: ((sub: string) => string[]) | undefined): Promise<{ url: string; close(): Promise<void> }> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((r) => wss.once('listening', r));
  wss.on('connection', (ws: WebSocket) => {
    ws.on('message', (data) => {
      const message = JSON.parse(data.toString()) as unknown[];
      if (message[0] === 'REQ' && answer) for (const m of answer(message[1] as string)) ws.send(m);
    });
  });
  const { port } = wss.address() as { port: number };
  return {
    url: `ws://127.0.0.1:${port}`,
    close: () => {
      for (const ws of wss.clients) ws.terminate();
      return new Promise((r) => wss.close(() => r(undefined)));
    },
  };
}

describe.skipIf(skipWithout(built, SKIPPED))(built ? 'k6/x/nostr reader (load/query-native.js)' : SKIPPED, () => {
  let relay: TestRelay;
  const author = newSigner();

  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'pgrelay-k6-nostr-'));
    relay = await startTestRelay();
    const client = await TestClient.connect(relay.url);
    for (let i = 0; i < 12; i++) expect(await client.publish(author.sign({ kind: 1, content: `note ${i}` }))).toEqual([true, '']);
    expect(await client.publish(newSigner().sign({ kind: 1, content: 'someone else' }))).toEqual([true, '']);
    client.close();
  });

  afterAll(async () => {
    await relay?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('every REQ against the relay counts exactly the stored events its filter matches, then EOSE', async () => {
    const run = await runK6(relay.url, [JSON.stringify({ authors: [author.pubkey], kinds: [1] }), JSON.stringify({ authors: [author.pubkey], limit: 5 })]);
    expect(run.exitCode, run.log).toBe(0);
    expect(run.metrics.reqs.count).toBeGreaterThan(2);
    expect(run.metrics.req_events_per_req.min).toBe(5);
    expect(run.metrics.req_events_per_req.max).toBe(12);
    expect(run.metrics.relay_errors?.count ?? 0).toBe(0);
  });

  test('a REQ the relay refuses with CLOSED is an error, not an answer', async () => {
    const run = await runK6(relay.url, [JSON.stringify({ kinds: 'not a list' })]);
    expect(run.exitCode).toBe(99); // thresholds crossed: relay_errors and checks
    expect(run.metrics.reqs?.count ?? 0).toBe(0);
    expect(run.metrics.relay_errors.count).toBeGreaterThan(0);
    // k6 logs in logfmt: the quotes of the message come escaped.
    expect(run.log).toContain('CLOSED test: [\\"CLOSED\\",\\"q');
    expect(run.log).toContain('invalid:');
  });

  test("only the subscription's own EVENTs count: another sub id's, the AUTH challenge and a look-alike do not", async () => {
    const stand = await scriptedRelay((sub) => [
      '["AUTH","challenge"]',
      `["EVENT","other-${sub}",{"id":"x"}]`,
      `["EVENT",${JSON.stringify(sub)},{"id":"1"}]`,
      `["EVENTS",${JSON.stringify(sub)},{"id":"y"}]`,
      `["EVENT",${JSON.stringify(sub)},{"id":"2"}]`,
      `["EOSE","other-${sub}"]`,
      `["EVENT",${JSON.stringify(sub)},{"id":"3"}]`,
      `["EOSE",${JSON.stringify(sub)}]`,
    ]);
    try {
      const run = await runK6(stand.url, ['{}']);
      expect(run.exitCode, run.log).toBe(0);
      expect(run.metrics.req_events_per_req.min).toBe(3);
      expect(run.metrics.req_events_per_req.max).toBe(3);
    } finally {
      await stand.close();
    }
  });

  test('a relay that never sends EOSE ends each REQ as a timeout', async () => {
    const stand = await scriptedRelay(undefined);
    try {
      const run = await runK6(stand.url, ['{}'], { REQ_TIMEOUT_MS: '300', VUS: '1' });
      expect(run.exitCode).toBe(99);
      expect(run.metrics.reqs?.count ?? 0).toBe(0);
      expect(run.metrics.relay_errors.count).toBeGreaterThan(0);
      expect(run.log).toContain('ended: timeout');
    } finally {
      await stand.close();
    }
  });

  test('a NOTICE in place of an answer is an error', async () => {
    const stand = await scriptedRelay(() => ['["NOTICE","invalid: message is not valid JSON"]']);
    try {
      const run = await runK6(stand.url, ['{}'], { VUS: '1' });
      expect(run.exitCode).toBe(99);
      expect(run.log).toContain('NOTICE test: [\\"NOTICE\\",\\"invalid: message is not valid JSON\\"]');
    } finally {
      await stand.close();
    }
  });
});
