// A self-signed certificate for tests of the wss:// path, made in the test (selfsigned, Node's
// WebCrypto): valid for localhost and 127.0.0.1, written to files as TLS_CERT_FILE/TLS_KEY_FILE want.
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import selfsigned from 'selfsigned';

export interface TestCertificate {
  /** The folder holding the files: remove it when done. */
  dir: string;
  cert: string; // PEM
  key: string; // PEM
  certFile: string;
  keyFile: string;
  fingerprint: string;
}

export async function makeCertificate(commonName = 'localhost', dir?: string): Promise<TestCertificate> {
  const pems = await selfsigned.generate([{ name: 'commonName', value: commonName }], {
    keyType: 'ec',
    algorithm: 'sha256',
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'subjectAltName', altNames: [{ type: 2, value: 'localhost' }, { type: 7, ip: '127.0.0.1' }] },
    ],
  });
  const folder = dir ?? (await mkdtemp(path.join(tmpdir(), 'pgrelay-tls-')));
  const certFile = path.join(folder, `${commonName}-${Date.now()}-cert.pem`);
  const keyFile = path.join(folder, `${commonName}-${Date.now()}-key.pem`);
  await writeFile(certFile, pems.cert);
  await writeFile(keyFile, pems.private, { mode: 0o600 });
  return { dir: folder, cert: pems.cert, key: pems.private, certFile, keyFile, fingerprint: pems.fingerprint };
}
