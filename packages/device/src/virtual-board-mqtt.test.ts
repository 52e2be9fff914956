/**
 * The virtual board on MQTT + UDP (docs/protocol.md §5), end to end: our OTA reply gives it
 * MQTT, it connects at boot and answers MCP with no click, opens UDP audio sessions, and goes
 * back to WebSocket only when a reply blanks the endpoint. The broker here is written from the
 * MQTT 3.1.1 packet formats alone (it shares nothing with the board's mqtt.js) and, like the
 * cloud's, delivers to a device without a subscription.
 */
import { createDecipheriv } from 'node:crypto';
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { once } from 'node:events';
import { createServer, type Server, type Socket } from 'node:net';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { TestBackend } from './testing/backend.js';
import { FAST_TIMING } from './testing/timing.js';
import { type BoardTiming, VirtualBoard } from './virtual-board.js';

const MAC = 'f4:12:fa:00:00:01';
const P2P = 'devices/p2p/f4_12_fa_00_00_01';
const CLIENT_ID = 'GID_xiaozhi@@@f4_12_fa_00_00_01@@@uuid-1';
const KEY_HEX = '2b7e151628aed2a6abf7158809cf4f3c';
const NONCE_HEX = '01000000123456780000000000000000';

/** The firmware's pauses shortened; generous waits for the hello and HTTP. */
const FAST: Partial<BoardTiming> = { ...FAST_TIMING, helloTimeoutMs: 3000, httpTimeoutMs: 3000 };

interface ConnectPacket {
  readonly protocol: string;
  readonly level: number;
  readonly flags: number;
  readonly keepalive: number;
  readonly clientId: string;
  readonly username: string | undefined;
  readonly password: string | undefined;
}

interface Published {
  readonly topic: string;
  readonly qos: number;
  readonly text: string;
}

/** A broker that accepts everyone and lets the test deliver to a connection directly. */
class DeliveringBroker {
  readonly connects: ConnectPacket[] = [];
  readonly published: Published[] = [];
  readonly subscribes: number[] = [];
  pings = 0;
  /** Answers a device hello with this, or stays silent (undefined). */
  helloReply: ((hello: Record<string, unknown>) => unknown) | undefined;
  #sockets = new Set<Socket>();
  #server: Server;

  private constructor() {
    this.#server = createServer((socket) => this.#accept(socket));
  }

  static async start(): Promise<DeliveringBroker> {
    const broker = new DeliveringBroker();
    broker.#server.listen(0, '127.0.0.1');
    await once(broker.#server, 'listening');
    return broker;
  }

  get port(): number {
    const address = this.#server.address();
    return typeof address === 'object' && address !== null ? address.port : 0;
  }

  get connections(): number {
    return this.#sockets.size;
  }

  /** PUBLISH QoS 0 to every connection on `topic`, subscribed or not. */
  deliver(topic: string, text: string): void {
    const topicBytes = Buffer.from(topic);
    const body = Buffer.concat([
      Buffer.from([topicBytes.length >> 8, topicBytes.length & 0xff]),
      topicBytes,
      Buffer.from(text),
    ]);
    const packet = Buffer.concat([Buffer.from([0x30]), remainingLength(body.length), body]);
    for (const socket of this.#sockets) socket.write(packet);
  }

  /** Cuts every connection (TCP reset), as a network failure does. */
  dropAll(): void {
    for (const socket of this.#sockets) socket.destroy();
  }

  /** Waits for what the broker saw (test-kit's bounded poll), saying what it had. */
  until<T>(check: () => T | undefined | false, what: string): Promise<NonNullable<T>> {
    return until(check, {
      what: `the broker's ${what}`,
      seen: () => ({ connects: this.connects.length, published: this.published.length }),
    }) as Promise<NonNullable<T>>;
  }

  /** The device's MCP replies (envelopes on its publish topic), by id. */
  reply(id: number): Record<string, unknown> | undefined {
    for (const p of this.published) {
      const frame = JSON.parse(p.text) as Record<string, unknown>;
      const payload = frame.payload as { id?: unknown } | undefined;
      if (frame.type === 'mcp' && payload?.id === id) return frame;
    }
    return undefined;
  }

  async close(): Promise<void> {
    this.dropAll();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(socket: Socket): void {
    this.#sockets.add(socket);
    socket.on('close', () => {
      this.#sockets.delete(socket);
    });
    socket.on('error', () => {});
    let buffer = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        // Fixed header: type and flags, then the remaining length in 7-bit groups.
        let length = 0;
        let multiplier = 1;
        let offset = 1;
        let complete = false;
        while (offset < buffer.length && offset <= 4) {
          const byte = buffer[offset] as number;
          length += (byte & 0x7f) * multiplier;
          multiplier *= 128;
          offset++;
          if ((byte & 0x80) === 0) {
            complete = true;
            break;
          }
        }
        if (!complete || buffer.length < offset + length) return;
        const first = buffer[0] as number;
        const body = buffer.subarray(offset, offset + length);
        buffer = buffer.subarray(offset + length);
        this.#packet(socket, first >> 4, first & 0x0f, body);
      }
    });
  }

  #packet(socket: Socket, type: number, flags: number, body: Buffer): void {
    const str = (at: number): [string, number] => {
      const n = body.readUInt16BE(at);
      return [body.subarray(at + 2, at + 2 + n).toString('utf8'), at + 2 + n];
    };
    switch (type) {
      case 1: {
        const [protocol, afterName] = str(0);
        const level = body[afterName] as number;
        const connectFlags = body[afterName + 1] as number;
        const keepalive = body.readUInt16BE(afterName + 2);
        let [clientId, at] = str(afterName + 4);
        if (connectFlags & 0x04) {
          [, at] = str(at);
          [, at] = str(at);
        }
        let username: string | undefined;
        let password: string | undefined;
        if (connectFlags & 0x80) [username, at] = str(at);
        if (connectFlags & 0x40) [password, at] = str(at);
        this.connects.push({
          protocol,
          level,
          flags: connectFlags,
          keepalive,
          clientId,
          username,
          password,
        });
        socket.write(Buffer.from([0x20, 0x02, 0x00, 0x00]));
        return;
      }
      case 3: {
        const qos = (flags >> 1) & 0x03;
        const [topic, at] = str(0);
        const text = body.subarray(qos > 0 ? at + 2 : at).toString('utf8');
        this.published.push({ topic, qos, text });
        const frame = JSON.parse(text) as Record<string, unknown>;
        const answer = frame.type === 'hello' ? this.helloReply?.(frame) : undefined;
        if (answer !== undefined) setImmediate(() => this.deliver(P2P, JSON.stringify(answer)));
        return;
      }
      case 8:
        this.subscribes.push(body.readUInt16BE(0));
        return;
      case 12:
        this.pings++;
        socket.write(Buffer.from([0xd0, 0x00]));
        return;
      case 14:
        socket.end();
        return;
    }
  }
}

function remainingLength(n: number): Buffer {
  const bytes: number[] = [];
  do {
    let byte = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) byte |= 0x80;
    bytes.push(byte);
  } while (n > 0);
  return Buffer.from(bytes);
}

/** The server side of UDP audio, from the wire format alone. */
class UdpSink {
  readonly packets: { sequence: number; ssrc: number; header: Buffer; payload: Buffer }[] = [];
  private constructor(readonly socket: UdpSocket) {
    socket.on('message', (data) => {
      const header = data.subarray(0, 16);
      const decipher = createDecipheriv('aes-128-ctr', Buffer.from(KEY_HEX, 'hex'), header);
      this.packets.push({
        sequence: header.readUInt32BE(12),
        ssrc: header.readUInt32BE(4),
        header,
        payload: Buffer.concat([decipher.update(data.subarray(16)), decipher.final()]),
      });
    });
  }
  static async start(): Promise<UdpSink> {
    const socket = createSocket('udp4');
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
    return new UdpSink(socket);
  }
  get port(): number {
    return this.socket.address().port;
  }
}

let backend: TestBackend | undefined;
let broker: DeliveringBroker | undefined;
let sink: UdpSink | undefined;
const boards: VirtualBoard[] = [];

afterEach(async () => {
  for (const board of boards.splice(0)) board.powerOff();
  await backend?.close();
  await broker?.close();
  sink?.socket.close();
  backend = undefined;
  broker = undefined;
  sink = undefined;
});

/** Our OTA reply's `mqtt` section, as the server issues it. */
function mqttSection(port: number): Record<string, unknown> {
  return {
    endpoint: `127.0.0.1:${port}`,
    client_id: CLIENT_ID,
    username: MAC,
    password: 'per-device-secret',
    keepalive: 240,
    publish_topic: 'device-server',
  };
}

async function start(
  otaReply: (backend: TestBackend, broker: DeliveringBroker) => unknown,
): Promise<{ board: VirtualBoard; backend: TestBackend; broker: DeliveringBroker }> {
  const b = await DeliveringBroker.start();
  broker = b;
  backend = await TestBackend.start({
    otaReply: (_request, server) => ({ body: otaReply(server, b) }),
  });
  const board = new VirtualBoard({
    mac: MAC,
    wifi: { ssid: 'rig-wifi' },
    otaUrl: backend.otaUrl,
    timing: FAST,
  });
  boards.push(board);
  board.powerOn();
  return { board, backend, broker: b };
}

describe('VirtualBoard over MQTT + UDP', () => {
  it('stores the OTA reply mqtt keys as the firmware does, connects at boot and answers MCP without a click', async () => {
    const lines: string[] = [];
    const { board, broker } = await start((server, b) => ({
      websocket: { url: server.wsUrl, token: 't', version: 1 },
      mqtt: mqttSection(b.port),
    }));
    board.console.on('line', (line) => lines.push(line.text));
    await board.waitForState('idle', 20_000);
    await broker.until(() => board.mqttConnected, 'connection');
    expect(board.transport).toBe('mqtt');
    expect(board.storage.read('mqtt', 'endpoint')).toEqual({
      type: 'string',
      value: `127.0.0.1:${broker.port}`,
    });
    expect(board.storage.read('mqtt', 'keepalive')).toEqual({ type: 'i32', value: 240 });
    expect(board.storage.read('mqtt', 'publish_topic')).toEqual({
      type: 'string',
      value: 'device-server',
    });
    expect(broker.connects).toEqual([
      {
        protocol: 'MQTT',
        level: 4,
        // user name, password, clean session
        flags: 0xc2,
        keepalive: 240,
        clientId: CLIENT_ID,
        username: MAC,
        password: 'per-device-secret',
      },
    ]);
    expect(lines.some((l) => /^I \(\d+\) MQTT: Connected to endpoint$/.test(l))).toBe(true);
    expect(lines.some((l) => l.includes('MQTT is not supported'))).toBe(false);

    broker.deliver(
      P2P,
      '{"session_id":"","type":"mcp","payload":{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}}',
    );
    const init = await broker.until(() => broker.reply(1), 'initialize reply');
    expect(init).toEqual({
      session_id: '',
      type: 'mcp',
      payload: {
        jsonrpc: '2.0',
        id: 1,
        result: {
          protocolVersion: '2024-11-05',
          capabilities: { tools: {} },
          serverInfo: { name: 'bread-compact-wifi', version: '2.4.2' },
        },
      },
    });
    // Any topic reaches it.
    broker.deliver(
      'some/other/topic',
      '{"type":"mcp","payload":{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"self.audio_speaker.set_volume","arguments":{"volume":21}}}}',
    );
    await broker.until(() => broker.reply(2), 'tools/call reply');
    expect(board.hardware.volume).toBe(21);
    expect(broker.published.every((p) => p.topic === 'device-server' && p.qos === 0)).toBe(true);
    expect(broker.subscribes).toEqual([]);
    expect(board.state).toBe('idle');
  });

  it('opens an audio session on a click: hello, server hello, UDP frames in order, listen stop and goodbye', async () => {
    const udp = await UdpSink.start();
    sink = udp;
    const { board, broker } = await start((server, b) => ({
      websocket: { url: server.wsUrl },
      mqtt: mqttSection(b.port),
    }));
    broker.helloReply = () => ({
      type: 'hello',
      transport: 'udp',
      session_id: 'S-1',
      audio_params: { format: 'opus', sample_rate: 24000, channels: 1, frame_duration: 60 },
      udp: { server: '127.0.0.1', port: udp.port, key: KEY_HEX, nonce: NONCE_HEX },
    });
    await board.waitForState('idle', 20_000);
    await broker.until(() => board.mqttConnected, 'connection');
    const ended = new Promise((resolve) => board.once('uplink-end', resolve));
    board.click();
    expect(await ended).toEqual({ sessionId: 'S-1', packets: 5, bytes: 5 * 40 });
    await board.waitForState('idle', 20_000);
    await broker.until(() => udp.packets.length === 5, 'five UDP packets');
    await broker.until(() => broker.published.length === 4, 'the goodbye');

    const texts = broker.published.map((p) => p.text);
    expect(texts).toEqual([
      '{"type":"hello","version":3,"transport":"udp","features":{"mcp":true},"audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}',
      '{"session_id":"S-1","type":"listen","state":"start","mode":"auto"}',
      '{"session_id":"S-1","type":"listen","state":"stop"}',
      '{"session_id":"S-1","type":"goodbye"}',
    ]);
    const packets = [...udp.packets].sort((a, b) => a.sequence - b.sequence);
    expect(packets.map((p) => p.sequence)).toEqual([1, 2, 3, 4, 5]);
    for (const p of packets) {
      expect(p.ssrc).toBe(0x12345678);
      expect(p.header[0]).toBe(0x01);
      expect(p.header.readUInt16BE(2)).toBe(40);
      // An Opus TOC byte: SILK wideband, 60 ms, one frame.
      expect(p.payload[0]).toBe(0x58);
      expect(p.payload).toHaveLength(40);
    }
    expect(board.uplink).toEqual({
      sessions: 1,
      packets: 5,
      bytes: 200,
      last: { sessionId: 'S-1', packets: 5, bytes: 200 },
    });

    // MCP after the session carries its id (the last one).
    broker.deliver(P2P, '{"type":"mcp","payload":{"jsonrpc":"2.0","id":3,"method":"tools/list"}}');
    expect((await broker.until(() => broker.reply(3), 'tools/list reply')).session_id).toBe('S-1');
  });

  it('honours a server goodbye only for its own session', async () => {
    const udp = await UdpSink.start();
    sink = udp;
    const { board, broker } = await start((_server, b) => ({ mqtt: mqttSection(b.port) }));
    broker.helloReply = () => ({
      type: 'hello',
      transport: 'udp',
      session_id: 'S-2',
      udp: { server: '127.0.0.1', port: udp.port, key: KEY_HEX, nonce: NONCE_HEX },
    });
    board.timing.uplinkFrames = 1_000_000;
    await board.waitForState('idle', 20_000);
    await broker.until(() => board.mqttConnected, 'connection');
    board.click();
    await board.waitForState('listening', 20_000);
    await broker.until(() => udp.packets.length > 0, 'a UDP packet');
    broker.deliver(P2P, '{"session_id":"S-other","type":"goodbye"}');
    broker.deliver(P2P, '{"type":"tts","state":"sentence_start","text":"marker"}');
    await board.waitForLine(/<< marker/, 20_000);
    expect(board.state).toBe('listening');
    broker.deliver(P2P, '{"session_id":"S-2","type":"goodbye"}');
    await board.waitForState('idle', 20_000);
    // The board answers a goodbye with its own (CloseAudioChannel).
    await broker.until(
      () => broker.published.at(-1)?.text === '{"session_id":"S-2","type":"goodbye"}',
      'the goodbye',
    );
    expect(board.sessionId).toBeUndefined();
  });

  it('logs the firmware line and goes idle when no server hello comes', async () => {
    const { board, broker } = await start((_server, b) => ({ mqtt: mqttSection(b.port) }));
    board.timing.helloTimeoutMs = 200;
    await board.waitForState('idle', 20_000);
    await broker.until(() => board.mqttConnected, 'connection');
    const failed = board.waitForLine(/MQTT: Failed to receive server hello/, 20_000);
    board.click();
    await failed;
    await board.waitForState('idle', 20_000);
    expect(board.uplink.sessions).toBe(0);
  });

  it('reconnects after a drop once mqttReconnectMs has passed', async () => {
    const { board, broker } = await start((_server, b) => ({ mqtt: mqttSection(b.port) }));
    await board.waitForState('idle', 20_000);
    await broker.until(() => broker.connects.length === 1 && board.mqttConnected, 'connection');
    const dropped = board.waitForLine(
      /^W \(\d+\) MQTT: MQTT disconnected, schedule reconnect in 0.3 seconds$/,
      5000,
    );
    broker.dropAll();
    await dropped;
    expect(board.mqttConnected).toBe(false);
    await broker.until(() => broker.connects.length === 2 && board.mqttConnected, 'reconnection');
    expect(board.transport).toBe('mqtt');
  });

  it('goes back to WebSocket after a reply that blanks the endpoint, and stays on MQTT without the blank', async () => {
    let reply: 'mqtt' | 'websocket-only' | 'websocket-and-blank' = 'mqtt';
    const { board, backend, broker } = await start((server, b) => {
      const websocket = { url: server.wsUrl, token: 't', version: 1 };
      if (reply === 'mqtt') return { websocket, mqtt: mqttSection(b.port) };
      if (reply === 'websocket-only') return { websocket };
      return { websocket, mqtt: { endpoint: '' } };
    });
    await board.waitForState('idle', 20_000);
    await broker.until(() => board.mqttConnected, 'connection');
    expect(board.transport).toBe('mqtt');

    // Keys are only overwritten: a reply without `mqtt` leaves the endpoint, MQTT wins.
    reply = 'websocket-only';
    board.reboot();
    await broker.until(() => broker.connects.length === 2 && board.mqttConnected, 'reconnection');
    expect(board.bootCount).toBe(2);
    expect(board.transport).toBe('mqtt');

    reply = 'websocket-and-blank';
    board.reboot();
    await broker.until(() => board.bootCount === 3 && board.state === 'idle', 'third boot');
    expect(board.transport).toBe('websocket');
    expect(board.mqttConnected).toBe(false);
    expect(board.storage.open('mqtt').getString('endpoint')).toBe('');
    // The other keys stay as they were.
    expect(board.storage.open('mqtt').getString('client_id')).toBe(CLIENT_ID);
    expect(broker.connects).toHaveLength(2);
    board.click();
    const connection = await backend.connection(0);
    expect(connection.hello).toMatchObject({ transport: 'websocket' });
    await board.waitForState('listening', 20_000);
  });
});
