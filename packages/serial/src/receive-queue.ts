/**
 * Bytes a port received and nobody has read yet, as a binding keeps them between `read()`s:
 * chunks in order, bounded like a UART driver's receive buffer (what does not fit is dropped and
 * counted as an overrun, never grown), and the one `read()` a binding may have waiting for them.
 * Both the RFC 2217 client and the virtual board's binding read from one.
 */
export class ReceiveQueue {
  readonly #limit: number;
  #chunks: Uint8Array[] = [];
  #size = 0;
  #overruns = 0;
  #waiting:
    | {
        readonly resolve: (bytesRead: number) => void;
        readonly reject: (error: Error) => void;
        readonly buffer: Uint8Array;
        readonly offset: number;
        readonly length: number;
      }
    | undefined;

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

  /**
   * Keeps what fits of `bytes` (kept as given: copy first if the caller reuses its buffer) and
   * hands it to a waiting {@link read}; returns how many bytes were kept.
   */
  push(bytes: Uint8Array): number {
    const room = Math.max(0, this.#limit - this.#size);
    const kept = bytes.length > room ? bytes.subarray(0, room) : bytes;
    this.#overruns += bytes.length - kept.length;
    if (kept.length === 0) return 0;
    this.#chunks.push(kept);
    this.#size += kept.length;
    const waiting = this.#waiting;
    if (waiting !== undefined) {
      this.#waiting = undefined;
      waiting.resolve(this.take(waiting.buffer, waiting.offset, waiting.length));
    }
    return kept.length;
  }

  /**
   * A binding's `read()`: bytes at once when some are waiting, else the next ones to arrive.
   * One read at a time, as `serialport` makes them; a second one is refused with `busyError`.
   */
  read(
    buffer: Uint8Array,
    offset: number,
    length: number,
    busyError: () => Error = () => new Error('a read is already pending'),
  ): Promise<number> {
    if (this.#size > 0) return Promise.resolve(this.take(buffer, offset, length));
    if (this.#waiting !== undefined) return Promise.reject(busyError());
    return new Promise((resolve, reject) => {
      this.#waiting = { resolve, reject, buffer, offset, length };
    });
  }

  /** Ends a waiting {@link read} with `error` (the port closed or was lost). */
  fail(error: Error): void {
    const waiting = this.#waiting;
    this.#waiting = undefined;
    waiting?.reject(error);
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
