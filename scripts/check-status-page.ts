// npm run check:status-page: the status page in a real browser, against a real relay.
// Starts the compiled relay on a fresh embedded PostgreSQL, opens its address in headless Chromium
// (puppeteer-core; `npm run status-page:install-chromium` installs Debian's), sends it traffic from
// Node (signed events on a few WebSockets, REQs, live subscriptions) and checks from the page's DOM
// that every figure followed. Then screenshots for a desktop and a phone (bench-out/status-page*.png),
// and the phone's layout must not scroll sideways. Skipped, with exit code 0, when no Chromium is found.
import { accessSync, constants, mkdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import WebSocket from 'ws';
import { startRelayProcess, type RelayProcess } from '../bench/lib/relay-process.js';
import { packageRoot } from '../src/paths.js';

const TOTAL_TIMEOUT_MS = 120_000;
const RELAY_NAME = 'Status check <relay> & "co"'; // markup in it: the page must show it as text
const CHROMIUM_FLAGS = [
  '--no-sandbox', // root in a container has no user namespaces for the sandbox
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  // Without these Chromium keeps calling Google's services, which a closed network refuses.
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-dev-shm-usage', // containers often have a tiny /dev/shm
];
const PHONE = { width: 390, height: 844, deviceScaleFactor: 2, isMobile: true, hasTouch: true };
const OUT_DIR = path.join(packageRoot(), 'bench-out');

// --- finding Chromium (the same order as scripts/install-chromium.sh) ------------------------------

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function findChromium(): string | undefined {
  const fromEnv = process.env.CHROMIUM_BIN;
  if (fromEnv && executable(fromEnv)) return fromEnv;
  const dirs = (process.env.PATH ?? '').split(path.delimiter).filter(Boolean);
  for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
    for (const dir of dirs) if (executable(path.join(dir, name))) return path.join(dir, name);
  }
  return executable('/usr/bin/chromium') ? '/usr/bin/chromium' : undefined;
}

// --- a minimal Nostr client ------------------------------------------------------------------------

/** One WebSocket to the relay: publish events, run REQs, hold live subscriptions. */
class Client {
  private readonly waiting = new Map<string, { resolve: (message: unknown[]) => void; reject: (err: Error) => void }>();
  /** EVENT messages received, stored answers and live deliveries alike. */
  received = 0;

  private constructor(private readonly ws: WebSocket) {
    // A socket that fails or closes fails whatever waits on it (no unhandled 'error' event).
    const fail = (why: string) => {
      for (const { reject } of this.waiting.values()) reject(new Error(`WebSocket to the relay ${why}`));
      this.waiting.clear();
    };
    ws.on('error', (err) => fail(`failed: ${err.message}`));
    ws.on('close', (code) => fail(`closed (${code})`));
    ws.on('message', (data) => {
      const message = JSON.parse(String(data)) as unknown[];
      if (message[0] === 'EVENT') this.received++;
      // OK is keyed by event id, EOSE/CLOSED/COUNT by subscription id.
      const key = message[0] === 'OK' || message[0] === 'EOSE' || message[0] === 'CLOSED' || message[0] === 'COUNT' ? String(message[1]) : '';
      const waiter = this.waiting.get(key);
      if (waiter) {
        this.waiting.delete(key);
        waiter.resolve(message);
      }
    });
  }

  static open(url: string): Promise<Client> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url);
      const refused = (err: Error) => reject(new Error(`could not connect to ${url}: ${err.message}`));
      ws.once('error', refused);
      ws.once('open', () => {
        ws.off('error', refused);
        resolve(new Client(ws));
      });
    });
  }

  private request(key: string, message: unknown[]): Promise<unknown[]> {
    return new Promise((resolve, reject) => {
      this.waiting.set(key, { resolve, reject });
      this.ws.send(JSON.stringify(message));
    });
  }

  async publish(event: { id: string }): Promise<void> {
    const ok = await this.request(event.id, ['EVENT', event]);
    if (ok[2] !== true) throw new Error(`the relay refused an event: ${JSON.stringify(ok)}`);
  }

  /** A REQ answered up to EOSE; `keep` leaves it open for live events. */
  async req(subId: string, filter: object, keep = false): Promise<void> {
    const reply = await this.request(subId, ['REQ', subId, filter]);
    if (reply[0] !== 'EOSE') throw new Error(`REQ ${subId} answered ${JSON.stringify(reply)}`);
    if (!keep) this.ws.send(JSON.stringify(['CLOSE', subId]));
  }

  async count(subId: string, filter: object): Promise<number> {
    const reply = await this.request(subId, ['COUNT', subId, filter]);
    return (reply[2] as { count: number }).count;
  }

  close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((resolve) => {
      this.ws.once('close', () => resolve());
      this.ws.close();
    });
  }
}

// --- reading the page ------------------------------------------------------------------------------

interface ChartState {
  id: string;
  points: number;
  empty: boolean;
  /** Pixels in the chart's colours (the grid and axes are grey): the series were drawn. */
  colouredPixels: number;
}

interface PageState {
  live: string;
  liveText: string;
  name: string;
  nameHasMarkup: boolean;
  counters: Record<string, number | null>;
  kinds: Array<{ kind: number; count: number }>;
  nips: string[];
  latencyOkP50: string;
  charts: ChartState[];
  scrollWidth: number;
  innerWidth: number;
}

// Runs inside the page, serialized by puppeteer: no imports, no closures. (tsconfig has no DOM types,
// so the document is reached through globalThis.)
function readPage(): PageState {
  const doc = (globalThis as any).document;
  const counters: Record<string, number | null> = {};
  for (const id of ['in-rate', 'in-total', 'out-rate', 'out-total', 'req-rate', 'req-total', 'connections', 'subscriptions', 'db-size', 'db-events']) {
    const value = doc.getElementById(id)?.dataset.value;
    counters[id] = value === undefined || value === '' ? null : Number(value);
  }
  const charts: ChartState[] = [];
  for (const el of doc.querySelectorAll('.chart')) {
    let colouredPixels = 0;
    const canvas = el.querySelector('canvas');
    if (canvas && canvas.width > 0 && canvas.height > 0) {
      const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
      for (let i = 0; i < pixels.length; i += 4) {
        const r = pixels[i], g = pixels[i + 1], b = pixels[i + 2];
        if (pixels[i + 3] > 128 && Math.max(r, g, b) - Math.min(r, g, b) > 80) colouredPixels++;
      }
    }
    charts.push({ id: el.id, points: Number(el.dataset.points), empty: el.dataset.empty !== 'false', colouredPixels });
  }
  const name = doc.getElementById('relay-name');
  return {
    live: doc.getElementById('live').dataset.state,
    liveText: doc.getElementById('live').textContent,
    name: name.textContent,
    nameHasMarkup: name.children.length > 0,
    counters,
    kinds: Array.from(doc.querySelectorAll('#kinds li'), (li: any) => ({ kind: Number(li.dataset.kind), count: Number(li.dataset.count) })),
    nips: Array.from(doc.querySelectorAll('#nips li'), (li: any) => li.textContent),
    latencyOkP50: doc.querySelector('#latency-ok td').textContent,
    charts,
    scrollWidth: doc.documentElement.scrollWidth,
    innerWidth: (globalThis as any).innerWidth,
  };
}

interface Check {
  what: string;
  pass: (s: PageState) => boolean;
  /** What the page showed, for the report. */
  saw: (s: PageState) => string;
}

/**
 * Polls the page until every check has passed, each at some poll (a rate averaged over 10 s may fall
 * back to 0 while a total is still arriving); on timeout, throws naming those that never did.
 */
async function waitForChecks(page: Page, checks: Check[], timeoutMs: number): Promise<PageState> {
  const deadline = Date.now() + timeoutMs;
  const passed = new Map<Check, string>();
  for (;;) {
    const state = await page.evaluate(readPage);
    for (const c of checks) if (!passed.has(c) && c.pass(state)) passed.set(c, c.saw(state));
    const failing = checks.filter((c) => !passed.has(c));
    if (failing.length === 0 || Date.now() > deadline) {
      for (const c of checks) console.log(`  ${passed.has(c) ? 'ok ' : 'FAIL'} ${c.what} (${passed.get(c) ?? c.saw(state)})`);
      if (failing.length > 0) {
        throw new Error(`the page did not show: ${failing.map((c) => c.what).join('; ')} (live indicator: ${JSON.stringify(state.liveText)})`);
      }
      return state;
    }
    await sleep(250);
  }
}

/** The live indicator says "Live" now (the stream did not drop during the checks). */
async function expectLive(page: Page, when: string): Promise<void> {
  const state = await page.evaluate(readPage);
  if (state.live !== 'live') throw new Error(`the page lost its stream ${when}: the indicator says ${JSON.stringify(state.liveText)}`);
}

// --- the run ---------------------------------------------------------------------------------------

const cleanups: Array<() => Promise<unknown>> = [];
let cleaning: Promise<void> | undefined;
let interrupted = false;

/** Undoes everything started so far, newest first; each step bounded, so a stuck one cannot hang the exit. */
function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    for (const step of cleanups.reverse()) {
      await Promise.race([step().catch(() => undefined), sleep(20_000, undefined, { ref: false })]);
    }
  })();
  return cleaning;
}

async function stopRelay(relay: RelayProcess): Promise<void> {
  const stopped = relay.stop();
  if ((await Promise.race([stopped.then(() => true), sleep(15_000, false, { ref: false })])) === false) relay.child.kill('SIGKILL');
}

async function run(chromium: string): Promise<void> {
  const started = Date.now();
  const dataDir = await mkdtemp(path.join(tmpdir(), 'pgrelay-status-data-'));
  cleanups.push(() => rm(dataDir, { recursive: true, force: true }));
  const profileDir = await mkdtemp(path.join(tmpdir(), 'pgrelay-status-chromium-'));
  cleanups.push(() => rm(profileDir, { recursive: true, force: true }));

  console.log('starting a relay on a fresh embedded PostgreSQL…');
  const relay = await startRelayProcess({
    DATA_DIR: dataDir,
    DATABASE_URL: '',
    HOST: '127.0.0.1',
    RELAY_NAME,
    RELAY_DESCRIPTION: 'A throwaway relay started by npm run check:status-page',
    // Whatever a local .env says: this traffic must not be rate-limited, need AUTH or proof of work.
    STATUS_PAGE: 'true',
    RATE_LIMIT_EXEMPT: '127.0.0.0/8,::1',
    AUTH_REQUIRED: 'none',
    MIN_POW_DIFFICULTY: '0',
  });
  cleanups.push(() => stopRelay(relay));
  const wsUrl = relay.url;
  const httpUrl = wsUrl.replace(/^ws/, 'http') + '/';
  console.log(`relay at ${wsUrl} (pid ${relay.pid})`);

  // Nostr clients still get NIP-11 from the same address.
  const nip11 = await fetch(httpUrl, { headers: { Accept: 'application/nostr+json' } });
  const info = (await nip11.json()) as { name?: string };
  if (info.name !== RELAY_NAME) throw new Error(`NIP-11 at ${httpUrl} names ${JSON.stringify(info.name)}, not ${JSON.stringify(RELAY_NAME)}`);
  console.log('  ok  NIP-11 JSON for Accept: application/nostr+json');

  const browser: Browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: CHROMIUM_FLAGS,
    userDataDir: profileDir,
    // Ours to close, after the sockets and before the relay (puppeteer's own handlers exit the process).
    handleSIGINT: false,
    handleSIGTERM: false,
    handleSIGHUP: false,
  });
  cleanups.push(async () => {
    const proc = browser.process();
    await Promise.race([browser.close(), sleep(10_000, undefined, { ref: false })]);
    if (proc && proc.exitCode === null) proc.kill('SIGKILL');
  });
  console.log(`${await browser.version()} at ${chromium}`);

  const page = await browser.newPage();
  const problems = watchPage(page, httpUrl);
  await page.setViewport({ width: 1280, height: 900 });
  const response = await page.goto(httpUrl, { waitUntil: 'load' });
  const type = response?.headers()['content-type'] ?? '';
  if (!type.startsWith('text/html')) throw new Error(`GET ${httpUrl} from a browser answered ${response?.status()} ${type}, not the status page`);
  await page.waitForSelector('#live[data-state="live"]', { timeout: 15_000 }).catch(() => {
    throw new Error('the page never showed "Live": no snapshot arrived from /status/stream within 15 s');
  });
  const before = await page.evaluate(readPage);
  const baseline = before.counters.connections ?? 0;
  console.log(`  ok  page live; before traffic: ${describe(before)}`);

  // Traffic: live subscriptions on three sockets, events in waves on four others (so the charts get
  // a shape, not one spike), REQs and a COUNT between the waves.
  const watchers = await Promise.all([0, 1, 2].map(() => Client.open(wsUrl)));
  const publishers = await Promise.all([0, 1, 2, 3].map(() => Client.open(wsUrl)));
  const sockets = [...watchers, ...publishers];
  cleanups.push(() => Promise.all(sockets.map((s) => s.close())));
  await Promise.all(watchers.map((w, i) => w.req(`live-${i}`, { kinds: [1, 7], since: Math.floor(Date.now() / 1000) - 5 }, true)));

  const keys = publishers.map(() => generateSecretKey());
  const now = () => Math.floor(Date.now() / 1000);
  let published = 0;
  let notes = 0;
  let reqs = 3;
  await Promise.all(publishers.map((p, i) => p.publish(finalizeEvent({ kind: 0, created_at: now(), tags: [], content: JSON.stringify({ name: `checker ${i}` }) }, keys[i]))));
  published += publishers.length;
  for (let wave = 0; wave < 6; wave++) {
    await Promise.all(
      publishers.map(async (p, i) => {
        for (let n = 0; n < 12; n++) {
          const note = finalizeEvent({ kind: 1, created_at: now(), tags: [['t', 'status-check']], content: `wave ${wave}, note ${n}` }, keys[i]);
          await p.publish(note);
          notes++;
          // A reaction to that note: every reaction differs, so none is a duplicate (an OK true that stores nothing).
          const tags = [['e', note.id], ['p', getPublicKey(keys[i])]];
          const reaction = finalizeEvent({ kind: 7, created_at: now(), tags, content: '+' }, keys[i]);
          await p.publish(reaction);
          published += 2;
        }
      }),
    );
    await Promise.all(publishers.map((p, i) => p.req(`q-${wave}-${i}`, { kinds: [1], '#t': ['status-check'], limit: 20 })));
    reqs += publishers.length;
    await sleep(700);
  }
  const counted = await publishers[0].count('count-0', { kinds: [1], '#t': ['status-check'] });
  reqs++;
  if (counted !== notes) throw new Error(`COUNT says ${counted} notes, ${notes} were published`);
  const received = sockets.reduce((sum, s) => sum + s.received, 0);
  console.log(`sent ${published} events (${notes} kind 1, ${published - notes - publishers.length} kind 7, ${publishers.length} kind 0) and ${reqs} REQ/COUNT on ${sockets.length} sockets; received ${received} EVENTs`);

  const value = (s: PageState, id: string) => s.counters[id] ?? -1;
  const chart = (s: PageState, id: string) => s.charts.find((c) => c.id === id);
  const chartDrawn = (id: string): Check => ({
    what: `chart ${id} drew its points`,
    pass: (s) => {
      const c = chart(s, id);
      return c !== undefined && c.points > 0 && !c.empty && c.colouredPixels > 50;
    },
    saw: (s) => JSON.stringify(chart(s, id) ?? 'no chart'),
  });
  await waitForChecks(
    page,
    [
      { what: `events-in total ≥ ${published}`, pass: (s) => value(s, 'in-total') >= published, saw: (s) => `${value(s, 'in-total')}` },
      { what: 'events-in rate > 0', pass: (s) => value(s, 'in-rate') > 0, saw: (s) => `${value(s, 'in-rate').toFixed(1)}/s` },
      { what: `events-out total ≥ ${received}`, pass: (s) => value(s, 'out-total') >= received, saw: (s) => `${value(s, 'out-total')}` },
      { what: 'events-out rate > 0', pass: (s) => value(s, 'out-rate') > 0, saw: (s) => `${value(s, 'out-rate').toFixed(1)}/s` },
      { what: `REQ total ≥ ${reqs}`, pass: (s) => value(s, 'req-total') >= reqs, saw: (s) => `${value(s, 'req-total')}` },
      { what: 'REQ rate > 0', pass: (s) => value(s, 'req-rate') > 0, saw: (s) => `${value(s, 'req-rate').toFixed(1)}/s` },
      {
        what: `connections = ${baseline + sockets.length} (${sockets.length} sockets open)`,
        pass: (s) => value(s, 'connections') === baseline + sockets.length,
        saw: (s) => `${value(s, 'connections')}`,
      },
      { what: 'subscriptions ≥ 3 (the live ones)', pass: (s) => value(s, 'subscriptions') >= 3, saw: (s) => `${value(s, 'subscriptions')}` },
      {
        what: `kind 1 listed with ≥ ${notes}`,
        pass: (s) => s.kinds.some((k) => k.kind === 1 && k.count >= notes),
        saw: (s) => s.kinds.map((k) => `kind ${k.kind}: ${k.count}`).join(', ') || 'no kinds',
      },
      { what: 'kinds 7 and 0 listed', pass: (s) => [0, 7].every((kind) => s.kinds.some((k) => k.kind === kind)), saw: (s) => s.kinds.map((k) => k.kind).join(', ') },
      { what: 'OK latency p50 shown', pass: (s) => /\d/.test(s.latencyOkP50), saw: (s) => `${s.latencyOkP50} ms` },
      chartDrawn('chart-events'),
      chartDrawn('chart-reqs'),
      { what: 'NIP-11 name shown as text', pass: (s) => s.name === RELAY_NAME && !s.nameHasMarkup, saw: (s) => JSON.stringify(s.name) },
      { what: 'supported NIPs listed', pass: (s) => s.nips.includes('NIP-11'), saw: (s) => s.nips.join(' ') },
    ],
    15_000,
  );

  await expectLive(page, 'during the traffic');
  console.log('  ok  still live after the traffic');

  // Screenshots while the sockets are open, so they show a relay at work.
  mkdirSync(OUT_DIR, { recursive: true });
  const desktopShot = path.join(OUT_DIR, 'status-page.png');
  await page.screenshot({ path: desktopShot, fullPage: true });

  const phone = await browser.newPage();
  const phoneProblems = watchPage(phone, httpUrl);
  await phone.setViewport(PHONE);
  await phone.goto(httpUrl, { waitUntil: 'load' });
  await phone.waitForSelector('#live[data-state="live"]', { timeout: 15_000 });
  await sleep(1500); // a tick or two after the snapshot, and the charts sized to the phone
  const phoneState = await phone.evaluate(readPage);
  // With isMobile, content wider than the device widens the layout viewport itself (innerWidth grows),
  // so compare with the device's width, not only with innerWidth.
  if (phoneState.innerWidth !== PHONE.width || phoneState.scrollWidth > PHONE.width) {
    throw new Error(`the phone layout scrolls sideways: scrollWidth ${phoneState.scrollWidth}, innerWidth ${phoneState.innerWidth}, device ${PHONE.width} px`);
  }
  console.log(`  ok  no horizontal overflow at ${PHONE.width} px (scrollWidth ${phoneState.scrollWidth})`);
  const phoneShot = path.join(OUT_DIR, 'status-page-phone.png');
  await phone.screenshot({ path: phoneShot, fullPage: true });
  const phoneFound = [...phoneProblems]; // closing the page cuts its stream: not a problem of the page
  await phone.close();

  // Closing the sockets brings the count back down.
  await Promise.all(sockets.map((s) => s.close()));
  await waitForChecks(
    page,
    [{ what: `connections back to ${baseline} after closing them`, pass: (s) => value(s, 'connections') === baseline, saw: (s) => `${value(s, 'connections')}` }],
    10_000,
  );

  await expectLive(page, 'after the sockets closed');
  const allProblems = [...problems, ...phoneFound];
  if (allProblems.length > 0) throw new Error(`the page had problems:\n  ${allProblems.join('\n  ')}`);
  console.log('  ok  no script errors, no failed or outside requests');
  console.log(`screenshots: ${path.relative(process.cwd(), desktopShot)}, ${path.relative(process.cwd(), phoneShot)}`);
  console.log(`status page check passed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

/** Collects script errors, console errors, failed requests and any request leaving the relay. */
function watchPage(page: Page, relayUrl: string): string[] {
  const origin = new URL(relayUrl).origin;
  const problems: string[] = [];
  page.on('pageerror', (err) => problems.push(`script error: ${(err as Error).message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`);
  });
  page.on('request', (req) => {
    const url = req.url();
    if (!url.startsWith('data:') && new URL(url).origin !== origin) problems.push(`request outside the relay: ${url}`);
  });
  page.on('requestfailed', (req) => problems.push(`request failed: ${req.url()} (${req.failure()?.errorText})`));
  page.on('response', (res) => {
    if (res.status() >= 400) problems.push(`HTTP ${res.status()} for ${res.url()}`);
  });
  return problems;
}

function describe(s: PageState): string {
  const c = s.counters;
  return `events in ${c['in-total']}, out ${c['out-total']}, REQs ${c['req-total']}, connections ${c.connections}, subscriptions ${c.subscriptions}`;
}

async function main(): Promise<number> {
  const chromium = findChromium();
  if (!chromium) {
    console.log('status page check skipped: no Chromium found; run npm run status-page:install-chromium');
    return 0;
  }
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      interrupted = true;
      console.error(`\n${signal}: stopping Chromium and the relay…`);
      void cleanUp().then(() => process.exit(130));
    });
  }
  const timeout = setTimeout(() => {
    console.error(`status page check FAILED: not done within ${TOTAL_TIMEOUT_MS / 1000} s`);
    void cleanUp().then(() => process.exit(1));
  }, TOTAL_TIMEOUT_MS);
  try {
    await run(chromium);
    return 0;
  } catch (err) {
    // After Ctrl-C, whatever the run was waiting for fails as things stop: not worth a message.
    if (!interrupted) console.error(`status page check FAILED: ${(err as Error).message}`);
    return 1;
  } finally {
    clearTimeout(timeout);
    await cleanUp();
  }
}

process.exitCode = await main();
