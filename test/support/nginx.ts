// A real nginx in front of a test relay, terminating TLS, configured with the site block that
// docs/deploy.md recommends. The block is read from the doc itself (the ```nginx block holding
// `proxy_pass http://127.0.0.1:8008;`), so the test exercises exactly what operators copy; only the
// listen address, the certificate paths and the upstream port are rewritten, and a rewrite that
// finds nothing to replace fails loudly instead of testing something else. In front of several
// relays, the doc's `upstream pgrelay` block joins it (only its servers' ports rewritten).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { findExecutable } from './executables.js';

export const DEPLOY_DOC = fileURLToPath(new URL('../../docs/deploy.md', import.meta.url));

const START_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 5_000;


/** The nginx binary: NGINX_BIN, else `nginx` on PATH, else /usr/sbin/nginx (Debian's, often not on a user's PATH). */
export function findNginx(): string | undefined {
  return findExecutable('NGINX_BIN', 'nginx', ['/usr/sbin/nginx']);
}

export interface SiteOptions {
  listenPort: number;
  upstreamPort: number;
  certFile: string;
  keyFile: string;
}

/** The first ```nginx block of docs/deploy.md that proxies to the relay: the recommended site file. */
export function recommendedSite(doc = readFileSync(DEPLOY_DOC, 'utf8')): string {
  const block = [...doc.matchAll(/^```nginx\n([\s\S]*?)^```$/gm)].map((m) => m[1]).find((b) => b.includes('proxy_pass http://127.0.0.1:8008;'));
  if (!block) throw new Error(`${DEPLOY_DOC}: no \`\`\`nginx block with "proxy_pass http://127.0.0.1:8008;"`);
  return block;
}

/** The recommended site, pointed at the test's port, certificate and relay. */
export function siteForTest(options: SiteOptions, site = recommendedSite()): string {
  const rewrites: Array<[RegExp, (...match: string[]) => string, boolean]> = [
    // IPv4 listener → only 127.0.0.1 on a free port; ssl and http2 parameters stay as documented.
    [/^(\s*)listen 443 (ssl[^;]*);$/m, (_, indent, params) => `${indent}listen 127.0.0.1:${options.listenPort} ${params};`, true],
    [/^\s*listen \[::\]:443 [^;]*;\n/m, () => '', false],
    [/^(\s*)ssl_certificate\s+\S+;$/m, (_, indent) => `${indent}ssl_certificate "${options.certFile}";`, true],
    [/^(\s*)ssl_certificate_key\s+\S+;$/m, (_, indent) => `${indent}ssl_certificate_key "${options.keyFile}";`, true],
    [/proxy_pass http:\/\/127\.0\.0\.1:8008;/, () => `proxy_pass http://127.0.0.1:${options.upstreamPort};`, true],
  ];
  let out = site;
  for (const [pattern, replacement, required] of rewrites) {
    if (required && !pattern.test(out)) throw new Error(`${DEPLOY_DOC}: the nginx site block has no line matching ${pattern}; update test/support/nginx.ts with the doc`);
    out = out.replace(pattern, replacement);
  }
  return out;
}

/** The ```nginx block of docs/deploy.md that contains `text`. */
function docBlock(text: string, doc: string): string {
  const block = [...doc.matchAll(/^```nginx\n([\s\S]*?)^```$/gm)].map((m) => m[1]).find((b) => b.includes(text));
  if (!block) throw new Error(`${DEPLOY_DOC}: no \`\`\`nginx block with "${text}"`);
  return block;
}

/**
 * The recommended site in front of several relays, as "Upgrading without downtime" in docs/deploy.md
 * has it: its `upstream pgrelay` block (each `server` line pointed at a test relay, in order), and its
 * `proxy_pass http://pgrelay;` lines in place of the site's own proxy_pass.
 */
export function siteWithUpstreams(options: Omit<SiteOptions, 'upstreamPort'> & { upstreamPorts: number[] }, doc = readFileSync(DEPLOY_DOC, 'utf8')): string {
  const upstream = docBlock('upstream pgrelay {', doc);
  const server = /^(\s*)server 127\.0\.0\.1:\d+/gm;
  const servers = upstream.match(server)?.length ?? 0;
  if (servers !== options.upstreamPorts.length)
    throw new Error(`${DEPLOY_DOC}: the upstream block has ${servers} "server 127.0.0.1:<port>" lines, the test runs ${options.upstreamPorts.length} relays`);
  let next = 0;
  const upstreamForTest = upstream.replace(server, (_, indent: string) => `${indent}server 127.0.0.1:${options.upstreamPorts[next++]}`);
  const proxyPass = docBlock('proxy_pass http://pgrelay;', doc);
  const site = siteForTest({ ...options, upstreamPort: 8008 }, recommendedSite(doc));
  const line = /^(\s*)proxy_pass http:\/\/127\.0\.0\.1:8008;\n/m;
  const indent = site.match(line)![1];
  const lines = proxyPass.trimEnd().split('\n').map((l) => (l ? indent + l : l));
  return `${upstreamForTest}\n${site.replace(line, () => lines.join('\n') + '\n')}`;
}

/** A whole nginx.conf: every path nginx writes (pid, logs, temp files) inside `dir`. */
export function nginxConf(dir: string, site: string): string {
  const file = (name: string) => `"${path.join(dir, name)}"`;
  return [
    // As root the master reads the key and workers would run as `nobody`, which cannot enter the
    // 0700 temp folder; in a test, workers simply stay root.
    ...(process.getuid?.() === 0 ? ['user root;'] : []),
    'daemon off;',
    'master_process on;',
    'worker_processes 1;',
    `pid ${file('nginx.pid')};`,
    `error_log ${file('error.log')} info;`,
    'events { worker_connections 256; }',
    'http {',
    `    access_log ${file('access.log')};`,
    `    client_body_temp_path ${file('client_body_temp')};`,
    `    proxy_temp_path ${file('proxy_temp')};`,
    `    fastcgi_temp_path ${file('fastcgi_temp')};`,
    `    uwsgi_temp_path ${file('uwsgi_temp')};`,
    `    scgi_temp_path ${file('scgi_temp')};`,
    '',
    '    # ---- docs/deploy.md ----',
    ...site.trimEnd().split('\n').map((line) => (line ? `    ${line}` : '')),
    '}',
    '',
  ].join('\n');
}

export interface NginxProxy {
  port: number;
  /** wss://127.0.0.1:<port> */
  url: string;
  dir: string;
  errorLog(): Promise<string>;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1' });
    socket.setTimeout(1000);
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => (socket.destroy(), resolve(false)));
  });
}

async function readOr(file: string, fallback: string): Promise<string> {
  return readFile(file, 'utf8').catch(() => fallback);
}

/** Stops nginx: SIGTERM (fast shutdown), then SIGKILL to its whole process group (master and workers). */
async function kill(child: ChildProcess): Promise<void> {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), STOP_TIMEOUT_MS).unref());
  if ((await Promise.race([exited, timer])) === 'timeout') {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      child.kill('SIGKILL');
    }
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, STOP_TIMEOUT_MS).unref())]);
  }
}

/**
 * Starts nginx (`daemon off`, its own process group) on a free 127.0.0.1 port, terminating TLS with
 * the given certificate and proxying with the doc's site block to the relay on
 * 127.0.0.1:`upstreamPort`, or to the relays on `upstreamPorts` with the doc's upstream block.
 * Resolves once the port accepts connections.
 */
export async function startNginx(
  options: Omit<SiteOptions, 'listenPort' | 'upstreamPort'> & { bin: string } & ({ upstreamPort: number } | { upstreamPorts: number[] }),
): Promise<NginxProxy> {
  const siteOn = (listenPort: number) =>
    'upstreamPorts' in options ? siteWithUpstreams({ ...options, listenPort }) : siteForTest({ ...options, listenPort });
  const dir = await mkdtemp(path.join(tmpdir(), 'pgrelay-nginx-'));
  const errorLogFile = path.join(dir, 'error.log');
  const errorLog = () => readOr(errorLogFile, '(no error.log)');
  let lastFailure = '';
  // The free port can be taken between our probe and nginx's bind: try a few.
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    await rm(path.join(dir, 'nginx.pid'), { force: true });
    await writeFile(path.join(dir, 'nginx.conf'), nginxConf(dir, siteOn(port)));
    const child = spawn(options.bin, ['-p', dir, '-c', path.join(dir, 'nginx.conf'), '-e', errorLogFile], {
      detached: true, // its own process group, so a stuck master and its workers can be killed together
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    let spawnError: Error | undefined;
    child.once('error', (err) => (spawnError = err));
    // If the test process dies without afterAll (a crash), do not leave nginx behind.
    const onExit = () => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        /* already gone */
      }
    };
    process.once('exit', onExit);
    const stop = async () => {
      process.removeListener('exit', onExit);
      await kill(child);
    };

    const deadline = Date.now() + START_TIMEOUT_MS;
    let ready = false;
    while (Date.now() < deadline && !spawnError && child.exitCode === null && child.signalCode === null) {
      // nginx writes its pid file after binding its sockets: a connection before that is someone else.
      if (existsSync(path.join(dir, 'nginx.pid')) && (await accepts(port))) {
        ready = true;
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    if (ready && child.exitCode === null) {
      return {
        port,
        url: `wss://127.0.0.1:${port}`,
        dir,
        errorLog,
        async stop() {
          await stop();
          await rm(dir, { recursive: true, force: true });
        },
      };
    }
    await stop();
    const log = await errorLog();
    const why = spawnError
      ? `could not be run: ${spawnError.message}`
      : child.exitCode !== null
        ? `exited with code ${child.exitCode}`
        : `was not listening after ${START_TIMEOUT_MS} ms`;
    lastFailure =
      `nginx (${options.bin}) on 127.0.0.1:${port} ${why}\n` +
      `--- stderr ---\n${stderr.trim()}\n--- error.log ---\n${log.trim()}\n` +
      `--- nginx.conf ---\n${await readOr(path.join(dir, 'nginx.conf'), '')}`;
    if (!/Address already in use/.test(stderr + log)) break;
  }
  await rm(dir, { recursive: true, force: true });
  throw new Error(lastFailure);
}
