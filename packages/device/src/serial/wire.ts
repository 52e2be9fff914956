/**
 * The wire between host and board, one direction at a time: bytes no faster than the baud rate
 * (10 bits a byte), delivered in time slices, and garbled when sender and receiver disagree on
 * the rate, as on a real UART. Over USB-Serial-JTAG there is no UART: bytes move at USB speed.
 */

/** Bits on the wire per byte: start, 8 data, stop. */
const BITS_PER_BYTE = 10;
/**
 * USB-Serial-JTAG has no UART: bytes move in USB full-speed bulk packets whatever baud rate
 * the host sets. Modelled as about 1 MB/s, expressed as an equivalent baud rate.
 */
const USB_LINK_BAUD = 10_000_000;

interface WireSegment {
  readonly bytes: Uint8Array;
  /** The sender's UART rate; undefined over USB, where there is none to disagree on. */
  readonly baud: number | undefined;
  readonly start: number;
  readonly byteMs: number;
  delivered: number;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
}

/**
 * One direction of the UART. Bytes leave back to back at `baud`; the receiver gets every
 * byte whose time has come, in slices (one timer per slice, never one per byte).
 */
export class Wire {
  readonly #deliver: (bytes: Uint8Array, baud: number | undefined) => void;
  readonly #throttle: boolean;
  readonly #sliceMs: number;
  #segments: WireSegment[] = [];
  #freeAt = 0;
  #timer: NodeJS.Timeout | undefined;
  #idleWaiters: (() => void)[] = [];
  bytes = 0;
  wireMs = 0;

  constructor(
    deliver: (bytes: Uint8Array, baud: number | undefined) => void,
    throttle: boolean,
    sliceMs = 2,
  ) {
    this.#deliver = deliver;
    this.#throttle = throttle;
    this.#sliceMs = sliceMs;
  }

  /** Resolves when the last byte has reached the other end. `baud` undefined: over USB. */
  send(bytes: Uint8Array, baud: number | undefined): Promise<void> {
    const linkMs = (bytes.length * BITS_PER_BYTE * 1000) / (baud ?? USB_LINK_BAUD);
    const byteMs = this.#throttle ? linkMs / bytes.length : 0;
    const start = Math.max(performance.now(), this.#freeAt);
    this.#freeAt = start + bytes.length * byteMs;
    this.bytes += bytes.length;
    this.wireMs += linkMs;
    return new Promise((resolve, reject) => {
      this.#segments.push({ bytes, baud, start, byteMs, delivered: 0, resolve, reject });
      this.#schedule();
    });
  }

  /** Resolves when nothing is in flight. */
  idle(): Promise<void> {
    if (this.#segments.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** How long until the last queued byte is out. */
  get backlogMs(): number {
    return this.#segments.length === 0 ? 0 : Math.max(0, this.#freeAt - performance.now());
  }

  /** Drops everything in flight; pending senders get `error`, or simply resolve. */
  clear(error?: Error): void {
    const segments = this.#segments;
    this.#segments = [];
    this.#freeAt = 0;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const segment of segments) {
      if (error === undefined) segment.resolve();
      else segment.reject(error);
    }
    this.#wakeIdle();
  }

  #wakeIdle(): void {
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const wake of waiters) wake();
  }

  #schedule(): void {
    if (this.#timer !== undefined) return;
    const head = this.#segments[0];
    if (head === undefined) return;
    const now = performance.now();
    const end = head.start + head.bytes.length * head.byteMs;
    const nextByte = head.start + (head.delivered + 1) * head.byteMs;
    // A short packet arrives whole at its end; a long transfer in slices of sliceMs.
    const at = Math.min(end, Math.max(nextByte, now + this.#sliceMs));
    this.#timer = setTimeout(() => this.#pump(), Math.max(0, at - now));
  }

  #pump(): void {
    this.#timer = undefined;
    const now = performance.now();
    for (;;) {
      const head = this.#segments[0];
      if (head === undefined) break;
      const due =
        head.byteMs === 0
          ? head.bytes.length
          : Math.min(head.bytes.length, Math.floor((now - head.start) / head.byteMs + 1e-6));
      if (due > head.delivered) {
        const slice = head.bytes.subarray(head.delivered, due);
        head.delivered = due;
        this.#deliver(slice, head.baud);
      }
      if (head.delivered < head.bytes.length) break;
      this.#segments.shift();
      head.resolve();
    }
    if (this.#segments.length === 0) this.#wakeIdle();
    this.#schedule();
  }
}

/** What a byte looks like when sender and receiver disagree on the rate: framing errors. */
export function garble(bytes: Uint8Array): Uint8Array {
  return new Uint8Array(bytes.length);
}

export interface WireStats {
  readonly bytes: number;
  /** Time those bytes take at the rates they were sent at. */
  readonly wireMs: number;
}
