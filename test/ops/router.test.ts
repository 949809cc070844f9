// The router in a relay process (as ROUTER_CONFIG runs it), between real relays over real sockets:
// down stores through the relay's write path and fans out; up sends what is committed here and
// never echoes an event to the remote it came from; both, with pluginDown and pluginUp told what
// strfry tells them; catch-up after the router was away, by negentropy and, from a remote without
// NIP-77, by REQ since; positions recorded only by the connection that proved them (a connection
// lost, or pluginUp failing, while a checkpoint waits); messages from remotes bounded; hot reconfig
// that leaves unchanged streams connected, and a bad edit that leaves the running configuration;
// metrics per stream and remote. Orders and counts only.
import { once } from 'node:events';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import type { NostrEvent } from '../../src/nostr/event.js';
import { remoteMessageLimit } from '../../src/ops/relay-client.js';
import type { RouterHost } from '../../src/ops/router/host.js';
import { readPosition } from '../../src/ops/router/positions.js';
import { Router } from '../../src/ops/router/router.js';
import { TestClient } from '../support/client.js';
import { newSigner, now } from '../support/keys.js';
import { routerHostOf } from '../support/router-host.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { until } from '../support/wait.js';

const FAST = { reconnectMs: [30, 80] as [number, number], checkpointMs: 100, reloadMs: 50, keepAliveMs: 5000 };
const SCRIPTED = fileURLToPath(new URL('../fixtures/plugins/scripted.js', import.meta.url));


let local: TestRelay;
let r1: TestRelay;
let r2: TestRelay;
let noNeg: TestRelay; // a remote without NIP-77
let slow: TestRelay; // a remote that takes 20 events a second from one address
let dir: string;
beforeAll(async () => {
  [local, r1, r2, noNeg, slow] = await Promise.all([
    startTestRelay(),
    startTestRelay(),
    startTestRelay(),
    startTestRelay({ NEGENTROPY_MAX_RECORDS: '0' }),
    startTestRelay({ RATE_LIMIT_EVENTS_PER_SECOND: '20', RATE_LIMIT_EVENTS_BURST: '5' }),
  ]);
  dir = await mkdtemp(path.join(tmpdir(), 'router-test-'));
});
afterAll(async () => {
  await Promise.all([local, r1, r2, noNeg, slow].map((r) => r?.close()));
  if (dir) await rm(dir, { recursive: true, force: true });
});

const has = async (relay: TestRelay, id: string) =>
  (await relay.db.pool.query('SELECT 1 FROM events WHERE id = decode($1, $2)', [id, 'hex'])).rowCount === 1;
const allIn = async (relay: TestRelay, events: NostrEvent[]) => (await Promise.all(events.map((e) => has(relay, e.id)))).every(Boolean);

async function publish(relay: TestRelay, events: NostrEvent[]): Promise<void> {
  const client = await TestClient.connect(relay.url);
  for (const e of events) expect(await client.publish(e)).toEqual([true, '']);
  client.close();
}

async function metric(relay: TestRelay, name: string, labels: Record<string, string>): Promise<number> {
  const found = (await relay.relay.context.metrics.registry.getMetricsAsJSON()).find((m) => m.name === name);
  return (found?.values ?? [])
    .filter((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))
    .reduce((sum, v) => sum + v.value, 0);
}

/**
 * The router's host on the local relay, with its log lines kept and its checkpoints counted: each
 * begins with one feed read, after taking the transaction horizon and before waiting on pluginUp.
 */
function watchedHost() {
  const base = routerHostOf(local);
  const lines: Array<Record<string, unknown>> = [];
  let reads = 0;
  let hold: { opened: Promise<void>; reached: boolean } | undefined;
  const host: RouterHost = {
    ...base,
    log: pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) }),
    feed: {
      nextRead: () => {
        reads++;
        const read = base.feed.nextRead();
        if (!hold) return read;
        hold.reached = true;
        return Promise.all([read, hold.opened]).then(() => undefined);
      },
      requestRead: () => base.feed.requestRead(),
    },
  };
  return {
    host,
    lines,
    checkpoints: () => reads,
    /** Holds the next checkpoint at its feed read until the function it resolves to is called. */
    async holdNextCheckpoint(): Promise<() => void> {
      let open!: () => void;
      const held = (hold = { opened: new Promise<void>((resolve) => (open = resolve)), reached: false });
      await until(() => held.reached, 'a checkpoint held at its feed read');
      return () => {
        hold = undefined;
        open();
      };
    },
  };
}

/** Whether a checkpoint logged, after the first `from` lines, that it did not record its up position. */
const upNotRecorded = (lines: Array<Record<string, unknown>>, from: number) =>
  lines.slice(from).some((l) => l.msg === 'router: position not recorded' && l.direction === 'up');

/** The transaction that stored `id` here. */
async function txidOf(relay: TestRelay, id: string): Promise<bigint> {
  const { rows } = await relay.db.pool.query<{ txid: string }>("SELECT txid::text AS txid FROM events WHERE id = decode($1, 'hex')", [id]);
  return BigInt(rows[0].txid);
}

/** Whether the stream's recorded up position says the transaction `txid` is done (sent and answered). */
async function upPast(stream: string, url: string, txid: bigint): Promise<boolean> {
  const position = await readPosition(local.db.pool, stream, url, 'up');
  return position?.txid !== undefined && BigInt(position.txid) > txid;
}

/**
 * A remote that answers as a relay without NIP-77 does (NOTICE to NEG-OPEN, EOSE to any REQ with
 * stored events) and, on the n-th connection's live subscription, sends the events `live(n)` gives.
 */
async function fakeRemote(live: (connection: number) => NostrEvent[]): Promise<{ url: string; connections(): number; close(): void }> {
  let connections = 0;
  const server = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  server.on('connection', (ws) => {
    const n = ++connections;
    ws.on('error', () => undefined);
    ws.on('message', (data) => {
      const m = JSON.parse(data.toString()) as [string, string, { limit?: number }?];
      if (m[0] === 'NEG-OPEN') ws.send(JSON.stringify(['NOTICE', 'ERROR: unknown command']));
      else if (m[0] === 'REQ' && m[2]?.limit === 0) for (const event of live(n)) ws.send(JSON.stringify(['EVENT', m[1], event]));
      else if (m[0] === 'REQ') ws.send(JSON.stringify(['EOSE', m[1]]));
    });
  });
  await once(server, 'listening');
  return {
    url: `ws://127.0.0.1:${(server.address() as { port: number }).port}`,
    connections: () => connections,
    close() {
      for (const ws of server.clients) ws.terminate();
      server.close();
    },
  };
}

/**
 * An `up` stream to `url` with scripted.js as its pluginUp, and one of its checkpoints held: it waits
 * on pluginUp's decision about `first`, which comes once the file `gate` exists.
 */
async function upWithCheckpointHeld(stream: string, url: string, gate: string) {
  const author = newSigner();
  const asked = path.join(dir, `${stream}-asked.log`);
  const { host, lines, checkpoints, holdNextCheckpoint } = watchedHost();
  const router = new Router(host, FAST);
  try {
    await router.runFile(
      await configFile(
        `streams { ${stream} { dir = "up" filter = { "authors": ["${author.pubkey}"] } pluginUp = "${process.execPath} ${SCRIPTED} --log ${asked}" urls = [ "${url}" ] } }`,
      ),
    );
    await until(async () => (await metric(local, 'pgrelay_router_connected', { stream })) === 1, 'connected');
    // Held before pluginUp is asked about `first`, the checkpoint then waits on its decision.
    const release = await holdNextCheckpoint();
    const first = author.sign({ content: `accept-when:${gate}` });
    await publish(local, [first]);
    await until(async () => (await readFile(asked, 'utf8').catch(() => '')).includes(first.id), 'pluginUp asked about the first event');
    const began = checkpoints();
    release();
    /** Resolves once the checkpoint after the held one began (so after `gate` was created). */
    const nextCheckpoint = () => until(() => checkpoints() > began, 'the next checkpoint began');
    return { router, author, first, lines, nextCheckpoint };
  } catch (err) {
    await router.stop();
    throw err;
  }
}

let configs = 0;
async function configFile(text: string): Promise<string> {
  const file = path.join(dir, `router-${++configs}.conf`);
  await writeFile(file, text);
  return file;
}

async function runRouter(text: string): Promise<{ router: Router; file: string }> {
  const file = await configFile(text);
  const router = new Router(routerHostOf(local), FAST);
  await router.runFile(file);
  return { router, file };
}

/** A strfry plugin that records each request and refuses content with "spam" (a shell command with arguments). */
async function recordingPlugin(name: string): Promise<{ command: string; requests(): Promise<Array<{ sourceType: string; sourceInfo: string; event: NostrEvent }>> }> {
  const script = path.join(dir, `${name}.cjs`);
  const log = path.join(dir, `${name}.log`);
  await writeFile(
    script,
    `const fs = require('fs');
     require('readline').createInterface({ input: process.stdin }).on('line', (line) => {
       fs.appendFileSync(process.argv[2], line + '\\n');
       const req = JSON.parse(line);
       const spam = req.event.content.includes('spam');
       console.log(JSON.stringify({ id: req.event.id, action: spam ? 'reject' : 'accept', msg: spam ? 'blocked: spam' : '' }));
     });`,
  );
  await chmod(script, 0o755);
  await writeFile(log, '');
  return {
    command: `${process.execPath} ${script} ${log}`,
    async requests() {
      const text = await readFile(log, 'utf8');
      return text.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    },
  };
}

describe('router in the relay process', () => {
  it('down: stores what the remote publishes (matched by the filter) through the write path, and fans it out here', async () => {
    const author = newSigner();
    const { router } = await runRouter(`streams { friends { dir = "down" filter = { "kinds": [1], "authors": ["${author.pubkey}"] } urls = [ "${r1.url}" ] } }`);
    try {
      await until(async () => (await metric(local, 'pgrelay_router_connected', { stream: 'friends', url: r1.url })) === 1, 'the router connected');
      const watcher = await TestClient.connect(local.url);
      const live = await watcher.query('live', { authors: [author.pubkey] });
      expect(live).toEqual([]);
      const notes = [author.sign({ content: 'one' }), author.sign({ content: 'two' })];
      const other = author.sign({ kind: 7, content: '+' }); // not matched by the stream's filter
      await publish(r1, [notes[0], other, notes[1]]);
      await until(() => allIn(local, notes), 'the notes stored here');
      await until(() => watcher.liveEvents('live').length === 2, 'the notes fanned out to a subscriber here');
      // Each is checked (signature, plugin) on its own, so they may be stored in either order.
      expect(watcher.liveEvents('live').map((e) => e.id).sort()).toEqual(notes.map((e) => e.id).sort());
      expect(await has(local, other.id)).toBe(false);
      expect(await metric(local, 'pgrelay_router_events_down_total', { stream: 'friends', outcome: 'stored' })).toBe(2);
      watcher.close();
    } finally {
      await router.stop();
    }
    expect(await metric(local, 'pgrelay_router_connected', { stream: 'friends' })).toBe(0);
  });

  it('up: sends what is committed here and matches the filter; both: never sends an event back to the remote it came from', async () => {
    const author = newSigner();
    const filter = `filter = { "authors": ["${author.pubkey}"] }`;
    const { router } = await runRouter(`streams {
      directory { dir = "up" ${filter} urls = [ "${r2.url}" ] }
      cluster { dir = "both" ${filter} urls = [ "${r1.url}", "${r2.url}" ] }
    }`);
    try {
      await until(async () => (await metric(local, 'pgrelay_router_connected', { url: r2.url })) === 2, 'both streams connected to r2');
      await until(async () => (await metric(local, 'pgrelay_router_connected', { stream: 'cluster', url: r1.url })) === 1, 'cluster connected to r1');
      const here = author.sign({ content: 'published here' });
      await publish(local, [here]);
      await until(async () => (await has(r1, here.id)) && (await has(r2, here.id)), 'sent up to both remotes');
      // From r1: stored here, sent on to r2, never back to r1.
      const there = author.sign({ content: 'published on r1' });
      await publish(r1, [there]);
      await until(() => has(local, there.id), 'down from r1');
      await until(() => has(r2, there.id), 'on to r2');
      await until(
        async () => (await metric(local, 'pgrelay_router_events_up_total', { stream: 'cluster', url: r2.url })) === 2,
        'both events answered by r2 (cluster)',
      );
      expect(await metric(local, 'pgrelay_router_events_up_total', { stream: 'cluster', url: r1.url })).toBe(1); // only `here`
      expect(await metric(local, 'pgrelay_router_events_up_total', { stream: 'cluster', url: r1.url, outcome: 'accepted' })).toBe(1);
    } finally {
      await router.stop();
    }
  });

  it('both, with plugins: pluginDown is told Stream and the remote, pluginUp Stored; what they refuse is neither stored nor sent', async () => {
    const author = newSigner();
    const down = await recordingPlugin('down');
    const up = await recordingPlugin('up');
    const { router } = await runRouter(`streams { s {
      dir = "both"
      filter = { "authors": ["${author.pubkey}"] }
      pluginDown = "${down.command}"
      pluginUp = "${up.command}"
      urls = [ "${r1.url}" ]
    } }`);
    try {
      await until(async () => (await metric(local, 'pgrelay_router_connected', { stream: 's' })) === 1, 'connected');
      const fromRemote = [author.sign({ content: 'fine' }), author.sign({ content: 'spam from afar' })];
      const fromHere = [author.sign({ content: 'fine here' }), author.sign({ content: 'spam here' })];
      await publish(r1, fromRemote);
      await publish(local, fromHere);
      await until(() => has(local, fromRemote[0].id), 'the accepted one stored here');
      await until(() => has(r1, fromHere[0].id), 'the accepted one sent up');
      await until(async () => (await down.requests()).length >= 2 && (await up.requests()).some((r) => r.event.id === fromHere[1].id), 'the plugins asked');
      expect(await has(local, fromRemote[1].id)).toBe(false);
      expect(await has(r1, fromHere[1].id)).toBe(false);
      const downSeen = await down.requests();
      expect(downSeen.map((r) => [r.event.id, r.sourceType, r.sourceInfo])).toEqual(fromRemote.map((e) => [e.id, 'Stream', r1.url]));
      const upSeen = (await up.requests()).filter((r) => fromHere.some((e) => e.id === r.event.id));
      expect(upSeen.every((r) => r.sourceType === 'Stored')).toBe(true);
      // The event that came down from r1 is not offered back to it, nor to pluginUp for it.
      expect((await up.requests()).some((r) => r.event.id === fromRemote[0].id)).toBe(true); // stored here, so committed
      expect(await metric(local, 'pgrelay_router_events_up_total', { stream: 's', url: r1.url })).toBe(1);
    } finally {
      await router.stop();
    }
  });

  it("up to a remote that rate-limits: sends again what it refused with rate-limited:, until all of it is there", async () => {
    const author = newSigner();
    const { router } = await runRouter(`streams { slow { dir = "up" filter = { "authors": ["${author.pubkey}"] } urls = [ "${slow.url}" ] } }`);
    try {
      await until(async () => (await metric(local, 'pgrelay_router_connected', { stream: 'slow' })) === 1, 'connected');
      const notes = Array.from({ length: 30 }, (_, i) => author.sign({ content: `note ${i}` }));
      await publish(local, notes);
      await until(() => allIn(slow, notes), 'all 30 on the remote that takes 20 a second');
      expect(await metric(local, 'pgrelay_router_events_up_total', { stream: 'slow', outcome: 'refused' })).toBe(0);
    } finally {
      await router.stop();
    }
  });

  it('catches up after the router was away: negentropy for down and up, what was committed here since its position however old', async () => {
    const author = newSigner();
    const text = `catchUpMargin = 60\nstreams { back { dir = "both" filter = { "authors": ["${author.pubkey}"] } urls = [ "${r2.url}" ] } }`;
    const first = await runRouter(text);
    await until(async () => (await metric(local, 'pgrelay_router_connected', { stream: 'back' })) === 1, 'connected');
    const before = author.sign({ content: 'before' });
    await publish(r2, [before]);
    await until(() => has(local, before.id), 'live before the stop');
    await until(async () => (await readPosition(local.db.pool, 'back', r2.url, 'down'))!.through >= now(), 'a position recorded');
    await first.router.stop();

    // While the router is away: new events there, new events here, and an event here a day old.
    const missedThere = [author.sign({ content: 'missed there 1' }), author.sign({ content: 'missed there 2' })];
    const missedHere = author.sign({ content: 'missed here' });
    const oldHere = author.sign({ content: 'a day old, imported here', created_at: now() - 86_400 });
    await publish(r2, missedThere);
    await publish(local, [missedHere, oldHere]);

    const second = new Router(routerHostOf(local), FAST);
    await second.runFile(first.file);
    try {
      await until(() => allIn(local, missedThere), 'down: caught up');
      await until(() => allIn(r2, [missedHere, oldHere]), 'up: caught up, the old event too (outside any created_at window)');
      expect(await metric(local, 'pgrelay_router_catchups_total', { stream: 'back', direction: 'down', method: 'negentropy' })).toBeGreaterThanOrEqual(2);
      expect(await metric(local, 'pgrelay_router_catchups_total', { stream: 'back', direction: 'up', method: 'txid' })).toBeGreaterThanOrEqual(2);
    } finally {
      await second.stop();
    }
  });

  it('catches up from a remote without NIP-77 with REQ since', async () => {
    const author = newSigner();
    const text = `streams { plain { dir = "down" filter = { "authors": ["${author.pubkey}"] } urls = [ "${noNeg.url}" ] } }`;
    const first = await runRouter(text);
    await until(async () => (await metric(local, 'pgrelay_router_connected', { stream: 'plain' })) === 1, 'connected');
    await first.router.stop();
    const missed = Array.from({ length: 5 }, (_, i) => author.sign({ content: `missed ${i}`, created_at: now() - i }));
    await publish(noNeg, missed);
    const second = new Router(routerHostOf(local), FAST);
    await second.runFile(first.file);
    try {
      await until(() => allIn(local, missed), 'caught up by REQ since');
      expect(await metric(local, 'pgrelay_router_catchups_total', { stream: 'plain', direction: 'down', method: 'req' })).toBeGreaterThanOrEqual(1);
      expect(await metric(local, 'pgrelay_router_catchups_total', { stream: 'plain', direction: 'down', method: 'negentropy' })).toBe(0);
    } finally {
      await second.stop();
    }
  });

  it('up: a checkpoint whose connection ends while it waits records nothing, so a remote without NIP-77 still gets every event', async () => {
    const proxy = await startTcpProxy(noNeg.url);
    const gates = [path.join(dir, 'drop-gate-1'), path.join(dir, 'drop-gate-2')];
    const { router, author, first, lines, nextCheckpoint } = await upWithCheckpointHeld('drop', proxy.url, gates[0]);
    try {
      // `second` is committed before the next checkpoint begins, so that one's position would pass it;
      // pluginUp decides it once gates[1] exists.
      const second = author.sign({ content: `accept-when:${gates[1]}` });
      await publish(local, [second]);
      await writeFile(gates[0], '');
      await nextCheckpoint();
      expect(await has(noNeg, first.id)).toBe(true);

      const logged = lines.length;
      proxy.cut();
      await until(async () => (await metric(local, 'pgrelay_router_connected', { stream: 'drop' })) === 0, 'disconnected');
      const meanwhile = [author.sign({ content: 'committed while disconnected 1' }), author.sign({ content: 'committed while disconnected 2' })];
      await publish(local, meanwhile);
      await writeFile(gates[1], ''); // the second event is decided now, its connection gone
      const secondTxid = await txidOf(local, second.id);
      await until(async () => upNotRecorded(lines, logged) || (await upPast('drop', proxy.url, secondTxid)), 'the waiting checkpoint ended');
      proxy.restore();
      await until(() => allIn(noNeg, [first, second, ...meanwhile]), 'every event on the remote');
      await until(() => upPast('drop', proxy.url, secondTxid), 'recorded by the new connection');
    } finally {
      await router.stop();
      await proxy.close();
    }
  });

  it('up: pluginUp failing on an event while a checkpoint waits on it records nothing past it; once pluginUp takes it, a remote without NIP-77 gets it', async () => {
    const gate = path.join(dir, 'fault-gate');
    const heal = path.join(dir, 'fault-heal');
    const { router, author, first, lines, nextCheckpoint } = await upWithCheckpointHeld('faulty', noNeg.url, gate);
    try {
      // The plugin exits on `failing` until `heal` exists (a fault, not a verdict); it refuses `refused`.
      const failing = author.sign({ content: `exit-until:${heal}` });
      const refused = author.sign({ content: 'reject:blocked: not this one' });
      await publish(local, [failing, refused]);
      const logged = lines.length;
      await writeFile(gate, '');
      await nextCheckpoint();
      const failingTxid = await txidOf(local, failing.id);
      await until(
        async () => upNotRecorded(lines, logged) || (await upPast('faulty', noNeg.url, failingTxid)),
        'pluginUp gave up on the failing event, and the checkpoint waiting on it ended',
        45_000,
      );
      expect(await metric(local, 'pgrelay_router_connections_total', { stream: 'faulty', result: 'lost' })).toBeGreaterThanOrEqual(1);
      await writeFile(heal, '');
      const later = author.sign({ content: 'after pluginUp recovered' });
      await publish(local, [later]);
      await until(() => allIn(noNeg, [first, failing, later]), 'every event pluginUp accepts on the remote', 45_000);
      expect(await has(noNeg, refused.id)).toBe(false);
    } finally {
      await router.stop();
    }
  }, 120_000);

  it('down: a remote that sends a message over the bound (twice MAX_MESSAGE_BYTES, at least 1 MiB) is cut off before it is read, and connected again', async () => {
    const author = newSigner();
    const huge = author.sign({ content: 'x'.repeat(remoteMessageLimit(local.config.MAX_MESSAGE_BYTES)) });
    const small = author.sign({ content: 'under the bound' });
    const remote = await fakeRemote((n) => (n === 1 ? [huge] : [small]));
    const { router } = await runRouter(`streams { big { dir = "down" filter = { "authors": ["${author.pubkey}"] } urls = [ "${remote.url}" ] } }`);
    try {
      await until(() => has(local, small.id), 'the next connection streams');
      expect(remote.connections()).toBe(2);
      expect(await metric(local, 'pgrelay_router_connections_total', { stream: 'big', result: 'lost' })).toBe(1);
      expect(await metric(local, 'pgrelay_router_events_down_total', { stream: 'big' })).toBe(1); // the huge one never reached the write path
    } finally {
      await router.stop();
      remote.close();
    }
  });

  it("down: a stream's maxMessageBytes bounds its remotes' messages instead", async () => {
    const author = newSigner();
    const under = author.sign({ content: 'u'.repeat(2000) });
    const over = author.sign({ content: 'o'.repeat(5000) });
    const remote = await fakeRemote((n) => (n === 1 ? [under, over] : []));
    const { router } = await runRouter(`streams { bounded { dir = "down" maxMessageBytes = 4096 filter = { "authors": ["${author.pubkey}"] } urls = [ "${remote.url}" ] } }`);
    try {
      await until(async () => remote.connections() === 2 && (await metric(local, 'pgrelay_router_connected', { stream: 'bounded' })) === 1, 'cut off, and connected again');
      await until(() => has(local, under.id), 'the message under the bound taken');
      expect(await has(local, over.id)).toBe(false);
      expect(await metric(local, 'pgrelay_router_events_down_total', { stream: 'bounded' })).toBe(1);
    } finally {
      await router.stop();
      remote.close();
    }
  });

  it('hot reconfig: a new URL and a new stream connect, the unchanged ones stay connected; a bad edit leaves the running configuration', async () => {
    const author = newSigner();
    const filter = `filter = { "authors": ["${author.pubkey}"] }`;
    const { router, file } = await runRouter(`streams { hot { dir = "down" ${filter} urls = [ "${r1.url}" ] } }`);
    const opened = (stream: string, url: string) => metric(local, 'pgrelay_router_connections_total', { stream, url, result: 'opened' });
    try {
      await until(async () => (await opened('hot', r1.url)) === 1, 'connected to r1');
      await writeFile(file, `streams {\n hot { dir = "down" ${filter} urls = [ "${r1.url}" "${r2.url}" ] }\n extra { dir = "down" ${filter} urls = [ "${r1.url}" ] }\n}`);
      await until(async () => (await opened('hot', r2.url)) === 1 && (await opened('extra', r1.url)) === 1, 'the new URL and stream connected');
      // A bad edit: logged, nothing changes.
      await writeFile(file, `streams { hot { dir = "sideways" urls = [ "${r1.url}" ] } }`);
      const note = author.sign({ content: 'after the bad edit' });
      await publish(r2, [note]);
      await until(() => has(local, note.id), 'r2 still streams after the bad edit');
      // Removing the URL and the stream closes only them.
      await writeFile(file, `streams { hot { dir = "down" ${filter} urls = [ "${r1.url}" ] } }`);
      await until(async () => (await metric(local, 'pgrelay_router_connected', { url: r2.url, stream: 'hot' })) === 0, 'r2 closed');
      await until(() => router.streamNames.join() === 'hot', 'extra removed');
      expect(await opened('hot', r1.url)).toBe(1); // never reconnected
      expect(await metric(local, 'pgrelay_router_connected', { stream: 'hot', url: r1.url })).toBe(1);
      // A changed filter reconnects that stream (strfry's rule).
      await writeFile(file, `streams { hot { dir = "down" filter = { "kinds": [1], "authors": ["${author.pubkey}"] } urls = [ "${r1.url}" ] } }`);
      await until(async () => (await opened('hot', r1.url)) === 2, 'reconnected for its new filter');
    } finally {
      await router.stop();
    }
  });

  it('publishes metrics per stream and remote: connected, events, lag, catch-ups', async () => {
    const text = (await local.relay.context.metrics.registry.metrics()).split('\n');
    for (const name of ['pgrelay_router_connected', 'pgrelay_router_events_down_total', 'pgrelay_router_events_up_total', 'pgrelay_router_lag_seconds', 'pgrelay_router_catchups_total'])
      expect(text.some((l) => l.startsWith(`# TYPE ${name} `))).toBe(true);
    expect(text.some((l) => /^pgrelay_router_events_down_total\{stream="friends",url="[^"]+",outcome="stored"\} 2$/.test(l))).toBe(true);
  });
});
