/**
 * One TCP connection of the RFC 2217 client, negotiated: connect, agree on COM-PORT-OPTION, then
 * send COM-PORT commands and match the server's answers to them. What to send and when (the
 * port's settings, its lines, reconnecting) is the port's business ({@link ./client.ts}); this
 * is the wire.
 *
 * Negotiation (RFC 854/855, RFC 2217 "Negotiation"): we offer WILL and DO for COM-PORT-OPTION,
 * BINARY (RFC 856) and SGA (RFC 858), and the session is ready once the server answers DO
 * COM-PORT-OPTION: the one answer pyserial's client requires too (`serial/rfc2217.py`,
 * `Serial.open`, its "mandatory" we-RFC2217 option). Each option's state on each side moves
 * only off -> requested -> on or back to off, and we answer a request only when it changes that
 * state (RFC 1143's rule), so two peers can never negotiate in a loop. ECHO and any option we do
 * not know are refused: serial bytes must never come back to us as if the board sent them.
 */
import { connect, type Socket } from 'node:net';
import { SerialError } from '../errors.js';
import {
  COM_PORT,
  encodeComPort,
  encodeNegotiation,
  escapeData,
  type NegotiationVerb,
  OPTION,
  readComPort,
  SERVER_OFFSET,
  TelnetDecoder,
  type TelnetEvent,
} from './telnet.js';
import { BUSY_REFUSAL_PREFIX, SERVE_REFUSAL_PREFIX } from './url.js';

/** A session ended under a pending operation; the port decides whether to reconnect. */
export class SessionClosedError extends Error {
  override readonly name = 'SessionClosedError';
}

/** Our SIGNATURE, for a server that asks for it (RFC 2217, SIGNATURE). */
export const CLIENT_SIGNATURE = 'xiaozhi-mcp rfc2217 client';

/** How many bytes a server sent before negotiating are kept for error messages. */
const PREAMBLE_BYTES = 512;

/** What a session tells whoever uses it; {@link ClientSession.attach} changes them later. */
export interface SessionHandlers {
  /** Serial bytes from the server, IAC IAC undone, in order. */
  readonly onData?: (bytes: Uint8Array) => void;
  /** A SIGNATURE text the server sent (asked for or not). */
  readonly onSignature?: (text: string) => void;
  /** The connection closed without {@link ClientSession.close}; `reason` says why. */
  readonly onClose?: (reason: string) => void;
}

export interface SessionOptions extends SessionHandlers {
  readonly host: string;
  readonly port: number;
  /** The URL, for messages. */
  readonly label: string;
  readonly connectTimeoutMs: number;
  readonly negotiationTimeoutMs: number;
}

type OptionState = 'off' | 'requested' | 'on';

/** The options we offer on both sides. */
const WANTED: readonly number[] = [OPTION.COM_PORT, OPTION.BINARY, OPTION.SGA];

interface Pending {
  readonly resolve: (value: Uint8Array) => void;
  readonly reject: (error: Error) => void;
  readonly timer: NodeJS.Timeout;
}

/** Printable ASCII of what a server sent, control bytes as spaces, trimmed and cut short. */
export function printableText(bytes: Uint8Array, max = 160): string {
  let text = '';
  for (const b of bytes) text += b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : ' ';
  text = text.replace(/\s+/g, ' ').trim();
  return text.length > max ? `${text.slice(0, max)}...` : text;
}

function connectError(label: string, error: NodeJS.ErrnoException): SerialError {
  if (error.code === 'ECONNREFUSED')
    return new SerialError(
      'PORT_NOT_FOUND',
      `${label} refused the connection; is \`xiaozhi-mcp port serve\` (or another RFC 2217 server) running there?`,
      { cause: error },
    );
  if (error.code === 'ENOTFOUND' || error.code === 'EAI_AGAIN')
    return new SerialError('PORT_NOT_FOUND', `${label}: no such host (${error.message})`, {
      cause: error,
    });
  return new SerialError('PORT_NOT_FOUND', `${label}: cannot connect (${error.message})`, {
    cause: error,
  });
}

/** Why a server that closed (or never agreed) before the session was ready is not usable. */
export function refusalError(label: string, text: string, what: string): SerialError {
  if (text.startsWith(BUSY_REFUSAL_PREFIX))
    return new SerialError('PORT_BUSY', `${label} is in use: ${text}`);
  // Its other refusals (`unavailable: the port is not there`) are reasons, not a wrong server.
  if (text.startsWith(SERVE_REFUSAL_PREFIX))
    return new SerialError('PORT_NOT_FOUND', `${label} refused the connection: ${text}`);
  return new SerialError(
    'PORT_NOT_FOUND',
    text === ''
      ? `${label} ${what} without a word; is it an RFC 2217 server?`
      : `${label} is not an RFC 2217 server: it ${what}, having sent ${JSON.stringify(text)}`,
  );
}

export class ClientSession {
  readonly #options: SessionOptions;
  #handlers: SessionHandlers;
  readonly #socket: Socket;
  readonly #decoder = new TelnetDecoder();
  readonly #us = new Map<number, OptionState>();
  readonly #them = new Map<number, OptionState>();
  /** Options already refused once: a peer that asks again gets no second answer. */
  readonly #refused = new Set<string>();
  readonly #pending = new Map<number, Pending[]>();
  #preamble: number[] = [];
  #negotiated = false;
  #onNegotiated: ((error?: Error) => void) | undefined;
  #closed = false;
  #closedByUs = false;
  #closeReason = 'the server closed the connection';
  #closeWaiters: (() => void)[] = [];
  #suspended = false;
  #resumeWaiters: { resolve: () => void; reject: (error: Error) => void }[] = [];
  /** The last NOTIFY-MODEMSTATE value; 0 until one comes. */
  modemState = 0;
  /** The server's SIGNATURE text, once it sent one. */
  signature: string | undefined;
  /** What this connection has been told, so that a change is sent only once per connection. */
  readonly applied: {
    baudRate?: number;
    dtr?: boolean;
    rts?: boolean;
    brk: boolean;
  } = { brk: false };

  private constructor(options: SessionOptions, socket: Socket) {
    this.#options = options;
    this.#handlers = options;
    this.#socket = socket;
  }

  /**
   * Who hears from this session from now on: a session opened before its port (to learn what
   * the server is) is handed to the port that opens next.
   */
  attach(handlers: SessionHandlers): void {
    this.#handlers = handlers;
  }

  /**
   * Connects and negotiates. Rejects `PORT_NOT_FOUND` (refused, unreachable, timed out, not an
   * RFC 2217 server) or `PORT_BUSY` (`xiaozhi-mcp port serve` serving another client).
   */
  static async open(options: SessionOptions): Promise<ClientSession> {
    const socket = connect({ host: options.host, port: options.port });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        socket.destroy();
        reject(
          new SerialError(
            'PORT_NOT_FOUND',
            `${options.label} did not answer within ${options.connectTimeoutMs} ms; check the host, the port and any firewall between`,
          ),
        );
      }, options.connectTimeoutMs);
      socket.once('connect', () => {
        clearTimeout(timer);
        socket.removeAllListeners('error');
        resolve();
      });
      socket.once('error', (error) => {
        clearTimeout(timer);
        socket.destroy();
        reject(connectError(options.label, error));
      });
    });
    // Small packets (esptool's commands, line changes) go out at once, as pyserial sets it.
    socket.setNoDelay(true);
    // A peer that vanished without closing is found eventually, not never.
    socket.setKeepAlive(true, 10_000);
    const session = new ClientSession(options, socket);
    await session.#negotiate();
    return session;
  }

  /** What the server sent as data first, printable, for error messages. */
  get preambleText(): string {
    return printableText(Uint8Array.from(this.#preamble));
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Whether the server asked us to stop sending (FLOWCONTROL-SUSPEND). */
  get suspended(): boolean {
    return this.#suspended;
  }

  /** Resolves once the server lets us send; rejects {@link SessionClosedError} on close. */
  whenResumed(): Promise<void> {
    if (this.#closed) return Promise.reject(new SessionClosedError(this.#closeReason));
    if (!this.#suspended) return Promise.resolve();
    return new Promise((resolve, reject) => this.#resumeWaiters.push({ resolve, reject }));
  }

  /** Serial bytes to the server, 255 doubled; resolves once the OS has them. */
  sendData(bytes: Uint8Array): Promise<void> {
    return this.#write(escapeData(bytes));
  }

  /** Resolves once every earlier write has reached the OS. */
  flushed(): Promise<void> {
    return this.#write(new Uint8Array(0));
  }

  /**
   * Sends a COM-PORT command. With `ackTimeoutMs` it resolves with the value of the server's
   * answer (the same code plus 100), the answers of one code taken in order; without, once sent.
   * Rejects `timeout()` when no answer comes in time, {@link SessionClosedError} on close.
   */
  async request(
    code: number,
    value: Uint8Array | readonly number[],
    ack?: { readonly timeoutMs: number; readonly timeout: () => Error },
  ): Promise<Uint8Array | undefined> {
    if (this.#closed) throw new SessionClosedError(this.#closeReason);
    if (ack === undefined) {
      await this.#write(encodeComPort(code, value));
      return undefined;
    }
    const answer = new Promise<Uint8Array>((resolve, reject) => {
      const queue = this.#pending.get(code) ?? [];
      const entry: Pending = {
        resolve,
        reject,
        timer: setTimeout(() => {
          const index = queue.indexOf(entry);
          if (index >= 0) queue.splice(index, 1);
          reject(ack.timeout());
        }, ack.timeoutMs),
      };
      queue.push(entry);
      this.#pending.set(code, queue);
    });
    // A write that fails closes the session, which rejects the answer too.
    this.#write(encodeComPort(code, value)).catch(() => undefined);
    return answer;
  }

  /** Ends the connection and waits (bounded) for the server to close its side. */
  async close(waitMs = 1000): Promise<void> {
    if (this.#closed) return;
    this.#closedByUs = true;
    const done = new Promise<void>((resolve) => this.#closeWaiters.push(resolve));
    this.#socket.end();
    const timer = setTimeout(() => this.#socket.destroy(), waitMs);
    await done;
    clearTimeout(timer);
  }

  /** Drops the connection at once. */
  destroy(): void {
    if (this.#closed) return;
    this.#closedByUs = true;
    this.#socket.destroy();
  }

  #write(bytes: Uint8Array): Promise<void> {
    if (this.#closed) return Promise.reject(new SessionClosedError(this.#closeReason));
    return new Promise((resolve, reject) => {
      this.#socket.write(bytes, (error) => {
        if (error) reject(new SessionClosedError(error.message));
        else resolve();
      });
    });
  }

  #negotiate(): Promise<void> {
    const { label, negotiationTimeoutMs } = this.#options;
    const socket = this.#socket;
    const result = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#onNegotiated = undefined;
        const text = printableText(Uint8Array.from(this.#preamble));
        this.destroy();
        reject(
          text === ''
            ? new SerialError(
                'PORT_NOT_FOUND',
                `${label} accepted the connection but did not answer within ${negotiationTimeoutMs} ms; is it an RFC 2217 server?`,
              )
            : refusalError(
                label,
                text,
                `did not agree to COM-PORT-OPTION within ${negotiationTimeoutMs} ms`,
              ),
        );
      }, negotiationTimeoutMs);
      this.#onNegotiated = (error) => {
        clearTimeout(timer);
        this.#onNegotiated = undefined;
        if (error === undefined) resolve();
        else {
          this.destroy();
          reject(error);
        }
      };
    });
    socket.on('data', (chunk: Buffer) => {
      for (const event of this.#decoder.push(chunk)) this.#onEvent(event);
    });
    socket.on('error', (error) => {
      this.#closeReason = `connection error: ${error.message}`;
    });
    socket.on('close', () => this.#onSocketClose());
    const offer: number[] = [];
    for (const option of WANTED) {
      this.#us.set(option, 'requested');
      this.#them.set(option, 'requested');
      offer.push(...encodeNegotiation('WILL', option), ...encodeNegotiation('DO', option));
    }
    this.#write(Uint8Array.from(offer)).catch(() => undefined);
    return result;
  }

  #onSocketClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    const reason = this.#closeReason;
    if (this.#onNegotiated !== undefined) {
      const text = printableText(Uint8Array.from(this.#preamble));
      this.#onNegotiated(
        refusalError(this.#options.label, text, 'closed the connection before negotiating'),
      );
    }
    for (const queue of this.#pending.values())
      for (const entry of queue.splice(0)) {
        clearTimeout(entry.timer);
        entry.reject(new SessionClosedError(reason));
      }
    for (const waiter of this.#resumeWaiters.splice(0))
      waiter.reject(new SessionClosedError(reason));
    for (const waiter of this.#closeWaiters.splice(0)) waiter();
    if (!this.#closedByUs && this.#negotiated) this.#handlers.onClose?.(reason);
  }

  #onEvent(event: TelnetEvent): void {
    switch (event.kind) {
      case 'data':
        if (this.#preamble.length < PREAMBLE_BYTES)
          this.#preamble.push(...event.bytes.subarray(0, PREAMBLE_BYTES - this.#preamble.length));
        this.#handlers.onData?.(event.bytes);
        return;
      case 'negotiate':
        this.#onNegotiate(event.verb, event.option);
        return;
      case 'subnegotiate': {
        const command = readComPort(event);
        if (command !== undefined) this.#onComPort(command.code, command.value);
        return;
      }
      case 'command':
        // NOP, AYT, BRK...: RFC 2217 uses none of them.
        return;
    }
  }

  #send(verb: NegotiationVerb, option: number): void {
    this.#write(encodeNegotiation(verb, option)).catch(() => undefined);
  }

  /** Refuses `option` once per verb; a peer that insists gets no second answer. */
  #refuse(verb: NegotiationVerb, option: number): void {
    const key = `${verb}:${option}`;
    if (this.#refused.has(key)) return;
    this.#refused.add(key);
    this.#send(verb, option);
  }

  #onNegotiate(verb: NegotiationVerb, option: number): void {
    const wanted = WANTED.includes(option);
    // DO/DONT are about our side (WILL/WONT), WILL/WONT about theirs (DO/DONT).
    const ours = verb === 'DO' || verb === 'DONT';
    const states = ours ? this.#us : this.#them;
    const yes = ours ? 'WILL' : 'DO';
    const no = ours ? 'WONT' : 'DONT';
    const state = states.get(option) ?? 'off';
    if (verb === 'DO' || verb === 'WILL') {
      if (!wanted) {
        this.#refuse(no, option);
        return;
      }
      if (state === 'off') this.#send(yes, option);
      states.set(option, 'on');
      if (ours && option === OPTION.COM_PORT && !this.#negotiated) {
        this.#negotiated = true;
        this.#onNegotiated?.();
      }
      return;
    }
    // DONT / WONT: acknowledged only when it turns an enabled option off.
    if (state === 'on') this.#send(no, option);
    states.set(option, 'off');
    if (ours && option === OPTION.COM_PORT && !this.#negotiated)
      this.#onNegotiated?.(
        new SerialError(
          'PORT_NOT_FOUND',
          `${this.#options.label} is a Telnet server without RFC 2217: it refused COM-PORT-OPTION`,
        ),
      );
  }

  #onComPort(code: number, value: Uint8Array): void {
    // pyserial's server (`PortManager`) suspends and resumes with the client's codes 8 and 9;
    // RFC 2217 has the server send them plus 100. Both mean the same from a server.
    if (
      code === COM_PORT.FLOWCONTROL_SUSPEND ||
      code === COM_PORT.FLOWCONTROL_SUSPEND + SERVER_OFFSET
    ) {
      this.#suspended = true;
      return;
    }
    if (
      code === COM_PORT.FLOWCONTROL_RESUME ||
      code === COM_PORT.FLOWCONTROL_RESUME + SERVER_OFFSET
    ) {
      this.#suspended = false;
      for (const waiter of this.#resumeWaiters.splice(0)) waiter.resolve();
      return;
    }
    if (code < SERVER_OFFSET) return; // a client's command: not ours to answer
    const command = code - SERVER_OFFSET;
    if (command === COM_PORT.NOTIFY_MODEMSTATE) {
      if (value.length > 0) this.modemState = value[0] as number;
      return;
    }
    if (command === COM_PORT.NOTIFY_LINESTATE) return;
    const queue = this.#pending.get(command);
    const entry = queue?.shift();
    if (command === COM_PORT.SIGNATURE) {
      const text = printableText(value, 400);
      if (entry === undefined && value.length === 0) {
        // The server asks for ours (RFC 2217: SIGNATURE without text is a request).
        this.request(COM_PORT.SIGNATURE, new TextEncoder().encode(CLIENT_SIGNATURE)).catch(
          () => undefined,
        );
        return;
      }
      if (text !== '') {
        this.signature = text;
        this.#handlers.onSignature?.(text);
      }
    }
    if (entry === undefined) return; // unasked: a notification we do not need
    clearTimeout(entry.timer);
    entry.resolve(Uint8Array.from(value));
  }
}
