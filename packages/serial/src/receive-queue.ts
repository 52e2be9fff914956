/**
 * Bytes a port received and nobody has read yet, as a binding keeps them between `read()`s:
 * chunks in order, bounded like a UART driver's receive buffer (what does not fit is dropped and
 * counted as an overrun, never grown). Both the RFC 2217 client and the virtual board's binding
 * read from one.
 */
export class ReceiveQueue {
  readonly #limit: number;
  #chunks: Uint8Array[] = [];
  #size = 0;
  #overruns = 0;

  /** `limit`: the most bytes kept unread. */
  constructor(limit: number) {
    this.#limit = limit;
  }

  /** Bytes waiting. */
  get size(): number {
    return this.#size;
  }

  /** Bytes dropped because the queue was full. */
  get overruns(): number {
    return this.#overruns;
  }

  /** Keeps what fits of `bytes` (kept as given: copy first if the caller reuses its buffer); returns how many. */
  push(bytes: Uint8Array): number {
    const room = Math.max(0, this.#limit - this.#size);
    const kept = bytes.length > room ? bytes.subarray(0, room) : bytes;
    this.#overruns += bytes.length - kept.length;
    if (kept.length === 0) return 0;
    this.#chunks.push(kept);
    this.#size += kept.length;
    return kept.length;
  }

  /** Moves up to `length` bytes into `buffer` at `offset`; returns how many. */
  take(buffer: Uint8Array, offset: number, length: number): number {
    let taken = 0;
    while (taken < length) {
      const head = this.#chunks[0];
      if (head === undefined) break;
      const n = Math.min(head.length, length - taken);
      buffer.set(head.subarray(0, n), offset + taken);
      taken += n;
      if (n === head.length) this.#chunks.shift();
      else this.#chunks[0] = head.subarray(n);
    }
    this.#size -= taken;
    return taken;
  }

  /** Drops everything waiting (a purge); not counted as overruns. */
  clear(): void {
    this.#chunks = [];
    this.#size = 0;
  }
}
