/**
 * SLIP framing (RFC 1055) as the ESP ROM bootloader, esptool's flasher stub and esptool use
 * it: every packet starts and ends with 0xC0; 0xC0 and 0xDB inside are sent as 0xDB 0xDC and
 * 0xDB 0xDD. Bytes between frames are not protocol (a ROM banner, console output, line noise)
 * and are handed to `onNoise` instead of being dropped silently.
 */

export const SLIP_END = 0xc0;
export const SLIP_ESC = 0xdb;
export const SLIP_ESC_END = 0xdc;
export const SLIP_ESC_ESC = 0xdd;

/** Frames `packet` (0xC0, escaped bytes, 0xC0). */
export function slipEncode(packet: Uint8Array): Uint8Array {
  let extra = 0;
  for (const byte of packet) if (byte === SLIP_END || byte === SLIP_ESC) extra++;
  const out = new Uint8Array(packet.length + extra + 2);
  let i = 0;
  out[i++] = SLIP_END;
  for (const byte of packet) {
    if (byte === SLIP_END) {
      out[i++] = SLIP_ESC;
      out[i++] = SLIP_ESC_END;
    } else if (byte === SLIP_ESC) {
      out[i++] = SLIP_ESC;
      out[i++] = SLIP_ESC_ESC;
    } else {
      out[i++] = byte;
    }
  }
  out[i] = SLIP_END;
  return out;
}

export interface SlipDecoderOptions {
  /** Bytes seen outside any frame, in arrival order. */
  readonly onNoise?: (bytes: Uint8Array) => void;
  /** A frame longer than this is dropped (counted in `errors`); default 1 MiB. */
  readonly maxFrameBytes?: number;
}

/**
 * A streaming decoder: feed it bytes as they arrive, in chunks of any size, and it returns
 * the frames completed by each chunk. A frame with an invalid escape is dropped and counted.
 */
export class SlipDecoder {
  #frame: number[] | undefined;
  #escaping = false;
  #invalid = false;
  #errors = 0;
  readonly #onNoise: ((bytes: Uint8Array) => void) | undefined;
  readonly #maxFrameBytes: number;

  constructor(options: SlipDecoderOptions = {}) {
    this.#onNoise = options.onNoise;
    this.#maxFrameBytes = options.maxFrameBytes ?? 1024 * 1024;
  }

  /** Frames dropped so far (invalid escape, oversize). */
  get errors(): number {
    return this.#errors;
  }

  /** True while a frame has started and not ended. */
  get inFrame(): boolean {
    return this.#frame !== undefined;
  }

  /** Forgets a partial frame (after a reset of the peer). */
  reset(): void {
    this.#frame = undefined;
    this.#escaping = false;
    this.#invalid = false;
  }

  push(bytes: Uint8Array): Uint8Array[] {
    const frames: Uint8Array[] = [];
    let noiseStart = -1;
    const flushNoise = (end: number) => {
      if (noiseStart >= 0 && end > noiseStart)
        this.#onNoise?.(new Uint8Array(bytes.subarray(noiseStart, end)));
      noiseStart = -1;
    };
    for (let i = 0; i < bytes.length; i++) {
      const byte = bytes[i] ?? 0;
      const frame = this.#frame;
      if (frame === undefined) {
        if (byte === SLIP_END) {
          flushNoise(i);
          this.#frame = [];
        } else if (noiseStart < 0) {
          noiseStart = i;
        }
        continue;
      }
      if (byte === SLIP_END) {
        // An empty frame is the closing 0xC0 of one packet next to the opening one of the next.
        if (frame.length === 0 && !this.#invalid) continue;
        if (this.#invalid || this.#escaping) this.#errors++;
        else frames.push(Uint8Array.from(frame));
        // After the closing 0xC0 the line is between frames until the next 0xC0.
        this.#frame = undefined;
        this.#escaping = false;
        this.#invalid = false;
        continue;
      }
      if (this.#invalid) continue;
      if (this.#escaping) {
        this.#escaping = false;
        if (byte === SLIP_ESC_END) frame.push(SLIP_END);
        else if (byte === SLIP_ESC_ESC) frame.push(SLIP_ESC);
        else this.#invalid = true;
      } else if (byte === SLIP_ESC) {
        this.#escaping = true;
      } else {
        frame.push(byte);
      }
      if (frame.length > this.#maxFrameBytes) {
        this.#invalid = true;
        frame.length = 0;
      }
    }
    flushNoise(bytes.length);
    return frames;
  }
}

/** Decodes every complete frame in `bytes` (a one-shot {@link SlipDecoder}). */
export function slipDecode(bytes: Uint8Array): Uint8Array[] {
  return new SlipDecoder().push(bytes);
}
