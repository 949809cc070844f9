// NIP-86 management API (protocol.md 12) with NIP-98 auth: every method against a real relay, each
// refusal of a bad Authorization header, and bans that hold on a second relay process on the same
// database within a second, and from the command line.
import { npubEncode, noteEncode } from 'nostr-tools/nip19';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestClient } from '../support/client.js';
import { runCli } from '../support/cli.js';
import { ids, unique } from '../support/events.js';
import { newSigner, now } from '../support/keys.js';
import { authHeader, httpOf, post, rpc } from '../support/management.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';

const admin = newSigner();
const stranger = newSigner();
const alice = newSigner();
const bob = newSigner();

let relay: TestRelay;
let url: string;
const clients: TestClient[] = [];
async function connect(options = {}): Promise<TestClient> {
  const c = await TestClient.connect(relay.url, options);
  clients.push(c);
  return c;
}
async function ok(method: string, params: unknown[] = []): Promise<unknown> {
  const r = await rpc(url, admin, method, params);
  expect(r).toMatchObject({ status: 200 });
  expect(r.body.error).toBeUndefined();
  return r.body.result;
}

beforeAll(async () => {
  relay = await startTestRelay({ ADMIN_PUBKEYS: npubEncode(admin.pubkey) });
  url = httpOf(relay.url);
});
afterAll(async () => {
  clients.forEach((c) => c.close());
  await relay.close();
});

describe('NIP-86 methods', () => {
  it('supportedmethods lists every method', async () => {
    expect(new Set((await ok('supportedmethods')) as string[])).toEqual(
      new Set([
        'supportedmethods', 'banpubkey', 'unbanpubkey', 'listbannedpubkeys', 'allowpubkey', 'unallowpubkey', 'listallowedpubkeys',
        'banevent', 'allowevent', 'listbannedevents', 'listeventsneedingmoderation', 'allowkind', 'disallowkind', 'listallowedkinds',
        'blockip', 'unblockip', 'listblockedips', 'changerelayname', 'changerelaydescription', 'changerelayicon',
        'listwebhooks', 'addwebhook', 'pausewebhook', 'resumewebhook', 'removewebhook',
        'listpubkeysneedingmoderation', 'dismisspubkeyreports',
        'allowpubkeyuntil', 'extendmembership',
      ]),
    );
  });

  it('manages webhook endpoints: addwebhook, listwebhooks, pausewebhook, resumewebhook, removewebhook', async () => {
    const added = (await ok('addwebhook', ['https://example.com/hook', { kinds: [1] }])) as { id: number; secret: string };
    expect(added.secret).toMatch(/^whsec_/);
    expect(await ok('listwebhooks')).toContainEqual(expect.objectContaining({ id: added.id, url: 'https://example.com/hook', filters: [{ kinds: [1] }], paused: false, queued: 0 }));
    expect(await ok('pausewebhook', [added.id])).toBe(true);
    expect(await ok('listwebhooks')).toContainEqual(expect.objectContaining({ id: added.id, paused: true }));
    expect(await ok('resumewebhook', [String(added.id)])).toBe(true);
    expect(await ok('removewebhook', [added.id])).toEqual({ queued: 0, dead: 0 });
    for (const [params, error] of [
      [['ftp://x/y', { kinds: [1] }], /http or https/],
      [['https://x/y', { kinds: 'x' }], /bad filter: invalid: "kinds" must be an array/],
      [['https://x/y', { kinds: [1] }, 'not-a-secret'], /whsec_/],
    ] as Array<[unknown[], RegExp]>) {
      const r = await rpc(url, admin, 'addwebhook', params);
      expect(r.body.error).toMatch(error);
    }
    expect((await rpc(url, admin, 'removewebhook', [999999])).body.error).toBe('no webhook endpoint with this id');
    expect((await rpc(url, admin, 'pausewebhook', ['x1'])).body.error).toMatch(/id/);
  });

  it('banpubkey refuses the key\'s new events with blocked:, listbannedpubkeys shows it, unbanpubkey lifts it', async () => {
    const c = await connect();
    const spammer = newSigner();
    expect(await ok('banpubkey', [spammer.pubkey, 'spam'])).toBe(true);
    expect(await c.publish(spammer.sign({ content: unique('spam') }))).toEqual([false, 'blocked: this pubkey is banned from this relay']);
    expect(await ok('listbannedpubkeys')).toContainEqual({ pubkey: spammer.pubkey, reason: 'spam' });
    expect(await ok('unbanpubkey', [npubEncode(spammer.pubkey)])).toBe(true);
    expect(await c.publish(spammer.sign({ content: unique('ok now') }))).toEqual([true, '']);
    expect(await ok('listbannedpubkeys')).not.toContainEqual(expect.objectContaining({ pubkey: spammer.pubkey }));
  });

  it('banevent removes the event from every answer and refuses it again; allowevent lets it back', async () => {
    const c = await connect();
    const note = alice.sign({ content: unique('bad note') });
    expect(await c.publish(note)).toEqual([true, '']);
    expect(await ok('banevent', [noteEncode(note.id), 'illegal'])).toBe(true);
    expect(await c.fetch('gone', { ids: [note.id] })).toEqual([]);
    expect(await c.count('gone-n', { ids: [note.id] })).toBe(0);
    expect(await c.publish(note)).toEqual([false, 'blocked: this event is banned from this relay']);
    expect(await ok('listbannedevents')).toContainEqual({ id: note.id, reason: 'illegal' });
    expect(await ok('allowevent', [note.id])).toBe(true);
    expect(await c.publish(note)).toEqual([true, '']);
    expect(await c.fetch('back', { ids: [note.id] })).toEqual([note]);
  });

  it('listeventsneedingmoderation is empty while no trusted reporter has reported anything (test/relay/reports.test.ts)', async () => {
    expect(await ok('listeventsneedingmoderation')).toEqual([]);
  });

  it('allowpubkey makes a private relay: only allowed keys (and gift wraps to them) may publish', async () => {
    const c = await connect();
    expect(await ok('allowpubkey', [alice.pubkey, 'member'])).toBe(true);
    try {
      expect(await c.publish(alice.sign({ content: unique('member') }))).toEqual([true, '']);
      expect(await c.publish(bob.sign({ content: unique('outsider') }))).toEqual([false, 'restricted: this relay accepts events only from its allowed pubkeys']);
      const wrap = newSigner().sign({ kind: 1059, tags: [['p', alice.pubkey]], content: 'sealed' });
      expect(await c.publish(wrap)).toEqual([true, '']);
      expect(await ok('listallowedpubkeys')).toEqual([{ pubkey: alice.pubkey, reason: 'member' }]);
    } finally {
      expect(await ok('unallowpubkey', [alice.pubkey])).toBe(true);
    }
    expect(await c.publish(bob.sign({ content: unique('open again') }))).toEqual([true, '']);
  });

  it('allowkind restricts the kinds accepted; disallowkind lifts it', async () => {
    const c = await connect();
    expect(await ok('allowkind', [1])).toBe(true);
    expect(await ok('allowkind', ['7'])).toBe(true);
    try {
      expect(await ok('listallowedkinds')).toEqual([1, 7]);
      expect(await c.publish(alice.sign({ kind: 1, content: unique('note') }))).toEqual([true, '']);
      expect(await c.publish(alice.sign({ kind: 30023, tags: [['d', 'x']], content: 'article' }))).toEqual([false, 'blocked: kind 30023 is not accepted by this relay']);
    } finally {
      await ok('disallowkind', [1]);
      await ok('disallowkind', [7]);
    }
    expect(await ok('listallowedkinds')).toEqual([]);
    expect(await c.publish(alice.sign({ kind: 30023, tags: [['d', 'y']], content: 'article' }))).toEqual([true, '']);
  });

  it('blockip refuses new connections from the address (HTTP 403) and closes its open ones; unblockip lets it back', async () => {
    const open = await connect({ localAddress: '127.0.0.9' });
    expect(await ok('blockip', ['127.0.0.9', 'abuse'])).toBe(true);
    try {
      expect((await open.closed()).reason).toMatch(/^blocked: /);
      await expect(TestClient.connect(relay.url, { localAddress: '127.0.0.9' })).rejects.toThrow(/403/);
      await connect({ localAddress: '127.0.0.10' }); // another address still connects
      expect(await ok('listblockedips')).toContainEqual({ ip: '127.0.0.9', reason: 'abuse' });
      expect(await ok('blockip', ['10.1.2.3/8'])).toBe(true); // host bits dropped
      expect(await ok('listblockedips')).toContainEqual({ ip: '10.0.0.0/8', reason: null });
    } finally {
      expect(await ok('unblockip', ['127.0.0.9'])).toBe(true);
      await ok('unblockip', ['10.0.0.0/8']);
    }
    await connect({ localAddress: '127.0.0.9' });
  });

  it('changerelayname, changerelaydescription and changerelayicon change the NIP-11 document', async () => {
    expect(await ok('changerelayname', ['Operated Relay'])).toBe(true);
    expect(await ok('changerelaydescription', ['Now with rules.'])).toBe(true);
    expect(await ok('changerelayicon', ['https://example.com/icon.png'])).toBe(true);
    const info = (await (await fetch(url, { headers: { Accept: 'application/nostr+json' } })).json()) as Record<string, unknown>;
    expect(info).toMatchObject({ name: 'Operated Relay', description: 'Now with rules.', icon: 'https://example.com/icon.png' });
  });

  it.each([
    ['an unknown method', 'nosuchmethod', [], /^unsupported method/],
    ['a pubkey that is not one', 'banpubkey', ['ABC'], /pubkey/],
    ['a kind out of range', 'allowkind', [70000], /kind/],
    ['an address that is not one', 'blockip', ['not-an-ip'], /IP address/],
    ['an icon that is not a URL', 'changerelayicon', ['javascript:alert(1)'], /http/],
    ['a reason that is not a string', 'banpubkey', [alice.pubkey, 42], /reason/],
  ])('answers %s with an error and changes nothing', async (_, method, params, error) => {
    const r = await rpc(url, admin, method, params);
    expect(r.status).toBe(200);
    expect(r.body.error).toMatch(error);
    expect(r.body.result).toBeNull();
  });
});

describe('NIP-98 authentication', () => {
  const body = JSON.stringify({ method: 'listbannedpubkeys', params: [] });

  it('answers 401 with a JSON error when the Authorization header is missing', async () => {
    const r = await post(url, body, {});
    expect(r.status).toBe(401);
    expect(r.body.error).toMatch(/^unauthorized: an Authorization: Nostr header/);
  });

  it.each([
    ['not the Nostr scheme', () => 'Bearer abc', /must be "Nostr/],
    ['not base64 JSON', () => 'Nostr !!!!', /must be "Nostr|base64/],
    ['another kind', () => authHeader(admin, url, body, { kind: 27236 }), /kind 27235/],
    ['61 s old', () => authHeader(admin, url, body, { created_at: now() - 61 }), /within 60 seconds/],
    ['61 s ahead', () => authHeader(admin, url, body, { created_at: now() + 61 }), /within 60 seconds/],
    ['a u tag naming another host', () => authHeader(admin, url, body, { u: 'https://evil.example.com/' }), /u tag/],
    ['a u tag naming another path', () => authHeader(admin, url, body, { u: url + 'admin' }), /u tag/],
    ['no u tag', () => authHeader(admin, url, body, { u: null }), /u tag/],
    ['a GET method tag', () => authHeader(admin, url, body, { method: 'GET' }), /method tag/],
    ['no payload tag', () => authHeader(admin, url, body, { payload: null }), /payload tag .* is required/],
    ['the payload hash of another body', () => authHeader(admin, url, body, { payload: 'a'.repeat(64) }), /not the sha256/],
  ])('answers 401 to a header that is %s', async (_, header, error) => {
    const r = await post(url, body, { Authorization: header() });
    expect(r.status).toBe(401);
    expect(r.body.error).toMatch(error);
  });

  it('answers 401 to a bad signature', async () => {
    const good = JSON.parse(Buffer.from(authHeader(admin, url, body).slice(6), 'base64').toString());
    const forged = { ...good, sig: JSON.parse(Buffer.from(authHeader(stranger, url, body).slice(6), 'base64').toString()).sig };
    const r = await post(url, body, { Authorization: `Nostr ${Buffer.from(JSON.stringify(forged)).toString('base64')}` });
    expect(r).toMatchObject({ status: 401, body: { error: expect.stringMatching(/bad signature/) } });
  });

  it('answers 401 when the header of a change is replayed (a read may repeat)', async () => {
    const change = JSON.stringify({ method: 'banpubkey', params: [newSigner().pubkey] });
    const header = authHeader(admin, url, change);
    expect((await post(url, change, { Authorization: header })).status).toBe(200);
    expect(await post(url, change, { Authorization: header })).toMatchObject({ status: 401, body: { error: expect.stringMatching(/already used/) } });
    const read = authHeader(admin, url, body);
    expect((await post(url, body, { Authorization: read })).status).toBe(200);
    expect((await post(url, body, { Authorization: read })).status).toBe(200);
  });

  it('answers 403 to a valid key that is not an admin, and changes nothing', async () => {
    const r = await rpc(url, stranger, 'banpubkey', [alice.pubkey]);
    expect(r).toMatchObject({ status: 403, body: { error: expect.stringMatching(/^forbidden: /) } });
    expect(await ok('listbannedpubkeys')).not.toContainEqual(expect.objectContaining({ pubkey: alice.pubkey }));
  });

  it('answers 415 to another content type and 413 to a body over 64 KiB', async () => {
    const res = await fetch(url, { method: 'POST', body, headers: { 'Content-Type': 'application/json', Authorization: authHeader(admin, url, body) } });
    expect(res.status).toBe(415);
    const big = JSON.stringify({ method: 'supportedmethods', params: ['x'.repeat(70_000)] });
    expect((await post(url, big, { Authorization: authHeader(admin, url, big) })).status).toBe(413);
  });
});

describe('bans that hold', () => {
  it('a ban made on one relay process applies on another on the same database, without a restart', async () => {
    const second = await startTestRelay({ ADMIN_PUBKEYS: admin.pubkey }, relay.config.DATABASE_URL);
    try {
      const c = await TestClient.connect(second.url);
      const troll = newSigner();
      expect(await c.publish(troll.sign({ content: unique('before') }))).toEqual([true, '']);
      expect(await ok('banpubkey', [troll.pubkey])).toBe(true);
      // The other process polls the lists' version (every 500 ms): the ban arrives with its next poll.
      await expect
        .poll(async () => (await c.publish(troll.sign({ content: unique('after') })))[1], { timeout: 10_000, interval: 50 })
        .toBe('blocked: this pubkey is banned from this relay');
      await ok('unbanpubkey', [troll.pubkey]);
      c.close();
    } finally {
      await second.close();
    }
  });

  it('the CLI bans (npub input), lists, purges and unbans, and the running relay applies it within a second', async () => {
    const env = { DATABASE_URL: relay.config.DATABASE_URL!, LOG_LEVEL: 'silent' };
    const c = await connect();
    const spammer = newSigner();
    const stored = [spammer.sign({ content: unique('1') }), spammer.sign({ content: unique('2') })];
    for (const e of stored) expect(await c.publish(e)).toEqual([true, '']);

    const ban = await runCli(['ban', 'pubkey', npubEncode(spammer.pubkey), '--reason', 'spam', '--purge'], env);
    expect(ban).toMatchObject({ code: 0, stdout: expect.stringMatching(/banned pubkey .*\n.*purged 2 stored events/) });
    expect(await c.fetch('purged', { authors: [spammer.pubkey] })).toEqual([]);
    await expect.poll(async () => (await c.publish(spammer.sign({ content: unique('x') })))[0], { timeout: 10_000, interval: 50 }).toBe(false);

    const listed = await runCli(['list', 'banned-pubkeys', '--json'], env);
    expect(JSON.parse(listed.stdout)['banned-pubkeys']).toContainEqual({ key: spammer.pubkey, reason: 'spam' });
    expect(await runCli(['unban', 'pubkey', spammer.pubkey], env)).toMatchObject({ code: 0 });
    expect(await runCli(['unban', 'pubkey', spammer.pubkey], env)).toMatchObject({ code: 1, stdout: expect.stringMatching(/no ban/) });
    await expect.poll(async () => (await c.publish(spammer.sign({ content: unique('y') })))[0], { timeout: 10_000, interval: 50 }).toBe(true);
  });

  it('the CLI refuses what is not a key, an id, an address or a kind', async () => {
    const env = { DATABASE_URL: relay.config.DATABASE_URL!, LOG_LEVEL: 'silent' };
    expect(await runCli(['ban', 'pubkey', 'A'.repeat(64)], env)).toMatchObject({ code: 2, stderr: expect.stringMatching(/expected a pubkey/) });
    expect(await runCli(['ban', 'event', npubEncode(alice.pubkey)], env)).toMatchObject({ code: 2, stderr: expect.stringMatching(/expected an event id/) });
    expect(await runCli(['ban', 'ip', '300.1.1.1'], env)).toMatchObject({ code: 2 });
    expect(await runCli(['allow', 'kind', '65536'], env)).toMatchObject({ code: 2 });
    expect(await runCli(['ban', 'event', alice.pubkey, '--purge'], env)).toMatchObject({ code: 2, stderr: expect.stringMatching(/--purge goes with ban pubkey/) });
  });

  it('an import applies the bans too (the same rule list)', async () => {
    const env = { DATABASE_URL: relay.config.DATABASE_URL!, LOG_LEVEL: 'silent' };
    const banned = newSigner();
    await ok('banpubkey', [banned.pubkey]);
    const line = JSON.stringify(banned.sign({ content: unique('imported') }));
    const r = await runCli(['import', '-'], env, line + '\n');
    expect(r.code).toBe(0);
    expect(r.stderr + r.stdout).toMatch(/blocked: this pubkey is banned/);
    const c = await connect();
    expect(ids(await c.fetch('imported', { authors: [banned.pubkey] }))).toEqual([]);
  });
});
