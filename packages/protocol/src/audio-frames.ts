/**
 * Binary audio framing (docs/protocol.md §4 and §5). WebSocket binary frames carry Opus:
 * version 1 raw, version 2 behind a 16-byte header, version 3 behind a 4-byte header,
 * all big-endian. MQTT sessions send UDP packets behind a 16-byte header that is also
 * the AES-128-CTR IV (encryption is done elsewhere).
 *
 * The firmware trusts the size fields (it copies `payload_size` bytes whatever the frame
 * length), so the decoder is stricter than the board: any disagreement throws.
 */
import { ProtocolError } from './errors.js';

/** The `Protocol-Version` that selects the WebSocket binary framing. */
export type AudioFrameVersion = 1 | 2 | 3;

/** Payload type 0: Opus audio (the only type the firmware sends). */
export const AUDIO_FRAME_TYPE_OPUS = 0;

export const AUDIO_FRAME_HEADER_SIZES: Readonly<Record<AudioFrameVersion, number>> = {
  1: 0,
  2: 16,
  3: 4,
};

export interface AudioFrame {
  readonly type: number;
  /** Used by server-side AEC; only version 2 carries it (else 0). */
  readonly timestamp: number;
  readonly payload: Uint8Array;
}

export interface AudioFrameInput {
  readonly payload: Uint8Array;
  /** Default {@link AUDIO_FRAME_TYPE_OPUS}. Version 1 can only carry 0. */
  readonly type?: number;
  /** Default 0. Dropped by versions 1 and 3, which have no timestamp field. */
  readonly timestamp?: number;
}

function invalid(context: string, field: string, message: string): never {
  throw new ProtocolError('INVALID_MESSAGE', `${context}: ${message}`, { field });
}

function checkUint(context: string, field: string, value: number, bits: 8 | 16 | 32): number {
  const max = 2 ** bits - 1;
  if (!Number.isInteger(value) || value < 0 || value > max) {
    invalid(context, field, `${field} must be an integer from 0 to ${max}, got ${String(value)}`);
  }
  return value;
}

function checkVersion(version: unknown): AudioFrameVersion {
  if (version !== 1 && version !== 2 && version !== 3) {
    invalid('audio frame', 'version', `version must be 1, 2 or 3, got ${String(version)}`);
  }
  return version;
}

function viewOf(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * Frames one Opus packet for the given protocol version. Version 1 returns `payload`
 * itself (no header, no copy).
 */
export function encodeAudioFrame(version: AudioFrameVersion, frame: AudioFrameInput): Uint8Array {
  const context = `audio frame v${checkVersion(version)}`;
  const { payload } = frame;
  const type = frame.type ?? AUDIO_FRAME_TYPE_OPUS;
  const timestamp = frame.timestamp ?? 0;
  if (!(payload instanceof Uint8Array)) {
    invalid(context, 'payload', 'payload must be a Uint8Array');
  }
  if (version === 1) {
    // A raw frame is always taken as Opus; another type would be misread.
    if (type !== AUDIO_FRAME_TYPE_OPUS) {
      invalid(context, 'type', `version 1 frames carry Opus only (type 0), got ${String(type)}`);
    }
    return payload;
  }
  const headerSize = AUDIO_FRAME_HEADER_SIZES[version];
  const out = new Uint8Array(headerSize + payload.length);
  const view = viewOf(out);
  if (version === 2) {
    view.setUint16(0, 2);
    view.setUint16(2, checkUint(context, 'type', type, 16));
    view.setUint32(4, 0); // reserved
    view.setUint32(8, checkUint(context, 'timestamp', timestamp, 32));
    view.setUint32(12, checkUint(context, 'payload_size', payload.length, 32));
  } else {
    view.setUint8(0, checkUint(context, 'type', type, 8));
    view.setUint8(1, 0); // reserved
    view.setUint16(2, checkUint(context, 'payload_size', payload.length, 16));
  }
  out.set(payload, headerSize);
  return out;
}

/**
 * Reads one binary frame. `payload` is a view into `bytes`, not a copy. The reserved
 * fields are ignored, as on the board.
 */
export function decodeAudioFrame(version: AudioFrameVersion, bytes: Uint8Array): AudioFrame {
  const context = `audio frame v${checkVersion(version)}`;
  if (version === 1) return { type: AUDIO_FRAME_TYPE_OPUS, timestamp: 0, payload: bytes };
  const headerSize = AUDIO_FRAME_HEADER_SIZES[version];
  if (bytes.length < headerSize) {
    invalid(
      context,
      'header',
      `frame of ${bytes.length} bytes is shorter than the ${headerSize}-byte header`,
    );
  }
  const view = viewOf(bytes);
  const remaining = bytes.length - headerSize;
  let type: number;
  let timestamp = 0;
  let size: number;
  if (version === 2) {
    const headerVersion = view.getUint16(0);
    if (headerVersion !== 2) {
      invalid(context, 'version', `header version must be 2, got ${headerVersion}`);
    }
    type = view.getUint16(2);
    timestamp = view.getUint32(8);
    size = view.getUint32(12);
  } else {
    type = view.getUint8(0);
    size = view.getUint16(2);
  }
  if (size !== remaining) {
    invalid(
      context,
      'payload_size',
      `payload_size says ${size} bytes but ${remaining} follow the header`,
    );
  }
  return { type, timestamp, payload: bytes.subarray(headerSize) };
}

// ---------------------------------------------------------------------------
// MQTT + UDP

export const UDP_AUDIO_HEADER_SIZE = 16;
/** The first header byte; the board drops packets with any other value. */
export const UDP_AUDIO_PACKET_TYPE = 0x01;

/**
 * `u8 type(=0x01), u8 flags, u16 payload_len, u32 ssrc, u32 timestamp, u32 sequence`.
 * The board builds it from the server's nonce, overwriting payload_len, timestamp and
 * sequence, and uses the 16 bytes as the AES-CTR counter block.
 */
export interface UdpAudioHeader {
  readonly flags: number;
  readonly payloadLength: number;
  readonly ssrc: number;
  readonly timestamp: number;
  /** Starts at 1 and increases per packet; the board drops packets older than the last. */
  readonly sequence: number;
}

export interface UdpAudioHeaderInput {
  /** Default 0. */
  readonly flags?: number;
  readonly payloadLength: number;
  /** Default 0. */
  readonly ssrc?: number;
  readonly timestamp: number;
  readonly sequence: number;
}

/** The 16-byte header (type always 0x01). Errors name the wire field, e.g. `payload_len`. */
export function encodeUdpAudioHeader(header: UdpAudioHeaderInput): Uint8Array {
  const context = 'udp audio header';
  const out = new Uint8Array(UDP_AUDIO_HEADER_SIZE);
  const view = viewOf(out);
  view.setUint8(0, UDP_AUDIO_PACKET_TYPE);
  view.setUint8(1, checkUint(context, 'flags', header.flags ?? 0, 8));
  view.setUint16(2, checkUint(context, 'payload_len', header.payloadLength, 16));
  view.setUint32(4, checkUint(context, 'ssrc', header.ssrc ?? 0, 32));
  view.setUint32(8, checkUint(context, 'timestamp', header.timestamp, 32));
  view.setUint32(12, checkUint(context, 'sequence', header.sequence, 32));
  return out;
}

/**
 * Reads the header from the first 16 bytes of a packet (the rest is the encrypted
 * payload). `payload_len` is returned, not checked: the board ignores it too.
 */
export function decodeUdpAudioHeader(bytes: Uint8Array): UdpAudioHeader {
  const context = 'udp audio header';
  if (bytes.length < UDP_AUDIO_HEADER_SIZE) {
    invalid(
      context,
      'header',
      `packet of ${bytes.length} bytes is shorter than the ${UDP_AUDIO_HEADER_SIZE}-byte header`,
    );
  }
  const view = viewOf(bytes);
  const type = view.getUint8(0);
  if (type !== UDP_AUDIO_PACKET_TYPE) {
    invalid(context, 'type', `type must be 0x01, got 0x${type.toString(16).padStart(2, '0')}`);
  }
  return {
    flags: view.getUint8(1),
    payloadLength: view.getUint16(2),
    ssrc: view.getUint32(4),
    timestamp: view.getUint32(8),
    sequence: view.getUint32(12),
  };
}
