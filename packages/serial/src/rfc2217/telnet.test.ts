import { describe, expect, it } from 'vitest';
import {
  baudBytes,
  COM_PORT,
  encodeComPort,
  encodeNegotiation,
  escapeData,
  MAX_SUBNEGOTIATION_BYTES,
  OPTION,
  readBaud,
  readComPort,
  TelnetDecoder,
  type TelnetEvent,
} from './telnet.js';

const bytes = (...b: number[]) => Uint8Array.from(b);

/** Feeds `wire` one byte at a time and joins the data events, so no split can hide a bug. */
function decodeByteByByte(wire: Uint8Array): TelnetEvent[] {
  const decoder = new TelnetDecoder();
  return [...wire].flatMap((b) => decoder.push(bytes(b)));
}

describe('TelnetDecoder', () => {
  it('undoes IAC IAC in data and keeps every other byte as it is', () => {
    const events = new TelnetDecoder().push(bytes(1, 255, 255, 13, 10, 0));
    expect(events).toEqual([{ kind: 'data', bytes: bytes(1, 255, 13, 10, 0) }]);
  });

  it('splits data around negotiations and subnegotiations, in order', () => {
    // RFC 2217's example of a client setting 115200 baud: IAC SB 44 1 <4 bytes> IAC SE.
    const wire = Uint8Array.from([
      0x41,
      ...encodeNegotiation('WILL', OPTION.COM_PORT),
      0x42,
      ...encodeComPort(COM_PORT.SET_BAUDRATE, baudBytes(115200)),
      0x43,
    ]);
    const expected = [
      { kind: 'data', bytes: bytes(0x41) },
      { kind: 'negotiate', verb: 'WILL', option: 44 },
      { kind: 'data', bytes: bytes(0x42) },
      { kind: 'subnegotiate', option: 44, payload: bytes(1, 0x00, 0x01, 0xc2, 0x00) },
      { kind: 'data', bytes: bytes(0x43) },
    ];
    expect(new TelnetDecoder().push(wire)).toEqual(expected);
    expect(decodeByteByByte(wire).filter((e) => e.kind !== 'data')).toEqual(
      expected.filter((e) => e.kind !== 'data'),
    );
  });

  it('keeps a 255 inside a subnegotiation value (baud 0xff00ff00 doubles two bytes)', () => {
    const wire = encodeComPort(COM_PORT.SET_BAUDRATE, baudBytes(0xff00ff00));
    expect(wire).toEqual(bytes(255, 250, 44, 1, 255, 255, 0, 255, 255, 0, 255, 240));
    const [event] = new TelnetDecoder().push(wire);
    const com = event === undefined ? undefined : readComPort(event);
    expect(com?.code).toBe(COM_PORT.SET_BAUDRATE);
    expect(com === undefined ? undefined : readBaud(com.value)).toBe(0xff00ff00);
  });

  it('reports other commands (NOP, BRK) without losing the data around them', () => {
    expect(new TelnetDecoder().push(bytes(7, 255, 241, 8))).toEqual([
      { kind: 'data', bytes: bytes(7) },
      { kind: 'command', command: 241 },
      { kind: 'data', bytes: bytes(8) },
    ]);
  });

  it('bounds a subnegotiation that never ends', () => {
    const decoder = new TelnetDecoder();
    decoder.push(bytes(255, 250, 44, 0));
    for (let i = 0; i < 100; i++) decoder.push(new Uint8Array(4096).fill(0x61));
    const [event] = decoder.push(bytes(255, 240));
    expect(event?.kind === 'subnegotiate' ? event.payload.length : -1).toBe(
      MAX_SUBNEGOTIATION_BYTES,
    );
  });
});

describe('escapeData', () => {
  it('doubles 255 and returns other data untouched', () => {
    const plain = bytes(1, 2, 3);
    expect(escapeData(plain)).toBe(plain);
    expect(escapeData(bytes(255, 0, 255))).toEqual(bytes(255, 255, 0, 255, 255));
  });

  it('round-trips any bytes through the decoder', () => {
    const all = Uint8Array.from({ length: 512 }, (_, i) => (i * 7) & 0xff);
    const [event] = new TelnetDecoder().push(escapeData(all));
    expect(event).toEqual({ kind: 'data', bytes: all });
  });
});
