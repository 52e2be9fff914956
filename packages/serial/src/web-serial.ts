/**
 * The part of the Web Serial `SerialPort` that esptool-js's `Transport` uses, over a Node
 * `serialport` stream. Any binding works: `@serialport/bindings-cpp` reaches a real port,
 * the virtual binding reaches a virtual board, through the same code.
 *
 * Serial facts this class keeps (docs/hil.md §6): `serialport`'s `set()` writes every line, so each
 * `setSignals` sends DTR and RTS together, keeping the last state of a line esptool did not
 * name; the baud rate changes in place (`update()`), never by reopening, since reopening
 * resets boards; the port is opened with `hupcl: false` (with `hupcl: true`, bindings-cpp's
 * `serialport_win.cpp` opens with `DTR_CONTROL_ENABLE` and `RTS_CONTROL_DISABLE`, DTR alone
 * asserted: GPIO0 low, a BOOT press on a running app; its `serialport_unix.cpp` sets `HUPCL`,
 * which drops DTR on close); and the readable survives esptool's pattern of taking a reader per
 * chunk.
 */
import type { SerialPortStream } from '@serialport/stream';
import { openSafely } from './port-open.js';

/**
 * A `serialport` binding (`@serialport/bindings-interface`'s `BindingInterface`), taken from
 * `SerialPortStream`'s own options: that package's types cannot be imported from ESM.
 */
export type SerialBinding = ConstructorParameters<typeof SerialPortStream>[0]['binding'];
/** An entry of `binding.list()` (`PortInfo`). */
export type SerialPortInfo = Awaited<ReturnType<SerialBinding['list']>>[number];

export interface WebSerialOpenOptions {
  readonly baudRate: number;
  readonly dataBits?: 7 | 8 | undefined;
  readonly stopBits?: 1 | 2 | undefined;
  readonly parity?: 'none' | 'even' | 'odd' | undefined;
  readonly bufferSize?: number | undefined;
  readonly flowControl?: 'none' | 'hardware' | undefined;
}

/** Web Serial's signal names; `true` asserts the line. An absent line keeps its state. */
export interface WebSerialSignals {
  readonly dataTerminalReady?: boolean | undefined;
  readonly requestToSend?: boolean | undefined;
  readonly break?: boolean | undefined;
}

export interface WebSerialPortInfo {
  readonly usbVendorId?: number | undefined;
  readonly usbProductId?: number | undefined;
}

export interface NodeWebSerialPortOptions {
  readonly binding: SerialBinding;
  readonly path: string;
  /** From the port list (`PortInfo.vendorId` is hex text; see {@link NodeWebSerialPort.fromPortInfo}). */
  readonly usbVendorId?: number | undefined;
  readonly usbProductId?: number | undefined;
  /** Bound on open, close, set, update and each write; default 5000 ms. */
  readonly timeoutMs?: number;
  /**
   * Release DTR and RTS right after opening, so the chip is neither held in reset nor
   * strapped for download mode whatever the OS did on open. Default true.
   */
  readonly releaseLinesOnOpen?: boolean;
}

/** The lines as last set (true = asserted). */
export interface SerialLines {
  readonly dtr: boolean;
  readonly rts: boolean;
  readonly brk: boolean;
}

function lostError(message: string): Error {
  // esptool-js recognises a lost device by this name, as Chrome reports it.
  const error = new Error(`The device has been lost: ${message}`);
  error.name = 'NetworkError';
  return error;
}

function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

function callbackPromise(run: (done: (error: Error | null) => void) => void): Promise<void> {
  return new Promise((resolve, reject) => run((error) => (error ? reject(error) : resolve())));
}

export class NodeWebSerialPort {
  readonly path: string;
  readonly #binding: SerialBinding;
  readonly #info: WebSerialPortInfo;
  readonly #timeoutMs: number;
  readonly #releaseLinesOnOpen: boolean;
  #stream: SerialPortStream | undefined;
  #readable: ReadableStream<Uint8Array> | null = null;
  #detachReadable: (() => void) | undefined;
  #writable: WritableStream<Uint8Array> | null = null;
  #lines: SerialLines = { dtr: false, rts: false, brk: false };
  #lost: Error | undefined;
  readonly #dataListeners = new Set<(bytes: Uint8Array) => void>();

  constructor(options: NodeWebSerialPortOptions) {
    this.path = options.path;
    this.#binding = options.binding;
    this.#info = { usbVendorId: options.usbVendorId, usbProductId: options.usbProductId };
    this.#timeoutMs = options.timeoutMs ?? 5000;
    this.#releaseLinesOnOpen = options.releaseLinesOnOpen ?? true;
  }

  /** A port for an entry of `binding.list()` (vendor and product ids parsed from hex). */
  static fromPortInfo(
    binding: SerialBinding,
    info: {
      readonly path: string;
      readonly vendorId?: string | undefined;
      readonly productId?: string | undefined;
    },
    options: Omit<
      NodeWebSerialPortOptions,
      'binding' | 'path' | 'usbVendorId' | 'usbProductId'
    > = {},
  ): NodeWebSerialPort {
    const id = (text: string | undefined) => {
      const value = text === undefined ? Number.NaN : Number.parseInt(text, 16);
      return Number.isFinite(value) ? value : undefined;
    };
    return new NodeWebSerialPort({
      ...options,
      binding,
      path: info.path,
      usbVendorId: id(info.vendorId),
      usbProductId: id(info.productId),
    });
  }

  get isOpen(): boolean {
    return this.#stream !== undefined;
  }

  /** The line states last sent. */
  get lines(): SerialLines {
    return this.#lines;
  }

  /** Set when the port went away under us (unplugged, I/O error); cleared by the next open. */
  get lost(): Error | undefined {
    return this.#lost;
  }

  getInfo(): WebSerialPortInfo {
    return { ...this.#info };
  }

  async open(options: WebSerialOpenOptions): Promise<void> {
    if (this.#stream !== undefined) {
      throw new DOMException(`serial port ${this.path} is already open`, 'InvalidStateError');
    }
    // The one open of every port (port-open.ts): `hupcl` off (on Windows `hupcl` asserts DTR
    // alone as the port opens, before the first set(): see the top of this file), a port that
    // is still busy or not yet permitted retried, and a refusal said as what it is (busy and by
    // whom, permission denied and the fix, missing), never as a board that does not answer.
    const stream = await openSafely(this.path, {
      binding: this.#binding,
      baudRate: options.baudRate,
      timeoutMs: this.#timeoutMs,
      releaseLines: false,
      settings: {
        ...(options.dataBits === undefined ? {} : { dataBits: options.dataBits }),
        ...(options.stopBits === undefined ? {} : { stopBits: options.stopBits }),
        ...(options.parity === undefined ? {} : { parity: options.parity }),
        ...(options.flowControl === 'hardware' ? { rtscts: true } : {}),
        ...(options.bufferSize === undefined ? {} : { highWaterMark: options.bufferSize }),
      },
    });
    // Without a listener, a stream error would crash the process; we report it instead.
    stream.on('error', (error: Error) => this.#onLost(error));
    stream.on('close', (error: Error | null) => {
      if (this.#stream !== stream) return;
      if (error) this.#onLost(error);
      else this.#endReadable();
    });
    this.#stream = stream;
    this.#lost = undefined;
    if (this.#releaseLinesOnOpen)
      await this.setSignals({ dataTerminalReady: false, requestToSend: false });
  }

  /**
   * Bytes from the device. Like Web Serial's, it is the same stream until it is cancelled or
   * ends; then the next access makes a new one while the port is open.
   */
  get readable(): ReadableStream<Uint8Array> | null {
    const stream = this.#stream;
    if (stream === undefined) return null;
    if (this.#readable === null) this.#readable = this.#makeReadable(stream);
    return this.#readable;
  }

  /**
   * Sees every chunk the readable delivers (a copy), while someone reads it; returns the
   * unsubscribe. The flasher keeps what the board printed while it tried to connect.
   */
  addDataListener(listener: (bytes: Uint8Array) => void): () => void {
    this.#dataListeners.add(listener);
    return () => {
      this.#dataListeners.delete(listener);
    };
  }

  get writable(): WritableStream<Uint8Array> | null {
    const stream = this.#stream;
    if (stream === undefined) return null;
    if (this.#writable === null) this.#writable = this.#makeWritable(stream);
    return this.#writable;
  }

  /** Sets DTR and RTS (and break) together, in one `set()`; absent lines keep their state. */
  async setSignals(signals: WebSerialSignals): Promise<void> {
    const stream = this.#requireOpen('setSignals');
    const lines: SerialLines = {
      dtr: signals.dataTerminalReady ?? this.#lines.dtr,
      rts: signals.requestToSend ?? this.#lines.rts,
      brk: signals.break ?? this.#lines.brk,
    };
    await withTimeout(
      callbackPromise((done) =>
        stream.set({ dtr: lines.dtr, rts: lines.rts, brk: lines.brk }, done),
      ),
      this.#timeoutMs,
      `setting the lines of ${this.path}`,
    );
    this.#lines = lines;
  }

  /** Changes the baud rate in place (`port.update`): a reopen would reset the board. */
  async setBaudRate(baudRate: number): Promise<void> {
    const stream = this.#requireOpen('setBaudRate');
    await withTimeout(
      callbackPromise((done) => stream.update({ baudRate }, done)),
      this.#timeoutMs,
      `changing ${this.path} to ${baudRate} baud`,
    );
  }

  /** The current baud rate, or undefined while closed. */
  get baudRate(): number | undefined {
    return this.#stream?.baudRate;
  }

  async close(): Promise<void> {
    const stream = this.#stream;
    if (stream === undefined) return;
    this.#endReadable();
    const writable = this.#writable;
    this.#writable = null;
    if (writable !== null && !writable.locked) await writable.abort().catch(() => {});
    this.#stream = undefined;
    if (!stream.isOpen) return;
    await withTimeout(
      callbackPromise((done) => stream.close(done)),
      this.#timeoutMs,
      `closing ${this.path}`,
    ).catch((error: Error) => {
      // A port that was unplugged meanwhile is closed as far as we are concerned.
      if (!/not open/i.test(error.message)) throw error;
    });
  }

  #requireOpen(what: string): SerialPortStream {
    const stream = this.#stream;
    if (stream === undefined || !stream.isOpen) {
      throw new DOMException(`${what}: serial port ${this.path} is not open`, 'InvalidStateError');
    }
    return stream;
  }

  #onLost(error: Error): void {
    if (this.#lost !== undefined) return;
    this.#lost = lostError(error.message);
    this.#endReadable();
    this.#writable = null;
    this.#stream = undefined;
  }

  #endReadable(): void {
    const detach = this.#detachReadable;
    this.#detachReadable = undefined;
    this.#readable = null;
    detach?.();
  }

  #makeReadable(stream: SerialPortStream): ReadableStream<Uint8Array> {
    let controller: ReadableStreamDefaultController<Uint8Array> | undefined;
    let finished = false;
    const onData = (chunk: Buffer) => {
      if (finished || controller === undefined) return;
      const bytes = new Uint8Array(chunk);
      controller.enqueue(bytes);
      for (const listener of this.#dataListeners) listener(bytes.slice());
      // Backpressure: stop the Node stream while nobody reads; `pull` resumes it.
      if ((controller.desiredSize ?? 1) <= 0) stream.pause();
    };
    const detach = () => {
      if (finished) return;
      finished = true;
      stream.off('data', onData);
      stream.pause();
      if (controller === undefined) return;
      try {
        if (this.#lost !== undefined) controller.error(this.#lost);
        else controller.close();
      } catch {
        // Already closed or errored (cancelled by the reader).
      }
    };
    this.#detachReadable = detach;
    const readable = new ReadableStream<Uint8Array>(
      {
        start: (c) => {
          controller = c;
          stream.on('data', onData);
          stream.resume();
        },
        pull: () => {
          if (!finished) stream.resume();
        },
        cancel: () => {
          finished = true;
          stream.off('data', onData);
          stream.pause();
          if (this.#detachReadable === detach) this.#detachReadable = undefined;
          if (this.#readable === readable) this.#readable = null;
        },
      },
      { highWaterMark: 64 * 1024, size: (chunk) => chunk.byteLength },
    );
    return readable;
  }

  #makeWritable(stream: SerialPortStream): WritableStream<Uint8Array> {
    const drop = () => {
      if (this.#writable === writable) this.#writable = null;
    };
    const writable = new WritableStream<Uint8Array>({
      write: (chunk) => {
        if (this.#lost !== undefined) return Promise.reject(this.#lost);
        // Twice the wire time of the chunk, so a slow baud rate is not mistaken for a hang.
        const wireMs = (chunk.byteLength * 10 * 1000) / stream.baudRate;
        return withTimeout(
          callbackPromise((done) =>
            stream.write(Buffer.from(chunk), (error) => done(error ?? null)),
          ),
          Math.max(this.#timeoutMs, 2 * wireMs + 1000),
          `writing ${chunk.byteLength} bytes to ${this.path}`,
        );
      },
      close: () => {
        drop();
        return callbackPromise((done) => stream.drain((error) => done(error ?? null)));
      },
      abort: () => drop(),
    });
    return writable;
  }
}
