// The embedded MQTT broker's hostile-input targets, against the real thing: a real
// XiaozhiServer on 127.0.0.1:0 with its broker (transport mqtt), a board logged in with what our
// OTA reply issued (mqtt.js, answering MCP with the device SDK's McpServer), attacked with raw
// MQTT byte streams over TCP. After every case: nothing uncaught in this process, the fuzz
// connection has ended once we end ours (no stall), the broker holds no client but the board
// (bounded), an operator still gets CONNACK 0, and the board still answers a tools/call on its
// first connection (no takeover). The packets are built here byte by byte from MQTT 3.1.1 §2-3,
// so lengths, flags and strings can be wrong on purpose.
import { type Socket, connect as tcpConnect } from 'node:net';
import { McpServer } from '@xiaozhi-mcp/device';
import {
  type AnyTarget,
  CaseFailure,
  cutFractions,
  erase,
  type FuzzTarget,
  ProcessWatch,
  splitAtCuts,
} from '@xiaozhi-mcp/fuzz-kit';
import { XiaozhiServer } from '@xiaozhi-mcp/server';
import fc from 'fast-check';
import mqtt, { type MqttClient } from 'mqtt';
import { pino } from 'pino';

const API_TOKEN = 'fuzz-mqtt-api-token-0123456789';
const BOARD_MAC = 'f4:12:fa:c0:00:02';
const BOARD_UUID = '6c1f8f0e-0000-4000-8000-00000000c002';
/** The board's client id, as our OTA reply gives it (docs/protocol.md §5). */
const BOARD_CLIENT_ID = `GID_xiaozhi@@@f4_12_fa_c0_00_02@@@${BOARD_UUID}`;
const BOARD_PUBLISH_TOPIC = 'device-server/f4_12_fa_c0_00_02';
const BOARD_DELIVERY_TOPIC = 'devices/p2p/f4_12_fa_c0_00_02';
/** How long anything the broker owes (a close, a CONNACK, a call) may take before it is a stall. */
const ANSWER_TIMEOUT_MS = 5000;

// --- MQTT 3.1.1 packets by hand (§2.2 fixed header, §3 packets) -------------------------------------

function remainingLength(length: number): number[] {
  const bytes: number[] = [];
  let value = length;
  do {
    let byte = value % 128;
    value = Math.floor(value / 128);
    if (value > 0) byte |= 0x80;
    bytes.push(byte);
  } while (value > 0);
  return bytes;
}

/** A UTF-8 string field: two bytes of length, big-endian, then the bytes (§1.5.3). */
function utf8Field(bytes: Uint8Array): Buffer {
  const length = Math.min(bytes.length, 0xffff);
  return Buffer.concat([Buffer.from([length >> 8, length & 0xff]), bytes.subarray(0, length)]);
}

function u16(value: number): Buffer {
  return Buffer.from([(value >> 8) & 0xff, value & 0xff]);
}

/** One packet; `lengthSkew` declares a Remaining Length off by that much (a lie about the body). */
function packet(first: number, body: Buffer, lengthSkew = 0): Buffer {
  const declared = Math.max(0, body.length + lengthSkew);
  return Buffer.concat([Buffer.from([first & 0xff, ...remainingLength(declared)]), body]);
}

export interface ConnectFields {
  readonly protocolName: string;
  readonly level: number;
  /** The flags byte as sent; the username/password/will bits decide which fields follow. */
  readonly flags: number;
  readonly keepalive: number;
  readonly clientId: Uint8Array;
  readonly willTopic: Uint8Array;
  readonly willMessage: Uint8Array;
  readonly username: Uint8Array;
  readonly password: Uint8Array;
}

/** CONNECT (§3.1): the fields present are those its flags announce, whatever they say. */
export function connectPacket(c: ConnectFields, lengthSkew = 0): Buffer {
  const parts = [
    utf8Field(Buffer.from(c.protocolName)),
    Buffer.from([c.level & 0xff, c.flags & 0xff]),
    u16(c.keepalive),
    utf8Field(c.clientId),
  ];
  if (c.flags & 0x04) parts.push(utf8Field(c.willTopic), utf8Field(c.willMessage));
  if (c.flags & 0x80) parts.push(utf8Field(c.username));
  if (c.flags & 0x40) parts.push(utf8Field(c.password));
  return packet(0x10, Buffer.concat(parts), lengthSkew);
}

/** A valid CONNECT: MQTT 3.1.1 (level 4), clean session, keep-alive 60 s. */
function validConnect(clientId: string, username?: string, password?: string): Buffer {
  return connectPacket({
    protocolName: 'MQTT',
    level: 4,
    flags: 0x02 | (username === undefined ? 0 : 0x80) | (password === undefined ? 0 : 0x40),
    keepalive: 60,
    clientId: Buffer.from(clientId),
    willTopic: Buffer.alloc(0),
    willMessage: Buffer.alloc(0),
    username: Buffer.from(username ?? ''),
    password: Buffer.from(password ?? ''),
  });
}

// --- arbitraries ----------------------------------------------------------------------------------

const text = (s: string) => Buffer.from(s);

/** Client ids: the board's (a takeover), its forms bent, an operator's, random, empty, huge. */
const clientIdBytes: fc.Arbitrary<Uint8Array> = fc.oneof(
  { weight: 3, arbitrary: fc.constant(text(BOARD_CLIENT_ID)) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      text(BOARD_CLIENT_ID.toUpperCase()),
      text(`${BOARD_CLIENT_ID}x`),
      text('GID_xiaozhi@@@f4_12_fa_c0_00_02@@@'),
      text(`GID_xiaozhi@@@f4_12_fa_c0_00_02@@@${'u'.repeat(65)}`),
      text('GID_xiaozhi@@@'),
      text('GID_xiaozhi@@@zz_zz_zz_zz_zz_zz@@@x'),
      text('fuzz-operator'),
      text(''),
      Buffer.from([0xff, 0xfe, 0x00, 0xc0, 0x80]),
    ),
  },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }).map(text) },
  { weight: 2, arbitrary: fc.uint8Array({ maxLength: 40 }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(129, 1000, 60_000, 65_535).map((n) => Buffer.alloc(n, 0x61)),
  },
);

const shortBytes: fc.Arbitrary<Uint8Array> = fc.oneof(
  { weight: 3, arbitrary: fc.string({ maxLength: 30 }).map(text) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 30 }) },
);

/** Usernames: the board's Device-Id (as it logs in), forms of it, the operator's, anything. */
const usernameBytes: fc.Arbitrary<Uint8Array> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      text(BOARD_MAC),
      text(BOARD_MAC.toUpperCase()),
      text('operator'),
      text('f4:12:fa:c0:00:01'),
    ),
  },
  { weight: 2, arbitrary: shortBytes },
);

/** Passwords that are never the board's nor an API token (a takeover must never get in). */
const passwordBytes: fc.Arbitrary<Uint8Array> = fc.oneof(
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      text(''),
      text('password'),
      text(`${API_TOKEN}x`),
      text(API_TOKEN.slice(0, -1)),
    ),
  },
  { weight: 3, arbitrary: shortBytes },
  { weight: 1, arbitrary: fc.constantFrom(1000, 65_535).map((n) => Buffer.alloc(n, 0x70)) },
);

const connectFields: fc.Arbitrary<ConnectFields> = fc.record({
  protocolName: fc.oneof(
    { weight: 6, arbitrary: fc.constant('MQTT') },
    { weight: 2, arbitrary: fc.constantFrom('MQIsdp', 'mqtt', '', 'MQTTT', 'MQ\u0000T') },
    { weight: 1, arbitrary: fc.string({ maxLength: 10 }) },
  ),
  level: fc.oneof(
    { weight: 6, arbitrary: fc.constant(4) },
    { weight: 2, arbitrary: fc.constantFrom(3, 5, 0, 131, 132, 255) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 255 }) },
  ),
  flags: fc.oneof(
    // username + password + clean session, the board's own flags
    { weight: 4, arbitrary: fc.constant(0xc2) },
    { weight: 4, arbitrary: fc.integer({ min: 0, max: 255 }) },
  ),
  keepalive: fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(0, 1, 60, 240, 3600, 3601, 65_535) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 65_535 }) },
  ),
  clientId: clientIdBytes,
  willTopic: fc.oneof(
    fc.constantFrom(text(BOARD_DELIVERY_TOPIC), text('#'), text('$SYS/x'), text('')),
    shortBytes,
  ),
  willMessage: shortBytes,
  username: usernameBytes,
  password: passwordBytes,
});

const topicBytes: fc.Arbitrary<Uint8Array> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.constantFrom(
      text(BOARD_PUBLISH_TOPIC),
      text(BOARD_DELIVERY_TOPIC),
      text('devices/p2p/+'),
      text('#'),
      text('+'),
      text('$SYS/broker/x'),
      text('$SYS/#'),
      text(''),
      text('a/#/b'),
      text('device-server/#'),
      text('/'),
      Buffer.from([0x61, 0x00, 0x62]),
    ),
  },
  { weight: 2, arbitrary: shortBytes },
  { weight: 1, arbitrary: fc.constantFrom(1000, 65_535).map((n) => Buffer.alloc(n, 0x74)) },
);

const payloadBytes: fc.Arbitrary<Uint8Array> = fc.oneof(
  { weight: 3, arbitrary: fc.uint8Array({ maxLength: 200 }) },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      text('{"type":"hello","version":3,"transport":"udp"}'),
      text('{"session_id":"","type":"mcp","payload":{"jsonrpc":"2.0","id":1,"result":{}}}'),
      text('{"type":"goodbye","session_id":"x"}'),
      text('{"type":"listen","state":"start","mode":"auto"}'),
      text('{"type":"mcp","payload":'),
      text(`${'['.repeat(5000)}`),
    ),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom(4096, 65_536, 131_000).map((n) => Buffer.alloc(n, 0x7b)),
  },
);

/** Any packet of MQTT 3.1.1, valid or bent, or bytes that are none. */
export const mqttPacket: fc.Arbitrary<Buffer> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc
      .tuple(
        connectFields,
        fc.oneof({ weight: 8, arbitrary: fc.constant(0) }, fc.integer({ min: -8, max: 8 })),
      )
      .map(([c, skew]) => connectPacket(c, skew)),
  },
  {
    // PUBLISH (§3.3): QoS 3 is malformed; a packet id follows the topic at QoS 1 and 2.
    weight: 5,
    arbitrary: fc
      .record({
        dup: fc.boolean(),
        qos: fc.oneof({ weight: 6, arbitrary: fc.constant(0) }, fc.constantFrom(1, 2, 3)),
        retain: fc.boolean(),
        topic: topicBytes,
        id: fc.integer({ min: 0, max: 65_535 }),
        payload: payloadBytes,
        skew: fc.oneof({ weight: 8, arbitrary: fc.constant(0) }, fc.integer({ min: -4, max: 4 })),
      })
      .map((p) =>
        packet(
          0x30 | (p.dup ? 8 : 0) | (p.qos << 1) | (p.retain ? 1 : 0),
          Buffer.concat([utf8Field(p.topic), p.qos > 0 ? u16(p.id) : Buffer.alloc(0), p.payload]),
          p.skew,
        ),
      ),
  },
  {
    // SUBSCRIBE (§3.8, flags 0010) and UNSUBSCRIBE (§3.10), flags sometimes wrong.
    weight: 3,
    arbitrary: fc
      .record({
        unsubscribe: fc.boolean(),
        flags: fc.oneof({ weight: 6, arbitrary: fc.constant(2) }, fc.integer({ min: 0, max: 15 })),
        id: fc.integer({ min: 0, max: 65_535 }),
        filters: fc.array(fc.tuple(topicBytes, fc.integer({ min: 0, max: 255 })), {
          maxLength: 4,
        }),
      })
      .map((s) =>
        packet(
          (s.unsubscribe ? 0xa0 : 0x80) | s.flags,
          Buffer.concat([
            u16(s.id),
            ...s.filters.map(([topic, qos]) =>
              s.unsubscribe
                ? utf8Field(topic)
                : Buffer.concat([utf8Field(topic), Buffer.from([qos])]),
            ),
          ]),
        ),
      ),
  },
  {
    // PUBACK/PUBREC/PUBREL/PUBCOMP with any id, PINGREQ, DISCONNECT, and server-only packets.
    weight: 2,
    arbitrary: fc
      .tuple(
        fc.constantFrom(0x40, 0x50, 0x62, 0x70, 0xc0, 0xe0, 0x20, 0x90, 0xb0, 0xd0, 0x00, 0xf0),
        fc.integer({ min: 0, max: 65_535 }),
      )
      .map(([first, id]) =>
        first === 0xc0 || first === 0xe0 || first === 0xd0 || first === 0x00 || first === 0xf0
          ? packet(first, Buffer.alloc(0))
          : packet(first, u16(id)),
      ),
  },
  {
    // Any first byte with any body.
    weight: 2,
    arbitrary: fc
      .tuple(fc.integer({ min: 0, max: 255 }), fc.uint8Array({ maxLength: 64 }))
      .map(([first, body]) => packet(first, Buffer.from(body))),
  },
  {
    weight: 2,
    arbitrary: fc.uint8Array({ minLength: 1, maxLength: 64 }).map((b) => Buffer.from(b)),
  },
  {
    // Remaining Lengths at and over the bounds: 5 length bytes, the broker's bound, §2.2.3's most.
    weight: 1,
    arbitrary: fc
      .constantFrom(
        [0x30, 0xff, 0xff, 0xff, 0xff, 0x01],
        [0x30, ...remainingLength(128 * 1024)],
        [0x30, ...remainingLength(128 * 1024 + 1)],
        [0x10, 0xff, 0xff, 0xff, 0x7f],
        [0x10, 0x80, 0x80, 0x80, 0x00],
      )
      .map((b) => Buffer.from(b)),
  },
);

/** How the stream starts: logged in (so what follows is read as a client's), or not. */
export type MqttOpening = 'none' | 'operator' | 'board-id-wrong-password' | 'fuzzed';

export interface MqttCase {
  readonly opening: MqttOpening;
  /** The CONNECT of a `fuzzed` opening. */
  readonly connect: ConnectFields;
  readonly packets: readonly Buffer[];
  /** Cut points (fractions of the stream) where the bytes go out as separate writes. */
  readonly cuts: readonly number[];
}

export const mqttCase: fc.Arbitrary<MqttCase> = fc.record({
  opening: fc.oneof(
    { weight: 4, arbitrary: fc.constant('operator' as const) },
    { weight: 2, arbitrary: fc.constant('board-id-wrong-password' as const) },
    { weight: 2, arbitrary: fc.constant('none' as const) },
    { weight: 2, arbitrary: fc.constant('fuzzed' as const) },
  ),
  connect: connectFields,
  packets: fc.array(mqttPacket, { minLength: 1, maxLength: 6 }),
  cuts: cutFractions,
});

// --- the world: a server with its broker, and a board on it ---------------------------------------

function once<T>(emit: (resolve: (value: T) => void) => void, ms: number, late: T): Promise<T> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(late), ms);
    emit((value) => {
      clearTimeout(timer);
      resolve(value);
    });
  });
}

export class MqttFuzzWorld {
  board: MqttClient | undefined;
  /** Times the board's connection closed (a takeover closes it). */
  boardCloses = 0;
  #level = 0;

  private constructor(
    readonly server: XiaozhiServer,
    readonly watch: ProcessWatch,
    /** The watch is this world's own (stopped on close), not one it shares. */
    readonly ownWatch: boolean,
  ) {}

  /** `watch`: another world's, shared (left running on close); none: one of its own. */
  static async start(shared?: ProcessWatch): Promise<MqttFuzzWorld> {
    const watch = shared ?? new ProcessWatch().start();
    const server = await XiaozhiServer.start({
      host: '127.0.0.1',
      port: 0,
      mqttPort: 0,
      transport: 'mqtt',
      apiTokens: [API_TOKEN],
      // A fuzz connection that never sends CONNECT is let go sooner than a board's 10 s.
      headersTimeoutMs: 2000,
      logger: pino({ level: 'silent' }),
    });
    const world = new MqttFuzzWorld(server, watch, shared === undefined);
    await world.healBoard();
    return world;
  }

  get port(): number {
    return Number(new URL(this.server.urls.mqtt ?? '').port);
  }

  /** Connects the board afresh (after a case broke it, or at start) with what the OTA reply issued. */
  async healBoard(): Promise<void> {
    if (this.board?.connected === true && this.server.registry.get(BOARD_MAC)?.ready === true)
      return;
    this.board?.end(true);
    const response = await fetch(this.server.urls.ota, {
      method: 'POST',
      headers: {
        'Device-Id': BOARD_MAC,
        'Client-Id': BOARD_UUID,
        'User-Agent': 'bread-compact-wifi/2.4.2',
        'Content-Type': 'application/json',
      },
      body: JSON.stringify({
        version: 2,
        mac_address: BOARD_MAC,
        uuid: BOARD_UUID,
        application: { name: 'xiaozhi', version: '2.4.2' },
        board: { type: 'bread-compact-wifi' },
      }),
    });
    const reply = (await response.json()) as { mqtt?: Record<string, unknown> };
    const section = reply.mqtt ?? {};
    if (section.client_id !== BOARD_CLIENT_ID || section.publish_topic !== BOARD_PUBLISH_TOPIC)
      throw new Error(
        `the OTA reply's mqtt section is not the board's: ${JSON.stringify(section)}`,
      );
    const client = await mqtt.connectAsync({
      host: '127.0.0.1',
      port: this.port,
      protocolVersion: 4,
      clientId: BOARD_CLIENT_ID,
      username: String(section.username),
      password: String(section.password),
      keepalive: 240,
      reconnectPeriod: 0,
      connectTimeout: 10_000,
    });
    const mcp = new McpServer({ board: { name: 'bread-compact-wifi', version: '2.4.2' } });
    mcp.addTool(
      {
        name: 'self.light.set_brightness',
        description: 'Set the light',
        properties: [{ name: 'level', type: 'integer', minimum: 0, maximum: 100 }],
      },
      (args) => {
        this.#level = args.integer('level');
        return true;
      },
    );
    mcp.setSender((payload) =>
      client.publish(BOARD_PUBLISH_TOPIC, `{"session_id":"","type":"mcp","payload":${payload}}`),
    );
    client.on('message', (_topic, payload) => {
      try {
        const frame = JSON.parse(payload.toString('utf8')) as Record<string, unknown>;
        if (frame.type === 'mcp') mcp.handlePayload(JSON.stringify(frame.payload));
      } catch {
        // an operator's publish to the board's topic need not be JSON
      }
    });
    client.on('error', () => {});
    client.on('close', () => {
      if (this.board === client) this.boardCloses++;
    });
    this.board = client;
    this.boardCloses = 0;
    await this.server.registry.waitForReady(BOARD_MAC, 10_000);
  }

  /** The board answers a tools/call on the connection it had before the case. */
  async checkBoard(): Promise<void> {
    const level = (this.#level + 7) % 101;
    try {
      await this.server.registry.callTool(
        BOARD_MAC,
        'self.light.set_brightness',
        { level },
        { timeoutMs: ANSWER_TIMEOUT_MS },
      );
    } catch (error) {
      throw new CaseFailure(`the board no longer answers tools/call: ${(error as Error).message}`);
    }
    if (this.#level !== level)
      throw new CaseFailure(
        `the board's tools/call went elsewhere (level ${this.#level}, expected ${level})`,
      );
  }

  /** An operator (a fresh raw connection) gets CONNACK 0 within the bound. */
  async checkOperator(): Promise<void> {
    const socket = tcpConnect(this.port, '127.0.0.1');
    socket.on('error', () => {});
    try {
      const answer = await once<Buffer | 'closed' | 'timeout'>(
        (resolve) => {
          const chunks: Buffer[] = [];
          socket.on('data', (chunk: Buffer) => {
            chunks.push(chunk);
            const all = Buffer.concat(chunks);
            if (all.length >= 4) resolve(all);
          });
          socket.on('close', () => resolve('closed'));
          socket.on('connect', () =>
            socket.write(validConnect('fuzz-check', 'operator', API_TOKEN)),
          );
        },
        ANSWER_TIMEOUT_MS,
        'timeout',
      );
      // CONNACK (§3.2): 0x20 0x02, session present 0, return code 0.
      if (typeof answer === 'string' || answer[0] !== 0x20 || answer[3] !== 0)
        throw new CaseFailure(
          `an operator got no CONNACK 0: ${typeof answer === 'string' ? answer : answer.subarray(0, 8).toString('hex')}`,
        );
    } finally {
      socket.destroy();
    }
  }

  /** Authenticated clients are back to the board alone (nothing a case opened is held). */
  async checkClients(): Promise<void> {
    for (let i = 0; i < ANSWER_TIMEOUT_MS / 10 && this.server.mqttClients !== 1; i++)
      await new Promise((resolve) => setTimeout(resolve, 10));
    if (this.server.mqttClients !== 1)
      throw new CaseFailure(
        `the broker holds ${this.server.mqttClients} clients, not the board alone`,
      );
  }

  async close(): Promise<void> {
    this.board?.end(true);
    await this.server.stop();
    if (this.ownWatch) this.watch.stop();
  }
}

// --- the target -----------------------------------------------------------------------------------

function opening(kind: MqttOpening, fuzzed: ConnectFields): Buffer {
  switch (kind) {
    case 'none':
      return Buffer.alloc(0);
    case 'operator':
      return validConnect('fuzz-operator', 'operator', API_TOKEN);
    case 'board-id-wrong-password':
      return validConnect(BOARD_CLIENT_ID, BOARD_MAC, 'not-the-password');
    case 'fuzzed':
      return connectPacket(fuzzed);
  }
}

export function describeMqttCase(c: MqttCase): string {
  const total = c.packets.reduce((n, p) => n + p.length, 0);
  return `opening ${c.opening}, ${c.packets.length} packets (${total} bytes: ${c.packets.map((p) => p.subarray(0, 6).toString('hex')).join(' ')}…), ${c.cuts.length} cuts`;
}

/**
 * mqtt: a hostile client's byte stream over a real TCP connection to the broker, cut at random
 * points. The server lives; once we end our side the broker ends the connection within 5 s; the
 * broker holds only the board afterwards; an operator still gets CONNACK 0; the board keeps its
 * connection and answers (a CONNECT with its client id and a wrong password takes nothing).
 */
export function mqttTarget(world: MqttFuzzWorld): FuzzTarget<MqttCase> {
  return {
    name: 'mqtt',
    summary:
      'MQTT packet streams over TCP to the embedded broker; it lives, ends the connection, holds nothing, keeps the board',
    arbitrary: mqttCase,
    describe: describeMqttCase,
    async run(c) {
      await world.healBoard();
      const closesBefore = world.boardCloses;
      const bytes = Buffer.concat([opening(c.opening, c.connect), ...c.packets]);
      const socket: Socket = tcpConnect(world.port, '127.0.0.1');
      socket.on('error', () => {});
      socket.resume();
      const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
      let ms = 0;
      try {
        await once<void>(
          (resolve) => socket.once('connect', () => resolve()),
          ANSWER_TIMEOUT_MS,
          undefined,
        );
        for (const chunk of splitAtCuts(bytes, c.cuts)) {
          if (socket.destroyed) break;
          socket.write(chunk);
          await new Promise((resolve) => setImmediate(resolve));
        }
        // Our end: the broker must end its side within the bound, whatever state its reader is in.
        const started = performance.now();
        socket.end();
        const outcome = await once<'closed' | 'stall'>(
          (resolve) => void closed.then(() => resolve('closed')),
          ANSWER_TIMEOUT_MS,
          'stall',
        );
        ms = performance.now() - started;
        if (outcome === 'stall')
          throw new CaseFailure(
            `a stall: the broker kept the connection ${ANSWER_TIMEOUT_MS} ms after our FIN`,
          );
      } finally {
        socket.destroy();
      }
      await world.checkClients();
      await world.checkOperator();
      if (world.boardCloses !== closesBefore || world.board?.connected !== true)
        throw new CaseFailure('the board lost its connection: taken over by the fuzz client');
      await world.checkBoard();
      return ms;
    },
  };
}

/** The broker's targets, with their shares of a server fuzz run. */
export function mqttTargets(world: MqttFuzzWorld): { target: AnyTarget; share: number }[] {
  return [{ target: erase(mqttTarget(world)), share: 0.1 }];
}
