// docs/deploy.md, run for real: nginx terminates TLS with the doc's site block and proxies to a relay
// started with TRUSTED_PROXIES=127.0.0.1/32. Clients connect over wss:// from chosen loopback
// addresses (Linux routes all of 127/8 to lo); nginx always connects to the relay from 127.0.0.1,
// so only X-Forwarded-For can tell the relay who the client is.
import { request } from 'node:https';
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
const nginxBin = findNginx();
const SKIPPED = process.env.NGINX_BIN
  ? `wss through nginx (skipped: NGINX_BIN=${process.env.NGINX_BIN} is not an executable file)`
  : 'wss through nginx (skipped: nginx not installed; run npm run deploy:install-nginx)';

describe.skipIf(skipWithout(nginxBin !== undefined, SKIPPED))(nginxBin ? 'wss through nginx (docs/deploy.md)' : SKIPPED, () => {
  let relay: TestRelay | undefined;
  let cert: TestCertificate;
  let proxy: NginxProxy | undefined;
  const clients: TestClient[] = [];

  /** A wss:// connection through nginx from `localAddress`, trusting the test certificate. */
  async function open(localAddress: string, headers?: Record<string, string>): Promise<TestClient> {
    const client = await TestClient.connect(proxy!.url, { ca: cert.cert, localAddress, headers, handshakeTimeout: WAIT_MS });
    clients.push(client);
    return client;
  }

  async function close(client: TestClient): Promise<void> {
    client.close();
    await client.closed(WAIT_MS);
  }

  beforeAll(async () => {
    relay = await startTestRelay({
      TRUSTED_PROXIES: '127.0.0.1/32',
      RELAY_URL: 'wss://relay.example.com', // as docs/deploy.md's .env: behind a proxy the relay cannot see its public URL
      MAX_CONNECTIONS_PER_ADDRESS: '1',
      RATE_LIMIT_CONNECTIONS_PER_MINUTE: '0', // only the open-connection limit is under test
    });
    cert = await makeCertificate();
    proxy = await startNginx({ bin: nginxBin!, upstreamPort: relay.relay.port, certFile: cert.certFile, keyFile: cert.keyFile });
  });

  afterAll(async () => {
    for (const client of clients) client.ws.terminate();
    // Each step runs even when an earlier one fails, so nginx never outlives the file.
    const steps = await Promise.allSettled([proxy?.stop(), relay?.close()]);
    if (cert) await rm(path.dirname(cert.certFile), { recursive: true, force: true });
    for (const step of steps) if (step.status === 'rejected') throw step.reason;
  });

  test('a client publishes a signed event over wss:// and reads it back with a REQ', async () => {
    const client = await open('127.0.0.6');
    const event = newSigner().sign({ kind: 1, content: 'through nginx' });
    expect(await client.publish(event)).toEqual([true, '']);
    expect(await client.fetch('back', { ids: [event.id] })).toEqual([event]);
    await close(client);
  });

  test('a client authenticates (NIP-42) through the proxy, naming the relay by RELAY_URL', async () => {
    const client = await open('127.0.0.8');
    const alice = newSigner();
    expect(await client.auth(alice, proxy!.url)).toEqual([false, 'invalid: the relay tag does not name this relay']);
    expect(await client.auth(alice, 'wss://relay.example.com')).toEqual([true, '']);
    expect(await client.publish(alice.sign({ tags: [['-']], content: 'protected, through nginx' }))).toEqual([true, '']);
    await close(client);
  });

  test('the NIP-11 document is served over https:// at the same URL', async () => {
    const { status, type, body } = await new Promise<{ status: number; type: string; body: string }>((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port: proxy!.port, path: '/', ca: cert.cert, localAddress: '127.0.0.7', timeout: WAIT_MS, headers: { Accept: 'application/nostr+json' } },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (body += chunk));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type']), body }));
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no NIP-11 answer within ${WAIT_MS} ms`)));
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(200);
    expect(type).toContain('application/nostr+json');
    expect(JSON.parse(body)).toMatchObject({ supported_nips: expect.arrayContaining([1, 11]) });
  });

  test('clients from two addresses are both served, though nginx reaches the relay from 127.0.0.1 for both', async () => {
    const first = await open('127.0.0.2');
    const second = await open('127.0.0.3');
    await first.sync(); // a round trip through nginx and the relay
    await second.sync();
    await Promise.all([close(first), close(second)]);
  });

  test('a second connection from the same client address is refused with HTTP 429', async () => {
    const first = await open('127.0.0.4');
    await expect(open('127.0.0.4')).rejects.toThrow('Unexpected server response: 429');
    await first.sync(); // the first one is still served
    await close(first);
  });

  test('a forged X-Forwarded-For does not get a client past its limit (the relay reads the right-most entry)', async () => {
    const first = await open('127.0.0.5');
    await expect(open('127.0.0.5', { 'X-Forwarded-For': '198.51.100.7' })).rejects.toThrow('Unexpected server response: 429');
    await close(first);
  });
});
