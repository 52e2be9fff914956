/**
 * The bytes of RFC 2217 ("Telnet Com Port Control Option"): Telnet's command framing (RFC 854,
 * RFC 855 for subnegotiation) carrying the COM-PORT-OPTION (44). Pure: no sockets, no timers.
 * Both our client ({@link ./client.ts}) and our server ({@link ./server.ts}) speak through this
 * one codec; the interoperability tests hold them to software nobody here wrote (pyserial) and to
 * a server written in a test from the RFC's text.
 *
 * Framing facts (RFC 854): IAC (255) starts a command; a data byte 255 is sent as IAC IAC. A
 * command is IAC plus one byte, or IAC plus WILL/WONT/DO/DONT plus an option. A subnegotiation is
 * IAC SB option payload... IAC SE, with a 255 in the payload doubled as in data. A CR in data is
 * not translated: RFC 2217 sessions negotiate BINARY, and serial bytes pass as they are.
 */

/** Telnet command bytes (RFC 854). */
export const TELNET = Object.freeze({
  IAC: 255,
  DONT: 254,
  DO: 253,
  WONT: 252,
  WILL: 251,
  SB: 250,
  GA: 249,
  EL: 248,
  EC: 247,
  AYT: 246,
  AO: 245,
  IP: 244,
  BRK: 243,
  DM: 242,
  NOP: 241,
  SE: 240,
} as const);

/** Telnet options this project negotiates (RFC 856 BINARY, RFC 857 ECHO, RFC 858 SGA, RFC 2217). */
export const OPTION = Object.freeze({
  BINARY: 0,
  ECHO: 1,
  SGA: 3,
  COM_PORT: 44,
} as const);

/**
 * COM-PORT-OPTION subcommands as the client sends them (RFC 2217, "Command Names and Codes");
 * the server answers each with the same code plus {@link SERVER_OFFSET}.
 */
export const COM_PORT = Object.freeze({
  SIGNATURE: 0,
  SET_BAUDRATE: 1,
  SET_DATASIZE: 2,
  SET_PARITY: 3,
  SET_STOPSIZE: 4,
  SET_CONTROL: 5,
  NOTIFY_LINESTATE: 6,
  NOTIFY_MODEMSTATE: 7,
  FLOWCONTROL_SUSPEND: 8,
  FLOWCONTROL_RESUME: 9,
  SET_LINESTATE_MASK: 10,
  SET_MODEMSTATE_MASK: 11,
  PURGE_DATA: 12,
} as const);

/** Server-to-client codes are the client's plus 100 (RFC 2217). */
export const SERVER_OFFSET = 100;

/** SET-CONTROL values (RFC 2217). The `REQUEST_*` values ask for the current state. */
export const CONTROL = Object.freeze({
  REQUEST_FLOW: 0,
  FLOW_NONE: 1,
  FLOW_XONXOFF: 2,
  FLOW_HARDWARE: 3,
  REQUEST_BREAK: 4,
  BREAK_ON: 5,
  BREAK_OFF: 6,
  REQUEST_DTR: 7,
  DTR_ON: 8,
  DTR_OFF: 9,
  REQUEST_RTS: 10,
  RTS_ON: 11,
  RTS_OFF: 12,
  REQUEST_INBOUND_FLOW: 13,
  INBOUND_FLOW_NONE: 14,
  INBOUND_FLOW_XONXOFF: 15,
  INBOUND_FLOW_HARDWARE: 16,
  FLOW_DCD: 17,
  FLOW_DTR: 18,
  FLOW_DSR: 19,
} as const);

/** SET-PARITY values (RFC 2217); 0 asks for the current one. */
export const PARITY = Object.freeze({ none: 1, odd: 2, even: 3, mark: 4, space: 5 } as const);

/** SET-STOPSIZE values (RFC 2217); 0 asks for the current one. */
export const STOPSIZE = Object.freeze({ one: 1, two: 2, onePointFive: 3 } as const);

/**
 * PURGE-DATA values (RFC 2217), named from the access server's side: 1 purges its receive buffer
 * (bytes from the serial device on their way to the client), 2 its transmit buffer (bytes from the
 * client on their way to the device), 3 both.
 */
export const PURGE = Object.freeze({ RECEIVE: 1, TRANSMIT: 2, BOTH: 3 } as const);

/** MODEMSTATE bits (RFC 2217, NOTIFY-MODEMSTATE). */
export const MODEMSTATE = Object.freeze({
  CD: 0x80,
  RI: 0x40,
  DSR: 0x20,
  CTS: 0x10,
  DELTA_CD: 0x08,
  TRAILING_RI: 0x04,
  DELTA_DSR: 0x02,
  DELTA_CTS: 0x01,
} as const);

export type NegotiationVerb = 'WILL' | 'WONT' | 'DO' | 'DONT';

const VERB_BYTE: Readonly<Record<NegotiationVerb, number>> = {
  WILL: TELNET.WILL,
  WONT: TELNET.WONT,
  DO: TELNET.DO,
  DONT: TELNET.DONT,
};

/** What the decoder found in the stream, in order. */
export type TelnetEvent =
  /** Serial bytes, IAC IAC already undone. */
  | { readonly kind: 'data'; readonly bytes: Uint8Array }
  /** WILL/WONT/DO/DONT for an option. */
  | { readonly kind: 'negotiate'; readonly verb: NegotiationVerb; readonly option: number }
  /** IAC SB option payload IAC SE, the payload unescaped. */
  | { readonly kind: 'subnegotiate'; readonly option: number; readonly payload: Uint8Array }
  /** Any other two-byte command (NOP, BRK, AYT, ...). */
  | { readonly kind: 'command'; readonly command: number };

/**
 * The longest subnegotiation payload kept: RFC 2217's longest is a SIGNATURE text, which nobody
 * sends at this length. Beyond it the payload is cut, so a hostile peer that never sends SE
 * cannot grow memory.
 */
export const MAX_SUBNEGOTIATION_BYTES = 4096;

type State = 'data' | 'iac' | 'verb' | 'sb-option' | 'sb' | 'sb-iac';

/**
 * A streaming decoder: feed it chunks as they arrive (a command may be split across chunks) and
 * it returns the events each chunk completes. Linear in the input, bounded in memory.
 */
export class TelnetDecoder {
  #state: State = 'data';
  #verb: NegotiationVerb = 'WILL';
  #sbOption = 0;
  #sb: number[] = [];

  /** The events `chunk` completes; data runs come out as one event per run. */
  push(chunk: Uint8Array): TelnetEvent[] {
    const events: TelnetEvent[] = [];
    let runStart = -1;
    const data: Uint8Array[] = [];
    const flushRun = (end: number) => {
      if (runStart >= 0 && end > runStart) data.push(chunk.subarray(runStart, end));
      runStart = -1;
    };
    const flushData = () => {
      if (data.length === 0) return;
      events.push({ kind: 'data', bytes: concat(data) });
      data.length = 0;
    };
    for (let i = 0; i < chunk.length; i++) {
      const byte = chunk[i] as number;
      switch (this.#state) {
        case 'data':
          if (byte === TELNET.IAC) {
            flushRun(i);
            this.#state = 'iac';
          } else if (runStart < 0) runStart = i;
          break;
        case 'iac':
          if (byte === TELNET.IAC) {
            data.push(Uint8Array.of(TELNET.IAC));
            this.#state = 'data';
          } else if (
            byte === TELNET.WILL ||
            byte === TELNET.WONT ||
            byte === TELNET.DO ||
            byte === TELNET.DONT
          ) {
            this.#verb = verbOf(byte);
            this.#state = 'verb';
          } else if (byte === TELNET.SB) {
            this.#state = 'sb-option';
          } else {
            flushData();
            events.push({ kind: 'command', command: byte });
            this.#state = 'data';
          }
          break;
        case 'verb':
          flushData();
          events.push({ kind: 'negotiate', verb: this.#verb, option: byte });
          this.#state = 'data';
          break;
        case 'sb-option':
          this.#sbOption = byte;
          this.#sb = [];
          this.#state = 'sb';
          break;
        case 'sb':
          if (byte === TELNET.IAC) this.#state = 'sb-iac';
          else if (this.#sb.length < MAX_SUBNEGOTIATION_BYTES) this.#sb.push(byte);
          break;
        case 'sb-iac':
          if (byte === TELNET.SE) {
            flushData();
            events.push({
              kind: 'subnegotiate',
              option: this.#sbOption,
              payload: Uint8Array.from(this.#sb),
            });
            this.#sb = [];
            this.#state = 'data';
          } else {
            // IAC IAC is a 255 in the payload; any other command inside SB is a protocol error
            // that RFC 855 leaves undefined: keep the byte, as most implementations do.
            if (this.#sb.length < MAX_SUBNEGOTIATION_BYTES) this.#sb.push(byte);
            this.#state = 'sb';
          }
          break;
      }
    }
    if (this.#state === 'data') flushRun(chunk.length);
    flushData();
    return events;
  }
}

function verbOf(byte: number): NegotiationVerb {
  if (byte === TELNET.WILL) return 'WILL';
  if (byte === TELNET.WONT) return 'WONT';
  if (byte === TELNET.DO) return 'DO';
  return 'DONT';
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  if (parts.length === 1) return Uint8Array.from(parts[0] as Uint8Array);
  let length = 0;
  for (const p of parts) length += p.length;
  const out = new Uint8Array(length);
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}

/** Serial bytes as they go on the wire: every 255 doubled. */
export function escapeData(bytes: Uint8Array): Uint8Array {
  let iacs = 0;
  for (const b of bytes) if (b === TELNET.IAC) iacs++;
  if (iacs === 0) return bytes;
  const out = new Uint8Array(bytes.length + iacs);
  let j = 0;
  for (const b of bytes) {
    out[j++] = b;
    if (b === TELNET.IAC) out[j++] = TELNET.IAC;
  }
  return out;
}

/** IAC verb option. */
export function encodeNegotiation(verb: NegotiationVerb, option: number): Uint8Array {
  return Uint8Array.of(TELNET.IAC, VERB_BYTE[verb], option);
}

/** IAC SB option payload IAC SE, a 255 in the payload doubled. */
export function encodeSubnegotiation(option: number, payload: Uint8Array): Uint8Array {
  const body = escapeData(payload);
  const out = new Uint8Array(body.length + 5);
  out.set([TELNET.IAC, TELNET.SB, option], 0);
  out.set(body, 3);
  out.set([TELNET.IAC, TELNET.SE], 3 + body.length);
  return out;
}

/** A COM-PORT-OPTION subnegotiation: `code` (client's, or plus 100 from a server) and its value. */
export function encodeComPort(code: number, value: Uint8Array | readonly number[]): Uint8Array {
  return encodeSubnegotiation(OPTION.COM_PORT, Uint8Array.of(code, ...value));
}

/** A baud rate as SET-BAUDRATE carries it: four bytes, network order (RFC 2217). */
export function baudBytes(baud: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, baud >>> 0, false);
  return out;
}

/** The baud rate in a SET-BAUDRATE value; undefined when it is not four bytes. */
export function readBaud(value: Uint8Array): number | undefined {
  if (value.length !== 4) return undefined;
  return new DataView(value.buffer, value.byteOffset, 4).getUint32(0, false);
}

/** A COM-PORT-OPTION subnegotiation split into its code and value; undefined when it is not one. */
export function readComPort(
  event: TelnetEvent,
): { readonly code: number; readonly value: Uint8Array } | undefined {
  if (event.kind !== 'subnegotiate' || event.option !== OPTION.COM_PORT) return undefined;
  if (event.payload.length === 0) return undefined;
  return { code: event.payload[0] as number, value: event.payload.subarray(1) };
}
