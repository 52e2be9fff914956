/**
 * The RFC 2217 client: a `serialport` binding whose ports are serial ports on another host,
 * named `rfc2217://host:port`, so `SerialPortStream`, `NodeWebSerialPort`, the flasher and the
 * console reach a board behind `xiaozhi-mcp port serve`, `esp_rfc2217_server`, ser2net or
 * pyserial's server through the same code as a local one.
 *
 * What the port does with the wire (RFC 2217, "Com Port Control Option"):
 * - One connection per command: `resolvePort` connects, negotiates ({@link ClientSession}) and
 *   learns what the server is ({@link Rfc2217Binding.connect}), and the port's open takes that
 *   connection over. The SIGNATURE is asked first and the server's rate right after it
 *   (SET-BAUDRATE 0, a query): a server answers in order, so once the rate is in, no
 *   SIGNATURE means none is coming (pyserial's PortManager and esp_rfc2217_server send none).
 *   One round trip; nothing waits for an answer that never comes.
 * - open: SET-BAUDRATE, SET-DATASIZE, SET-PARITY, SET-STOPSIZE together and SET-CONTROL flow
 *   control, waiting for each answer (the same code plus 100), as pyserial's client does
 *   (`Serial._reconfigure_port`). Opening touches neither DTR nor RTS: the first `set()` does.
 * - `set()` on a server that passes line changes (`xiaozhi-mcp port serve`, ser2net: it sends a
 *   SIGNATURE): one SET-CONTROL per line that changed on this connection (the first sends
 *   both), RTS first, then DTR, each waiting for the server's answer: the order bindings-cpp
 *   writes the lines on Windows (`src/serialport_win.cpp`, `SetBaton::Execute`), so
 *   `line-steps.ts` plans for it as for Windows (`linePlatform: 'win32'`). BREAK-ON/OFF for `brk`.
 * - `set()` on a server that plays resets itself (no SIGNATURE: `esp_rfc2217_server`, and
 *   pyserial's `PortManager` it extends; or `?ign_set_control`, which ESP-IDF documents for it):
 *   nothing at open, and esptool's resets as the few commands that mean them there
 *   ({@link planServerReset}), none waiting for an answer ({@link Rfc2217LineControl}).
 * - `update()`: SET-BAUDRATE and its answer; `flush()`: PURGE-DATA both buffers (3) and the
 *   bytes received so far; `drain()`: what was written has reached the OS.
 * - FLOWCONTROL-SUSPEND/RESUME from the server pause and resume writes.
 * - A connection lost after open is made again (backoff, for `reconnectMs` in all), with the
 *   settings and the last DTR/RTS applied again; reads wait meanwhile. A write under way when
 *   the connection dropped loses its bytes, as a glitch on a wire would. If the connection
 *   cannot be made again, a pending read and every later call fail with `PORT_NOT_FOUND`.
 */
import { connect } from 'node:net';
import type { SerialPortStream } from '@serialport/stream';
import { SerialError } from '../errors.js';
import type { PortKind } from '../port-info.js';
import { ReceiveQueue } from '../receive-queue.js';
import { abortableWait } from '../wait.js';
import {
  ClientSession,
  refusalError,
  SessionClosedError,
  type SessionHandlers,
  type SessionOptions,
} from './client-session.js';
import {
  INITIAL_SERVER_RESET_STATE,
  planServerReset,
  type ServerResetState,
} from './server-resets.js';
import {
  baudBytes,
  COM_PORT,
  CONTROL,
  MODEMSTATE,
  PARITY,
  PURGE,
  readBaud,
  STOPSIZE,
} from './telnet.js';
import {
  formatRfc2217Url,
  parseRfc2217Signature,
  parseRfc2217Url,
  type Rfc2217Url,
} from './url.js';

// `@serialport/bindings-interface` types cannot be imported from ESM (its exports map has no
// types); they are taken from `SerialPortStream`, whose options carry the binding.
type BindingInterface = ConstructorParameters<typeof SerialPortStream>[0]['binding'];
type BindingPortInterface = Awaited<ReturnType<BindingInterface['open']>>;
type BindingOpenOptions = Parameters<BindingInterface['open']>[0];
type BindingPortInfo = Awaited<ReturnType<BindingInterface['list']>>[number];
type PortStatus = Awaited<ReturnType<BindingPortInterface['get']>>;
type SetOptions = Parameters<BindingPortInterface['set']>[0];
type UpdateOptions = Parameters<BindingPortInterface['update']>[0];

/** Defaults of {@link Rfc2217BindingOptions}. */
export const RFC2217_DEFAULTS = Object.freeze({
  connectTimeoutMs: 5000,
  negotiationTimeoutMs: 3000,
  /** pyserial's `_network_timeout`: 3 s for each answer. */
  ackTimeoutMs: 3000,
  reconnectMs: 10_000,
  /** Bytes received and not read yet, at most (a tty's buffer); more are dropped. */
  receiveBufferBytes: 64 * 1024,
} as const);

/**
 * A server that says it is busy is asked once more, a moment later: it may still be closing our
 * own last session (a probe just before the open).
 */
const BUSY_RETRY_PAUSE_MS = 250;
/** The pauses between reconnect attempts: doubling from the first to the last. */
const RECONNECT_FIRST_PAUSE_MS = 100;
const RECONNECT_MAX_PAUSE_MS = 1000;
/** Serial bytes per socket write: a flow-control suspension takes effect between them. */
const WRITE_CHUNK_BYTES = 4096;

/**
 * How a server treats DTR and RTS. `lines`: each change reaches its port (`xiaozhi-mcp port
 * serve`, which recognises esptool's download resets; ser2net). `resets`: it plays esptool's
 * resets itself from `DTR on` and `RTS off` and drops other changes (`esp_rfc2217_server`);
 * a BOOT click cannot be expressed through it.
 */
export type Rfc2217LineControl = 'lines' | 'resets';

/**
 * `resets` for a server that sent no SIGNATURE (esp_rfc2217_server and pyserial's PortManager
 * send none; what is sent to them plays as the same reset on both, `server-resets.ts`), or for a
 * URL with `?ign_set_control` (what ESP-IDF documents for esp_rfc2217_server) unless the
 * server is `xiaozhi-mcp port serve`, which passes lines; `lines` otherwise.
 */
export function lineControlOf(url: Rfc2217Url, signature: string): Rfc2217LineControl {
  if (parseRfc2217Signature(signature).kind !== undefined) return 'lines';
  return signature === '' || url.ignoreSetControl ? 'resets' : 'lines';
}

/** What an RFC 2217 port reports as it goes. */
export type Rfc2217Event =
  | {
      readonly kind: 'lost';
      readonly url: string;
      readonly reason: string;
      readonly reconnectMs: number;
    }
  | { readonly kind: 'reconnected'; readonly url: string; readonly attempts: number }
  | { readonly kind: 'failed'; readonly url: string; readonly error: Error }
  | { readonly kind: 'signature'; readonly url: string; readonly signature: string };

export interface Rfc2217BindingOptions {
  /** TCP connect, each attempt. Default 5000 ms. */
  readonly connectTimeoutMs?: number;
  /** From connected to the server's DO COM-PORT-OPTION. Default 3000 ms. */
  readonly negotiationTimeoutMs?: number;
  /** Each answer to a COM-PORT command (settings, lines, purge). Default 3000 ms. */
  readonly ackTimeoutMs?: number;
  /** How long a lost connection is tried again, in all; 0: never. Default 10000 ms. */
  readonly reconnectMs?: number;
  /** Received bytes kept for reading, at most. Default 64 KiB. */
  readonly receiveBufferBytes?: number;
  readonly onEvent?: (event: Rfc2217Event) => void;
}

type Resolved = Required<Omit<Rfc2217BindingOptions, 'onEvent'>> &
  Pick<Rfc2217BindingOptions, 'onEvent'>;

function canceledError(message: string): Error {
  // serialport: "in progress reads must error when the port is closed with an error object that
  // has the property `canceled` equal to `true`" (bindings-interface).
  return Object.assign(new Error(message), { canceled: true });
}

const CONTROL_NAMES: Readonly<Record<number, string>> = {
  [CONTROL.FLOW_NONE]: 'no flow control',
  [CONTROL.FLOW_XONXOFF]: 'XON/XOFF flow control',
  [CONTROL.FLOW_HARDWARE]: 'hardware flow control',
  [CONTROL.BREAK_ON]: 'BREAK on',
  [CONTROL.BREAK_OFF]: 'BREAK off',
  [CONTROL.DTR_ON]: 'DTR on',
  [CONTROL.DTR_OFF]: 'DTR off',
  [CONTROL.RTS_ON]: 'RTS on',
  [CONTROL.RTS_OFF]: 'RTS off',
};

interface Settings {
  baudRate: number;
  dataBits: number;
  parity: number;
  stopSize: number;
  flow: number;
}

function settingsFrom(options: BindingOpenOptions): Settings {
  const parity = PARITY[(options.parity ?? 'none') as keyof typeof PARITY];
  if (parity === undefined) throw new TypeError(`"parity" ${String(options.parity)} is not valid`);
  const stopBits = options.stopBits ?? 1;
  const stopSize =
    stopBits === 1 ? STOPSIZE.one : stopBits === 2 ? STOPSIZE.two : STOPSIZE.onePointFive;
  const flow =
    options.rtscts === true
      ? CONTROL.FLOW_HARDWARE
      : options.xon === true || options.xoff === true
        ? CONTROL.FLOW_XONXOFF
        : CONTROL.FLOW_NONE;
  return { baudRate: options.baudRate, dataBits: options.dataBits ?? 8, parity, stopSize, flow };
}

function resolveOptions(options: Rfc2217BindingOptions): Resolved {
  return {
    connectTimeoutMs: options.connectTimeoutMs ?? RFC2217_DEFAULTS.connectTimeoutMs,
    negotiationTimeoutMs: options.negotiationTimeoutMs ?? RFC2217_DEFAULTS.negotiationTimeoutMs,
    ackTimeoutMs: options.ackTimeoutMs ?? RFC2217_DEFAULTS.ackTimeoutMs,
    reconnectMs: options.reconnectMs ?? RFC2217_DEFAULTS.reconnectMs,
    receiveBufferBytes: options.receiveBufferBytes ?? RFC2217_DEFAULTS.receiveBufferBytes,
    ...(options.onEvent === undefined ? {} : { onEvent: options.onEvent }),
  };
}

/** Opens a session; a server that says it is busy is asked `busyRetries` more times. */
async function openSession(
  url: Rfc2217Url,
  label: string,
  timeouts: { connectTimeoutMs: number; negotiationTimeoutMs: number },
  handlers: Pick<SessionOptions, 'onData' | 'onSignature' | 'onClose'>,
  busyRetries: number,
): Promise<ClientSession> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await ClientSession.open({
        host: url.host,
        port: url.port,
        label,
        ...timeouts,
        ...handlers,
      });
    } catch (error) {
      const busy = error instanceof SerialError && error.code === 'PORT_BUSY';
      if (!busy || attempt >= busyRetries) throw error;
      await abortableWait(BUSY_RETRY_PAUSE_MS);
    }
  }
}

type PortState = 'open' | 'reconnecting' | 'failed' | 'closed';

/** An open port on an RFC 2217 server. */
export class Rfc2217Port implements BindingPortInterface {
  readonly openOptions: Required<BindingOpenOptions>;
  isOpen = true;
  /** The URL in its one spelling. */
  readonly url: string;
  readonly #url: Rfc2217Url;
  readonly #options: Resolved;
  readonly #settings: Settings;
  /** The lines as last asked for; undefined: never set. */
  readonly #lines: { dtr?: boolean; rts?: boolean; brk: boolean } = { brk: false };
  /** How the server treats DTR and RTS, once the first connection said. */
  #lineControl: Rfc2217LineControl = 'lines';
  /** For a server that plays resets itself: what the caller's lines have asked so far. */
  #serverReset: ServerResetState = INITIAL_SERVER_RESET_STATE;
  #session: ClientSession | undefined;
  #state: PortState = 'open';
  #failure: Error | undefined;
  #stateWaiters: (() => void)[] = [];
  readonly #abort = new AbortController();
  #queue: Promise<unknown> = Promise.resolve();
  #writing: Promise<unknown> = Promise.resolve();
  readonly #rx: ReceiveQueue;
  #signature: string | undefined;

  /** @internal Use {@link Rfc2217Binding.open}. */
  constructor(url: Rfc2217Url, openOptions: Required<BindingOpenOptions>, options: Resolved) {
    this.#url = url;
    this.url = formatRfc2217Url(url);
    this.openOptions = openOptions;
    this.#options = options;
    this.#settings = settingsFrom(openOptions);
    this.#rx = new ReceiveQueue(options.receiveBufferBytes);
  }

  /** Bytes dropped because nobody read them in time. */
  get overruns(): number {
    return this.#rx.overruns;
  }

  /** The server's SIGNATURE, once it answered. */
  get signature(): string | undefined {
    return this.#signature;
  }

  /** Whether the connection is up (not reconnecting, failed or closed). */
  get connected(): boolean {
    return this.#state === 'open';
  }

  /**
   * @internal Connects and negotiates (or takes over `kept`, a connection that already did and
   * asked the signature), then applies the settings; the port is usable after.
   */
  async start(kept?: ClientSession): Promise<void> {
    this.#session = await this.#establish(
      {
        connectTimeoutMs: this.#options.connectTimeoutMs,
        negotiationTimeoutMs: this.#options.negotiationTimeoutMs,
      },
      1,
      kept,
    );
  }

  async read(
    buffer: Buffer,
    offset: number,
    length: number,
  ): Promise<{ buffer: Buffer; bytesRead: number }> {
    this.#check();
    const bytesRead = await this.#rx.read(buffer, offset, length);
    return { buffer, bytesRead };
  }

  async write(buffer: Buffer): Promise<void> {
    this.#check();
    const work = this.#writeAll(new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.length));
    this.#writing = work.catch(() => undefined);
    await work;
  }

  async update(options: UpdateOptions): Promise<void> {
    this.#check();
    const { baudRate } = options;
    if (!Number.isInteger(baudRate) || baudRate <= 0 || baudRate > 0xffff_ffff)
      throw new TypeError(`"baudRate" ${baudRate} is not valid`);
    const previous = this.#settings.baudRate;
    this.#settings.baudRate = baudRate;
    try {
      await this.#op((session) => this.#applyBaud(session));
    } catch (error) {
      if (this.#settings.baudRate === baudRate) this.#settings.baudRate = previous;
      throw error;
    }
  }

  async set(options: SetOptions): Promise<void> {
    this.#check();
    // A line not named keeps its state: nothing is ever toggled unasked.
    const want = {
      dtr: options.dtr ?? this.#lines.dtr,
      rts: options.rts ?? this.#lines.rts,
      brk: options.brk ?? this.#lines.brk,
    };
    if (want.dtr !== undefined) this.#lines.dtr = want.dtr;
    if (want.rts !== undefined) this.#lines.rts = want.rts;
    this.#lines.brk = want.brk;
    await this.#op((session) =>
      this.#lineControl === 'resets'
        ? this.#applyServerReset(session, want)
        : this.#applyLines(session, want),
    );
  }

  /** How the server treats DTR and RTS ({@link lineControlOf}). */
  get lineControl(): Rfc2217LineControl {
    return this.#lineControl;
  }

  async get(): Promise<PortStatus> {
    this.#check();
    const state = this.#session?.modemState ?? 0;
    return {
      cts: (state & MODEMSTATE.CTS) !== 0,
      dsr: (state & MODEMSTATE.DSR) !== 0,
      dcd: (state & MODEMSTATE.CD) !== 0,
    };
  }

  async getBaudRate(): Promise<{ baudRate: number }> {
    this.#check();
    return { baudRate: this.#settings.baudRate };
  }

  async flush(): Promise<void> {
    this.#check();
    this.#rx.clear();
    await this.#op(async (session) => {
      await session.request(COM_PORT.PURGE_DATA, [PURGE.BOTH], this.#ack('PURGE-DATA'));
      // What arrived before the server's answer was in flight before the purge.
      this.#rx.clear();
    });
  }

  async drain(): Promise<void> {
    this.#check();
    await this.#writing;
    await this.#op((session) => session.flushed());
  }

  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    this.#setState('closed');
    this.isOpen = false;
    this.#abort.abort();
    this.#rx.fail(canceledError('port is closed'));
    const session = this.#session;
    this.#session = undefined;
    await session?.close();
  }

  #check(): void {
    if (this.#state === 'failed' && this.#failure !== undefined) throw this.#failure;
    if (this.#state === 'closed') throw new Error('Port is not open');
  }

  #setState(state: PortState): void {
    this.#state = state;
    for (const waiter of this.#stateWaiters.splice(0)) waiter();
  }

  /** The live session, once any reconnect is over; throws if the port failed or closed. */
  async #connected(): Promise<ClientSession> {
    for (;;) {
      if (this.#state === 'closed') throw canceledError('port is closed');
      if (this.#state === 'failed') throw this.#failure ?? new Error('port failed');
      const session = this.#session;
      if (this.#state === 'open' && session !== undefined && !session.closed) return session;
      await new Promise<void>((resolve) => this.#stateWaiters.push(resolve));
    }
  }

  /**
   * Runs `work` on the live session, one operation at a time. A connection lost under it is
   * waited out: the reconnect applies the settings and lines again, and `work` runs once more
   * on the new session, where it finds nothing left to change.
   */
  #op<T>(work: (session: ClientSession) => Promise<T>): Promise<T> {
    const run = async (): Promise<T> => {
      for (;;) {
        const session = await this.#connected();
        try {
          return await work(session);
        } catch (error) {
          if (!(error instanceof SessionClosedError)) throw error;
        }
      }
    };
    const result = this.#queue.then(run, run);
    this.#queue = result.catch(() => undefined);
    return result;
  }

  async #writeAll(data: Uint8Array): Promise<void> {
    let offset = 0;
    while (offset < data.length) {
      const session = await this.#connected();
      try {
        await session.whenResumed();
      } catch (error) {
        if (error instanceof SessionClosedError) continue; // nothing sent yet: on the next one
        throw error;
      }
      const chunk = data.subarray(offset, offset + WRITE_CHUNK_BYTES);
      try {
        await session.sendData(chunk);
      } catch (error) {
        if (!(error instanceof SessionClosedError)) throw error;
        // Lost with the connection, as bytes on a wire that glitched; the rest of this write
        // would arrive without its beginning, so it goes too. The write ends once the port is
        // back (or fails with it).
        await this.#connected();
        return;
      }
      offset += chunk.length;
    }
  }

  #ack(what: string): { timeoutMs: number; timeout: () => Error } {
    const timeoutMs = this.#options.ackTimeoutMs;
    return {
      timeoutMs,
      timeout: () =>
        new SerialError(
          'PORT_NOT_FOUND',
          `${this.url} did not answer ${what} within ${timeoutMs} ms`,
        ),
    };
  }

  /** A SET-CONTROL, answered unless the URL says `?ign_set_control`. */
  async #control(session: ClientSession, value: number): Promise<void> {
    const name = CONTROL_NAMES[value] ?? `SET-CONTROL ${value}`;
    if (this.#url.ignoreSetControl) {
      await session.request(COM_PORT.SET_CONTROL, [value]);
      return;
    }
    const timeoutMs = this.#options.ackTimeoutMs;
    await session.request(COM_PORT.SET_CONTROL, [value], {
      timeoutMs,
      timeout: () =>
        new SerialError(
          'PORT_NOT_FOUND',
          `${this.url} did not acknowledge SET-CONTROL (${name}) within ${timeoutMs} ms; a server that acknowledges no line change (esp_rfc2217_server) needs ${this.url}?ign_set_control`,
        ),
    });
  }

  async #applyBaud(session: ClientSession): Promise<void> {
    const baudRate = this.#settings.baudRate;
    if (session.applied.baudRate === baudRate) return;
    const answer = await session.request(
      COM_PORT.SET_BAUDRATE,
      baudBytes(baudRate),
      this.#ack(`SET-BAUDRATE ${baudRate}`),
    );
    const got = answer === undefined ? undefined : readBaud(answer);
    if (got !== baudRate)
      throw new Error(
        `${this.url} did not take ${baudRate} baud: the server answered ${got ?? 'something else'}`,
      );
    session.applied.baudRate = baudRate;
  }

  /**
   * On a server that plays resets itself: the commands that mean the reset the caller's lines
   * make ({@link planServerReset}), none waiting for an answer, then BREAK.
   */
  async #applyServerReset(
    session: ClientSession,
    want: { dtr?: boolean | undefined; rts?: boolean | undefined; brk: boolean },
  ): Promise<void> {
    const { state, steps } = planServerReset(this.#serverReset, {
      dtr: want.dtr ?? false,
      rts: want.rts ?? false,
    });
    this.#serverReset = state;
    for (const step of steps) {
      if ('waitMs' in step) await abortableWait(step.waitMs, this.#abort.signal);
      else
        await session.request(COM_PORT.SET_CONTROL, [
          step.line === 'dtr'
            ? step.on
              ? CONTROL.DTR_ON
              : CONTROL.DTR_OFF
            : step.on
              ? CONTROL.RTS_ON
              : CONTROL.RTS_OFF,
        ]);
    }
    if (session.applied.brk !== want.brk) {
      await session.request(COM_PORT.SET_CONTROL, [
        want.brk ? CONTROL.BREAK_ON : CONTROL.BREAK_OFF,
      ]);
      session.applied.brk = want.brk;
    }
  }

  /** RTS first, then DTR, each only when it changed on this connection; then BREAK. */
  async #applyLines(
    session: ClientSession,
    want: { dtr?: boolean | undefined; rts?: boolean | undefined; brk: boolean },
  ): Promise<void> {
    if (want.rts !== undefined && session.applied.rts !== want.rts) {
      await this.#control(session, want.rts ? CONTROL.RTS_ON : CONTROL.RTS_OFF);
      session.applied.rts = want.rts;
    }
    if (want.dtr !== undefined && session.applied.dtr !== want.dtr) {
      await this.#control(session, want.dtr ? CONTROL.DTR_ON : CONTROL.DTR_OFF);
      session.applied.dtr = want.dtr;
    }
    if (session.applied.brk !== want.brk) {
      await this.#control(session, want.brk ? CONTROL.BREAK_ON : CONTROL.BREAK_OFF);
      session.applied.brk = want.brk;
    }
  }

  /**
   * A new session with everything applied: the serial settings and flow control, and after a
   * reconnect the lines as last set. A failure closes it.
   */
  async #establish(
    timeouts: { connectTimeoutMs: number; negotiationTimeoutMs: number },
    busyRetries: number,
    kept?: ClientSession,
  ): Promise<ClientSession> {
    let session: ClientSession | undefined;
    const handlers: SessionHandlers = {
      onData: (bytes) => this.#receive(bytes),
      onSignature: (signature) => {
        this.#signature = signature;
        this.#options.onEvent?.({ kind: 'signature', url: this.url, signature });
      },
      onClose: (reason: string) => {
        if (session !== undefined) this.#onSessionClosed(session, reason);
      },
    };
    const adopted = kept !== undefined && !kept.closed;
    if (adopted) {
      session = kept;
      session.attach(handlers);
      this.#signature = session.signature;
    } else session = await openSession(this.#url, this.url, timeouts, handlers, busyRetries);
    const live = session;
    try {
      // Asked, not waited for: the answers to the settings sent after it bound the wait.
      if (!adopted) await live.request(COM_PORT.SIGNATURE, []);
      const s = this.#settings;
      await Promise.all([
        this.#applyBaud(live),
        live.request(COM_PORT.SET_DATASIZE, [s.dataBits], this.#ack(`SET-DATASIZE ${s.dataBits}`)),
        live.request(COM_PORT.SET_PARITY, [s.parity], this.#ack('SET-PARITY')),
        live.request(COM_PORT.SET_STOPSIZE, [s.stopSize], this.#ack('SET-STOPSIZE')),
      ]);
      // The settings' answers came after the SIGNATURE's, if the server sends one.
      this.#lineControl = lineControlOf(this.#url, live.signature ?? '');
      await this.#control(live, s.flow);
      // A server that plays resets itself sets its own lines as a client connects: nothing to
      // apply again, and a reset in the middle of the caller's sequence starts over.
      if (this.#lineControl === 'resets')
        this.#serverReset = { intent: this.#serverReset.intent, phase: 'pass' };
      else await this.#applyLines(live, this.#lines);
    } catch (error) {
      live.destroy();
      if (error instanceof SessionClosedError)
        throw refusalError(
          this.url,
          live.preambleText,
          'closed the connection while the port was being set up',
        );
      throw error;
    }
    return live;
  }

  #onSessionClosed(session: ClientSession, reason: string): void {
    if (this.#session !== session || this.#state !== 'open') return;
    this.#session = undefined;
    const { reconnectMs } = this.#options;
    this.#options.onEvent?.({ kind: 'lost', url: this.url, reason, reconnectMs });
    if (reconnectMs <= 0) {
      this.#fail(
        new SerialError('PORT_NOT_FOUND', `${this.url}: the connection was lost (${reason})`),
      );
      return;
    }
    this.#setState('reconnecting');
    void this.#reconnect(reason);
  }

  async #reconnect(reason: string): Promise<void> {
    const { reconnectMs, connectTimeoutMs, negotiationTimeoutMs } = this.#options;
    const started = performance.now();
    const remaining = () => reconnectMs - (performance.now() - started);
    let pause = RECONNECT_FIRST_PAUSE_MS;
    let attempts = 0;
    let last: unknown;
    while (this.#state === 'reconnecting' && remaining() > 0) {
      attempts++;
      try {
        const left = Math.max(1, remaining());
        const session = await this.#establish(
          {
            connectTimeoutMs: Math.min(connectTimeoutMs, left),
            negotiationTimeoutMs: Math.min(negotiationTimeoutMs, left),
          },
          0,
        );
        if (this.#state !== 'reconnecting') {
          session.destroy();
          return;
        }
        this.#session = session;
        this.#setState('open');
        this.#options.onEvent?.({ kind: 'reconnected', url: this.url, attempts });
        return;
      } catch (error) {
        last = error;
      }
      const wait = Math.min(pause, remaining());
      if (wait > 0) await abortableWait(wait, this.#abort.signal).catch(() => undefined);
      pause = Math.min(pause * 2, RECONNECT_MAX_PAUSE_MS);
    }
    if (this.#state !== 'reconnecting') return;
    const why = last instanceof Error ? last.message : String(last ?? 'no attempt');
    this.#fail(
      new SerialError(
        'PORT_NOT_FOUND',
        `${this.url}: the connection was lost (${reason}) and could not be made again within ${reconnectMs / 1000} s: ${why}`,
        { cause: last },
      ),
    );
  }

  #fail(error: Error): void {
    this.#failure = error;
    this.#setState('failed');
    this.#rx.fail(error);
    this.#options.onEvent?.({ kind: 'failed', url: this.url, error });
  }

  #receive(bytes: Uint8Array): void {
    if (this.#state === 'closed') return;
    this.#rx.push(bytes);
  }
}

/**
 * The binding: pass it as `binding` wherever a `serialport` binding goes, with the URL as the
 * path. `list()` is empty: remote ports are always named.
 */
export class Rfc2217Binding implements BindingInterface {
  readonly #options: Resolved;
  readonly #open = new Set<Rfc2217Port>();
  /** Connections {@link connect} made, by URL, for the next open of that URL. */
  readonly #kept = new Map<string, ClientSession>();

  constructor(options: Rfc2217BindingOptions = {}) {
    this.#options = resolveOptions(options);
  }

  async list(): Promise<BindingPortInfo[]> {
    return [];
  }

  /**
   * Connects to the URL in `options.path`. Rejects `OPTION_INVALID` for a bad URL,
   * `PORT_NOT_FOUND` when nothing usable answers, `PORT_BUSY` when the server serves another
   * client.
   */
  async open(options: BindingOpenOptions): Promise<Rfc2217Port> {
    if (typeof options.path !== 'string' || options.path === '')
      throw new TypeError('"path" is not a valid port');
    if (!Number.isInteger(options.baudRate) || options.baudRate <= 0)
      throw new TypeError('"baudRate" is not a valid baudRate');
    const url = parseRfc2217Url(options.path);
    const port = new Rfc2217Port(
      url,
      {
        dataBits: 8,
        lock: true,
        stopBits: 1,
        parity: 'none',
        rtscts: false,
        xon: false,
        xoff: false,
        xany: false,
        hupcl: true,
        ...options,
      } as Required<BindingOpenOptions>,
      this.#options,
    );
    const kept = this.#kept.get(port.url);
    this.#kept.delete(port.url);
    await port.start(kept);
    this.#open.add(port);
    const close = port.close.bind(port);
    port.close = async () => {
      this.#open.delete(port);
      await close();
    };
    return port;
  }

  /**
   * Connects to `url` and learns what the server is ({@link probeRfc2217}: no line, no setting
   * touched), keeping the connection for the next {@link open} of `url`, so that a command makes
   * one connection, not a probe and then another. `timeoutMs` (default 5000) bounds it all.
   */
  async connect(url: string, options: { timeoutMs?: number } = {}): Promise<Rfc2217Probe> {
    const { session, probe } = await learnServer(url, options.timeoutMs);
    const label = formatRfc2217Url(parseRfc2217Url(url));
    this.#kept.get(label)?.destroy();
    this.#kept.set(label, session);
    session.attach({
      onClose: () => {
        if (this.#kept.get(label) === session) this.#kept.delete(label);
      },
    });
    return probe;
  }

  /** Closes the connections {@link connect} kept that no open took over. */
  release(): void {
    for (const session of this.#kept.values()) void session.close();
    this.#kept.clear();
  }

  /** Whether a port of this binding holds a live connection to `url`. */
  isConnected(url: string): boolean {
    const normal = formatRfc2217Url(parseRfc2217Url(url));
    for (const port of this.#open) if (port.url === normal && port.connected) return true;
    return false;
  }
}

/** What {@link probeRfc2217} found. */
export interface Rfc2217Probe {
  /** The server's SIGNATURE text; empty when it sent none. */
  readonly signature: string;
  /** How it treats DTR and RTS ({@link lineControlOf}). */
  readonly lineControl: Rfc2217LineControl;
  /** From `xiaozhi-mcp port serve`'s signature; else `unknown`. */
  readonly kind: PortKind;
  /** The shared port's name, from `xiaozhi-mcp port serve`'s signature. */
  readonly label?: string;
}

/**
 * Connects, negotiates and learns what the server is: its SIGNATURE is asked, then its rate
 * (SET-BAUDRATE 0, a query that changes nothing). A server answers in the order it was asked,
 * so once the rate is in, a SIGNATURE answer would have come before it: none means the server
 * sends none (pyserial's PortManager, and esp_rfc2217_server built on it). One round trip after
 * negotiating; nothing waits for an answer that does not come. Touches neither DTR nor RTS nor
 * any setting, so it never resets a board. Resolves with the open session.
 */
async function learnServer(
  url: string,
  timeoutMs: number = RFC2217_DEFAULTS.connectTimeoutMs,
): Promise<{ session: ClientSession; probe: Rfc2217Probe }> {
  const parsed = parseRfc2217Url(url);
  const label = formatRfc2217Url(parsed);
  const started = performance.now();
  const left = () => Math.max(1, timeoutMs - (performance.now() - started));
  const session = await openSession(
    parsed,
    label,
    {
      connectTimeoutMs: timeoutMs,
      negotiationTimeoutMs: Math.min(RFC2217_DEFAULTS.negotiationTimeoutMs, timeoutMs),
    },
    {},
    1,
  );
  try {
    await session.request(COM_PORT.SIGNATURE, []);
    const waitMs = Math.min(RFC2217_DEFAULTS.ackTimeoutMs, left());
    await session.request(COM_PORT.SET_BAUDRATE, baudBytes(0), {
      timeoutMs: waitMs,
      timeout: () =>
        new SerialError(
          'PORT_NOT_FOUND',
          `${label} did not answer SET-BAUDRATE (a query of its rate) within ${waitMs} ms; is it an RFC 2217 server?`,
        ),
    });
  } catch (error) {
    session.destroy();
    if (error instanceof SessionClosedError)
      throw refusalError(
        label,
        session.preambleText,
        'closed the connection right after negotiating',
      );
    throw error;
  }
  const signature = session.signature ?? '';
  const said = parseRfc2217Signature(signature);
  return {
    session,
    probe: {
      signature,
      lineControl: lineControlOf(parsed, signature),
      kind: said.kind ?? 'unknown',
      ...(said.label === undefined ? {} : { label: said.label }),
    },
  };
}

/**
 * What the server at `url` is ({@link learnServer}), on a connection closed right after.
 * `timeoutMs` (default 5000) bounds it all. Rejects as {@link Rfc2217Binding.open} does.
 */
export async function probeRfc2217(
  url: string,
  options: { timeoutMs?: number } = {},
): Promise<Rfc2217Probe> {
  const { session, probe } = await learnServer(url, options.timeoutMs);
  await session.close();
  return probe;
}

/** Whether something accepts a TCP connection at the URL's host and port within `timeoutMs`. */
export function rfc2217Reachable(url: string, timeoutMs = 2000): Promise<boolean> {
  const { host, port } = parseRfc2217Url(url);
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}
