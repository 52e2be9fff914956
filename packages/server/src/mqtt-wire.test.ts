import { once } from 'node:events';
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { boundMqttPackets, MqttPacketBound } from './mqtt-wire.js';

/** MQTT 3.1.1 §2.2.3's examples of Remaining Length encodings, as literals. */
const LENGTHS: [number, number[]][] = [
  [0, [0x00]],
  [127, [0x7f]],
  [128, [0x80, 0x01]],
  [16_383, [0xff, 0x7f]],
  [16_384, [0x80, 0x80, 0x01]],
  [2_097_151, [0xff, 0xff, 0x7f]],
  [2_097_152, [0x80, 0x80, 0x80, 0x01]],
  [268_435_455, [0xff, 0xff, 0xff, 0x7f]],
];

function packet(length: number[], body: number): Uint8Array {
  return Uint8Array.from([0x30, ...length, ...new Array<number>(body).fill(0x61)]);
}

describe('MqttPacketBound', () => {
  it.each(LENGTHS)('reads a Remaining Length of %i', (length, bytes) => {
    const under = new MqttPacketBound(length);
    expect(under.feed(Uint8Array.from([0x30, ...bytes]))).toBeUndefined();
    if (length > 0) {
      const over = new MqttPacketBound(length - 1);
      expect(over.feed(Uint8Array.from([0x30, ...bytes]))).toMatch(
        new RegExp(`a packet of ${length} bytes, over the ${length - 1} accepted`),
      );
    }
  });

  it('skips bodies and reads the next header, across chunk boundaries, one byte at a time', () => {
    const bound = new MqttPacketBound(200);
    const stream = [
      ...packet([0x02], 2),
      ...packet([0x00], 0),
      ...packet([0xc8, 0x01], 200), // 200
      ...packet([0xc9, 0x01], 0), // 201: over
    ];
    const verdicts = stream.map((byte) => bound.feed(Uint8Array.of(byte)));
    expect(verdicts.slice(0, -1).every((v) => v === undefined)).toBe(true);
    expect(verdicts.at(-1)).toMatch(/201 bytes/);
  });

  it('takes several packets in one chunk', () => {
    const bound = new MqttPacketBound(10);
    expect(
      bound.feed(Uint8Array.from([...packet([0x03], 3), ...packet([0x0a], 10), 0xc0, 0x00])),
    ).toBeUndefined();
    expect(bound.feed(packet([0x0b], 0))).toMatch(/11 bytes/);
  });

  it('refuses a Remaining Length of more than 4 bytes', () => {
    expect(
      new MqttPacketBound(1 << 30).feed(Uint8Array.of(0x30, 0xff, 0xff, 0xff, 0xff, 0x01)),
    ).toMatch(/more than 4 bytes/);
  });
});

describe('boundMqttPackets', () => {
  let server: Server | undefined;
  afterEach(() => {
    server?.close();
    server = undefined;
  });

  /** A server socket read as aedes reads it (`readable`, `read()`), bounded; and its client. */
  async function pair(maxPacketBytes: number): Promise<{
    socket: Socket;
    client: Socket;
    read: number[];
    refusals: string[];
  }> {
    let resolveAccepted: (socket: Socket) => void = () => {};
    const accepted = new Promise<Socket>((resolve) => {
      resolveAccepted = resolve;
    });
    const listener = createServer((socket) => resolveAccepted(socket));
    server = listener;
    listener.listen(0, '127.0.0.1');
    await once(listener, 'listening');
    const { port } = listener.address() as { port: number };
    const client = tcpConnect(port, '127.0.0.1');
    client.on('error', () => {});
    const socket = await accepted;
    socket.on('error', () => {});
    const read: number[] = [];
    socket.on('readable', () => {
      for (let chunk = socket.read() as Buffer | null; chunk !== null; chunk = socket.read())
        read.push(...chunk);
    });
    const refusals: string[] = [];
    boundMqttPackets(socket, maxPacketBytes, (reason) => refusals.push(reason));
    return { socket, client, read, refusals };
  }

  it('lets packets within the bound through to the reader, and the socket stays out of flowing mode', async () => {
    const { socket, client, read, refusals } = await pair(100);
    client.write(Buffer.from([0xc0, 0x00, 0x30, 0x03, 0x00, 0x01, 0x74]));
    await until(() => read.length >= 7, { what: 'the bytes at the reader', seen: () => read });
    expect(read).toEqual([0xc0, 0x00, 0x30, 0x03, 0x00, 0x01, 0x74]);
    expect(refusals).toEqual([]);
    expect(socket.readableFlowing).toBe(false);
    expect(socket.destroyed).toBe(false);
    client.destroy();
  });

  it('writes the pieces of one packet to the socket in one write (no Nagle wait between them)', async () => {
    const { socket, client } = await pair(100);
    const got: number[] = [];
    client.on('data', (chunk: Buffer) => got.push(...chunk));
    let writes = 0;
    const writev = socket._writev?.bind(socket);
    socket._writev = (chunks, callback) => {
      writes++;
      writev?.(chunks, callback);
    };
    // As aedes writes one PUBLISH (mqtt-packet's writeToStream): header, topic, payload, corked.
    socket.cork();
    socket.write(Buffer.from([0x30, 0x05]));
    socket.write(Buffer.from([0x00, 0x01, 0x74]));
    socket.write(Buffer.from([0x68, 0x69]));
    process.nextTick(() => socket.uncork());
    await until(() => got.length >= 7, { what: 'the packet at the client', seen: () => got });
    expect(got).toEqual([0x30, 0x05, 0x00, 0x01, 0x74, 0x68, 0x69]);
    expect(writes).toBe(1);
    client.destroy();
  });

  it('cuts the connection at a header over the bound, before the body is read', async () => {
    const { socket, client, refusals } = await pair(1000);
    const closed = new Promise((resolve) => socket.once('close', resolve));
    client.write(Buffer.from([0x30, 0xe9, 0x07])); // 1001
    await closed;
    expect(refusals).toEqual([expect.stringMatching(/1001 bytes, over the 1000 accepted/)]);
    client.resume();
    if (!client.destroyed) await once(client, 'close');
  });
});
