// `sync`: our database as a NIP-77 negentropy client of another relay, between two real relays (each
// with its own database) over real sockets: both directions end with the exact union, a second run
// finds nothing to do in one round, one direction changes one side only, --filter limits what moves,
// our rules refuse downloaded events (NIP-62), a remote's rate limits slow the upload and pause the
// reconciliation, and a remote's NEG-ERR, a remote without NIP-77 and a silent remote end the
// command with a clear message.
import { WebSocket, WebSocketServer } from 'ws';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { syncCommand } from '../../src/cli/commands/sync.js';
import { createLogger } from '../../src/log.js';
import type { NostrEvent } from '../../src/nostr/event.js';
import { NegentropySet, respond } from '../../src/nostr/negentropy.js';
import { SignatureVerifier } from '../../src/nostr/verifier.js';
import { remoteMessageLimit } from '../../src/ops/relay-client.js';
import { DEFAULT_FRAME_SIZE, frameSizeFor, SyncError, syncWithRelay, type SyncOptions } from '../../src/ops/sync.js';
import { policyFrom } from '../../src/policy/policy.js';
import { prepareEvent } from '../../src/store/prepared-event.js';
import { writeBatchStored } from '../../src/store/write.js';
import { runCli } from '../support/cli.js';
import { newSigner, now, type Signer } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

let a: TestRelay; // "our" database: the one sync runs from
let b: TestRelay; // the remote
let verifier: SignatureVerifier;
beforeAll(async () => {
  // B answers in frames of 4096 bytes, so a reconciliation of a few hundred records takes several rounds.
  [a, b] = await Promise.all([startTestRelay(), startTestRelay({ NEGENTROPY_FRAME_SIZE_LIMIT: '4096' })]);
  verifier = new SignatureVerifier(1);
});
afterAll(async () => {
  await verifier?.close();
  await Promise.all([a?.close(), b?.close()]);
});

const t = now() - 10_000;

async function seed(relay: TestRelay, events: NostrEvent[]): Promise<void> {
  for (let i = 0; i < events.length; i += 500) {
    const { results } = await writeBatchStored(relay.db.pool, events.slice(i, i + 500).map(prepareEvent));
    expect(results.every((r) => r.status === 'stored')).toBe(true);
  }
}

/** Stored ids, sorted; only `author`'s when given. */
async function idsIn(relay: TestRelay, author?: Signer, kind?: number): Promise<string[]> {
  const { rows } = await relay.db.pool.query<{ id: string }>(
    `SELECT encode(id, 'hex') AS id FROM events
      WHERE ($1::text IS NULL OR pubkey = decode($1, 'hex')) AND ($2::int IS NULL OR kind = $2) ORDER BY 1`,
    [author?.pubkey ?? null, kind ?? null],
  );
  return rows.map((r) => r.id);
}
const ids = (...lists: NostrEvent[][]) => lists.flat().map((e) => e.id).sort();

const sync = (remote: TestRelay, options: Partial<SyncOptions> = {}) =>
  syncWithRelay(a.db.pool, { url: remote.url, policy: policyFrom(a.config), verifier, timeoutMs: 10_000, ...options });

/** Runs the command in this process, as main.ts would, with A's configuration; returns the exit code and output. */
async function runSync(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const log = vi.spyOn(console, 'log').mockImplementation((...x) => void out.push(x.join(' ')));
  const error = vi.spyOn(console, 'error').mockImplementation((...x) => void err.push(x.join(' ')));
  const write = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => (err.push(String(chunk)), true));
  try {
    const code = await syncCommand.run(args, { config: { ...a.config, VERIFY_THREADS: 1 }, log: createLogger('silent') });
    return { code, stdout: out.join('\n'), stderr: err.join('') };
  } finally {
    log.mockRestore();
    error.mockRestore();
    write.mockRestore();
  }
}

/** Some events on both sides, some on one only: [on both, only on A, only on B]. */
function overlapping(signer: Signer, both: number, onlyA: number, onlyB: number, template: Partial<NostrEvent> = {}) {
  const make = (label: string, n: number) =>
    // Seven events a second: equal timestamps, so bounds need id prefixes.
    Array.from({ length: n }, (_, i) => signer.sign({ content: `${label} ${i}`, created_at: t + Math.floor(i / 7), ...template }));
  return [make('both', both), make('only A', onlyA), make('only B', onlyB)];
}

describe('sync (NIP-77 client)', () => {
  const [alice, bob] = [newSigner(), newSigner()];
  const [bothAlice, onlyAAlice, onlyBAlice] = overlapping(alice, 500, 60, 45);
  const [bothBob, onlyABob, onlyBBob] = overlapping(bob, 150, 20, 35, { kind: 7 });

  it('--direction both: each side ends with exactly the union; a second run finds nothing in one round', async () => {
    await seed(a, [...bothAlice, ...onlyAAlice, ...bothBob, ...onlyABob]);
    await seed(b, [...bothAlice, ...onlyBAlice, ...bothBob, ...onlyBBob]);
    const first = await sync(b, { frameSizeLimit: 4096 });
    expect(first.complete).toBe(true);
    expect(first.reconcile).toMatchObject({ local: 730, have: 80, need: 80 });
    expect(first.reconcile.rounds).toBeGreaterThan(1);
    expect(first.reconcile.bytesSent).toBeGreaterThan(0);
    expect(first.reconcile.bytesReceived).toBeGreaterThan(0);
    expect(first.download).toMatchObject({ requested: 80, received: 80, accepted: 80, duplicate: 0, rejected: 0, missing: 0 });
    expect(first.upload).toMatchObject({ requested: 80, sent: 80, accepted: 80, duplicate: 0, refused: 0, unanswered: 0 });
    const union = ids(bothAlice, onlyAAlice, onlyBAlice, bothBob, onlyABob, onlyBBob);
    expect(await idsIn(a)).toEqual(union);
    expect(await idsIn(b)).toEqual(union);

    const again = await sync(b);
    expect(again.reconcile).toMatchObject({ local: 810, have: 0, need: 0, rounds: 1, frameSizeFrom: 'nip11', frameSizeLimit: frameSizeFor(b.config.MAX_MESSAGE_BYTES) });
    expect(again.download).toBeUndefined();
    expect(again.upload).toBeUndefined();
  });

  it('--direction down changes only our database, --direction up only the remote', async () => {
    const carol = newSigner();
    const [both, onlyA, onlyB] = overlapping(carol, 30, 12, 9);
    await seed(a, [...both, ...onlyA]);
    await seed(b, [...both, ...onlyB]);
    const filter = { authors: [carol.pubkey] };

    const down = await sync(b, { direction: 'down', filter });
    expect(down.reconcile).toMatchObject({ have: 12, need: 9 });
    expect(down.download).toMatchObject({ accepted: 9 });
    expect(down.upload).toBeUndefined();
    expect(await idsIn(a, carol)).toEqual(ids(both, onlyA, onlyB));
    expect(await idsIn(b, carol)).toEqual(ids(both, onlyB));

    const up = await sync(b, { direction: 'up', filter });
    expect(up.reconcile).toMatchObject({ have: 12, need: 0 });
    expect(up.download).toBeUndefined();
    expect(up.upload).toMatchObject({ accepted: 12 });
    expect(await idsIn(b, carol)).toEqual(ids(both, onlyA, onlyB));

    // And up alone leaves our side alone.
    const dave = newSigner();
    const [dBoth, dOnlyA, dOnlyB] = overlapping(dave, 10, 4, 6);
    await seed(a, [...dBoth, ...dOnlyA]);
    await seed(b, [...dBoth, ...dOnlyB]);
    const upOnly = await sync(b, { direction: 'up', filter: { authors: [dave.pubkey] } });
    expect(upOnly.upload).toMatchObject({ accepted: 4 });
    expect(await idsIn(a, dave)).toEqual(ids(dBoth, dOnlyA));
    expect(await idsIn(b, dave)).toEqual(ids(dBoth, dOnlyA, dOnlyB));
  });

  it('--filter restricts the sync to matching events, in both directions', async () => {
    const erin = newSigner();
    const [notesBoth, notesOnlyA, notesOnlyB] = overlapping(erin, 5, 6, 7, { kind: 1 });
    const [likesBoth, likesOnlyA, likesOnlyB] = overlapping(erin, 5, 3, 4, { kind: 7 });
    await seed(a, [...notesBoth, ...notesOnlyA, ...likesBoth, ...likesOnlyA]);
    await seed(b, [...notesBoth, ...notesOnlyB, ...likesBoth, ...likesOnlyB]);
    const r = await sync(b, { filter: { authors: [erin.pubkey], kinds: [7] } });
    expect(r.reconcile).toMatchObject({ local: 8, have: 3, need: 4 });
    expect(await idsIn(a, erin, 7)).toEqual(ids(likesBoth, likesOnlyA, likesOnlyB));
    expect(await idsIn(b, erin, 7)).toEqual(ids(likesBoth, likesOnlyA, likesOnlyB));
    expect(await idsIn(a, erin, 1)).toEqual(ids(notesBoth, notesOnlyA));
    expect(await idsIn(b, erin, 1)).toEqual(ids(notesBoth, notesOnlyB));
  });

  it("counts downloaded events our rules refuse (a pubkey that vanished here, NIP-62) as rejected, and stores none", async () => {
    const frank = newSigner();
    const notes = Array.from({ length: 5 }, (_, i) => frank.sign({ content: `before vanishing ${i}`, created_at: t - 100 + i }));
    const later = frank.sign({ content: 'after vanishing', created_at: t + 50 });
    await seed(b, [...notes, later]);
    await seed(a, [frank.sign({ kind: 62, created_at: t, tags: [['relay', 'ALL_RELAYS']], content: 'bye' })]);
    const { code, stdout, stderr } = await runSync([b.url, '--direction', 'down', '--filter', JSON.stringify({ authors: [frank.pubkey] })]);
    expect(code).toBe(0);
    expect(stdout).toMatch(/^have: +1 /m);
    expect(stdout).toMatch(/^need: +6 /m);
    expect(stdout).toMatch(/^ {2}stored: +1$/m); // the note written after the request
    expect(stdout).toMatch(/^ {2}rejected: +5$/m);
    expect(stdout).toMatch(/NIP-62/);
    expect(stdout).toMatch(/^upload: +1 not sent \(--direction down\)$/m);
    expect(stderr).toContain(`refused by us ${notes[0].id}`);
    expect(await idsIn(a, frank)).toHaveLength(2); // the request and the later note
  });

  it('a remote NEG-ERR fails the command with a clear message, changing nothing: blocked: (over its NEGENTROPY_MAX_RECORDS), auth-required:', async () => {
    const [c, d] = await Promise.all([startTestRelay({ NEGENTROPY_MAX_RECORDS: '5' }), startTestRelay({ AUTH_REQUIRED: 'all' })]);
    try {
      const gina = newSigner();
      await seed(c, Array.from({ length: 8 }, (_, i) => gina.sign({ content: `c ${i}`, created_at: t + i })));
      const before = await idsIn(a);
      const blocked = await runSync([c.url]);
      expect(blocked.code).toBe(1);
      expect(blocked.stderr).toMatch(/failed: the remote answered NEG-ERR: blocked: the filter matches more than 5 events/);
      expect(blocked.stderr).toMatch(/narrow --filter/);
      expect(await idsIn(a)).toEqual(before);
      expect(await idsIn(c)).toHaveLength(8);

      const auth = await runSync([d.url]);
      expect(auth.code).toBe(1);
      expect(auth.stderr).toMatch(/auth-required: .*\n.*does not support/);
      expect(await idsIn(a)).toEqual(before);
    } finally {
      await Promise.all([c.close(), d.close()]);
    }
  });

  it('an upload slows down on rate-limited: and sends those events again', async () => {
    const e = await startTestRelay({ RATE_LIMIT_EVENTS_PER_SECOND: '100', RATE_LIMIT_EVENTS_BURST: '20' });
    try {
      const hank = newSigner();
      const notes = Array.from({ length: 80 }, (_, i) => hank.sign({ content: `paced ${i}`, created_at: t + i }));
      await seed(a, notes);
      const r = await sync(e, { direction: 'up', filter: { authors: [hank.pubkey] } });
      expect(r.complete).toBe(true);
      expect(r.upload).toMatchObject({ sent: 80, accepted: 80, refused: 0, unanswered: 0 });
      expect(r.upload!.retried).toBeGreaterThan(0);
      expect(await idsIn(e, hank)).toEqual(ids(notes));
    } finally {
      await e.close();
    }
  });

  it('a reconciliation the remote rate-limits (NEG-ERR rate-limited:) goes on where it stopped, after a pause', async () => {
    // Our relay gives rounds their own budget; another relay may end a session with rate-limited:.
    // A proxy in front of E does that on the 4th NEG-MSG (and closes E's session).
    const e = await startTestRelay({ NEGENTROPY_FRAME_SIZE_LIMIT: '4096' });
    const proxy = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    proxy.on('connection', (client) => {
      const upstream = new WebSocket(e.url);
      const pending: string[] = [];
      let rounds = 0;
      upstream.on('open', () => pending.splice(0).forEach((m) => upstream.send(m)));
      upstream.on('message', (data) => client.send(data.toString()));
      client.on('close', () => upstream.close());
      client.on('message', (data) => {
        const text = data.toString();
        const m = JSON.parse(text) as [string, string];
        if (m[0] === 'NEG-MSG' && ++rounds === 4) {
          upstream.send(JSON.stringify(['NEG-CLOSE', m[1]]));
          return client.send(JSON.stringify(['NEG-ERR', m[1], 'rate-limited: slow down']));
        }
        if (upstream.readyState === WebSocket.OPEN) upstream.send(text);
        else pending.push(text);
      });
    });
    await new Promise((r) => proxy.once('listening', r));
    try {
      const jill = newSigner();
      const all = Array.from({ length: 1500 }, (_, i) => jill.sign({ content: `j ${i}`, created_at: t + Math.floor(i / 3) }));
      await seed(a, all.filter((_, i) => i % 3 !== 0));
      await seed(e, all.filter((_, i) => i % 3 !== 1));
      const url = `ws://127.0.0.1:${(proxy.address() as { port: number }).port}`;
      const r = await syncWithRelay(a.db.pool, { url, policy: policyFrom(a.config), verifier, timeoutMs: 10_000, filter: { authors: [jill.pubkey] }, frameSizeLimit: 4096, dryRun: true });
      expect(r.reconcile).toMatchObject({ have: 500, need: 500 });
      expect(r.reconcile.resumed).toBeGreaterThan(0);
    } finally {
      proxy.close();
      await e.close();
    }
  });

  it('NEG-MSG rounds are not charged to the remote relay\'s event budget', async () => {
    const e = await startTestRelay({ RATE_LIMIT_EVENTS_PER_SECOND: '100', RATE_LIMIT_EVENTS_BURST: '8', NEGENTROPY_FRAME_SIZE_LIMIT: '4096' });
    try {
      const kim = newSigner();
      const all = Array.from({ length: 1500 }, (_, i) => kim.sign({ content: `k ${i}`, created_at: t + Math.floor(i / 3) }));
      await seed(a, all.filter((_, i) => i % 3 !== 0));
      await seed(e, all.filter((_, i) => i % 3 !== 1));
      const r = await sync(e, { filter: { authors: [kim.pubkey] }, frameSizeLimit: 4096, dryRun: true });
      expect(r.reconcile).toMatchObject({ have: 500, need: 500, resumed: 0 });
      expect(r.reconcile.rounds).toBeGreaterThan(8);
    } finally {
      await e.close();
    }
  });

  it('a remote without NIP-77 (NOTICE, or no answer) fails with a clear message', async () => {
    const servers = [new WebSocketServer({ port: 0, host: '127.0.0.1' }), new WebSocketServer({ port: 0, host: '127.0.0.1' })];
    for (const s of servers) s.on('connection', (ws) => ws.on('error', () => undefined));
    servers[0].on('connection', (ws) => ws.on('message', () => ws.send(JSON.stringify(['NOTICE', 'ERROR: unknown command']))));
    await Promise.all(servers.map((s) => new Promise((r) => s.once('listening', r))));
    const url = (s: WebSocketServer) => `ws://127.0.0.1:${(s.address() as { port: number }).port}`;
    try {
      await expect(sync(b, { url: url(servers[0]) })).rejects.toThrow(/NOTICE "ERROR: unknown command".*NIP-77/);
      await expect(sync(b, { url: url(servers[1]), timeoutMs: 300 })).rejects.toThrow(SyncError);
      await expect(sync(b, { url: url(servers[1]), timeoutMs: 300 })).rejects.toThrow(/no answer to NEG-OPEN .*within 0.3 s/);
      await expect(sync(b, { url: 'ws://127.0.0.1:1' })).rejects.toThrow(/cannot connect/);
    } finally {
      for (const s of servers) {
        for (const ws of s.clients) ws.terminate();
        s.close();
      }
    }
  });

  it("a remote's message over the bound (twice MAX_MESSAGE_BYTES, at least 1 MiB) ends the sync before it is read", async () => {
    const server = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    server.on('connection', (ws) =>
      ws.on('error', () => undefined).on('message', (data) => {
        const m = JSON.parse(data.toString());
        if (m[0] === 'NEG-OPEN') ws.send(JSON.stringify(['NEG-MSG', m[1], '61'.repeat(remoteMessageLimit(a.config.MAX_MESSAGE_BYTES) / 2)]));
      }),
    );
    await new Promise((r) => server.once('listening', r));
    try {
      const url = `ws://127.0.0.1:${(server.address() as { port: number }).port}`;
      await expect(sync(b, { url, maxMessageBytes: a.config.MAX_MESSAGE_BYTES })).rejects.toThrow(/the remote sent a message larger than 1048576 bytes/);
    } finally {
      for (const ws of server.clients) ws.terminate();
      server.close();
    }
  });

  it('reports ids the remote listed but never sent, and an upload the remote never acknowledges', async () => {
    // A minimal remote: negentropy over a fixed set holding one id it never serves; no OK for any EVENT.
    const phantom = 'ab'.repeat(32);
    const theirs = NegentropySet.fromRecords([{ timestamp: t, id: phantom }]);
    const server = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    server.on('connection', (ws) =>
      ws.on('error', () => undefined).on('message', (data) => {
        const m = JSON.parse(data.toString());
        if (m[0] === 'NEG-OPEN' || m[0] === 'NEG-MSG') ws.send(JSON.stringify(['NEG-MSG', m[1], respond(theirs, Buffer.from(m.at(-1), 'hex')).toString('hex')]));
        if (m[0] === 'REQ') ws.send(JSON.stringify(['EOSE', m[1]]));
      }),
    );
    await new Promise((r) => server.once('listening', r));
    try {
      const ivan = newSigner();
      const mine = ivan.sign({ content: 'never acknowledged', created_at: t });
      await seed(a, [mine]);
      const r = await sync(b, { url: `ws://127.0.0.1:${(server.address() as { port: number }).port}`, filter: { authors: [ivan.pubkey] }, timeoutMs: 300 });
      expect(r.reconcile).toMatchObject({ local: 1, have: 1, need: 1, frameSizeFrom: 'default', frameSizeLimit: DEFAULT_FRAME_SIZE });
      expect(r.download).toMatchObject({ requested: 1, received: 0, missing: 1, missingIds: [phantom] });
      expect(r.upload).toMatchObject({ sent: 1, accepted: 0, unanswered: 1 });
      expect(r.complete).toBe(false);
      expect(r.problem).toMatch(/no OK from the remote within 0.3 s/);
    } finally {
      for (const ws of server.clients) ws.terminate();
      server.close();
    }
  });

  it('derives the frame size limit from the remote NIP-11 max_message_length (hex doubles it)', () => {
    expect(frameSizeFor(undefined)).toBe(DEFAULT_FRAME_SIZE);
    expect(frameSizeFor(131072)).toBe(65280);
    expect(frameSizeFor(1024)).toBe(4096);
    expect(frameSizeFor(2 ** 31)).toBe(500_000);
  });

  it('runs as `npm run cli -- sync`', async () => {
    const help = await runCli(['help'], {});
    expect(help.stdout).toMatch(/^ {2}sync /m);
    const env = { DATABASE_URL: a.config.DATABASE_URL!, LOG_LEVEL: 'warn', VERIFY_THREADS: '1' };
    const run = await runCli(['sync', b.url, '--dry-run', '--filter', JSON.stringify({ authors: [alice.pubkey, bob.pubkey] })], env);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^have: +0 /m);
    expect(run.stdout).toMatch(/^need: +0 /m);
    expect(run.stdout).toMatch(/differ \(0\.0 %\)/);
    const usage = await runCli(['sync', b.url, '--direction', 'sideways'], env);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/--direction must be down, up or both/);
    const badFilter = await runCli(['sync', b.url, '--filter', '{"kinds":"x"}'], env);
    expect(badFilter.code).toBe(2);
    expect(badFilter.stderr).toMatch(/--filter: invalid: "kinds" must be an array/);
  });
});
