import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  AUDIO_FRAME_HEADER_SIZES,
  type AudioFrameVersion,
  decodeAudioFrame,
  decodeUdpAudioHeader,
  encodeAudioFrame,
  encodeUdpAudioHeader,
  UDP_AUDIO_HEADER_SIZE,
} from './audio-frames.js';
import { ProtocolError } from './errors.js';

function expectRejected(fn: () => unknown, field: string, message?: RegExp): void {
  let error: unknown;
  try {
    fn();
  } catch (err) {
    error = err;
  }
  expect(error).toBeInstanceOf(ProtocolError);
  const err = error as ProtocolError;
  expect(err.code).toBe('INVALID_MESSAGE');
  expect(err.field).toBe(field);
  if (message !== undefined) expect(err.message).toMatch(message);
}

const bytes = (...values: number[]) => Uint8Array.from(values);
const OPUS = bytes(0xaa, 0xbb, 0xcc);

describe('WebSocket audio frames', () => {
  it('version 1 is the raw payload, both ways, without copying', () => {
    expect(encodeAudioFrame(1, { payload: OPUS, timestamp: 99 })).toBe(OPUS);
    const frame = decodeAudioFrame(1, OPUS);
    expect(frame).toEqual({ type: 0, timestamp: 0, payload: OPUS });
    expect(frame.payload).toBe(OPUS);
  });

  it('version 1 refuses a non-audio type it cannot carry', () => {
    expectRejected(() => encodeAudioFrame(1, { payload: OPUS, type: 1 }), 'type');
  });

  it('writes the exact version 2 header', () => {
    expect(Array.from(encodeAudioFrame(2, { payload: OPUS, timestamp: 0x01020304 }))).toEqual([
      0, 2, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 3, 0xaa, 0xbb, 0xcc,
    ]);
    expect(
      Array.from(
        encodeAudioFrame(2, {
          payload: new Uint8Array(0x0102),
          type: 0x0a0b,
          timestamp: 0xfffffffe,
        }).subarray(0, 16),
      ),
    ).toEqual([0, 2, 0x0a, 0x0b, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0x01, 0x02]);
  });

  it('writes the exact version 3 header', () => {
    expect(Array.from(encodeAudioFrame(3, { payload: OPUS, timestamp: 5 }))).toEqual([
      0, 0, 0, 3, 0xaa, 0xbb, 0xcc,
    ]);
    expect(
      Array.from(encodeAudioFrame(3, { payload: new Uint8Array(0x1234), type: 7 }).subarray(0, 4)),
    ).toEqual([7, 0, 0x12, 0x34]);
  });

  it('decodes a firmware version 2 frame', () => {
    const frame = bytes(0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0x03, 0xe8, 0, 0, 0, 2, 0x11, 0x22);
    expect(decodeAudioFrame(2, frame)).toEqual({
      type: 0,
      timestamp: 1000,
      payload: bytes(0x11, 0x22),
    });
  });

  it('returns the payload as a view into the frame, also for frames at an offset', () => {
    const backing = new Uint8Array(64).fill(0xee);
    const encoded = encodeAudioFrame(2, { payload: OPUS, timestamp: 7 });
    backing.set(encoded, 10);
    const frame = backing.subarray(10, 10 + encoded.length);
    const decoded = decodeAudioFrame(2, frame);
    expect(decoded).toEqual({ type: 0, timestamp: 7, payload: OPUS });
    expect(decoded.payload.buffer).toBe(backing.buffer);
    expect(decoded.payload.byteOffset).toBe(10 + 16);

    const v3 = backing.subarray(30, 30 + 7);
    v3.set(encodeAudioFrame(3, { payload: OPUS }));
    expect(decodeAudioFrame(3, v3).payload.byteOffset).toBe(34);
  });

  it('round-trips any payload, type and timestamp (versions 2 and 3)', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(2 as const, 3 as const),
        fc.uint8Array({ maxLength: 600 }),
        fc.integer({ min: 0, max: 0xff }),
        fc.integer({ min: 0, max: 0xffffffff }),
        (version, payload, type, timestamp) => {
          const encoded = encodeAudioFrame(version, { payload, type, timestamp });
          expect(encoded.length).toBe(AUDIO_FRAME_HEADER_SIZES[version] + payload.length);
          expect(decodeAudioFrame(version, encoded)).toEqual({
            type,
            timestamp: version === 2 ? timestamp : 0,
            payload,
          });
        },
      ),
    );
  });

  it('rejects every truncated or extended frame (versions 2 and 3)', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(2 as const, 3 as const),
        fc.uint8Array({ minLength: 1, maxLength: 100 }),
        fc.nat(),
        fc.boolean(),
        (version, payload, cut, extend) => {
          const encoded = encodeAudioFrame(version, { payload });
          const damaged = extend
            ? Uint8Array.from([...encoded, 0])
            : encoded.subarray(0, cut % encoded.length);
          const headerSize = AUDIO_FRAME_HEADER_SIZES[version];
          expectRejected(
            () => decodeAudioFrame(version, damaged),
            damaged.length < headerSize ? 'header' : 'payload_size',
          );
        },
      ),
    );
  });

  it('names the field of a bad frame', () => {
    expectRejected(
      () => decodeAudioFrame(2, new Uint8Array(15)),
      'header',
      /15 bytes .* 16-byte header/,
    );
    expectRejected(() => decodeAudioFrame(3, new Uint8Array(3)), 'header');
    expectRejected(
      () => decodeAudioFrame(2, bytes(0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1, 2, 3)),
      'payload_size',
      /payload_size says 4 bytes but 3 follow/,
    );
    expectRejected(() => decodeAudioFrame(3, bytes(0, 0, 0, 1, 9, 9)), 'payload_size');
    // A version 2 header must say version 2 (a v3 frame read as v2 is caught here).
    expectRejected(
      () => decodeAudioFrame(2, bytes(0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)),
      'version',
    );
    expectRejected(() => decodeAudioFrame(4 as AudioFrameVersion, OPUS), 'version');
  });

  it('refuses values the header cannot hold', () => {
    expectRejected(() => encodeAudioFrame(3, { payload: new Uint8Array(65536) }), 'payload_size');
    expect(encodeAudioFrame(3, { payload: new Uint8Array(65535) }).length).toBe(65539);
    expectRejected(() => encodeAudioFrame(3, { payload: OPUS, type: 256 }), 'type');
    expectRejected(() => encodeAudioFrame(2, { payload: OPUS, type: 65536 }), 'type');
    expectRejected(() => encodeAudioFrame(2, { payload: OPUS, timestamp: 2 ** 32 }), 'timestamp');
    expectRejected(() => encodeAudioFrame(2, { payload: OPUS, timestamp: -1 }), 'timestamp');
    expectRejected(() => encodeAudioFrame(2, { payload: OPUS, timestamp: 1.5 }), 'timestamp');
    expectRejected(() => encodeAudioFrame(0 as AudioFrameVersion, { payload: OPUS }), 'version');
    expectRejected(
      () => encodeAudioFrame(2, { payload: [1, 2] as unknown as Uint8Array }),
      'payload',
    );
  });
});

describe('UDP audio header', () => {
  it('writes the exact 16 bytes', () => {
    const header = encodeUdpAudioHeader({
      payloadLength: 0x0102,
      ssrc: 0x0a0b0c0d,
      timestamp: 0x11223344,
      sequence: 1,
    });
    expect(Array.from(header)).toEqual([
      0x01, 0, 0x01, 0x02, 0x0a, 0x0b, 0x0c, 0x0d, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 1,
    ]);
  });

  it('reads a server nonce as a header (the header doubles as the IV)', () => {
    const nonce = Uint8Array.from(Buffer.from('01000000aabbccdd0000000000000000', 'hex'));
    expect(decodeUdpAudioHeader(nonce)).toEqual({
      flags: 0,
      payloadLength: 0,
      ssrc: 0xaabbccdd,
      timestamp: 0,
      sequence: 0,
    });
  });

  it('round-trips any header and reads it from the front of a whole packet', () => {
    fc.assert(
      fc.property(
        fc.record({
          flags: fc.integer({ min: 0, max: 0xff }),
          payloadLength: fc.integer({ min: 0, max: 0xffff }),
          ssrc: fc.integer({ min: 0, max: 0xffffffff }),
          timestamp: fc.integer({ min: 0, max: 0xffffffff }),
          sequence: fc.integer({ min: 0, max: 0xffffffff }),
        }),
        fc.uint8Array({ maxLength: 40 }),
        (header, encrypted) => {
          const packet = Uint8Array.from([...encodeUdpAudioHeader(header), ...encrypted]);
          expect(decodeUdpAudioHeader(packet)).toEqual(header);
        },
      ),
    );
  });

  it('rejects short packets, a wrong type and out-of-range fields', () => {
    expectRejected(() => decodeUdpAudioHeader(new Uint8Array(UDP_AUDIO_HEADER_SIZE - 1)), 'header');
    const packet = encodeUdpAudioHeader({ payloadLength: 0, timestamp: 0, sequence: 1 });
    packet[0] = 0x02;
    expectRejected(() => decodeUdpAudioHeader(packet), 'type', /0x02/);
    const base = { payloadLength: 0, timestamp: 0, sequence: 0 };
    expectRejected(() => encodeUdpAudioHeader({ ...base, payloadLength: 70000 }), 'payload_len');
    expectRejected(() => encodeUdpAudioHeader({ ...base, sequence: 2 ** 32 }), 'sequence');
    expectRejected(() => encodeUdpAudioHeader({ ...base, flags: 256 }), 'flags');
    expectRejected(() => encodeUdpAudioHeader({ ...base, ssrc: -1 }), 'ssrc');
    expectRejected(() => encodeUdpAudioHeader({ ...base, timestamp: Number.NaN }), 'timestamp');
  });
});
