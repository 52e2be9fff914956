import { once } from 'node:events';
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { MqttPacketBound, MqttWire } from './mqtt-wire.js';

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

describe('MqttWire', () => {
  let server: Server | undefined;
  afterEach(() => {
    server?.close();
    server = undefined;
  });

  async function pair(
    maxPacketBytes: number,
  ): Promise<{ wire: MqttWire; client: Socket; writes: () => number }> {
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
    // Counts the writes that reach the socket (each one a separate send for Nagle's algorithm).
    let writes = 0;
    const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
    socket.write = ((...args: unknown[]) => {
      writes++;
      return write(...args);
    }) as typeof socket.write;
    const wire = new MqttWire(socket, maxPacketBytes);
    wire.on('error', () => {});
    return { wire, client, writes: () => writes };
  }

  it('passes bytes both ways', async () => {
    const { wire, client } = await pair(100);
    client.write(Buffer.from([0xc0, 0x00]));
    const [chunk] = (await once(wire, 'data')) as [Buffer];
    expect([...chunk]).toEqual([0xc0, 0x00]);
    wire.write(Buffer.from([0xd0, 0x00]));
    const [back] = (await once(client, 'data')) as [Buffer];
    expect([...back]).toEqual([0xd0, 0x00]);
    client.destroy();
    await once(wire, 'close');
  });

  it('writes the pieces of one packet to the socket in one write (no Nagle wait between them)', async () => {
    const { wire, client, writes } = await pair(100);
    const got: number[] = [];
    client.on('data', (chunk: Buffer) => got.push(...chunk));
    // What aedes does for one PUBLISH: header, topic, payload, written together.
    wire.cork();
    wire.write(Buffer.from([0x30, 0x05]));
    wire.write(Buffer.from([0x00, 0x01, 0x74]));
    wire.write(Buffer.from([0x68, 0x69]));
    process.nextTick(() => wire.uncork());
    await until(() => got.length >= 7, { what: 'the packet at the client', seen: () => got });
    expect(got).toEqual([0x30, 0x05, 0x00, 0x01, 0x74, 0x68, 0x69]);
    expect(writes()).toBe(1);
    client.destroy();
  });

  it('cuts the connection at a header over the bound, before the body is read', async () => {
    const { wire, client } = await pair(1000);
    const closed = new Promise((resolve) => wire.once('close', resolve));
    client.write(Buffer.from([0x30, 0xe9, 0x07])); // 1001
    await closed;
    expect(wire.refusal).toMatch(/1001 bytes, over the 1000 accepted/);
    client.resume();
    if (!client.destroyed) await once(client, 'close');
  });
});
