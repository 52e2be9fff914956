import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SLIP_END, SLIP_ESC, SlipDecoder, slipDecode, slipEncode } from './slip.js';

describe('SLIP', () => {
  it('escapes 0xC0 and 0xDB the way esptool does', () => {
    expect([...slipEncode(Uint8Array.from([0x01, 0xc0, 0xdb, 0x02]))]).toEqual([
      0xc0, 0x01, 0xdb, 0xdc, 0xdb, 0xdd, 0x02, 0xc0,
    ]);
    expect([...slipEncode(new Uint8Array(0))]).toEqual([0xc0, 0xc0]);
  });

  it('round-trips any packet, fed in chunks of any size', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ minLength: 1, maxLength: 64 }), { minLength: 1, maxLength: 5 }),
        fc.integer({ min: 1, max: 7 }),
        (packets, chunk) => {
          const wire = Uint8Array.from(packets.flatMap((p) => [...slipEncode(p)]));
          const decoder = new SlipDecoder();
          const frames: Uint8Array[] = [];
          for (let i = 0; i < wire.length; i += chunk)
            frames.push(...decoder.push(wire.subarray(i, i + chunk)));
          expect(frames.map((f) => [...f])).toEqual(packets.map((p) => [...p]));
          expect(decoder.errors).toBe(0);
        },
      ),
    );
  });

  it('hands bytes between frames to onNoise (a ROM banner before the first reply)', () => {
    const noise: string[] = [];
    const decoder = new SlipDecoder({
      onNoise: (bytes) => noise.push(Buffer.from(bytes).toString('latin1')),
    });
    const banner = new TextEncoder().encode('waiting for download\r\n');
    const frames = decoder.push(
      Uint8Array.from([...banner, ...slipEncode(Uint8Array.from([1, 2])), 0x41]),
    );
    expect(frames.map((f) => [...f])).toEqual([[1, 2]]);
    expect(noise).toEqual(['waiting for download\r\n', 'A']);
    expect(decoder.inFrame).toBe(false);
  });

  it('accepts back-to-back delimiters (C0 C0) and drops a frame with a bad escape', () => {
    const decoder = new SlipDecoder();
    expect(
      decoder.push(Uint8Array.from([SLIP_END, SLIP_END, 7, SLIP_END])).map((f) => [...f]),
    ).toEqual([[7]]);
    expect(decoder.push(Uint8Array.from([SLIP_END, 1, SLIP_ESC, 0x41, 2, SLIP_END]))).toEqual([]);
    expect(decoder.errors).toBe(1);
    expect(slipDecode(Uint8Array.from([SLIP_END, 9, SLIP_END])).map((f) => [...f])).toEqual([[9]]);
  });

  it('keeps a partial frame across pushes and forgets it on reset', () => {
    const decoder = new SlipDecoder();
    expect(decoder.push(Uint8Array.from([SLIP_END, 1, 2]))).toEqual([]);
    expect(decoder.inFrame).toBe(true);
    decoder.reset();
    expect(decoder.push(Uint8Array.from([3, SLIP_END, 4, SLIP_END])).map((f) => [...f])).toEqual([
      [4],
    ]);
  });

  it('drops an oversized frame', () => {
    const decoder = new SlipDecoder({ maxFrameBytes: 4 });
    expect(decoder.push(Uint8Array.from([SLIP_END, 1, 2, 3, 4, 5, SLIP_END]))).toEqual([]);
    expect(decoder.errors).toBe(1);
  });
});
