/**
 * The embedded MQTT broker with clients nobody here wrote: the `mqtt` npm package as a fake
 * board (connects with what our OTA reply issued, answers MCP with the device SDK's McpServer),
 * and Debian's mosquitto-clients as an operator. Firmware facts are literals here
 * (docs/protocol.md §5; xiaozhi-esp32 main/protocols/mqtt_protocol.cc).
 */
import { execFile, spawn } from 'node:child_process';
import { createCipheriv } from 'node:crypto';
import dgram from 'node:dgram';
import { once } from 'node:events';
import { type Socket, connect as tcpConnect } from 'node:net';
import { promisify } from 'node:util';
import { McpServer, VirtualBoard } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { validateOtaReply } from '@xiaozhi-mcp/protocol';
import { until } from '@xiaozhi-mcp/test-kit';
import mqtt, { type MqttClient } from 'mqtt';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { type StartOptions, XiaozhiServer } from './server.js';

const API_TOKEN = 'operator-token-1';
/** A hang guard for what the test waits on, generous for a loaded CI machine. */
const WAIT_MS = 20_000;

let server: XiaozhiServer | undefined;
const clients: MqttClient[] = [];
const virtualBoards: VirtualBoard[] = [];
const sockets: Socket[] = [];
let logs: Record<string, unknown>[] = [];

afterEach(async () => {
  for (const client of clients.splice(0)) client.end(true);
  for (const virtual of virtualBoards.splice(0)) virtual.powerOff();
  for (const socket of sockets.splice(0)) socket.destroy();
  await server?.stop();
  server = undefined;
  logs = [];
});

async function startServer(options: StartOptions = {}): Promise<XiaozhiServer> {
  logs = [];
  server = await XiaozhiServer.start({
    port: 0,
    mqttPort: 0,
    transport: 'mqtt',
    apiTokens: [API_TOKEN],
    logger: pino(
      { level: 'debug' },
      { write: (line: string) => logs.push(JSON.parse(line) as Record<string, unknown>) },
    ),
    ...options,
  });
  return server;
}

function mqttPort(target: XiaozhiServer): number {
  return Number(new URL(target.urls.mqtt ?? '').port);
}

/** What a 2.4.x board POSTs (docs/protocol.md §7), trimmed to what the server reads. */
async function otaCheck(
  target: XiaozhiServer,
  mac: string,
  uuid: string,
): Promise<Record<string, Record<string, unknown>>> {
  const response = await fetch(target.urls.ota, {
    method: 'POST',
    headers: {
      'Activation-Version': '1',
      'Device-Id': mac,
      'Client-Id': uuid,
      'User-Agent': 'bread-compact-wifi/2.4.2',
      'Accept-Language': 'zh-CN',
      'Content-Type': 'application/json',
    },
    body: JSON.stringify({
      version: 2,
      mac_address: mac,
      uuid,
      chip_model_name: 'esp32s3',
      application: { name: 'xiaozhi', version: '2.4.2' },
      board: { type: 'bread-compact-wifi' },
    }),
  });
  expect(response.status).toBe(200);
  return (await response.json()) as Record<string, Record<string, unknown>>;
}

async function api(
  target: XiaozhiServer,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`${target.urls.api}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${API_TOKEN}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

interface Received {
  readonly topic: string;
  readonly text: string;
}

/**
 * A board on MQTT as the firmware behaves (mqtt_protocol.cc): connects with the stored
 * endpoint, client id, username and password, never subscribes, reads anything delivered to it
 * as a JSON frame, and publishes QoS 0 on its publish_topic.
 */
class FakeBoard {
  readonly received: Received[] = [];
  readonly mcp = new McpServer({ board: { name: 'bread-compact-wifi', version: '2.4.2' } });
  /** The last audio session id from a server hello ("" before any, mqtt_protocol.cc session_id_). */
  sessionId = '';
  /** Calls are left unanswered (a board that hangs). */
  silent = false;

  private constructor(
    readonly client: MqttClient,
    readonly publishTopic: string,
  ) {
    this.mcp.addTool(
      {
        name: 'self.light.set_brightness',
        description: 'Set the light',
        properties: [{ name: 'level', type: 'integer', minimum: 0, maximum: 100 }],
      },
      (args) => args.integer('level') >= 0,
    );
    this.mcp.setSender((payload) =>
      this.publish(`{"session_id":"${this.sessionId}","type":"mcp","payload":${payload}}`),
    );
    client.on('message', (topic, payload) => {
      const text = payload.toString('utf8');
      this.received.push({ topic, text });
      const frame = JSON.parse(text) as Record<string, unknown>;
      if (frame.type === 'hello' && typeof frame.session_id === 'string')
        this.sessionId = frame.session_id;
      if (frame.type === 'mcp' && !this.silent)
        this.mcp.handlePayload(JSON.stringify(frame.payload));
    });
  }

  /** Connects with the OTA reply's `mqtt` section, as the board stores it in NVS. */
  static async connect(
    section: Record<string, unknown>,
    patch: Partial<mqtt.IClientOptions> = {},
  ): Promise<FakeBoard> {
    const [host, port] = String(section.endpoint).split(':');
    const client = await mqtt.connectAsync({
      host: host ?? '',
      port: Number(port),
      protocol: 'mqtt',
      protocolVersion: 4,
      clientId: String(section.client_id),
      username: String(section.username),
      password: String(section.password),
      keepalive: Number(section.keepalive),
      reconnectPeriod: 0,
      connectTimeout: 10_000,
      ...patch,
    });
    clients.push(client);
    return new FakeBoard(client, String(section.publish_topic));
  }

  publish(text: string, options: mqtt.IClientPublishOptions = { qos: 0 }, topic?: string): void {
    this.client.publish(topic ?? this.publishTopic, text, options);
  }

  async waitFor(match: (frame: Received) => boolean, what: string): Promise<Received> {
    return until(() => this.received.find(match), {
      what: `the board to get ${what}`,
      seen: () => this.received,
    });
  }

  closed(): Promise<void> {
    if (this.client.disconnected || !this.client.connected) return Promise.resolve();
    return new Promise((resolve) => this.client.once('close', () => resolve()));
  }
}

const MAC = 'f4:12:fa:00:00:01';
const UUID = '6c1f8f0e-0000-4000-8000-00000000e001';
const MAC_B = 'f4:12:fa:00:00:02';
const UUID_B = '6c1f8f0e-0000-4000-8000-00000000e002';

/** A board checked in and connected, with the server ready for it. */
async function board(
  target: XiaozhiServer,
  mac = MAC,
  uuid = UUID,
): Promise<{ board: FakeBoard; reply: Record<string, Record<string, unknown>> }> {
  const reply = await otaCheck(target, mac, uuid);
  const connected = await FakeBoard.connect(reply.mqtt ?? {});
  await target.registry.waitForReady(mac, WAIT_MS);
  return { board: connected, reply };
}

/** Connects an MQTT client and resolves with its CONNACK return code (0: accepted). */
async function connackCode(target: XiaozhiServer, options: mqtt.IClientOptions): Promise<number> {
  const client = mqtt.connect({
    host: '127.0.0.1',
    port: mqttPort(target),
    protocolVersion: 4,
    reconnectPeriod: 0,
    connectTimeout: 10_000,
    ...options,
  });
  clients.push(client);
  return new Promise((resolve) => {
    client.once('connect', () => resolve(0));
    client.once('error', (error) => resolve(Number((error as { code?: number }).code ?? -1)));
  });
}

/** An operator's MQTT client (the API token as password), closed after the test. */
async function connectOperator(target: XiaozhiServer): Promise<mqtt.MqttClient> {
  const operator = await mqtt.connectAsync({
    host: '127.0.0.1',
    port: mqttPort(target),
    protocolVersion: 4,
    username: 'operator',
    password: API_TOKEN,
    reconnectPeriod: 0,
  });
  clients.push(operator);
  return operator;
}

describe('the OTA reply offers MQTT', { timeout: 60_000 }, () => {
  it('carries mqtt{endpoint, client_id, username, password, keepalive, publish_topic} and no websocket', async () => {
    const target = await startServer();
    const reply = await otaCheck(target, MAC, UUID);
    expect(reply.websocket).toBeUndefined();
    expect(reply.mqtt).toEqual({
      endpoint: `127.0.0.1:${mqttPort(target)}`,
      client_id: `GID_xiaozhi@@@f4_12_fa_00_00_01@@@${UUID}`,
      username: MAC,
      password: expect.stringMatching(/^[0-9a-f]{32}$/),
      keepalive: 240,
      publish_topic: 'device-server/f4_12_fa_00_00_01',
    });
    expect(validateOtaReply(reply).filter((f) => f.severity !== 'warning')).toEqual([]);
    // Issued once per device: the next check gives the same password.
    expect((await otaCheck(target, MAC, UUID)).mqtt?.password).toBe(reply.mqtt?.password);
    expect(target.mqttPasswordFor(MAC)).toBe(reply.mqtt?.password);
    expect(target.urls.mqtt).toBe(`mqtt://127.0.0.1:${mqttPort(target)}`);
    expect(target.urls.udp).toMatch(/^udp:\/\/127\.0\.0\.1:\d+$/);
  });

  it('offers WebSocket with a blank MQTT endpoint, per device, and the API switches it', async () => {
    const target = await startServer({ transport: 'websocket' });
    const ws = await otaCheck(target, MAC, UUID);
    expect(ws.websocket).toMatchObject({ url: target.urls.websocket });
    // A stored, non-empty mqtt/endpoint wins at boot: the blank brings a board back.
    expect(ws.mqtt).toEqual({ endpoint: '' });
    expect(validateOtaReply(ws)).toEqual([]);

    expect(
      await api(target, 'PUT', '/devices/F4:12:FA:00:00:01/transport', { transport: 'mqtt' }),
    ).toEqual({ status: 200, body: { deviceId: MAC, transport: 'mqtt' } });
    const switched = await otaCheck(target, MAC, UUID);
    expect(switched.websocket).toBeUndefined();
    expect(switched.mqtt).toMatchObject({ username: MAC, keepalive: 240 });
    expect((await api(target, 'GET', `/devices/${MAC}`)).body.device).toMatchObject({
      offeredTransport: 'mqtt',
    });
    // Another device keeps the configured transport.
    expect((await otaCheck(target, MAC_B, UUID_B)).websocket).toBeDefined();

    target.setTransport(MAC, 'websocket');
    const back = await otaCheck(target, MAC, UUID);
    expect(back.mqtt).toEqual({ endpoint: '' });
    expect(back.websocket).toBeDefined();

    expect(
      (await api(target, 'PUT', `/devices/${MAC}/transport`, { transport: 'udp' })).status,
    ).toBe(400);
    expect(
      (await api(target, 'PUT', '/devices/nope/transport', { transport: 'mqtt' })).status,
    ).toBe(400);
  });

  it('refuses to start when boards could not read the endpoint (an IPv6 host), leaving nothing bound', async () => {
    await expect(
      XiaozhiServer.start({
        port: 0,
        mqttPort: 0,
        transport: 'mqtt',
        publicUrl: 'http://[::1]:8000',
        logLevel: 'silent',
      }),
    ).rejects.toMatchObject({
      code: 'CONFIG_HAZARD',
      message: expect.stringContaining('mqtt.endpoint'),
    });
  });

  it('refuses mqtt for a device when the server runs no broker (409)', async () => {
    server = await XiaozhiServer.start({
      port: 0,
      transport: 'websocket',
      apiTokens: [API_TOKEN],
      logLevel: 'silent',
    });
    const target = server;
    expect(target.urls.mqtt).toBeUndefined();
    const answer = await api(target, 'PUT', `/devices/${MAC}/transport`, { transport: 'mqtt' });
    expect(answer.status).toBe(409);
    expect(answer.body).toMatchObject({ error: { code: 'NO_MQTT_BROKER' } });
    expect(() => target.setTransport(MAC, 'mqtt')).toThrow(/no MQTT broker/);
  });
});

describe('a board on MQTT', { timeout: 60_000 }, () => {
  it('gets frames with any UTF-8 text byte for byte, each PUBLISH as long as its bytes', async () => {
    const target = await startServer();
    const { board: fake } = await board(target);
    const session = target.registry.get(MAC)?.session;
    const texts = [
      '{"type":"x","text":"grüße 温度 😀 \u2028"}',
      '{"type":"x","text":"\\ud83d lone escapes stay ASCII"}',
      '{"type":"x","text":"after"}',
    ];
    for (const text of texts) session?.sendRaw(text);
    await fake.waitFor((r) => r.text.includes('"after"'), 'the last frame');
    expect(fake.received.filter((r) => r.text.startsWith('{"type":"x"'))).toEqual(
      texts.map((text) => ({ topic: 'devices/p2p/f4_12_fa_00_00_01', text })),
    );
  });

  it('gets a session without a hello: initialize, tools/list and calls through the API', async () => {
    const target = await startServer();
    const { board: fake } = await board(target);
    const record = target.registry.get(MAC);
    expect(record).toMatchObject({ ready: true, transport: 'mqtt' });
    expect(record?.session?.info).toMatchObject({
      sessionId: '',
      protocolVersion: 3,
      transport: 'mqtt',
      helloText: '',
    });
    expect(record?.session?.canPing).toBe(false);
    // initialize went to the board's delivery topic, with session_id "" (no audio session).
    const initialize = fake.received.find((r) => r.text.includes('"initialize"'));
    expect(initialize?.topic).toBe('devices/p2p/f4_12_fa_00_00_01');
    expect(initialize?.text.startsWith('{"session_id":"","type":"mcp","payload":')).toBe(true);

    const listed = await api(target, 'GET', '/devices');
    expect(listed.body.devices).toEqual([
      expect.objectContaining({ deviceId: MAC, transport: 'mqtt', offeredTransport: 'mqtt' }),
    ]);
    expect((await api(target, 'GET', `/devices/${MAC}/tools`)).body.tools).toContainEqual(
      expect.objectContaining({ name: 'self.light.set_brightness' }),
    );
    expect(
      await api(target, 'POST', `/devices/${MAC}/call`, {
        name: 'self.light.set_brightness',
        arguments: { level: 30 },
      }),
    ).toEqual({
      status: 200,
      body: { result: { content: [{ type: 'text', text: 'true' }], isError: false } },
    });
  });

  it('rejects pending calls with DEVICE_DISCONNECTED when the connection drops', async () => {
    const target = await startServer();
    const { board: fake } = await board(target);
    fake.silent = true;
    const call = api(target, 'POST', `/devices/${MAC}/call`, {
      name: 'self.light.set_brightness',
      arguments: { level: 1 },
    });
    await fake.waitFor((r) => r.text.includes('tools/call'), 'tools/call');
    fake.client.stream.destroy();
    const answer = await call;
    expect(answer.status).toBe(409);
    expect(answer.body).toMatchObject({ error: { code: 'DEVICE_DISCONNECTED' } });
    expect(target.registry.get(MAC)?.session).toBeUndefined();
  });

  it('may publish only QoS 0 on its own publish topic: anything else closes its connection', async () => {
    const target = await startServer();
    const { board: a } = await board(target);
    const { board: b } = await board(target, MAC_B, UUID_B);
    const frames: string[] = [];
    target.registry.get(MAC_B)?.session?.on('frame', (direction, text) => {
      if (direction === 'in') frames.push(text);
    });
    // Board A speaks as board B.
    a.publish('{"session_id":"","type":"listen","state":"start"}', { qos: 0 }, b.publishTopic);
    await a.closed();
    expect(frames).toEqual([]);
    expect(target.registry.get(MAC)?.session).toBeUndefined();
    expect(target.registry.get(MAC_B)?.session?.closed).toBe(false);
    expect(logs.some((l) => String(l.msg).includes('not its publish topic'))).toBe(true);

    // QoS 1 (and 2) on its own topic: the firmware publishes QoS 0 only.
    b.publish('{"session_id":"","type":"listen","state":"start"}', { qos: 1 });
    await b.closed();
    expect(target.registry.get(MAC_B)?.session).toBeUndefined();
  });

  it('cannot subscribe (SUBACK 0x80) and still gets what is delivered to it', async () => {
    const target = await startServer();
    const { board: fake } = await board(target);
    // MQTT 3.1.1 §3.9.3: a SUBACK return code of 0x80 is a failure.
    const suback = new Promise<unknown>((resolve) =>
      fake.client.on('packetreceive', (packet) => {
        if (packet.cmd === 'suback') resolve(packet.granted);
      }),
    );
    fake.client.subscribe('#', () => {});
    expect(await suback).toEqual([128]);
    expect(fake.client.connected).toBe(true);
    expect(
      (
        await api(target, 'POST', `/devices/${MAC}/call`, {
          name: 'self.light.set_brightness',
          arguments: { level: 5 },
        })
      ).status,
    ).toBe(200);
  });

  it('refuses an impostor (bad password, bad username, a client id of another form) and keeps the board', async () => {
    const target = await startServer();
    const { board: fake, reply } = await board(target);
    const mqttSection = reply.mqtt ?? {};
    const clientId = String(mqttSection.client_id);
    // MQTT 3.1.1 §3.2.2.3: 4 bad user name or password, 2 identifier rejected.
    expect(await connackCode(target, { clientId, username: MAC, password: 'guess' })).toBe(4);
    expect(
      await connackCode(target, {
        clientId,
        username: MAC_B,
        password: String(mqttSection.password),
      }),
    ).toBe(4);
    expect(await connackCode(target, { clientId, username: MAC })).toBe(4);
    expect(await connackCode(target, { clientId: 'anything', username: MAC, password: 'x' })).toBe(
      2,
    );
    expect(
      await connackCode(target, {
        clientId: `GID_xiaozhi@@@f4_12_fa_00_00_01@@@${'u'.repeat(65)}`,
        username: MAC,
        password: String(mqttSection.password),
      }),
    ).toBe(2);
    // The board's session was never touched.
    expect(target.registry.get(MAC)?.sessions).toBe(1);
    expect(fake.client.connected).toBe(true);
    expect(
      (
        await api(target, 'POST', `/devices/${MAC}/call`, {
          name: 'self.light.set_brightness',
          arguments: { level: 5 },
        })
      ).status,
    ).toBe(200);
  });

  it('refuses a known Device-Id with another Client-Id (not authorized), logged as the gateway does', async () => {
    // A static device token is shared by every board: only the pin tells them apart.
    const target = await startServer({ tokens: ['shared-device-token'] });
    await board(target);
    const other = 'ffffffff-0000-4000-8000-000000000000';
    expect(
      await connackCode(target, {
        clientId: `GID_xiaozhi@@@f4_12_fa_00_00_01@@@${other}`,
        username: MAC,
        password: 'shared-device-token',
      }),
    ).toBe(5);
    const refusal = logs.find((l) => String(l.msg).startsWith('MQTT connection refused: device'));
    expect(refusal).toMatchObject({ deviceId: MAC, clientId: other, pinnedClientId: UUID });
    expect(String(refusal?.msg)).toContain(
      `device ${MAC} is known with another Client-Id: if this board was re-flashed (a new uuid), release it with \`xiaozhi-mcp devices forget ${MAC}\``,
    );
    expect(target.registry.get(MAC)?.sessions).toBe(1);
  });

  it('reconnecting with its own credentials replaces the connection it lost', async () => {
    const target = await startServer();
    const { board: first, reply } = await board(target);
    const second = await FakeBoard.connect(reply.mqtt ?? {});
    await first.closed();
    await target.registry.waitForReady(MAC, WAIT_MS);
    await until(() => target.registry.get(MAC)?.sessions === 2, { what: 'the second session' });
    expect(target.registry.get(MAC)).toMatchObject({ sessions: 2, ready: true });
    const call = await api(target, 'POST', `/devices/${MAC}/call`, {
      name: 'self.light.set_brightness',
      arguments: { level: 7 },
    });
    expect(call.status).toBe(200);
    expect(second.received.some((r) => r.text.includes('"level":7'))).toBe(true);
  });

  it('answers a UDP hello with the audio endpoint, carries the session id in MCP until goodbye', async () => {
    const target = await startServer();
    const { board: fake } = await board(target);
    // The MQTT build's hello (transport before features), mqtt_protocol.cc GetHelloMessage.
    fake.publish(
      '{"type":"hello","version":3,"transport":"udp","features":{"mcp":true},"audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}',
    );
    const answer = await fake.waitFor((r) => r.text.includes('"hello"'), 'server hello');
    const hello = JSON.parse(answer.text) as {
      transport: string;
      session_id: string;
      udp: { server: string; port: number; key: string; nonce: string };
    };
    expect(answer.topic).toBe('devices/p2p/f4_12_fa_00_00_01');
    expect(hello).toMatchObject({
      type: 'hello',
      transport: 'udp',
      udp: {
        server: '127.0.0.1',
        port: Number(new URL(target.urls.udp ?? '').port),
        key: expect.stringMatching(/^[0-9a-f]{32}$/i),
        nonce: expect.stringMatching(/^[0-9a-f]{32}$/i),
      },
    });
    const sessionId = hello.session_id;
    expect(target.registry.get(MAC)?.session?.info.sessionId).toBe(sessionId);

    // MCP envelopes now carry the audio session's id.
    await api(target, 'POST', `/devices/${MAC}/call`, {
      name: 'self.light.set_brightness',
      arguments: { level: 9 },
    });
    expect(
      fake.received
        .find((r) => r.text.includes('"level":9'))
        ?.text.startsWith(`{"session_id":"${sessionId}","type":"mcp"`),
    ).toBe(true);

    // One audio packet, as mqtt_protocol.cc SendAudio builds it: the nonce with len at 2..3,
    // timestamp at 8..11 and sequence at 12..15 (big-endian), AES-128-CTR with that as the IV.
    const payload = Buffer.from('opus-frame');
    const header = Buffer.from(hello.udp.nonce, 'hex');
    header.writeUInt16BE(payload.length, 2);
    header.writeUInt32BE(60, 8);
    header.writeUInt32BE(1, 12);
    const cipher = createCipheriv('aes-128-ctr', Buffer.from(hello.udp.key, 'hex'), header);
    const packet = Buffer.concat([header, cipher.update(payload), cipher.final()]);
    const socket = dgram.createSocket('udp4');
    await new Promise<void>((resolve) =>
      socket.send(packet, hello.udp.port, hello.udp.server, () => resolve()),
    );
    socket.close();
    let audio: Record<string, unknown> | null = null;
    await until(
      async () => {
        const device = (await api(target, 'GET', `/devices/${MAC}`)).body.device;
        audio = (device as Record<string, unknown>).audio as Record<string, unknown> | null;
        return audio?.packets === 1;
      },
      { what: 'the API to count the UDP packet', seen: () => audio },
    );
    expect(audio).toMatchObject({ sessionId, packets: 1, bytes: payload.length, open: true });

    // The board's goodbye ends it; MCP goes back to "".
    fake.publish(`{"session_id":"${sessionId}","type":"goodbye"}`);
    await until(() => target.registry.get(MAC)?.session?.info.sessionId === '', {
      what: 'the goodbye to end the session',
    });
    expect(target.registry.get(MAC)?.session?.info.sessionId).toBe('');
    expect(target.audioStatsFor(MAC)).toMatchObject({ sessionId, open: false });
  });

  it('ends an audio session from the server with {"session_id":S,"type":"goodbye"}', async () => {
    const target = await startServer();
    const { board: fake } = await board(target);
    expect(target.endAudioSession(MAC)).toBe(false);
    fake.publish(
      '{"type":"hello","version":3,"transport":"udp","features":{"mcp":true},"audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}',
    );
    await fake.waitFor((r) => r.text.includes('"hello"'), 'server hello');
    const sessionId = fake.sessionId;
    expect(target.endAudioSession(MAC)).toBe(true);
    const goodbye = await fake.waitFor((r) => r.text.includes('goodbye'), 'goodbye');
    expect(goodbye.text).toBe(`{"session_id":"${sessionId}","type":"goodbye"}`);
    expect(target.registry.get(MAC)?.session?.info.sessionId).toBe('');
    expect(target.audioStatsFor(MAC)).toMatchObject({ open: false });
  });
});

describe('operators', { timeout: 60_000 }, () => {
  it('subscribe to anything and see both directions; their publishes to devices/p2p reach the board', async () => {
    const target = await startServer();
    const { board: fake } = await board(target);
    const operator = await connectOperator(target);
    const seen: Received[] = [];
    operator.on('message', (topic, payload) => seen.push({ topic, text: payload.toString() }));
    expect(await operator.subscribeAsync('#')).toEqual([
      expect.objectContaining({ topic: '#', qos: 0 }),
    ]);
    await api(target, 'POST', `/devices/${MAC}/call`, {
      name: 'self.light.set_brightness',
      arguments: { level: 42 },
    });
    await until(() => seen.length >= 2, { what: 'the operator to see the call and its reply' });
    expect(seen.map((s) => s.topic)).toEqual([
      'devices/p2p/f4_12_fa_00_00_01',
      'device-server/f4_12_fa_00_00_01',
    ]);
    operator.publish(
      'devices/p2p/f4_12_fa_00_00_01',
      '{"session_id":"","type":"mcp","payload":{"jsonrpc":"2.0","id":9001,"method":"tools/list","params":{"cursor":""}}}',
    );
    await fake.waitFor((r) => r.text.includes('9001'), 'the operator request');
    // The board's answer goes to its publish topic, where the operator sees it.
    await until(() => seen.some((s) => s.text.includes('"id":9001,"result"')), {
      what: "the operator to see the board's answer",
    });
    expect(seen.find((s) => s.text.includes('"id":9001,"result"'))?.topic).toBe(
      'device-server/f4_12_fa_00_00_01',
    );
  });

  it('see the calls and answers made while they are connected; the board gets every call once, before, during and after', async () => {
    const target = await startServer();
    const { board: fake } = await board(target);
    const call = (level: number) =>
      api(target, 'POST', `/devices/${MAC}/call`, {
        name: 'self.light.set_brightness',
        arguments: { level },
      });
    const calls = (level: number) =>
      fake.received.filter((r) => r.text.includes(`"level":${level}}`));
    await call(11);
    const operator = await connectOperator(target);
    const seen: Received[] = [];
    operator.on('message', (topic, payload) => seen.push({ topic, text: payload.toString() }));
    await operator.subscribeAsync('devices/p2p/#');
    await operator.subscribeAsync('device-server/#');
    await call(22);
    await until(() => seen.some((s) => s.text.includes('"level":22}')), {
      what: 'the operator to see the call made while it watches',
    });
    // And the board's answer to it, on the board's publish topic.
    await until(() => seen.some((s) => s.topic === 'device-server/f4_12_fa_00_00_01'), {
      what: "the operator to see the board's answer",
    });
    await operator.endAsync();
    await until(() => target.mqttClients === 1, { what: 'the operator to be gone' });
    await call(33);
    expect([calls(11).length, calls(22).length, calls(33).length]).toEqual([1, 1, 1]);
    // Written to the board directly or through its topic, a call is the same PUBLISH.
    expect(new Set(fake.received.map((r) => r.topic))).toEqual(
      new Set(['devices/p2p/f4_12_fa_00_00_01']),
    );
    expect(seen.filter((s) => s.text.includes('"level":')).map((s) => s.text)).toEqual([
      calls(22)[0]?.text,
    ]);
  });

  it('are refused without an API token, with a wrong one, or with a board client id', async () => {
    const target = await startServer();
    expect(await connackCode(target, { username: 'operator', password: 'wrong' })).toBe(4);
    expect(
      await connackCode(target, {
        username: 'operator',
        password: API_TOKEN,
        clientId: `GID_xiaozhi@@@f4_12_fa_00_00_01@@@${UUID}`,
      }),
    ).toBe(2);
    await server?.stop();
    const open = await startServer({ apiTokens: [] });
    expect(await connackCode(open, { username: 'operator', password: '' })).toBe(4);
  });
});

/** The firmware's pauses shortened, with a hello wait for a busy machine. */
const FAST = { ...FAST_TIMING, helloTimeoutMs: 3000 };

function virtualBoard(target: XiaozhiServer, mac = MAC): VirtualBoard {
  const created = new VirtualBoard({
    mac,
    wifi: { ssid: 'lab' },
    otaUrl: target.urls.ota,
    timing: FAST,
  });
  virtualBoards.push(created);
  return created;
}

describe('a virtual board (the device SDK) on the embedded broker', { timeout: 60_000 }, () => {
  it('is reached with no click, streams audio over UDP on a click, and goes back to WebSocket when told', async () => {
    const target = await startServer();
    const vboard = virtualBoard(target);
    vboard.powerOn();
    // No click: MQTT is up from boot on, and MCP with it.
    const record = await target.registry.waitForReady(MAC, WAIT_MS);
    expect(vboard.transport).toBe('mqtt');
    expect(record.transport).toBe('mqtt');
    expect(
      await api(target, 'POST', `/devices/${MAC}/call`, {
        name: 'self.audio_speaker.set_volume',
        arguments: { volume: 30 },
      }),
    ).toMatchObject({ status: 200, body: { result: { isError: false } } });

    // A click: hello, the server's answer, five UDP frames, goodbye.
    const ended = once(vboard, 'uplink-end');
    vboard.click();
    await ended;
    const audio = await until(
      () => {
        const stats = target.audioStatsFor(MAC);
        return stats?.open === false && stats;
      },
      { what: 'the audio session to close', seen: () => target.audioStatsFor(MAC) },
    );
    expect(audio).toMatchObject({ packets: 5, gaps: 0, outOfOrder: 0, rejected: 0, open: false });
    expect(target.registry.get(MAC)?.session?.info.sessionId).toBe('');

    // Switched back: the next OTA reply blanks mqtt/endpoint and the board comes up on WebSocket.
    target.setTransport(MAC, 'websocket');
    const checked = once(vboard, 'ota');
    vboard.reboot();
    await checked;
    await until(() => vboard.transport === 'websocket', { what: 'the board on WebSocket' });
    await vboard.waitForState('idle', WAIT_MS);
    expect(vboard.transport).toBe('websocket');
    expect(vboard.storage.open('mqtt').getString('endpoint')).toBe('');
    vboard.click();
    await until(() => target.registry.get(MAC)?.transport === 'websocket', {
      what: 'the registry to see WebSocket',
    });
    await target.registry.waitForReady(MAC, WAIT_MS);
    expect(target.registry.get(MAC)?.transport).toBe('websocket');
  });
});

describe('hostile MQTT clients', { timeout: 60_000 }, () => {
  function raw(target: XiaozhiServer): Promise<Socket> {
    const socket = tcpConnect(mqttPort(target), '127.0.0.1');
    sockets.push(socket);
    socket.on('error', () => {});
    // Read what the broker answers, so that its end is seen.
    socket.resume();
    return once(socket, 'connect').then(() => socket);
  }

  function closedWithin(socket: Socket): Promise<void> {
    if (socket.destroyed) return Promise.resolve();
    return once(socket, 'close').then(() => undefined);
  }

  /** A CONNECT packet (MQTT 3.1.1 §3.1) with the given protocol level and client id. */
  function connectPacket(level: number, clientId: string): Buffer {
    const name = Buffer.from([0x00, 0x04, 0x4d, 0x51, 0x54, 0x54]); // "MQTT"
    const id = Buffer.from(clientId);
    const variable = Buffer.concat([
      name,
      Buffer.from([level, 0x02, 0x00, 0x3c]), // clean session, keep-alive 60 s
      Buffer.from([id.length >> 8, id.length & 0xff]),
      id,
    ]);
    return Buffer.concat([Buffer.from([0x10]), remainingLength(variable.length), variable]);
  }

  function remainingLength(length: number): Buffer {
    const bytes: number[] = [];
    let value = length;
    do {
      let byte = value % 128;
      value = Math.floor(value / 128);
      if (value > 0) byte |= 0x80;
      bytes.push(byte);
    } while (value > 0);
    return Buffer.from(bytes);
  }

  it('drops a connection that declares a packet over the bound before its body arrives', async () => {
    const target = await startServer({ maxFrameBytes: 64 * 1024 });
    const socket = await raw(target);
    // A PUBLISH declaring 100 MB; only its first bytes follow.
    socket.write(Buffer.concat([Buffer.from([0x30]), remainingLength(100 * 1024 * 1024)]));
    socket.write(Buffer.alloc(1024));
    await closedWithin(socket);
    expect(logs.some((l) => String(l.reason).includes('over the 65536 accepted'))).toBe(true);
  });

  it('survives malformed packets, wrong protocol levels, a huge client id, silence and QoS 2', async () => {
    const target = await startServer({ headersTimeoutMs: 300, requestTimeoutMs: 1000 });
    const { board: fake } = await board(target);
    const attempts: Buffer[] = [
      Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'),
      Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0x01]), // a length of 5 bytes
      connectPacket(5, 'mqtt5-client'),
      connectPacket(2, 'old-client'),
      connectPacket(4, 'x'.repeat(60_000)),
      Buffer.concat([connectPacket(4, 'twice'), connectPacket(4, 'twice')]),
      Buffer.from([0x30, 0x02, 0x00, 0x00]), // PUBLISH before CONNECT
      Buffer.from([0x10, 0x00]), // an empty CONNECT
    ];
    for (const bytes of attempts) {
      const socket = await raw(target);
      socket.write(bytes);
      await closedWithin(socket);
    }
    // Connected and silent: closed after the CONNECT deadline (headersTimeoutMs).
    await closedWithin(await raw(target));
    // QoS 2 from a board (the firmware publishes QoS 0): closed, the server goes on.
    const { board: other } = await board(target, MAC_B, UUID_B);
    other.publish('{"type":"listen","state":"start"}', { qos: 2 });
    await other.closed();

    expect(fake.client.connected).toBe(true);
    expect(
      (
        await api(target, 'POST', `/devices/${MAC}/call`, {
          name: 'self.light.set_brightness',
          arguments: { level: 3 },
        })
      ).status,
    ).toBe(200);
  });

  it('caps connections at maxConnections', async () => {
    const target = await startServer({ maxConnections: 1 });
    const first = await raw(target);
    const second = await raw(target);
    await closedWithin(second);
    expect(first.destroyed).toBe(false);
  });
});

const exec = promisify(execFile);
const mosquittoMissing = await exec('sh', [
  '-c',
  'command -v mosquitto_sub && command -v mosquitto_pub',
])
  .then(() => undefined)
  .catch(() => "Debian's mosquitto-clients are not installed (apt-get install mosquitto-clients)");

describe.skipIf(mosquittoMissing !== undefined)(
  `with Debian's mosquitto-clients${mosquittoMissing === undefined ? '' : ` (skipped: ${mosquittoMissing})`}`,
  { timeout: 60_000 },
  () => {
    it("mosquitto_sub -t # sees a virtual board's MCP replies; mosquitto_pub to its p2p topic reaches it", async () => {
      const target = await startServer();
      virtualBoard(target).powerOn();
      await target.registry.waitForReady(MAC, WAIT_MS);
      const port = String(mqttPort(target));
      const sub = spawn(
        'mosquitto_sub',
        ['-h', '127.0.0.1', '-p', port, '-u', 'operator', '-P', API_TOKEN, '-t', '#', '-v', '-d'],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      sub.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
      });
      try {
        const printed = (match: (text: string) => boolean, what: string) =>
          until(() => match(out), { what: `mosquitto_sub to print ${what}`, seen: () => out });
        // mosquitto_sub flushes stdout after each message: probe until it prints one.
        const probe = await mqtt.connectAsync({
          host: '127.0.0.1',
          port: Number(port),
          username: 'operator',
          password: API_TOKEN,
          reconnectPeriod: 0,
        });
        clients.push(probe);
        await until(
          () => {
            probe.publish('probe/ready', '{}');
            return out.includes('probe/ready');
          },
          { what: 'mosquitto_sub to print a probe', intervalMs: 40, seen: () => out },
        );
        await printed((text) => text.includes('probe/ready {}'), 'the probe');
        await api(target, 'POST', `/devices/${MAC}/call`, {
          name: 'self.audio_speaker.set_volume',
          arguments: { volume: 64 },
        });
        // `-v`: "topic payload" per message.
        await printed(
          (text) =>
            /^device-server\/f4_12_fa_00_00_01 \{"session_id":"","type":"mcp","payload":\{"jsonrpc":"2.0","id":\d+,"result":\{"content":\[\{"type":"text","text":"true"\}\],"isError":false\}\}\}$/m.test(
              text,
            ),
          "the board's MCP reply",
        );
        expect(out).toMatch(
          /^devices\/p2p\/f4_12_fa_00_00_01 \{"session_id":"","type":"mcp","payload":\{"jsonrpc":"2.0","id":\d+,"method":"tools\/call"/m,
        );

        await exec('mosquitto_pub', [
          '-h',
          '127.0.0.1',
          '-p',
          port,
          '-u',
          'operator',
          '-P',
          API_TOKEN,
          '-t',
          'devices/p2p/f4_12_fa_00_00_01',
          '-m',
          '{"session_id":"","type":"mcp","payload":{"jsonrpc":"2.0","id":4242,"method":"tools/call","params":{"name":"self.audio_speaker.set_volume","arguments":{"volume":12}}}}',
        ]);
        // Only the board could have answered it.
        await printed(
          (text) =>
            text.includes(
              'device-server/f4_12_fa_00_00_01 {"session_id":"","type":"mcp","payload":{"jsonrpc":"2.0","id":4242,"result"',
            ),
          'the reply to mosquitto_pub',
        );
      } finally {
        sub.kill();
      }
      // A wrong token: mosquitto_sub gives up (exit status not 0).
      await expect(
        exec('mosquitto_sub', [
          '-h',
          '127.0.0.1',
          '-p',
          port,
          '-u',
          'operator',
          '-P',
          'nope',
          '-t',
          '#',
          '-C',
          '1',
          '-W',
          '5',
        ]),
      ).rejects.toMatchObject({ code: expect.any(Number) });
    });
  },
);
