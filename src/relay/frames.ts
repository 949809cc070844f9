// A REQ's stored events as WebSocket frames, encoded straight into one buffer (RFC 6455 §5.2: a
// server's text frame is FIN + opcode 1, unmasked, with a 7-, 16- or 64-bit payload length). Sending
// ~270 events through ws one by one cost a frame header Buffer, a flattened copy of each
// `["EVENT",sub,raw]` string and two stream chunks per event; here each event's JSON is encoded
// once, into its place, and a chunk of events leaves in one socket write.

/** Stored events are framed and written in chunks of about this many bytes. */
export const FRAME_CHUNK_BYTES = 128 * 1024;

/** `["EVENT",<sub id as JSON>,` as bytes: what every frame of one subscription starts with. */
export function eventPrefix(subId: string): Buffer {
  return Buffer.from(`["EVENT",${JSON.stringify(subId)},`, 'utf8');
}

function headerBytes(payload: number): number {
  return payload < 126 ? 2 : payload < 65536 ? 4 : 10;
}

/**
 * Frames `rows[from..]` as EVENT messages of the subscription whose prefix is given, stopping after
 * the event that brings the buffer to `chunkBytes` or more (so one very large event still goes
 * alone). Returns the buffer and the index after the last event framed.
 */
export function eventFrames(prefix: Buffer, rows: ReadonlyArray<{ raw: string }>, from: number, chunkBytes: number): { frames: Buffer; next: number } {
  const lengths: number[] = [];
  let total = 0;
  let i = from;
  while (i < rows.length && total < chunkBytes) {
    const payload = prefix.length + Buffer.byteLength(rows[i]!.raw, 'utf8') + 1;
    lengths.push(payload);
    total += headerBytes(payload) + payload;
    i++;
  }
  const frames = Buffer.allocUnsafe(total);
  let at = 0;
  for (let k = 0; k < lengths.length; k++) {
    const payload = lengths[k]!;
    frames[at++] = 0x81;
    if (payload < 126) {
      frames[at++] = payload;
    } else if (payload < 65536) {
      frames[at++] = 126;
      frames.writeUInt16BE(payload, at);
      at += 2;
    } else {
      frames[at++] = 127;
      frames.writeUInt32BE(Math.floor(payload / 2 ** 32), at);
      frames.writeUInt32BE(payload >>> 0, at + 4);
      at += 8;
    }
    at += prefix.copy(frames, at);
    at += frames.write(rows[from + k]!.raw, at, 'utf8');
    frames[at++] = 0x5d; // ]
  }
  return { frames, next: i };
}
