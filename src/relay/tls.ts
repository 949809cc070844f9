// Built-in TLS (TLS_CERT_FILE + TLS_KEY_FILE): the relay serves wss:// and https:// (NIP-11) itself.
// Certificates rotate (Let's Encrypt every 60-90 days): reload() reads the files again and swaps the
// secure context, so new handshakes use the new certificate and open connections are not dropped.
import { readFile } from 'node:fs/promises';
import { createServer as createHttpServer, type RequestListener, type Server } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import type { Config } from '../config.js';

export interface ListeningServer {
  server: Server | HttpsServer;
  scheme: 'ws' | 'wss';
  /** Reads the certificate files again (TLS only); throws, keeping the old ones, when they are unusable. */
  reload(): Promise<boolean>;
}

async function readPair(config: Config): Promise<{ cert: Buffer; key: Buffer }> {
  const [cert, key] = await Promise.all([readFile(config.TLS_CERT_FILE!), readFile(config.TLS_KEY_FILE!)]);
  return { cert, key };
}

export async function createListeningServer(config: Config, listener: RequestListener): Promise<ListeningServer> {
  if (!config.TLS_CERT_FILE) {
    return { server: createHttpServer(listener), scheme: 'ws', reload: async () => false };
  }
  const server = createHttpsServer(await readPair(config), listener);
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
