/**
 * An RFC 2217 server: one local port (real or a provider's board) shared over TCP, the way
 * ESP-IDF's `esp_rfc2217_server` shares one, so that `rfc2217://host:port` reaches a board on
 * another host with its baud rate and lines. One client at a time; loopback by default.
 *
 * What it does beyond pyserial's `PortManager` (`serial/rfc2217.py`) and `esp_rfc2217_server`
 * (`esp_port_manager.py`, `redirector.py`):
 *
 * - esptool's resets into download mode are recognised from the client's line commands
 *   ({@link ./reset-recognizer.ts}) and played locally with the local port's own sequence and
 *   timing; other line changes (a hard reset, a BOOT click) pass as they come.
 * - Every COM-PORT command is answered with the value in effect, line commands too, even
 *   those a recognised reset absorbs, so clients that wait for answers (pyserial without
 *   `?ign_set_control`) and clients that do not both work. `esp_rfc2217_server` answers none of
 *   the line commands it handles itself, which is why ESP-IDF documents `?ign_set_control`.
 *   Line commands are answered at once, except while a download reset plays locally: then once
 *   it has played, so that a client which waits for answers syncs with a chip in download mode.
 * - The client's bytes go to the port in order with its commands: bytes sent after a reset
 *   reach the chip after it, when the reset plays for longer than the network took.
 * - Bounded: the client's bytes the port has not taken yet stop the socket (backpressure), a
 *   client that does not read is let go, a client that never negotiates is let go, and no frame
 *   stops the process. A second client is told who has the port and closed.
 * - When the client leaves, both lines are released (never a board left in reset or strapped)
 *   and the port waits, open, for the next client.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { SerialError } from '../errors.js';
import type { LinePlatform } from '../line-steps.js';
import type { ResolvedPort } from '../port-provider.js';
import { type RecognizerAction, ResetRecognizer } from './reset-recognizer.js';
import { ServedPort } from './served-port.js';
import {
  baudBytes,
  COM_PORT,
  CONTROL,
  encodeComPort,
  encodeNegotiation,
  escapeData,
  type NegotiationVerb,
  OPTION,
  PARITY,
  PURGE,
  readBaud,
  readComPort,
  SERVER_OFFSET,
  STOPSIZE,
  TelnetDecoder,
  type TelnetEvent,
} from './telnet.js';

/** The port RFC 2217 servers commonly listen on (`esp_rfc2217_server`'s default too). */
export const DEFAULT_RFC2217_PORT = 2217;
/** How long a client has to negotiate the COM-PORT option before it is let go. */
export const NEGOTIATION_TIMEOUT_MS = 10_000;
/** Above this many bytes the port has not taken, the client's socket is paused ... */
const HOLD_HIGH_BYTES = 256 * 1024;
/** ... and below this it reads again. */
const HOLD_LOW_BYTES = 64 * 1024;
/** A client whose held bytes still reach this (it did not stop when paused) is let go. */
const HOLD_MAX_BYTES = 1024 * 1024;
/** A client that leaves this much of our output unread is let go. */
const UNREAD_MAX_BYTES = 1024 * 1024;
/** How long a refused connection may take to read its one line. */
const REFUSAL_LINGER_MS = 1000;
/** How long a new client waits for the last one's goodbye (lines released) before it is refused. */
const TEARDOWN_WAIT_MS = 5000;
/** Connections at once, the one client and those being refused included. */
const MAX_CONNECTIONS = 16;
/**
 * The longest a line command waits for its answer while a download reset plays locally (its
 * plays take at most 650 ms, ClassicReset's at 550 ms), well inside the 3 s clients wait.
 */
const PLAY_ANSWER_MAX_MS = 1500;

export interface Rfc2217ServerOptions {
  /**
   * The port to share, from `resolvePort`: the server opens it itself with its binding, safely
   * (`hupcl` off, lines released), and closes it on {@link Rfc2217Server.close}; the caller
   * still owns the port (its lock, a provided board): `dispose()` is the caller's.
   */
  readonly port: ResolvedPort;
  /** Default `127.0.0.1`; anything else is reachable from elsewhere, and said so in the log. */
  readonly host?: string;
  /** Default {@link DEFAULT_RFC2217_PORT}; 0 lets the OS choose (see {@link Rfc2217Server.address}). */
  readonly listenPort?: number;
  /** The rate each client starts at; default 115200. */
  readonly baudRate?: number;
  /** One line per event: clients, recognised resets, the port going away. */
  readonly log?: (line: string) => void;
  /** Closes the server. */
  readonly signal?: AbortSignal;
  /** Default {@link NEGOTIATION_TIMEOUT_MS}. */
  readonly negotiationTimeoutMs?: number;
  /** How long a vanished port may take to come back before the client is let go; default 10 s. */
  readonly refindMs?: number;
}

/**
 * What the server answers a SIGNATURE request with. `xiaozhi-mcp`'s client reads the port's
 * kind from it, to pick the reset a USB-Serial-JTAG needs; keep its form.
 */
export function serveSignature(label: string, kind: string): string {
  return `xiaozhi-mcp port serve port=${label} kind=${kind}`;
}

/** The one line a second client gets before it is closed. */
export function busyLine(label: string, peer: string): string {
  return `xiaozhi-mcp port serve: busy: ${label} is in use by ${peer}; one client at a time\r\n`;
}

/** Whether `host` is this machine only (127.0.0.0/8, ::1, localhost). */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase();
  return (
    h === 'localhost' || h === '::1' || /^127(\.\d{1,3}){3}$/.test(h) || /^::ffff:127\./.test(h)
  );
}

const hostForUrl = (host: string): string => (host.includes(':') ? `[${host}]` : host);
const message = (error: unknown): string =>
  error instanceof Error ? error.message : String(error);

function peerOf(socket: Socket): string {
  const address = socket.remoteAddress ?? 'unknown';
  return `${hostForUrl(address)}:${socket.remotePort ?? 0}`;
}

/** The host whose `set()` writes the port's lines: the port may say (a port reached over RFC 2217). */
function linePlatformOf(port: ResolvedPort): LinePlatform {
  return (port as { readonly linePlatform?: LinePlatform }).linePlatform ?? process.platform;
}

function listen(server: Server, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (error: Error) => reject(error);
    server.once('error', onError);
    server.listen({ host, port, exclusive: true }, () => {
      server.off('error', onError);
      resolve();
    });
  });
}

function listenError(host: string, port: number, error: unknown): Error {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  const where = `${hostForUrl(host)}:${port}`;
  if (code === 'EADDRINUSE')
    return new Error(
      `cannot listen on ${where}: the address is in use (another server?); choose another with --listen HOST:PORT`,
      { cause: error },
    );
  if (code === 'EACCES')
    return new Error(
      `cannot listen on ${where}: permission denied (ports below 1024 need privileges)`,
      { cause: error },
    );
  if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND' || code === 'EAI_AGAIN')
    return new SerialError(
      'OPTION_INVALID',
      `cannot listen on ${where}: ${host} is not an address of this host`,
      { cause: error },
    );
  return new Error(`cannot listen on ${where}: ${message(error)}`, { cause: error });
}

export class Rfc2217Server {
  /** `rfc2217://HOST:PORT` as clients reach it (the address listened on). */
  readonly url: string;
  readonly address: { readonly host: string; readonly port: number };
  /** Resolves once the server is closed (by {@link close} or the signal). */
  readonly closed: Promise<void>;
  readonly #server: Server;
  readonly #served: ServedPort;
  readonly #log: (line: string) => void;
  readonly #negotiationTimeoutMs: number;
  readonly #refused = new Set<Socket>();
  readonly #signal: AbortSignal | undefined;
  readonly #onAbort = () => void this.close();
  #current: ClientSession | undefined;
  #closing: Promise<void> | undefined;
  #resolveClosed: () => void = () => {};

  private constructor(server: Server, served: ServedPort, options: Rfc2217ServerOptions) {
    this.#server = server;
    this.#served = served;
    this.#log = options.log ?? (() => {});
    this.#negotiationTimeoutMs = options.negotiationTimeoutMs ?? NEGOTIATION_TIMEOUT_MS;
    const address = server.address();
    const host =
      typeof address === 'object' && address !== null
        ? address.address
        : (options.host ?? '127.0.0.1');
    const port = typeof address === 'object' && address !== null ? address.port : 0;
    this.address = Object.freeze({ host, port });
    this.url = `rfc2217://${hostForUrl(host)}:${port}`;
    this.closed = new Promise((resolve) => {
      this.#resolveClosed = resolve;
    });
    server.on('connection', (socket) => void this.#accept(socket));
    server.on('error', (error) => this.#log(`listener: ${message(error)}`));
    this.#signal = options.signal;
    this.#signal?.addEventListener('abort', this.#onAbort, { once: true });
  }

  /**
   * Opens the port and listens. Rejects `OPTION_INVALID` for bad options or an address this
   * host does not have, `PORT_NOT_FOUND`/`PORT_BUSY` for the port, and an Error naming the
   * address when it cannot listen (in use, not permitted).
   */
  static async start(options: Rfc2217ServerOptions): Promise<Rfc2217Server> {
    const host = options.host ?? '127.0.0.1';
    const listenPort = options.listenPort ?? DEFAULT_RFC2217_PORT;
    const baudRate = options.baudRate ?? 115_200;
    if (!Number.isInteger(listenPort) || listenPort < 0 || listenPort > 65_535)
      throw new SerialError('OPTION_INVALID', `listen port ${listenPort} is not 0-65535`);
    if (!Number.isInteger(baudRate) || baudRate <= 0)
      throw new SerialError('OPTION_INVALID', `baud rate ${baudRate} is not a positive integer`);
    if (host.trim() === '') throw new SerialError('OPTION_INVALID', 'the listen host is empty');
    options.signal?.throwIfAborted();
    const log = options.log ?? (() => {});
    const served = await ServedPort.open({
      port: options.port,
      baudRate,
      platform: linePlatformOf(options.port),
      log,
      ...(options.refindMs === undefined ? {} : { refindMs: options.refindMs }),
    });
    const server = createServer({ noDelay: true, keepAlive: true, keepAliveInitialDelay: 15_000 });
    server.maxConnections = MAX_CONNECTIONS;
    try {
      await listen(server, host, listenPort);
    } catch (error) {
      server.close();
      await served.close();
      throw listenError(host, listenPort, error);
    }
    const instance = new Rfc2217Server(server, served, options);
    if (!isLoopbackHost(instance.address.host))
      log(
        `warning: listening on ${instance.address.host}, reachable from other hosts: RFC 2217 has no authentication, so whoever reaches ${instance.url} can reset and flash ${served.label}`,
      );
    if (options.signal?.aborted) await instance.close();
    return instance;
  }

  /** The client's address while one is connected. */
  get client(): string | undefined {
    return this.#current?.peer;
  }

  /** The client's bytes (and commands) the port has not taken yet. */
  get heldBytes(): number {
    return this.#served.queuedBytes;
  }

  /** Closes the client, the listener and the local port (not the ResolvedPort: its owner's). */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    this.#signal?.removeEventListener('abort', this.#onAbort);
    const stopped = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    const current = this.#current;
    if (current !== undefined) {
      current.end('the server is closing');
      await withBound(current.done, TEARDOWN_WAIT_MS);
    }
    for (const socket of this.#refused) socket.destroy();
    await this.#served.close();
    await withBound(stopped, TEARDOWN_WAIT_MS);
    this.#resolveClosed();
  }

  async #accept(socket: Socket): Promise<void> {
    // A socket error (a reset by the peer) must never reach the process.
    socket.on('error', () => {});
    const peer = peerOf(socket);
    if (this.#closing !== undefined) {
      socket.destroy();
      return;
    }
    const leaving = this.#current;
    if (leaving?.ending === true) {
      // The last client is saying goodbye (its lines being released): wait for it.
      await withBound(leaving.done, TEARDOWN_WAIT_MS);
      if (this.#closing !== undefined || socket.destroyed) {
        socket.destroy();
        return;
      }
    }
    const current = this.#current;
    if (current !== undefined) {
      this.#refuse(socket, busyLine(this.#served.label, current.peer));
      this.#log(`refused ${peer}: ${this.#served.label} is in use by ${current.peer}`);
      return;
    }
    const unavailable = this.#served.unavailable;
    if (unavailable !== undefined) {
      this.#refuse(
        socket,
        `xiaozhi-mcp port serve: unavailable: ${this.#served.label}: ${unavailable}\r\n`,
      );
      this.#log(`refused ${peer}: ${this.#served.label} is not there`);
      return;
    }
    const session = new ClientSession(socket, peer, this.#served, {
      log: this.#log,
      negotiationTimeoutMs: this.#negotiationTimeoutMs,
    });
    this.#current = session;
    void session.done.then(() => {
      if (this.#current === session) this.#current = undefined;
    });
    this.#log(`client ${peer} connected`);
    session.start();
  }

  #refuse(socket: Socket, line: string): void {
    this.#refused.add(socket);
    const timer = setTimeout(() => socket.destroy(), REFUSAL_LINGER_MS);
    timer.unref();
    socket.on('close', () => {
      clearTimeout(timer);
      this.#refused.delete(socket);
    });
    socket.resume(); // whatever it sends is not read
    socket.end(line);
  }
}

function withBound(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    work.then(() => {}),
    new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * Telnet options by side (RFC 854 negotiation, answered as RFC 1143 says: only a change of
 * state is answered, so two sides never loop). We enable on our side, when asked (DO):
 * BINARY (RFC 856), ECHO (RFC 857: the device's own echo comes back, a telnet program then
 * does not echo locally, as ser2net and pyserial's server do it), SGA (RFC 858) and
 * COM-PORT (RFC 2217). We let the client enable (WILL): BINARY, SGA, COM-PORT. pyserial's
 * client sends DO ECHO, WILL SGA, DO SGA, WILL COM-PORT, DO COM-PORT and waits for our
 * DO COM-PORT (`serial/rfc2217.py` `open`, its `mandadory_options`).
 */
const OURS: ReadonlySet<number> = new Set([
  OPTION.BINARY,
  OPTION.ECHO,
  OPTION.SGA,
  OPTION.COM_PORT,
]);
const THEIRS: ReadonlySet<number> = new Set([OPTION.BINARY, OPTION.SGA, OPTION.COM_PORT]);

/** One client: its Telnet/RFC 2217 conversation, its bytes both ways, its goodbye. */
class ClientSession {
  readonly peer: string;
  readonly done: Promise<void>;
  readonly #socket: Socket;
  readonly #served: ServedPort;
  readonly #log: (line: string) => void;
  readonly #negotiationTimeoutMs: number;
  readonly #decoder = new TelnetDecoder();
  readonly #recognizer: ResetRecognizer;
  /** A download reset playing locally: line commands are answered once it has played. */
  #playing: Promise<void> | undefined;
  /** The last PURGE-DATA's answer. */
  #purging: Promise<void> = Promise.resolve();
  /** Fires at the recognizer's deadline (a held DTR given up, an absorbing window over). */
  #deadlineTimer: NodeJS.Timeout | undefined;
  readonly #us = new Set<number>();
  readonly #them = new Set<number>();
  #negotiated = false;
  #negotiationTimer: NodeJS.Timeout | undefined;
  /** The socket is paused: the port has not taken what the client sent. */
  #held = false;
  /** The client asked us not to send (FLOWCONTROL-SUSPEND). */
  #suspended = false;
  /** The socket's buffer is full: the device is not read until it drains. */
  #congested = false;
  #modemMask = 0xff;
  #ending = false;
  #bytesIn = 0;
  #bytesOut = 0;
  #resolveDone: () => void = () => {};

  constructor(
    socket: Socket,
    peer: string,
    served: ServedPort,
    options: { log: (line: string) => void; negotiationTimeoutMs: number },
  ) {
    this.#socket = socket;
    this.peer = peer;
    // Which line orders are a download reset depends on the port: on a USB-Serial-JTAG RTS
    // alone resets at once and the peripheral latches the strap its own way
    // (reset-recognizer.ts, `usbSerialJtag`).
    this.#recognizer = new ResetRecognizer({ usbSerialJtag: served.kind === 'usb-serial-jtag' });
    this.#served = served;
    this.#log = options.log;
    this.#negotiationTimeoutMs = options.negotiationTimeoutMs;
    this.done = new Promise((resolve) => {
      this.#resolveDone = resolve;
    });
  }

  /** The client is gone or going; its goodbye may still be running. */
  get ending(): boolean {
    return this.#ending;
  }

  start(): void {
    const socket = this.#socket;
    const served = this.#served;
    socket.setNoDelay(true);
    served.newClient();
    served.onData((bytes) => this.#toClient(bytes));
    served.onDrain(() => this.#maybeResume());
    served.onUnavailable((reason) => this.end(`${served.label} went away: ${reason}`));
    socket.on('data', (chunk: Buffer) => this.#fromClient(chunk));
    socket.on('drain', () => {
      this.#congested = false;
      if (!this.#suspended) served.resumeReading();
    });
    socket.on('close', () => this.end('disconnected'));
    this.#negotiationTimer = setTimeout(() => {
      if (this.#negotiated || this.#ending) return;
      this.#say(
        `xiaozhi-mcp port serve: ${served.label} is shared over RFC 2217 (Telnet COM-PORT-OPTION), which this client did not negotiate within ${this.#negotiationTimeoutMs / 1000} s; connect with an RFC 2217 client (rfc2217://HOST:PORT)\r\n`,
      );
      this.end(`it did not negotiate RFC 2217 within ${this.#negotiationTimeoutMs / 1000} s`);
    }, this.#negotiationTimeoutMs);
  }

  /** Lets the client go: its queued work is dropped, the lines released, the port kept. */
  end(why: string): void {
    if (this.#ending) return;
    this.#ending = true;
    clearTimeout(this.#negotiationTimer);
    clearTimeout(this.#deadlineTimer);
    const socket = this.#socket;
    const served = this.#served;
    served.onData(undefined);
    served.onDrain(undefined);
    served.onUnavailable(undefined);
    // Whatever it said last may still be in the socket's buffer: it gets a moment to leave.
    socket.end();
    const linger = setTimeout(() => socket.destroy(), REFUSAL_LINGER_MS);
    linger.unref();
    socket.on('close', () => clearTimeout(linger));
    served.dropQueued();
    served.resumeReading();
    void served.release().then(() => {
      this.#log(
        `client ${this.peer} ${why === 'disconnected' ? 'disconnected' : `let go: ${why}`} (${this.#bytesIn} bytes in, ${this.#bytesOut} out); DTR and RTS released`,
      );
      this.#resolveDone();
    });
  }

  #fromClient(chunk: Buffer): void {
    if (this.#ending) return;
    let events: TelnetEvent[];
    try {
      events = this.#decoder.push(chunk);
      for (const event of events) {
        if (this.#ending) return;
        this.#handle(event);
      }
    } catch (error) {
      // Nothing a client sends may stop the server: the client is let go instead.
      this.end(`its input could not be handled: ${message(error)}`);
    }
  }

  #handle(event: TelnetEvent): void {
    switch (event.kind) {
      case 'data':
        this.#bytesIn += event.bytes.length;
        this.#served.write(event.bytes);
        this.#checkHeld();
        return;
      case 'negotiate':
        this.#negotiate(event.verb, event.option);
        return;
      case 'subnegotiate': {
        const command = readComPort(event);
        if (command !== undefined) {
          this.#isRfc2217();
          this.#comPort(command.code, command.value);
          this.#checkHeld();
        }
        return;
      }
      case 'command':
        // NOP, AYT, BRK, ...: RFC 2217 uses none of them.
        return;
    }
  }

  #checkHeld(): void {
    const queued = this.#served.queuedBytes;
    if (queued >= HOLD_MAX_BYTES) {
      this.end(`it sent ${queued} bytes more than ${this.#served.label} took, and did not stop`);
    } else if (queued >= HOLD_HIGH_BYTES && !this.#held) {
      this.#held = true;
      this.#socket.pause();
    }
  }

  #maybeResume(): void {
    if (this.#held && !this.#ending && this.#served.queuedBytes < HOLD_LOW_BYTES) {
      this.#held = false;
      this.#socket.resume();
    }
  }

  #write(bytes: Uint8Array): boolean {
    const socket = this.#socket;
    if (socket.destroyed || !socket.writable) return true;
    if (socket.writableLength > UNREAD_MAX_BYTES) {
      this.end(`it left ${socket.writableLength} bytes unread`);
      return true;
    }
    return socket.write(bytes);
  }

  #say(text: string): void {
    this.#write(new TextEncoder().encode(text));
  }

  #toClient(bytes: Buffer): void {
    if (this.#ending) return;
    this.#bytesOut += bytes.length;
    if (!this.#write(escapeData(bytes)) && !this.#congested) {
      this.#congested = true;
      this.#served.pauseReading();
    }
  }

  #negotiate(verb: NegotiationVerb, option: number): void {
    const send = (reply: NegotiationVerb) => this.#write(encodeNegotiation(reply, option));
    switch (verb) {
      case 'DO':
        if (!OURS.has(option)) send('WONT');
        else if (!this.#us.has(option)) {
          this.#us.add(option);
          send('WILL');
        }
        break;
      case 'DONT':
        if (this.#us.delete(option)) send('WONT');
        break;
      case 'WILL':
        if (!THEIRS.has(option)) send('DONT');
        else if (!this.#them.has(option)) {
          this.#them.add(option);
          send('DO');
        }
        break;
      case 'WONT':
        if (this.#them.delete(option)) send('DONT');
        break;
    }
    if (option === OPTION.COM_PORT && (this.#us.has(option) || this.#them.has(option)))
      this.#isRfc2217();
  }

  /** The client speaks RFC 2217: it keeps the port, and learns the modem lines once. */
  #isRfc2217(): void {
    if (this.#negotiated) return;
    this.#negotiated = true;
    clearTimeout(this.#negotiationTimer);
    // As pyserial's server does when the client accepts RFC 2217 (`PortManager._client_ok`),
    // so that reading CTS/DSR works without polling.
    void this.#served
      .modemState()
      .then((state) => this.#answer(COM_PORT.NOTIFY_MODEMSTATE, [state & this.#modemMask]));
  }

  /** A COM-PORT answer: the client's code plus {@link SERVER_OFFSET} (RFC 2217). */
  #answer(code: number, value: Uint8Array | readonly number[]): void {
    if (this.#ending) return;
    this.#write(encodeComPort(code + SERVER_OFFSET, value));
  }

  #comPort(code: number, value: Uint8Array): void {
    const served = this.#served;
    const first = value[0];
    switch (code) {
      case COM_PORT.SIGNATURE:
        // An empty value asks for ours; text is the client's own, which we need not answer.
        if (value.length === 0)
          this.#answer(code, new TextEncoder().encode(serveSignature(served.label, served.kind)));
        return;
      case COM_PORT.SET_BAUDRATE: {
        const rate = readBaud(value);
        // 0 asks for the rate in effect; it is answered after what was queued before it.
        void served
          .setBaudRate(rate === undefined || rate === 0 ? served.baudRate : rate)
          .then((applied) => this.#answer(code, baudBytes(applied)));
        return;
      }
      case COM_PORT.SET_DATASIZE:
        // The port runs 8 data bits, no parity, 1 stop bit (what ESP ROMs and consoles use); a
        // request for anything else is answered with what is in effect, which refuses it.
        this.#answer(code, [8]);
        return;
      case COM_PORT.SET_PARITY:
        this.#answer(code, [PARITY.none]);
        return;
      case COM_PORT.SET_STOPSIZE:
        this.#answer(code, [STOPSIZE.one]);
        return;
      case COM_PORT.SET_CONTROL:
        if (first !== undefined) this.#control(first);
        return;
      case COM_PORT.NOTIFY_LINESTATE:
        // No line-state errors to tell (as pyserial's server answers).
        this.#answer(code, [0]);
        return;
      case COM_PORT.NOTIFY_MODEMSTATE:
        void served.modemState().then((state) => this.#answer(code, [state & this.#modemMask]));
        return;
      case COM_PORT.FLOWCONTROL_SUSPEND:
        // RFC 2217: the client cannot take more for now; no answer.
        this.#suspended = true;
        served.pauseReading();
        return;
      case COM_PORT.FLOWCONTROL_RESUME:
        this.#suspended = false;
        if (!this.#congested) served.resumeReading();
        return;
      case COM_PORT.SET_LINESTATE_MASK:
        this.#answer(code, [first ?? 0]);
        return;
      case COM_PORT.SET_MODEMSTATE_MASK:
        this.#modemMask = first ?? 0xff;
        this.#answer(code, [this.#modemMask]);
        return;
      case COM_PORT.PURGE_DATA: {
        // Each answered once done, so a client that waits for the answer (pyserial's
        // `reset_input_buffer`) reads nothing older than its purge; in the order asked, as
        // clients match answers of one code.
        const work =
          first === PURGE.RECEIVE
            ? served.purgeInput()
            : first === PURGE.TRANSMIT
              ? Promise.resolve(served.purgeTransmit())
              : first === PURGE.BOTH
                ? served.purgeBoth()
                : undefined;
        if (work === undefined) return;
        this.#purging = Promise.all([this.#purging, work]).then(() =>
          this.#answer(code, [first ?? 0]),
        );
        return;
      }
      default:
        // Not an RFC 2217 command: nothing to answer.
        return;
    }
  }

  /** SET-CONTROL: flow control, break, DTR and RTS (RFC 2217), each answered with what is in effect. */
  #control(value: number): void {
    const served = this.#served;
    const answer = (state: number) => this.#answer(COM_PORT.SET_CONTROL, [state]);
    const lines = served.lines ?? this.#recognizer.state.intent;
    switch (value) {
      case CONTROL.REQUEST_FLOW:
      case CONTROL.FLOW_NONE:
      case CONTROL.FLOW_XONXOFF:
      case CONTROL.FLOW_HARDWARE:
      case CONTROL.FLOW_DCD:
      case CONTROL.FLOW_DSR:
        // No flow control, whatever is asked: on a board's auto-reset circuit RTS drives EN,
        // so RTS/CTS flow control would reset the chip; and the rate changes in place, never by
        // reopening, which is the only way to change flow control on an open port.
        answer(CONTROL.FLOW_NONE);
        return;
      case CONTROL.REQUEST_INBOUND_FLOW:
      case CONTROL.INBOUND_FLOW_NONE:
      case CONTROL.INBOUND_FLOW_XONXOFF:
      case CONTROL.INBOUND_FLOW_HARDWARE:
      case CONTROL.FLOW_DTR:
        answer(CONTROL.INBOUND_FLOW_NONE);
        return;
      case CONTROL.REQUEST_BREAK:
        answer(served.breakOn ? CONTROL.BREAK_ON : CONTROL.BREAK_OFF);
        return;
      case CONTROL.BREAK_ON:
      case CONTROL.BREAK_OFF:
        void served
          .setBreak(value === CONTROL.BREAK_ON)
          .then((on) => answer(on ? CONTROL.BREAK_ON : CONTROL.BREAK_OFF));
        return;
      case CONTROL.REQUEST_DTR:
        answer(lines.dtr ? CONTROL.DTR_ON : CONTROL.DTR_OFF);
        return;
      case CONTROL.REQUEST_RTS:
        answer(lines.rts ? CONTROL.RTS_ON : CONTROL.RTS_OFF);
        return;
      case CONTROL.DTR_ON:
      case CONTROL.DTR_OFF:
      case CONTROL.RTS_ON:
      case CONTROL.RTS_OFF: {
        const line = value === CONTROL.DTR_ON || value === CONTROL.DTR_OFF ? 'dtr' : 'rts';
        const on = value === CONTROL.DTR_ON || value === CONTROL.RTS_ON;
        for (const action of this.#recognizer.command({ line, on }, performance.now()))
          this.#act(action);
        this.#watchDeadline();
        // Answered with what the client asked, absorbed or not (it is what it will have once its
        // sequence is over); at once, but while a download reset plays locally only once it
        // has played. A client that waits for answers (ours, pyserial's) then sends its next
        // line change, and its SYNC, to a chip already in download mode, its boot banner
        // already sent: its sequence's own wait after this command is the one esptool
        // measured (`reset.py`: the ROM prints its banner as it starts, esptool's
        // `_connect_attempt` reads it, then each SYNC flushes input and waits 100 ms). Answered
        // at once, the client's SYNCs sat behind the play, timed out there, and the banner
        // reached it mid-sync: each garbled attempt sent one more SYNC, and the ROM's answers
        // to the extra SYNCs then broke the next command (esptool-js: `Autodetection failed`,
        // a second connect at the 550 ms delay).
        // Bounded: a play waiting for its port (a USB-Serial-JTAG re-enumerating) must not
        // outlast the client's wait for the answer (pyserial's and ours: 3 s).
        const playing = this.#playing;
        if (playing === undefined) answer(value);
        else void withBound(playing, PLAY_ANSWER_MAX_MS).then(() => answer(value));
        return;
      }
      default:
        return;
    }
  }

  /** Runs the recognizer's deadline when it comes (its clock is `performance.now()`). */
  #watchDeadline(): void {
    clearTimeout(this.#deadlineTimer);
    const deadline = this.#recognizer.deadline;
    if (deadline === undefined || this.#ending) return;
    this.#deadlineTimer = setTimeout(
      () => {
        const action = this.#recognizer.tick(performance.now());
        if (action !== undefined && !this.#ending) this.#act(action);
        this.#watchDeadline();
      },
      Math.max(0, deadline - performance.now()),
    );
    this.#deadlineTimer.unref();
  }

  #act(action: RecognizerAction): void {
    const served = this.#served;
    switch (action.kind) {
      case 'forward':
        served.setLines(action.lines);
        if (action.recognised === 'hard')
          this.#log(`client ${this.peer}: hard reset (an RTS pulse) passed through`);
        else if (action.recognised === 'boot-click')
          this.#log(`client ${this.peer}: BOOT click (a DTR pulse) passed through`);
        return;
      case 'play': {
        if (action.sequence === 'hard') {
          const playing = served.playHard().then(() => {
            this.#recognizer.played(performance.now());
            this.#watchDeadline();
            if (this.#playing === playing) this.#playing = undefined;
            this.#log(
              `client ${this.peer}: hard reset (an RTS pulse) played locally: RTS alone waits for its release on a USB-Serial-JTAG port`,
            );
          });
          this.#playing = playing;
          return;
        }
        const playing = served.playDownload().then((played) => {
          this.#recognizer.played(performance.now());
          this.#watchDeadline();
          if (this.#playing === playing) this.#playing = undefined;
          this.#log(
            `client ${this.peer}: reset into download mode recognised (${action.because === 'classic' ? 'ClassicReset' : 'USBJTAGSerialReset'} order); played ${played} locally`,
          );
        });
        this.#playing = playing;
        return;
      }
      case 'absorb':
        return;
    }
  }
}
