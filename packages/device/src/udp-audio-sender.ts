/**
 * The device's UDP audio uplink of the MQTT + UDP transport (docs/protocol.md §5), as
 * `MqttProtocol::SendAudio` in xiaozhi-esp32's mqtt_protocol.cc builds it: each packet is a
 * 16-byte header, a copy of the server's nonce with the payload length, timestamp and sequence
 * written over it, followed by the Opus payload encrypted with AES-128-CTR, the header being the
 * counter block. Sealing a packet is data ({@link sealUdpAudioPacket}); {@link UdpAudioSender}
 * owns the socket and the sequence.
 */
import { createCipheriv } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import { isIPv6 } from 'node:net';

/** The header's size, which is also the nonce's and the AES block's. */
export const UDP_NONCE_BYTES = 16;

/**
 * `MqttProtocol::DecodeHexString`: two characters per byte, any character that is not a hex
 * digit read as 0, a trailing odd character paired with the string's terminating NUL (also 0).
 */
export function decodeHexLax(hex: string): Uint8Array {
  const digit = (c: string | undefined): number => {
    const n = c === undefined ? Number.NaN : Number.parseInt(c, 16);
    return Number.isNaN(n) ? 0 : n;
  };
  const out = new Uint8Array(Math.ceil(hex.length / 2));
  for (let i = 0; i < hex.length; i += 2) out[i / 2] = (digit(hex[i]) << 4) | digit(hex[i + 1]);
  return out;
}

/**
 * The packet header `SendAudio` writes: the nonce as the server gave it (type, flags and ssrc
 * stay), with `payload_len` (u16 BE) at 2..3, `timestamp` (u32 BE) at 8..11 and `sequence`
 * (u32 BE) at 12..15. Values wrap as the firmware's `htons`/`htonl` casts do.
 */
export function udpAudioHeader(
  nonce: Uint8Array,
  payloadLength: number,
  timestamp: number,
  sequence: number,
): Uint8Array {
  const header = new Uint8Array(UDP_NONCE_BYTES);
  header.set(nonce.subarray(0, UDP_NONCE_BYTES));
  const view = new DataView(header.buffer);
  view.setUint16(2, payloadLength & 0xffff);
  view.setUint32(8, timestamp >>> 0);
  view.setUint32(12, sequence >>> 0);
  return header;
}

export interface UdpAudioFrame {
  readonly payload: Uint8Array;
  readonly timestamp: number;
  readonly sequence: number;
}

/** One packet: the header, then the payload under AES-128-CTR with the header as the counter. */
export function sealUdpAudioPacket(
  key: Uint8Array,
  nonce: Uint8Array,
  frame: UdpAudioFrame,
): Uint8Array {
  const header = udpAudioHeader(nonce, frame.payload.length, frame.timestamp, frame.sequence);
  // mbedtls_aes_crypt_ctr with nc_off 0 and the header as nonce_counter: standard CTR mode.
  const cipher = createCipheriv('aes-128-ctr', key, header);
  return Buffer.concat([header, cipher.update(frame.payload), cipher.final()]);
}

/** Where and how to send, from the server hello's `udp` member. */
export interface UdpAudioTarget {
  readonly server: string;
  readonly port: number;
  /** 16 bytes (AES-128). */
  readonly key: Uint8Array;
  /** 16 bytes: the header template. */
  readonly nonce: Uint8Array;
}

/** One audio channel's uplink: a connected UDP socket and the packet sequence. */
export class UdpAudioSender {
  /** Packets handed to the socket. */
  packets = 0;
  /** Payload bytes of those packets (before encryption; CTR keeps the length). */
  bytes = 0;
  /** Sends the socket reported as failed. */
  errors = 0;
  #sequence = 0;
  #closed = false;
  readonly #socket: Socket;
  readonly #target: UdpAudioTarget;

  private constructor(socket: Socket, target: UdpAudioTarget) {
    this.#socket = socket;
    this.#target = target;
  }

  /** A socket connected to the target (`udp_->Connect`); rejects when that fails. */
  static async open(target: UdpAudioTarget): Promise<UdpAudioSender> {
    if (target.key.length !== UDP_NONCE_BYTES || target.nonce.length !== UDP_NONCE_BYTES)
      throw new RangeError('the UDP key and nonce must be 16 bytes each');
    const socket = createSocket(isIPv6(target.server) ? 'udp6' : 'udp4');
    // The board drops what it cannot read; a socket error must not take the process down.
    socket.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      socket.connect(target.port, target.server, (error?: Error) => {
        if (error === undefined || error === null) resolve();
        else reject(error);
      });
    }).catch((error: unknown) => {
      socket.close();
      throw error;
    });
    return new UdpAudioSender(socket, target);
  }

  /** The last sequence number sent (0 before the first packet). */
  get sequence(): number {
    return this.#sequence;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Seals and sends one Opus packet; `local_sequence_` is pre-incremented, so the first is 1. */
  send(payload: Uint8Array, timestamp: number): boolean {
    if (this.#closed) return false;
    const sequence = ++this.#sequence;
    const packet = sealUdpAudioPacket(this.#target.key, this.#target.nonce, {
      payload,
      timestamp,
      sequence,
    });
    this.packets++;
    this.bytes += payload.length;
    this.#socket.send(packet, (error) => {
      if (error) this.errors++;
    });
    return true;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#socket.close();
  }
}
