// A POST body read whole, up to a limit: the management API's and the admission API's requests are
// small JSON documents, and a client that sends more is answered 413 without the rest being kept.
import type { IncomingMessage } from 'node:http';

/** The body, or undefined once it passes `maxBytes`. */
export async function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}
