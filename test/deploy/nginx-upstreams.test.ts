// docs/deploy.md, Upgrading without downtime, with nginx: the site block of section 2 with the
// upstream block and proxy_pass lines of that section, in a real nginx in front of two relays on one
// database. Open-source nginx does not check /ready; a relay that is draining refuses new handshakes
// with 503, and nginx must try the other relay instead of passing the refusal on.
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { TestClient } from '../support/client.js';
import { skipWithout } from '../support/executables.js';
import { newSigner } from '../support/keys.js';
import { findNginx, startNginx, type NginxProxy } from '../support/nginx.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { makeCertificate, type TestCertificate } from '../support/tls.js';

const WAIT_MS = 10_000;
const CLIENTS = 6;
const nginxBin = findNginx();
const SKIPPED = process.env.NGINX_BIN
  ? `two relays behind nginx (skipped: NGINX_BIN=${process.env.NGINX_BIN} is not an executable file)`
  : 'two relays behind nginx (skipped: nginx not installed; run npm run deploy:install-nginx)';

/** The relay's count of upgrades it refused while stopping, from its /metrics. */
async function refusedWhileStopping(relay: TestRelay): Promise<number> {
  const text = await (await fetch(`${relay.url.replace(/^ws/, 'http')}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('nostr_connections_refused_total{reason="closing"}'));
  return line ? Number(line.split(' ').pop()) : 0;
}

describe.skipIf(skipWithout(nginxBin !== undefined, SKIPPED))(nginxBin ? 'two relays behind nginx (docs/deploy.md, Upgrading without downtime)' : SKIPPED, () => {
  let a: TestRelay | undefined;
  let b: TestRelay | undefined;
  let cert: TestCertificate;
  let proxy: NginxProxy | undefined;
  const endDrain = new AbortController();
  const clients: TestClient[] = [];

  beforeAll(async () => {
    a = await startTestRelay();
    b = await startTestRelay({}, a.config.DATABASE_URL);
    cert = await makeCertificate();
    proxy = await startNginx({ bin: nginxBin!, upstreamPorts: [a.relay.port, b.relay.port], certFile: cert.certFile, keyFile: cert.keyFile });
  });

  afterAll(async () => {
    for (const client of clients) client.ws.terminate();
    endDrain.abort();
    const steps = await Promise.allSettled([proxy?.stop(), a?.close(), b?.close()]);
    if (cert) await rm(path.dirname(cert.certFile), { recursive: true, force: true });
    for (const step of steps) if (step.status === 'rejected') throw step.reason;
  });

  test('a handshake the draining relay refuses with 503 is tried on the other: every client connects and publishes', async () => {
    void a!.relay.drain(600_000, endDrain.signal);
    const signer = newSigner();
    const answers: Array<[boolean, string]> = [];
    for (let i = 0; i < CLIENTS; i++) {
      const client = await TestClient.connect(proxy!.url, { ca: cert.cert, handshakeTimeout: WAIT_MS });
      clients.push(client);
      answers.push(await client.publish(signer.sign({ content: `through nginx while a relay drains ${i}` })));
      client.close();
    }
    expect(answers).toEqual(Array.from({ length: CLIENTS }, () => [true, '']));
    // nginx did send a handshake to the draining relay, which refused it.
    expect(await refusedWhileStopping(a!)).toBeGreaterThanOrEqual(1);
  });
});
