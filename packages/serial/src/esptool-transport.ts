import { Transport } from 'esptool-js';
import type { PortLease } from './port-lease.js';

/**
 * esptool-js's Transport, quiet (it prints some trace lines to the console even with tracing
 * off), with reads a cancelled attempt ends at once (esptool-js polls its buffer until its
 * timeout, so a read of a cancelled attempt would otherwise go on for seconds), and with
 * deadlines a busy machine does not shorten.
 */
export class QuietTransport extends Transport {
  readonly #sink: (line: string) => void;
  #signal: AbortSignal | undefined;

  constructor(device: PortLease, sink: (line: string) => void) {
    super(device as never, false);
    this.#sink = sink;
  }

  /** Reads reject with the signal's reason once it aborts (undefined: no signal). */
  cancelWith(signal: AbortSignal | undefined): void {
    this.#signal = signal;
  }

  override trace(message: string): void {
    this.#sink(message);
  }

  override async read(timeout: number): Promise<Uint8Array> {
    const signal = this.#signal;
    if (signal?.aborted) throw signal.reason;
    const arrived = await this.#arrival(timeout, signal);
    // Nothing came: esptool-js's own read with no time left throws its own error.
    const read = super.read(arrived ? timeout : 0);
    if (signal === undefined) return read;
    return new Promise<Uint8Array>((resolve, reject) => {
      const onAbort = () => reject(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      read.then(
        (value) => {
          signal.removeEventListener('abort', onAbort);
          resolve(value);
        },
        (error: unknown) => {
          signal.removeEventListener('abort', onAbort);
          reject(error);
        },
      );
    });
  }

  /**
   * Waits for the reply's first byte for `timeoutMs` of the time this process ran. esptool-js
   * waits on the wall clock and gives up without a last look, so a process starved of CPU on a
   * busy machine times out on a board whose reply sits unread in the buffer. A stall counts as
   * one poll step (at most STALL_STEP_MS), so on a quiet machine the deadline is esptool's own,
   * and under load it stretches only by the time the process did not run.
   */
  async #arrival(timeoutMs: number, signal: AbortSignal | undefined): Promise<boolean> {
    let waited = 0;
    let last = performance.now();
    while (this.inWaiting() === 0) {
      if (waited >= timeoutMs) return false;
      await new Promise((resolve) => setTimeout(resolve, 1));
      if (signal?.aborted) throw signal.reason;
      const now = performance.now();
      waited += Math.min(now - last, STALL_STEP_MS);
      last = now;
    }
    return true;
  }
}

/** The most a poll step counts towards a read's deadline: a longer one is the process stalled. */
const STALL_STEP_MS = 10;
