import { createDecipheriv } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import { EventEmitter } from 'node:events';
import { buildDeviceHello } from '@xiaozhi-mcp/protocol';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BoardConsole } from './console.js';
import { BoardPanic, DeviceError } from './errors.js';
import {
  MqttChannel,
  type MqttClientLike,
  type MqttConnectOptions,
  parseMqttEndpoint,
  readMqttSettings,
} from './mqtt-channel.js';
import { NvsStorage } from './nvs-storage.js';

/** An mqtt.js stand-in: records what the channel does, lets the test play the broker. */
class FakeClient extends EventEmitter implements MqttClientLike {
  readonly published: { topic: string; message: string; qos: number }[] = [];
  readonly subscribed: string[] = [];
  ended: boolean | undefined;

  constructor(
    readonly url: string,
    readonly options: MqttConnectOptions,
    accept: boolean,
  ) {
    super();
    setImmediate(() => this.emit(accept ? 'connect' : 'close'));
  }
  publish(topic: string, message: string, options: { qos: 0 }): void {
    this.published.push({ topic, message, qos: options.qos });
  }
  subscribe(topic: string): void {
    this.subscribed.push(topic);
  }
  end(force?: boolean): void {
    this.ended = force === true;
    setImmediate(() => this.emit('close'));
  }
  deliver(topic: string, text: string): void {
    this.emit('message', topic, Buffer.from(text));
  }
}

const channels: MqttChannel[] = [];
let receiver: Socket | undefined;
afterEach(() => {
  vi.useRealTimers();
  for (const channel of channels.splice(0)) channel.stop();
  receiver?.close();
  receiver = undefined;
});

function rig(
  options: {
    accept?: () => boolean;
    mayReconnect?: () => boolean;
    endpoint?: string;
    helloTimeoutMs?: number;
  } = {},
) {
  const storage = new NvsStorage();
  const mqtt = storage.open('mqtt');
  mqtt.setString('endpoint', options.endpoint ?? '127.0.0.1:1883');
  mqtt.setString('client_id', 'GID_xiaozhi@@@f4_12_fa_00_00_01@@@uuid-1');
  mqtt.setString('username', 'f4:12:fa:00:00:01');
  mqtt.setString('password', 'pw');
  mqtt.setString('publish_topic', 'device-server');
  const console = new BoardConsole();
  const lines: string[] = [];
  console.on('line', (line) => lines.push(line.text.replace(/^(\w) \(\d+\) /, '$1 ')));
  const clients: FakeClient[] = [];
  const channel = new MqttChannel({
    settings: () => readMqttSettings(storage),
    console,
    reconnectMs: 50,
    connectTimeoutMs: 2000,
    helloTimeoutMs: options.helloTimeoutMs ?? 5000,
    mayReconnect: options.mayReconnect ?? (() => true),
    connect: (url, connectOptions) => {
      const client = new FakeClient(url, connectOptions, options.accept?.() ?? true);
      clients.push(client);
      return client;
    },
  });
  channels.push(channel);
  return { storage, channel, clients, lines };
}

describe('parseMqttEndpoint', () => {
  it('splits at the first colon, reads the port as std::stoi does, and uses TLS on 8883 only', () => {
    expect(parseMqttEndpoint('127.0.0.1:1883')).toEqual({
      kind: 'tcp',
      host: '127.0.0.1',
      port: 1883,
    });
    expect(parseMqttEndpoint('mqtt.xiaozhi.me')).toEqual({
      kind: 'tls',
      host: 'mqtt.xiaozhi.me',
      port: 8883,
    });
    expect(parseMqttEndpoint('h:8883')).toEqual({ kind: 'tls', host: 'h', port: 8883 });
    expect(parseMqttEndpoint('h: 1884/x')).toEqual({ kind: 'tcp', host: 'h', port: 1884 });
    expect(parseMqttEndpoint('h:abc')).toEqual({
      kind: 'stoi-throws',
      exception: 'invalid_argument',
    });
    expect(parseMqttEndpoint('h:')).toEqual({ kind: 'stoi-throws', exception: 'invalid_argument' });
    expect(parseMqttEndpoint('h:99999999999')).toEqual({
      kind: 'stoi-throws',
      exception: 'out_of_range',
    });
  });
});

describe('readMqttSettings', () => {
  it('reads NVS namespace mqtt, keepalive 240 when none is stored', () => {
    const storage = new NvsStorage();
    storage.open('mqtt').setString('endpoint', 'h:1883');
    expect(readMqttSettings(storage)).toEqual({
      endpoint: 'h:1883',
      clientId: '',
      username: '',
      password: '',
      keepalive: 240,
      publishTopic: '',
    });
    storage.open('mqtt').setInt('keepalive', 30);
    expect(readMqttSettings(storage).keepalive).toBe(30);
  });
});

describe('MqttChannel', () => {
  it('connects with the stored settings as MQTT 3.1.1, clean session, no automatic reconnect', async () => {
    const { channel, clients, lines } = rig();
    expect(await channel.start()).toBe(true);
    expect(channel.connected).toBe(true);
    const [client] = clients;
    expect(client?.url).toBe('mqtt://127.0.0.1:1883');
    expect(client?.options).toMatchObject({
      protocolVersion: 4,
      clean: true,
      clientId: 'GID_xiaozhi@@@f4_12_fa_00_00_01@@@uuid-1',
      username: 'f4:12:fa:00:00:01',
      password: 'pw',
      keepalive: 240,
      reconnectPeriod: 0,
    });
    expect(lines).toEqual([
      'I MQTT: Connecting to endpoint 127.0.0.1:1883',
      'I MQTT: Connected to endpoint',
    ]);
  });

  it('does nothing without an endpoint', async () => {
    const { channel, clients, lines } = rig({ endpoint: '' });
    expect(await channel.start()).toBe(false);
    expect(clients).toHaveLength(0);
    expect(lines).toEqual(['W MQTT: MQTT endpoint is not specified']);
  });

  it('aborts on a port std::stoi throws on', async () => {
    const { channel } = rig({ endpoint: 'h:port' });
    await expect(channel.start()).rejects.toBeInstanceOf(BoardPanic);
  });

  it('fails a TLS endpoint, then retries on schedule with what NVS says then', async () => {
    const { channel, clients, lines, storage } = rig({ endpoint: 'mqtt.example:8883' });
    expect(await channel.start()).toBe(false);
    expect(lines).toContain('E MQTT: Failed to connect to endpoint, code=-1');
    expect(lines).toContain('W MQTT: MQTT disconnected, schedule reconnect in 0.05 seconds');
    storage.open('mqtt').setString('endpoint', '127.0.0.1:1883');
    await until(() => channel.connected, { what: 'reconnected' });
    expect(clients).toHaveLength(1);
  });

  it('after a drop, logs it and reconnects once the delay is over, only while the board may', async () => {
    let may = false;
    const { channel, clients, lines } = rig({ mayReconnect: () => may });
    await channel.start();
    const disconnected = new Promise<void>((resolve) =>
      channel.once('disconnected', () => resolve()),
    );
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    clients[0]?.emit('close');
    await disconnected;
    expect(channel.connected).toBe(false);
    expect(lines.at(-1)).toBe('W MQTT: MQTT disconnected, schedule reconnect in 0.05 seconds');
    // Not idle when the timer fires: the firmware's timer does nothing.
    await vi.advanceTimersByTimeAsync(200);
    expect(vi.getTimerCount()).toBe(0);
    vi.useRealTimers();
    expect(clients).toHaveLength(1);
    may = true;
    channel.dropConnection(); // nothing to drop: still no client
    expect(await channel.start()).toBe(true);
    clients[1]?.emit('close');
    await until(() => clients.length === 3 && channel.connected, { what: 'reconnected' });
    expect(lines).toContain('I MQTT: Reconnecting to MQTT server');
  });

  it('reads every message, on any topic, as a JSON frame, and never subscribes', async () => {
    const { channel, clients, lines } = rig();
    const frames: (string | undefined)[] = [];
    channel.on('json', (frame) => frames.push(frame.type));
    await channel.start();
    const client = clients[0] as FakeClient;
    client.deliver(
      'devices/p2p/f4_12_fa_00_00_01',
      '{"type":"mcp","payload":{"jsonrpc":"2.0","id":1,"method":"tools/list"}}',
    );
    client.deliver('anything/else', '{"type":"tts","state":"start"}');
    client.deliver('x', 'not json');
    client.deliver('x', '{"type":7}');
    expect(frames).toEqual(['mcp', 'tts']);
    expect(lines.slice(-2)).toEqual([
      'E MQTT: Failed to parse json message not json',
      'E MQTT: Message type is invalid',
    ]);
    expect(client.subscribed).toEqual([]);
  });

  it('publishes QoS 0 on publish_topic, and not at all without one', async () => {
    const { channel, clients, storage } = rig();
    await channel.start();
    expect(channel.sendText('{"a":1}')).toBe(true);
    expect(clients[0]?.published).toEqual([{ topic: 'device-server', message: '{"a":1}', qos: 0 }]);
    storage.open('mqtt').setString('publish_topic', '');
    await channel.start();
    expect(channel.sendText('{"a":2}')).toBe(false);
    expect(clients[1]?.published).toEqual([]);
  });

  it('opens an audio channel: hello, server hello, UDP; goodbye closes it with the session id', async () => {
    receiver = createSocket('udp4');
    const packets: Buffer[] = [];
    receiver.on('message', (data) => packets.push(data));
    await new Promise<void>((resolve) => receiver?.bind(0, '127.0.0.1', resolve));
    const port = receiver.address().port;
    const { channel, clients, lines } = rig();
    await channel.start();
    const client = clients[0] as FakeClient;
    const hello = buildDeviceHello({ transport: 'udp', features: { mcp: true } });
    const opened = channel.openAudioChannel(hello);
    await until(() => client.published.length === 1, { what: 'the hello published' });
    expect(client.published[0]?.message).toBe(
      '{"type":"hello","version":3,"transport":"udp","features":{"mcp":true},"audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}',
    );
    client.deliver(
      'devices/p2p/f4_12_fa_00_00_01',
      JSON.stringify({
        type: 'hello',
        transport: 'udp',
        session_id: 'S1',
        audio_params: { format: 'opus', sample_rate: 24000, channels: 1, frame_duration: 60 },
        udp: {
          server: '127.0.0.1',
          port,
          key: '00112233445566778899aabbccddeeff',
          nonce: '01000000000000070000000000000000',
        },
      }),
    );
    await opened;
    expect(channel.audioOpen).toBe(true);
    expect(channel.sessionId).toBe('S1');
    expect(lines).toContain('I MQTT: Session ID: S1');
    expect(channel.sendAudio(Buffer.from([0x58, 0xaa, 0xbb]), 0)).toBe(true);
    await until(() => packets.length === 1, { what: 'a UDP packet' });
    const packet = packets[0] as Buffer;
    expect(packet.readUInt32BE(12)).toBe(1);
    expect(packet.readUInt32BE(4)).toBe(7);
    const decipher = createDecipheriv(
      'aes-128-ctr',
      Buffer.from('00112233445566778899aabbccddeeff', 'hex'),
      packet.subarray(0, 16),
    );
    expect(Buffer.concat([decipher.update(packet.subarray(16)), decipher.final()])).toEqual(
      Buffer.from([0x58, 0xaa, 0xbb]),
    );
    const closed = new Promise((resolve) => channel.once('audio-closed', resolve));
    channel.closeAudioChannel();
    expect(await closed).toBe('S1');
    expect(channel.audioOpen).toBe(false);
    expect(client.published.at(-1)?.message).toBe('{"session_id":"S1","type":"goodbye"}');
    // MCP replies keep using the last session id.
    expect(channel.sessionId).toBe('S1');
  });

  it('gives up after the hello timeout without a server hello', async () => {
    const { channel, lines } = rig({ helloTimeoutMs: 100 });
    await channel.start();
    const error = await channel
      .openAudioChannel(buildDeviceHello({ transport: 'udp', features: { mcp: true } }))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeviceError);
    expect((error as DeviceError).code).toBe('MQTT_HELLO_TIMEOUT');
    expect(lines.at(-1)).toBe('E MQTT: Failed to receive server hello');
  });

  it('honours a server goodbye with its session id or none, not another', async () => {
    const { channel, clients } = rig();
    await channel.start();
    const client = clients[0] as FakeClient;
    client.deliver('t', '{"type":"hello","transport":"udp","session_id":"S9"}');
    let goodbyes = 0;
    channel.on('goodbye', () => goodbyes++);
    client.deliver('t', '{"type":"goodbye","session_id":"other"}');
    expect(goodbyes).toBe(0);
    client.deliver('t', '{"type":"goodbye","session_id":"S9"}');
    expect(goodbyes).toBe(1);
    client.deliver('t', '{"type":"goodbye"}');
    expect(goodbyes).toBe(2);
  });

  it('crashes on a server hello without a string transport, as the firmware does', async () => {
    const { channel, clients } = rig();
    await channel.start();
    const panics: BoardPanic[] = [];
    channel.on('panic', (panic) => panics.push(panic));
    clients[0]?.deliver('t', '{"type":"hello","session_id":"S"}');
    expect(panics).toHaveLength(1);
    expect(panics[0]?.kind).toBe('load-prohibited');
    expect(channel.connected).toBe(false);
  });
});
