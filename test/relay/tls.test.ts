// Built-in TLS: with TLS_CERT_FILE and TLS_KEY_FILE the relay serves wss:// and https:// (NIP-11) on
// its port, and reloading the files (SIGHUP) swaps the certificate without dropping connections.
import { spawn } from 'node:child_process';
import { copyFile, rm } from 'node:fs/promises';
import { get } from 'node:https';
import path from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { createInterface } from 'node:readline';
import { X509Certificate } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../src/paths.js';
import { TestClient } from '../support/client.js';
import { createTestDatabase } from '../support/database.js';
import { unique } from '../support/events.js';
import { newSigner } from '../support/keys.js';
import { startTestRelay, type TestRelay } from '../support/relay.js';
import { makeCertificate, type TestCertificate } from '../support/tls.js';

const alice = newSigner();

/** The fingerprint of the certificate a TLS handshake with the relay presents now (compared exactly, so not verified). */
function servedFingerprint(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false, servername: 'localhost' }, () => {
      resolve(socket.getPeerX509Certificate()!.fingerprint256);
      socket.end();
    });
    socket.once('error', reject);
  });
}

const fingerprint = (cert: TestCertificate) => new X509Certificate(cert.cert).fingerprint256;

function httpsJson(url: string, ca: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    get(url, { ca, headers: { Accept: 'application/nostr+json' } }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    }).once('error', reject);
  });
}

describe('built-in TLS', () => {
  let relay: TestRelay;
  let first: TestCertificate;
  let second: TestCertificate;
  let live: string; // the files the relay is configured with
  beforeAll(async () => {
    first = await makeCertificate('localhost');
    second = await makeCertificate('localhost', path.dirname(first.certFile));
    live = path.dirname(first.certFile);
    await copyFile(first.certFile, path.join(live, 'live-cert.pem'));
    await copyFile(first.keyFile, path.join(live, 'live-key.pem'));
    relay = await startTestRelay({ TLS_CERT_FILE: path.join(live, 'live-cert.pem'), TLS_KEY_FILE: path.join(live, 'live-key.pem') });
  });
  afterAll(async () => {
    await relay.close();
    await rm(live, { recursive: true, force: true });
  });

  it('serves wss:// on its port: a client that trusts the certificate publishes and reads back', async () => {
    expect(relay.url).toMatch(/^wss:\/\/127\.0\.0\.1:\d+$/);
    const c = await TestClient.connect(relay.url, { ca: first.cert });
    const note = alice.sign({ content: unique('tls') });
    expect(await c.publish(note)).toEqual([true, '']);
    expect(await c.fetch('s', { ids: [note.id] })).toEqual([note]);
    c.close();
  });

  it('serves the NIP-11 document over https://', async () => {
    const { status, body } = await httpsJson(relay.url.replace(/^wss/, 'https'), first.cert);
    expect(status).toBe(200);
    expect(JSON.parse(body).supported_nips).toContain(42);
  });

  it('does not speak plain ws:// on the TLS port', async () => {
    await expect(TestClient.connect(relay.url.replace(/^wss/, 'ws'))).rejects.toThrow();
  });

  it('swaps the certificate on reload while an open connection keeps working', async () => {
    const c = await TestClient.connect(relay.url, { ca: first.cert });
    expect(await servedFingerprint(relay.relay.port)).toBe(fingerprint(first));
    await copyFile(second.certFile, path.join(live, 'live-cert.pem'));
    await copyFile(second.keyFile, path.join(live, 'live-key.pem'));
    expect(await relay.relay.reloadTls()).toBe(true);
    expect(await servedFingerprint(relay.relay.port)).toBe(fingerprint(second));
    const note = alice.sign({ content: unique('after-reload') });
    expect(await c.publish(note)).toEqual([true, '']);
    expect(c.closeInfo).toBeUndefined();
    c.close();
  });

  it('keeps the certificate in use when the new files do not go together', async () => {
    const before = await servedFingerprint(relay.relay.port);
    await copyFile(first.keyFile, path.join(live, 'live-key.pem')); // a key that is not the certificate's
    await expect(relay.relay.reloadTls()).rejects.toThrow();
    expect(await servedFingerprint(relay.relay.port)).toBe(before);
  });

  it('refuses TLS_CERT_FILE without TLS_KEY_FILE at start', async () => {
    await expect(startTestRelay({ TLS_CERT_FILE: first.certFile })).rejects.toThrow(/TLS_CERT_FILE and TLS_KEY_FILE/);
  });
});

describe('SIGHUP', () => {
  it('makes a running relay process reload its certificate', async () => {
    const a = await makeCertificate('localhost');
    const b = await makeCertificate('localhost', path.dirname(a.certFile));
    const dir = path.dirname(a.certFile);
    const [certFile, keyFile] = [path.join(dir, 'hup-cert.pem'), path.join(dir, 'hup-key.pem')];
    await copyFile(a.certFile, certFile);
    await copyFile(a.keyFile, keyFile);
    const child = spawn(process.execPath, [path.join(packageRoot(), 'dist/src/main.js')], {
      cwd: dir,
      env: { PATH: process.env.PATH, PORT: '0', LOG_LEVEL: 'info', DATABASE_URL: await createTestDatabase(), TLS_CERT_FILE: certFile, TLS_KEY_FILE: keyFile, VERIFY_THREADS: '0' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const lines: Array<Record<string, unknown>> = [];
    const seen = (msg: string) => lines.some((l) => l.msg === msg);
    createInterface({ input: child.stdout! }).on('line', (line) => {
      try {
        lines.push(JSON.parse(line));
      } catch {
        /* not a log line */
      }
    });
    try {
      await expect.poll(() => seen('relay listening'), { timeout: 60_000 }).toBe(true);
      const port = Number(new URL(String(lines.find((l) => l.msg === 'relay listening')!.url).replace(/^wss/, 'https')).port);
      expect(await servedFingerprint(port)).toBe(fingerprint(a));
      await copyFile(b.certFile, certFile);
      await copyFile(b.keyFile, keyFile);
      child.kill('SIGHUP');
      await expect.poll(() => seen('TLS certificate reloaded'), { timeout: 10_000 }).toBe(true);
      expect(await servedFingerprint(port)).toBe(fingerprint(b));
      expect(child.exitCode).toBeNull();
    } finally {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
      await rm(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
