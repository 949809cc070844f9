// Built-in TLS (TLS_CERT_FILE + TLS_KEY_FILE): the relay serves wss:// and https:// (NIP-11) itself.
// Certificates rotate (Let's Encrypt every 60-90 days): reload() reads the files again and swaps the
// secure context, so new handshakes use the new certificate and open connections are not dropped.
import { readFile } from 'node:fs/promises';
import { createServer as createHttpServer, type RequestListener, type Server } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import type { Config } from '../config.js';
import { FatalError } from '../fatal.js';

export interface ListeningServer {
  server: Server | HttpsServer;
  scheme: 'ws' | 'wss';
  /** Reads the certificate files again (TLS only); throws, keeping the old ones, when they are unusable. */
  reload(): Promise<boolean>;
}

async function readPair(config: Config): Promise<{ cert: Buffer; key: Buffer }> {
  // One after the other: when both are unreadable, the error always names the certificate first.
  const cert = await readFile(config.TLS_CERT_FILE!);
  const key = await readFile(config.TLS_KEY_FILE!);
  return { cert, key };
}

/** Why the certificate or key cannot be used, for the person starting the relay. */
function tlsError(err: unknown, config: Config): FatalError {
  const e = err as NodeJS.ErrnoException;
  if (e.syscall === 'open' && e.path) {
    const variable = e.path === config.TLS_CERT_FILE ? 'TLS_CERT_FILE' : 'TLS_KEY_FILE';
    return new FatalError(`${variable} ${e.path} cannot be read (${e.code})`, `check the path and that this user may read it (set ${variable}), or unset TLS_CERT_FILE and TLS_KEY_FILE to serve ws://`);
  }
  return new FatalError(
    `TLS_CERT_FILE ${config.TLS_CERT_FILE} and TLS_KEY_FILE ${config.TLS_KEY_FILE} are not a usable certificate and key (${e.message})`,
    'both must be PEM files, the key matching the certificate (e.g. fullchain.pem and privkey.pem)',
  );
}

export async function createListeningServer(config: Config, listener: RequestListener): Promise<ListeningServer> {
  if (!config.TLS_CERT_FILE) {
    return { server: createHttpServer(listener), scheme: 'ws', reload: async () => false };
  }
  let server: HttpsServer;
  try {
    server = createHttpsServer(await readPair(config), listener);
  } catch (err) {
    throw tlsError(err, config);
  }
  return {
    server,
    scheme: 'wss',
    async reload() {
      // setSecureContext parses both and refuses a key that does not match the certificate.
      server.setSecureContext(await readPair(config));
      return true;
    },
  };
}
