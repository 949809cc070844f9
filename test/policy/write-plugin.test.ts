// strfry write-policy plugins (src/policy/write-plugin.ts): real child processes, one JSON line each
// way per event, answers matched by id; faults answer `error:` and restart the plugin.
import { chmodSync, copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { NostrEvent } from '../../src/nostr/event.js';
import { connectionSource, MAX_IN_FLIGHT, MAX_QUEUED, rejectionReason, WritePlugin, type PluginSource, type WritePluginSettings } from '../../src/policy/write-plugin.js';
import { newSigner } from '../support/keys.js';
import { until } from '../support/wait.js';

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '../fixtures/plugins');
const SCRIPTED = path.join(FIXTURES, 'scripted.js');
const signer = newSigner();
const client: PluginSource = { type: 'IP4', info: '203.0.113.7' };
const dir = mkdtempSync(path.join(tmpdir(), 'pgrelay-plugin-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let counter = 0;
const event = (content: string): NostrEvent => signer.sign({ content, tags: [['n', String(counter++)]] });

/** A plugin whose log lines are kept, and whose decisions and restarts are counted. */
function harness(command: string, timeoutMs = 20_000) {
  const logs: Array<Record<string, unknown>> = [];
  const decisions: string[] = [];
  const restarts: string[] = [];
  const log = pino({ level: 'debug' }, { write: (line: string) => void logs.push(JSON.parse(line)) });
  const settings: WritePluginSettings = {
    timeoutMs,
    log,
    onDecision: (action) => decisions.push(action),
    onRestart: (reason) => restarts.push(reason),
  };
  const plugin = new WritePlugin(command, settings);
  open.push(plugin);
  return { plugin, logs, decisions, restarts };
}
const open: WritePlugin[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((p) => p.close()));
});

/** A log file for --log, and the request lines the plugin wrote to it. */
function requestLog() {
  const file = path.join(dir, `requests-${counter++}.jsonl`);
  const lines = () => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : []);
  return { file, lines };
}

describe('rejectionReason', () => {
  it('keeps a message that starts with a NIP-01 prefix and prefixes the others with blocked:', () => {
    expect(rejectionReason('blocked: not on white-list')).toBe('blocked: not on white-list');
    expect(rejectionReason('rate-limited: slow down')).toBe('rate-limited: slow down');
    expect(rejectionReason('auth-required: who are you')).toBe('auth-required: who are you');
    expect(rejectionReason('spam')).toBe('blocked: spam');
    expect(rejectionReason('closed: not an OK prefix')).toBe('blocked: closed: not an OK prefix');
  });

  it('gives an empty message a reason', () => {
    expect(rejectionReason('')).toMatch(/^blocked: \S/);
  });
});

describe('connectionSource', () => {
  it('tells IP4 from IP6 by the client address, and names the first key the connection authenticated as', () => {
    const session = (address: string, pubkeys: string[] = []) => ({ origin: 'connection' as const, address, pubkeys: new Set(pubkeys) });
    expect(connectionSource(session('203.0.113.7'))).toEqual({ type: 'IP4', info: '203.0.113.7' });
    expect(connectionSource(session('2001:db8::1', ['a'.repeat(64), 'b'.repeat(64)]))).toEqual({ type: 'IP6', info: '2001:db8::1', authed: 'a'.repeat(64) });
  });
});

describe('a write-policy plugin', () => {
  it("runs strfry's whitelist example unchanged: the whitelisted key is accepted, others rejected with its message", async () => {
    // The fixture is strfry's docs/plugins.md example verbatim. Its whitelisted key's secret is
    // unknown, so the test runs a copy in which only that hex is replaced by a test key.
    const text = readFileSync(path.join(FIXTURES, 'whitelist.js'), 'utf8');
    const listed = '003ba9b2c5bd8afeed41a4ce362a8b7fc3ab59c25b6a1359cae9093f296dac01';
    expect(text).toContain(listed);
    const file = path.join(dir, 'whitelist.js');
    writeFileSync(file, text.replace(listed, signer.pubkey));
    chmodSync(file, 0o755);
    const { plugin, decisions } = harness(file);
    expect(await plugin.decide(event('hello'), client)).toEqual({ action: 'accept', msg: '' });
    const stranger = newSigner().sign({ content: 'hello' });
    const verdict = await plugin.decide(stranger, client);
    expect(verdict).toEqual({ action: 'reject', msg: 'blocked: not on white-list' });
    expect(rejectionReason(verdict.msg)).toBe('blocked: not on white-list');
    expect(decisions).toEqual(['accept', 'reject']);
  });

  it('sends strfry\'s request line: type new, the event, receivedAt, sourceType, sourceInfo, and authed when authenticated', async () => {
    const requests = requestLog();
    const { plugin } = harness(`${SCRIPTED} --log ${requests.file}`);
    const e = event('look');
    await plugin.decide(e, { type: 'IP6', info: '2001:db8::1', authed: signer.pubkey }, 1_700_000_000);
    await plugin.decide(event('look'), { type: 'Sync', info: 'wss://relay.example.com' });
    const [first, second] = requests.lines();
    expect(first).toEqual({ type: 'new', event: e, receivedAt: 1_700_000_000, sourceType: 'IP6', sourceInfo: '2001:db8::1', authed: signer.pubkey });
    expect(second).toMatchObject({ type: 'new', sourceType: 'Sync', sourceInfo: 'wss://relay.example.com' });
    expect(second).not.toHaveProperty('authed');
    expect(Math.abs(second.receivedAt - Date.now() / 1000)).toBeLessThan(3600);
  });

  it('runs a command with spaces through the shell, with its arguments', async () => {
    const requests = requestLog();
    const { plugin } = harness(`PLUGIN_VERSION=shell ${process.execPath} ${SCRIPTED} --log ${requests.file}`);
    expect(await plugin.decide(event('version'), client)).toEqual({ action: 'reject', msg: 'version shell' });
    expect(requests.lines()).toHaveLength(1);
  });

  it('passes reject and shadowReject with the message as sent, or none', async () => {
    const { plugin } = harness(SCRIPTED);
    expect(await plugin.decide(event('shadow'), client)).toEqual({ action: 'shadowReject', msg: '' });
    expect(await plugin.decide(event('reject:spam'), client)).toEqual({ action: 'reject', msg: 'spam' });
    expect(await plugin.decide(event('reject'), client)).toEqual({ action: 'reject', msg: '' });
  });

  it('has many events in flight: answers come out of order, and a slow decision does not hold up a fast one', async () => {
    const { plugin } = harness(SCRIPTED);
    const order: string[] = [];
    const held = plugin.decide(event('hold'), client).then((v) => (order.push('held'), v));
    const fast = await plugin.decide(event('fast'), client);
    order.push('fast');
    expect(fast.action).toBe('accept');
    expect(plugin.state().inFlight).toBe(1); // the held one, still waiting
    const release = plugin.decide(event('release'), client).then((v) => (order.push('release'), v));
    await Promise.all([held, release]);
    expect(order).toEqual(['fast', 'release', 'held']);
  });

  it('asks once for the same event from the same source, and every caller gets the answer', async () => {
    const requests = requestLog();
    const { plugin } = harness(`${SCRIPTED} --log ${requests.file}`);
    const e = event('hold');
    const calls = [plugin.decide(e, client), plugin.decide(e, client), plugin.decide(e, { type: 'IP4', info: '198.51.100.1' })];
    await plugin.decide(event('release'), client);
    const verdicts = await Promise.all(calls);
    expect(verdicts.map((v) => v.action)).toEqual(['accept', 'accept', 'accept']);
    const seen = requests.lines().filter((r) => r.event.id === e.id);
    expect(seen.map((r) => r.sourceInfo)).toEqual(['203.0.113.7', '198.51.100.1']); // another source is asked again
  });

  it('answers error: for what waited on a plugin that exits, and starts it again', async () => {
    const { plugin, logs, restarts } = harness(SCRIPTED);
    await plugin.decide(event('first'), client);
    const firstPid = plugin.state().pid;
    const waiting = plugin.decide(event('hold'), client);
    const exit = await plugin.decide(event('exit'), client);
    expect(exit.action).toBe('reject');
    expect(exit.msg).toMatch(/^error: .*exited with code 3/);
    expect((await waiting).msg).toMatch(/^error: /);
    expect(restarts).toEqual(['exit']);
    expect(plugin.state()).toMatchObject({ running: false, restarts: 1, inFlight: 0, lastError: 'exited with code 3' });
    // Started again once its backoff has passed: until then, events are answered error: at once.
    let after;
    await until(async () => (after = await plugin.decide(event('again'), client)).action === 'accept', 'the plugin to run again');
    expect(plugin.state().pid).not.toBe(firstPid);
    expect(plugin.state().running).toBe(true);
    expect(logs.some((l) => l.stderr === 'exiting as asked')).toBe(true); // its stderr reaches the log
  });

  it('gives up on a plugin that does not answer in time: error: for its events, and a new process', async () => {
    const { plugin, restarts } = harness(SCRIPTED, 1500);
    await plugin.decide(event('first'), client);
    const firstPid = plugin.state().pid;
    const hung = plugin.decide(event('hang'), client);
    const other = plugin.decide(event('hold'), client); // written after it, so it expires after it
    expect(await hung).toEqual({ action: 'reject', msg: 'error: the write policy plugin did not answer within 1500 ms' });
    expect(await other).toEqual({ action: 'reject', msg: 'error: the write policy plugin timed out on another event' });
    expect(restarts).toEqual(['timeout']);
    await until(async () => (await plugin.decide(event('again'), client)).action === 'accept', 'the plugin to run again');
    expect(plugin.state().pid).not.toBe(firstPid);
    expect(plugin.state().lastError).toBe('did not answer within 1500 ms');
  });

  it('skips lines that are not answers, and answers error: to an unknown action', async () => {
    const { plugin, logs, restarts } = harness(SCRIPTED);
    expect(await plugin.decide(event('garbage'), client)).toEqual({ action: 'accept', msg: '' });
    expect(await plugin.decide(event('bad-action'), client)).toEqual({ action: 'reject', msg: 'error: the write policy plugin gave an unknown action' });
    const ignored = logs.map((l) => l.msg).filter((m) => typeof m === 'string' && m.startsWith('write policy plugin: ignored'));
    expect(ignored).toEqual([
      'write policy plugin: ignored not JSON',
      'write policy plugin: ignored an id no event awaits',
      'write policy plugin: ignored no id',
      'write policy plugin: ignored an unknown action',
    ]);
    expect(restarts).toEqual([]);
    expect(await plugin.decide(event('still fine'), client)).toEqual({ action: 'accept', msg: '' });
  });

  it('logs its stderr, but only so many lines of it', async () => {
    const { plugin, logs } = harness(SCRIPTED);
    await plugin.decide(event('stderr:500'), client);
    await plugin.decide(event('after'), client); // stderr lines written before the answer have been read
    await until(() => logs.filter((l) => typeof l.stderr === 'string').length >= 50, 'stderr in the log');
    const said = logs.filter((l) => typeof l.stderr === 'string');
    expect(said.length).toBe(50);
    expect(said[0].stderr).toBe('stderr line 0');
  });

  it('answers error: at once when the plugin file does not exist, and starts it once it does', async () => {
    const file = path.join(dir, `later-${counter++}.js`);
    const { plugin, restarts } = harness(file);
    const verdict = await plugin.decide(event('x'), client);
    expect(verdict.action).toBe('reject');
    expect(verdict.msg).toMatch(/^error: .*does not exist/);
    expect(plugin.state()).toMatchObject({ running: false, lastError: `could not start: ${file} does not exist` });
    expect(restarts).toEqual(['spawn']);
    copyFileSync(SCRIPTED, file);
    chmodSync(file, 0o755);
    await until(async () => (await plugin.decide(event('x'), client)).action === 'accept', 'the plugin to start');
  });

  it('starts the new version when the file changes; events in flight finish on the old one', async () => {
    const file = path.join(dir, `reloaded-${counter++}.js`);
    const version = (v: string) => {
      writeFileSync(file, `#!${process.execPath}\nprocess.env.PLUGIN_VERSION = '${v}';\nrequire(${JSON.stringify(SCRIPTED)});\n`);
      chmodSync(file, 0o755);
    };
    version('one');
    const { plugin, restarts } = harness(file);
    expect((await plugin.decide(event('version'), client)).msg).toBe('version one');
    const release = path.join(dir, `release-${counter++}`);
    const inFlight = plugin.decide(event(`wait-for:${release}`), client);
    const oldPid = plugin.state().pid;
    version('two');
    const later = new Date(Date.now() + 10_000);
    utimesSync(file, later, later); // a change of mtime whatever the file system's resolution
    await new Promise((r) => setImmediate(r)); // the file is looked at once per tick, and this one already did
    expect((await plugin.decide(event('version'), client)).msg).toBe('version two');
    expect(restarts).toEqual(['reload']);
    expect(plugin.state().pid).not.toBe(oldPid);
    writeFileSync(release, '');
    expect((await inFlight).msg).toBe('version one');
    expect((await plugin.decide(event('version'), client)).msg).toBe('version two');
  });

  it(`keeps ${MAX_IN_FLIGHT} events in flight and queues ${MAX_QUEUED} more; past that, rate-limited:`, async () => {
    const requests = requestLog();
    const { plugin } = harness(`${SCRIPTED} --log ${requests.file}`);
    const e = event('hold');
    // One event from many sources: each is a request of its own.
    const verdicts: Array<Promise<{ action: string; msg: string }>> = [];
    for (let i = 0; i < MAX_IN_FLIGHT + MAX_QUEUED; i++) verdicts.push(plugin.decide(e, { type: 'IP4', info: `source ${i}` }));
    expect(plugin.state()).toMatchObject({ inFlight: MAX_IN_FLIGHT + MAX_QUEUED, queued: MAX_QUEUED });
    expect(await plugin.decide(e, { type: 'IP4', info: 'one too many' })).toEqual({ action: 'reject', msg: 'rate-limited: the write policy plugin is busy, try again shortly' });
    await until(() => requests.lines().length === MAX_IN_FLIGHT, 'the plugin to read what was written');
    await plugin.close();
    expect(requests.lines()).toHaveLength(MAX_IN_FLIGHT); // the queue never reached it
    const all = await Promise.all(verdicts);
    expect(all.every((v) => v.msg === 'error: the relay is closing')).toBe(true);
  });

  it('close() answers what waits with error: and stops the process', async () => {
    const { plugin } = harness(SCRIPTED);
    await plugin.decide(event('first'), client);
    const pid = plugin.state().pid!;
    const waiting = plugin.decide(event('hold'), client);
    await plugin.close();
    expect(await waiting).toEqual({ action: 'reject', msg: 'error: the relay is closing' });
    expect(() => process.kill(pid, 0)).toThrow();
    expect((await plugin.decide(event('late'), client)).msg).toBe('error: the relay is closing');
  });
});
