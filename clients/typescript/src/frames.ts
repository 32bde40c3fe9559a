// The framing of the daemon's stream socket (docs/protocol.md, "The stream
// socket"): a 5-byte header, the payload's length (uint32, big-endian) and
// its kind, then the payload.

export const FRAME_STDIN = 0;
export const FRAME_STDOUT = 1;
export const FRAME_STDERR = 2;
export const FRAME_MESSAGE = 3;
export const HEADER = 5;
/** A frame's payload is at most 1 MiB. */
export const MAX_PAYLOAD = 1 << 20;

export interface Frame {
  kind: number;
  payload: Buffer;
}

/** The header of a frame of kind holding length bytes. */
export function header(kind: number, length: number): Buffer {
  const h = Buffer.allocUnsafe(HEADER);
  h.writeUInt32BE(length, 0);
  h.writeUInt8(kind, 4);
  return h;
}

/** Cuts a byte stream into frames. Chunks are kept as they come and joined
 * only for the frame that needs them, so large output costs one copy. */
export class FrameReader {
  private chunks: Buffer[] = [];
  private size = 0;

  /** Adds bytes read from the socket and returns the frames now complete. */
  push(chunk: Buffer): Frame[] {
    this.chunks.push(chunk);
    this.size += chunk.length;
    const frames: Frame[] = [];
    for (;;) {
      if (this.size < HEADER) return frames;
      const head = this.peek(HEADER);
      const length = head.readUInt32BE(0);
      if (length > MAX_PAYLOAD) throw new Error(`a frame of ${length} bytes from the daemon (at most ${MAX_PAYLOAD})`);
      if (this.size < HEADER + length) return frames;
      const all = this.take(HEADER + length);
      frames.push({ kind: all[4], payload: all.subarray(HEADER) });
    }
  }

  /** Bytes of an unfinished frame. */
  get pending(): number {
    return this.size;
  }

  private peek(n: number): Buffer {
    if (this.chunks[0].length >= n) return this.chunks[0];
    return Buffer.concat(this.chunks, Math.min(this.size, Math.max(n, 0)));
  }

  private take(n: number): Buffer {
    let out: Buffer;
    if (this.chunks[0].length >= n) {
      const first = this.chunks[0];
      out = first.subarray(0, n);
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
    } else {
      out = Buffer.allocUnsafe(n);
      let off = 0;
      while (off < n) {
        const first = this.chunks[0];
        const k = Math.min(first.length, n - off);
        first.copy(out, off, 0, k);
        off += k;
        if (k === first.length) this.chunks.shift();
        else this.chunks[0] = first.subarray(k);
      }
    }
    this.size -= n;
    return out;
  }
}
