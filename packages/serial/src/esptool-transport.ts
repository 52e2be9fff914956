import { Transport } from 'esptool-js';
import type { PortLease } from './port-lease.js';

/**
 * esptool-js's Transport, quiet (it prints some trace lines to the console even with tracing
 * off), and with reads a cancelled attempt ends at once: esptool-js polls its buffer until its
 * timeout, so a read of a cancelled attempt would otherwise go on for seconds.
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

  override read(timeout: number): Promise<Uint8Array> {
    const signal = this.#signal;
    if (signal === undefined) return super.read(timeout);
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise<Uint8Array>((resolve, reject) => {
      const onAbort = () => reject(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      super.read(timeout).then(
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
}
