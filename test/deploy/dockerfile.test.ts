// The Dockerfile, built and run without Docker (test/support/dockerfile.ts): every stage in a clean
// temporary folder, its COPY lines from this repository as .dockerignore lets them through, its
// `npm ci` and build run for real, then the image's CMD started with the image's ENV. Left out: USER
// and `chown` (everything runs as the user running the test, and the image's `node` user need not
// exist here) and `npm cache clean` (it would empty this machine's cache). `mkdir -p` and `rm -rf`
// act inside the stage's folder. The replay installs twice (both stages run `npm ci`) and
// compiles the relay, so this file is slow.
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { packageRoot } from '../../src/paths.js';
import { binaries, freePort, postgresUser, run } from '../../src/store/embedded.js';
import { TestClient } from '../support/client.js';
import { hostPath, parseDockerfile, replayDockerfile, startCmd, type ReplayedStage, type StartedImage } from '../support/dockerfile.js';
import { newSigner } from '../support/keys.js';
import { serverPass } from '../support/server-pass.js';

const ROOT = packageRoot();
const REPLAY_TIMEOUT_MS = 30 * 60_000;
const START_TIMEOUT_MS = 5 * 60_000;

/** Every file under `dir`, as paths relative to it. */
function filesUnder(dir: string, prefix = ''): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(path.join(dir, e.name), `${prefix}${e.name}/`) : [`${prefix}${e.name}`],
  );
}

/** The relay's embedded PostgreSQL, if a relay that did not stop cleanly left it running (pg_ctl detaches it). */
async function stopLeftoverPostgres(dataDir: string): Promise<void> {
  const pgdata = path.join(dataDir, 'pg');
  if (!existsSync(path.join(pgdata, 'postmaster.pid'))) return;
  await run((await binaries()).pg_ctl, ['stop', '-D', pgdata, '-m', 'immediate', '-w', '-t', '60'], await postgresUser());
}

describe.skipIf(serverPass)('reading a Dockerfile', () => {
  test('an instruction the replay does not know fails the parse, naming it and its line', () => {
    expect(() => parseDockerfile('FROM node:20 AS build\nWORKDIR /app\nHEALTHCHECK CMD true\n')).toThrow(/line 3: .*HEALTHCHECK/);
  });

  test("a directory COPY leaves out what the repository's .dockerignore names: node_modules, dist, .git, data, .env", async () => {
    const work = await mkdtemp(path.join(tmpdir(), 'pgrelay-dockerignore-'));
    try {
      const context = path.join(work, 'context');
      for (const file of ['src/main.ts', 'node_modules/ws/index.js', 'dist/src/main.js', '.git/HEAD', 'data/pg/PG_VERSION', '.env']) {
        mkdirSync(path.dirname(path.join(context, file)), { recursive: true });
        writeFileSync(path.join(context, file), '');
      }
      writeFileSync(path.join(context, '.dockerignore'), readFileSync(path.join(ROOT, '.dockerignore')));
      const [stage] = await replayDockerfile(parseDockerfile('FROM node:20\nWORKDIR /app\nCOPY . ./\n'), context, path.join(work, 'stages'));
      expect(filesUnder(hostPath(stage, '/app')).sort()).toEqual(['.dockerignore', 'src/main.ts']);
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  });
});

describe.skipIf(serverPass)('the Dockerfile, replayed without Docker', () => {
  let work: string | undefined;
  let image: ReplayedStage;
  let dataDir: string;
  let relay: StartedImage | undefined;
  const clients: TestClient[] = [];

  beforeAll(async () => {
    work = await mkdtemp(path.join(tmpdir(), 'pgrelay-dockerfile-'));
    // mkdtemp makes a 0700 folder; run as root, the relay's PostgreSQL runs as `postgres` and must enter it.
    await chmod(work, 0o755);
    const stages = await replayDockerfile(parseDockerfile(readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8')), ROOT, work);
    image = stages.at(-1)!;
    // The image's data folder (its VOLUME), inside the stage's own folder, where its RUN made it.
    dataDir = hostPath(image, image.env.DATA_DIR ?? '/data');
    mkdirSync(dataDir, { recursive: true });
    relay = await startCmd(image, { DATA_DIR: dataDir, PORT: String(await freePort()), HOST: '127.0.0.1' }, START_TIMEOUT_MS);
  }, REPLAY_TIMEOUT_MS);

  afterAll(async () => {
    for (const client of clients) client.ws.terminate();
    // Each step runs even when an earlier one failed, so neither the relay nor its database outlives the file.
    const steps = await Promise.allSettled([relay?.stop()]);
    if (dataDir) steps.push(...(await Promise.allSettled([stopLeftoverPostgres(dataDir)])));
    if (work) await rm(work, { recursive: true, force: true });
    for (const step of steps) if (step.status === 'rejected') throw step.reason;
  }, START_TIMEOUT_MS);

  test("the image's relay accepts a signed event and returns it to a REQ, then EOSE", async () => {
    const client = await TestClient.connect(relay!.url);
    clients.push(client);
    const event = newSigner().sign({ kind: 1, content: 'from the replayed image' });
    expect(await client.publish(event)).toEqual([true, '']);
    const mark = client.mark;
    client.send(['REQ', 'back', { ids: [event.id] }]);
    await client.waitFor((m) => m[0] === 'EOSE' && m[1] === 'back', 10_000, mark);
    expect(client.messages.slice(mark)).toEqual([
      ['EVENT', 'back', event],
      ['EOSE', 'back'],
    ]);
  });

  test('the image serves the status page and every file the page links', async () => {
    const base = relay!.url.replace(/^ws/, 'http');
    const page = await fetch(base, { headers: { Accept: 'text/html' } });
    expect(page.status).toBe(200);
    const html = await page.text();
    const linked = [...html.matchAll(/(?:src|href)="(\/status\/[^"]+)"/g)].map((m) => m[1]);
    expect(linked).toContain('/status/vendor/uPlot.iife.min.js');
    const statuses = await Promise.all(linked.map(async (file) => [file, (await fetch(new URL(file, base))).status]));
    expect(statuses).toEqual(linked.map((file) => [file, 200]));
  });

  test('the image holds the build and production dependencies only: no sources, no dev dependencies', () => {
    const app = hostPath(image, image.workdir);
    expect(existsSync(path.join(app, 'dist/src/main.js'))).toBe(true);
    expect(existsSync(path.join(app, 'src'))).toBe(false);
    expect(existsSync(path.join(app, 'node_modules/vitest'))).toBe(false);
    expect(existsSync(path.join(app, 'node_modules/typescript'))).toBe(false);
    expect(readdirSync(path.join(app, 'dist')).filter((name) => !name.startsWith('.')).sort()).toEqual(['migrations', 'src']);
  });
});
