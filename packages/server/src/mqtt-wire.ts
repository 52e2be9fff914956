/**
 * One MQTT client's TCP connection, as the broker reads it, with a bound on packet size. The
 * parser under aedes (mqtt-packet) has none: it buffers a packet until the Remaining Length its
 * fixed header declares has arrived, and MQTT 3.1.1 §2.2.3 allows 268,435,455 bytes. Each
 * packet's fixed header is read here as the bytes pass, and a connection that declares a
 * packet over the bound is dropped before its body is buffered.
 */
import type { Socket } from 'node:net';
import { Duplex } from 'node:stream';

/**
 * Reads MQTT fixed headers from a byte stream (MQTT 3.1.1 §2.2: one byte of type and flags,
 * then the Remaining Length in 1 to 4 bytes of 7 bits each, least significant first, the top
 * bit set on all but the last) and skips each packet's body.
 */
export class MqttPacketBound {
  readonly maxPacketBytes: number;
  #state: 'type' | 'length' | 'body' = 'type';
  #length = 0;
  #multiplier = 1;
  #lengthBytes = 0;
  #remaining = 0;

  /** `maxPacketBytes`: the largest Remaining Length (variable header and payload) accepted. */
  constructor(maxPacketBytes: number) {
    this.maxPacketBytes = maxPacketBytes;
  }

  /** Takes the next bytes; undefined while every packet fits, else why the connection must go. */
  feed(bytes: Uint8Array): string | undefined {
    let i = 0;
    while (i < bytes.length) {
      if (this.#state === 'type') {
        i++;
        this.#state = 'length';
        this.#length = 0;
        this.#multiplier = 1;
        this.#lengthBytes = 0;
      } else if (this.#state === 'length') {
        const byte = bytes[i++] ?? 0;
        this.#length += (byte & 0x7f) * this.#multiplier;
        this.#multiplier *= 128;
        this.#lengthBytes++;
        if (byte & 0x80) {
          if (this.#lengthBytes === 4)
            return 'a malformed packet length (more than 4 bytes, MQTT 3.1.1 §2.2.3)';
          continue;
        }
        if (this.#length > this.maxPacketBytes)
          return `a packet of ${this.#length} bytes, over the ${this.maxPacketBytes} accepted`;
        this.#remaining = this.#length;
        this.#state = this.#remaining === 0 ? 'type' : 'body';
      } else {
        const take = Math.min(this.#remaining, bytes.length - i);
        i += take;
        this.#remaining -= take;
        if (this.#remaining === 0) this.#state = 'type';
      }
    }
    return undefined;
  }
}

/**
 * The socket as a stream the broker reads (`handle(stream)`), checked by {@link MqttPacketBound}.
 * Writes go straight to the socket; ending or destroying either side ends both.
 */
export class MqttWire extends Duplex {
  readonly #socket: Socket;
  readonly #bound: MqttPacketBound;
  /** Why the wire was cut, when it was cut for a packet over the bound. */
  refusal: string | undefined;

  constructor(socket: Socket, maxPacketBytes: number) {
    super({ allowHalfOpen: false });
    this.#socket = socket;
    this.#bound = new MqttPacketBound(maxPacketBytes);
    socket.on('data', (chunk: Buffer) => {
      const refusal = this.#bound.feed(chunk);
      if (refusal !== undefined) {
        this.refusal = refusal;
        this.destroy(new Error(`MQTT client sent ${refusal}`));
        return;
      }
      if (!this.push(chunk)) socket.pause();
    });
    socket.on('end', () => this.push(null));
    socket.on('error', (error) => this.destroy(error));
    socket.on('close', () => this.destroy());
  }

  get remoteAddress(): string | undefined {
    return this.#socket.remoteAddress;
  }

  override _read(): void {
    this.#socket.resume();
  }

  override _write(
    chunk: Buffer,
    _encoding: BufferEncoding,
    callback: (error?: Error | null) => void,
  ): void {
    if (this.#socket.destroyed) {
      callback(new Error('the MQTT connection is closed'));
      return;
    }
    this.#socket.write(chunk, callback);
  }

  /**
   * aedes writes one packet as several small pieces (fixed header, topic, payload) meant to go
   * out together. Passed on one by one, the second piece waits behind Nagle's algorithm for the
   * board's delayed ACK (about 40 ms on Linux): every message to a board took that long (measured
   * by the MQTT benchmark: tools/call p50 44 ms, 0.45 ms with this). One write per batch.
   */
  override _writev(
    chunks: { chunk: Buffer; encoding: BufferEncoding }[],
    callback: (error?: Error | null) => void,
  ): void {
    if (this.#socket.destroyed) {
      callback(new Error('the MQTT connection is closed'));
      return;
    }
    this.#socket.write(
      chunks.length === 1
        ? (chunks[0]?.chunk ?? Buffer.alloc(0))
        : Buffer.concat(chunks.map((c) => c.chunk)),
      callback,
    );
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.#socket.end();
    callback();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#socket.destroy();
    callback(error);
  }
}
