/**
 * The bound on the size of the packets an MQTT client sends. The
 * parser under aedes (mqtt-packet) has none: it buffers a packet until the Remaining Length its
 * fixed header declares has arrived, and MQTT 3.1.1 §2.2.3 allows 268,435,455 bytes. Each
 * packet's fixed header is read here as the bytes pass, and a connection that declares a
 * packet over the bound is dropped before its body is buffered.
 */
import type { Socket } from 'node:net';

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
 * Bounds the packets a client's socket carries, as the broker reads it: aedes reads the socket
 * itself (`readable` and `read()`), and every chunk it reads passes a `data` listener first, so
 * each fixed header is checked before the parser under aedes buffers the packet's body. A
 * socket that declares a packet over the bound is destroyed, with `onRefusal` told why. The
 * socket is handed to aedes as is: no stream in between, so no second buffer or write path per
 * packet (aedes corks the socket for each packet's pieces, which leave in one write).
 *
 * Call after `aedes.handle(socket)`: with aedes's `readable` listener in place, this listener
 * sees the chunks aedes reads and does not switch the socket to flowing mode.
 */
export function boundMqttPackets(
  socket: Socket,
  maxPacketBytes: number,
  onRefusal: (reason: string) => void,
): void {
  const bound = new MqttPacketBound(maxPacketBytes);
  socket.on('data', (chunk: Buffer) => {
    const refusal = bound.feed(chunk);
    if (refusal === undefined) return;
    onRefusal(refusal);
    socket.destroy(new Error(`MQTT client sent ${refusal}`));
  });
}
