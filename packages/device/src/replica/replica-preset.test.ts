/**
 * A virtual board made from a replica: its identity, its tools/list pages (the recorded ones,
 * byte for byte), recorded calls answered with the recorded reply bytes, and the fallbacks.
 */
import { encodeDeviceError, encodeToolResult, ImageContent } from '@xiaozhi-mcp/protocol';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { BoardApi } from '../board-api.js';
import { openSession } from '../board-session.test-helper.js';
import { McpServer } from '../mcp-server.js';
import { type DeviceConnection, TestBackend, type TestBackendOptions } from '../testing/backend.js';
import { FAST_TIMING } from '../testing/timing.js';
import { VirtualBoard } from '../virtual-board.js';
import { formatReplica, parseReplica, type ReplicaCall, type ReplicaFile } from './replica-file.js';
import { replicaFromTools } from './replica-from-tools.js';
import { replicaBoardOptions, replicaPreset, replyAnswer } from './replica-preset.js';

let backend: TestBackend | undefined;
const boards: VirtualBoard[] = [];

afterEach(async () => {
  for (const board of boards.splice(0)) board.powerOff();
  await backend?.close();
  backend = undefined;
});

const TOOLS = {
  board: {
    variant: 'arm-cn',
    firmwareVersion: '2.0.1',
    chip: 'esp32c3',
    flashSizeMb: 8,
    mac: 'f4:12:fa:aa:00:01',
  },
  tools: [
    {
      name: 'self.servo.move',
      description: '把舵机转到目标角度',
      properties: [
        { name: 'angle', type: 'integer', min: 0, max: 180 },
        { name: 'speed', type: 'integer', default: 50, min: 1, max: 100 },
      ],
    },
    { name: 'self.servo.get', description: 'Reads the servo' },
    { name: 'self.lamp.set', description: 'Lamp', properties: [{ name: 'on', type: 'boolean' }] },
    { name: 'self.system.reboot', description: 'Reboots', user_only: true },
  ],
  defaults: { 'self.lamp.set': { text: 'lamp busy', isError: true } },
};

/** Recorded by hand in the firmware's bytes: a text result, an unescaped error, a delayed reply. */
const CALLS: ReplicaCall[] = [
  {
    tool: 'self.servo.move',
    arguments: { angle: 30 },
    reply:
      '{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"{\\"angle\\":30,\\"speed\\":50}"}],"isError":false}}',
    delayMs: 0,
  },
  {
    tool: 'self.servo.move',
    arguments: { angle: 180, speed: 100 },
    reply: '{"jsonrpc":"2.0","id":8,"error":{"message":"Servo "jammed" at 180"}}',
    delayMs: 20,
  },
  {
    tool: 'self.servo.get',
    arguments: {},
    reply:
      '{"jsonrpc":"2.0","id":9,"result":{"content":[{"type":"text","text":"角度 30"}],"isError":false}}',
    delayMs: 5,
  },
];

function replica(): ReplicaFile {
  const written = replicaFromTools(JSON.stringify(TOOLS));
  return parseReplica(formatReplica({ ...written, calls: CALLS }));
}

async function connect(
  r: ReplicaFile,
  mac?: string,
  backendOptions: TestBackendOptions = {},
): Promise<{ board: VirtualBoard; connection: DeviceConnection }> {
  backend = await TestBackend.start(backendOptions);
  const board = new VirtualBoard({
    ...replicaBoardOptions(r, mac === undefined ? {} : { mac }),
    wifi: { ssid: 'rig-wifi' },
    otaUrl: backend.otaUrl,
    timing: FAST_TIMING,
  });
  boards.push(board);
  board.powerOn();
  const connection = await openSession(board, backend);
  return { board, connection };
}

async function reply(connection: DeviceConnection, request: string): Promise<string> {
  const id = /"id":(\d+)/.exec(request)?.[1];
  const prefix = `{"jsonrpc":"2.0","id":${id},`;
  connection.sendPayload(request);
  return connection.until(
    () => connection.mcpPayloads.find((p) => p.startsWith(prefix)),
    5000,
    `reply ${id}`,
  );
}

describe('a virtual board from a replica', () => {
  it('is the replica board: identity, initialize, pages and recorded replies byte for byte', async () => {
    const r = replica();
    const { board, connection } = await connect(r);
    expect(board.preset.chip).toBe('esp32c3');
    expect(board.preset.flashSizeMb).toBe(8);
    expect(connection.upgrade.headers['device-id']).toBe('f4:12:fa:aa:00:01');

    expect(
      await reply(connection, '{"jsonrpc":"2.0","id":100,"method":"initialize","params":{}}'),
    ).toBe(
      '{"jsonrpc":"2.0","id":100,"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"arm-cn","version":"2.0.1"}}}',
    );
    // The pages, asked with the recorded ids and cursors.
    const pages = r.pages as { plain: string[]; withUserTools: string[] };
    expect(
      await reply(
        connection,
        '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":""}}',
      ),
    ).toBe(pages.plain[0]);
    expect(
      await reply(
        connection,
        '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"","withUserTools":true}}',
      ),
    ).toBe(pages.withUserTools[0]);

    // Recorded calls, with their recorded ids: the recorded reply bytes. Defaults apply first:
    // {angle:30} is {angle:30, speed:50} as the firmware receives it.
    const calls = CALLS;
    expect(
      await reply(
        connection,
        '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"self.servo.move","arguments":{"angle":30,"speed":50}}}',
      ),
    ).toBe(calls[0]?.reply);
    expect(
      await reply(
        connection,
        '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"self.servo.move","arguments":{"speed":100,"angle":180}}}',
      ),
    ).toBe(calls[1]?.reply);
    expect(
      await reply(
        connection,
        '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"self.servo.get","arguments":{}}}',
      ),
    ).toBe(calls[2]?.reply);
  });

  it('answers other calls: stated default, else the last recorded reply, else true; validation is the firmware', async () => {
    const { connection } = await connect(replica(), 'f4:12:fa:aa:00:02');
    expect(connection.upgrade.headers['device-id']).toBe('f4:12:fa:aa:00:02');
    // No recording with these arguments: the tool's last recorded reply.
    expect(
      await reply(
        connection,
        '{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"self.servo.move","arguments":{"angle":90}}}',
      ),
    ).toBe('{"jsonrpc":"2.0","id":20,"error":{"message":"Servo "jammed" at 180"}}');
    // A stated default that is an error.
    expect(
      await reply(
        connection,
        '{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"self.lamp.set","arguments":{"on":true}}}',
      ),
    ).toBe('{"jsonrpc":"2.0","id":21,"error":{"message":"lamp busy"}}');
    // Nothing recorded, nothing stated: true. User-only tools are callable.
    expect(
      await reply(
        connection,
        '{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"self.system.reboot","arguments":{}}}',
      ),
    ).toBe(
      '{"jsonrpc":"2.0","id":22,"result":{"content":[{"type":"text","text":"true"}],"isError":false}}',
    );
    // Out of range: the firmware's own validation answers, not the replica.
    expect(
      await reply(
        connection,
        '{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"self.servo.move","arguments":{"angle":200}}}',
      ),
    ).toMatch(/^\{"jsonrpc":"2\.0","id":23,"error":\{"message":"[^"]*"\}\}$/);
  });
});

describe("a replica board's hello", () => {
  // As a real board sent it: its own features and key order, not the VirtualBoard build's.
  const RECORDED =
    '{"type":"hello","version":1,"features":{"mcp":true,"aec":true},"transport":"websocket","audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}';

  it('is the recorded hello, byte for byte, on a session of its transport and version', async () => {
    const { connection } = await connect(
      parseReplica(formatReplica({ ...replica(), hello: RECORDED })),
    );
    expect(connection.texts[0]).toBe(RECORDED);
  });

  it("is the build's own on a session of another protocol version, or when the recording is no hello", async () => {
    const version3: TestBackendOptions = {
      otaReply: (_request, b) => ({
        body: { websocket: { url: b.wsUrl, token: 'test-token', version: 3 } },
      }),
    };
    const { connection } = await connect(
      parseReplica(formatReplica({ ...replica(), hello: RECORDED })),
      undefined,
      version3,
    );
    expect(connection.hello).toMatchObject({ type: 'hello', version: 3, transport: 'websocket' });
    expect(connection.texts[0]).not.toBe(RECORDED);
    for (const board of boards.splice(0)) board.powerOff();
    await backend?.close();

    const { connection: plain } = await connect(
      parseReplica(formatReplica({ ...replica(), hello: '{}' })),
    );
    expect(plain.hello).toMatchObject({ type: 'hello', version: 1, transport: 'websocket' });
  });
});

describe("the firmware's board actions", () => {
  it('self.reboot reboots a replica board, its reply lost as on the firmware', async () => {
    const r = replicaFromTools(
      JSON.stringify({
        tools: [
          { name: 'self.ping', description: 'Ping' },
          { name: 'self.reboot', description: 'Restarts the device.', user_only: true },
        ],
      }),
    );
    const { board, connection } = await connect(r);
    const boots: number[] = [];
    board.on('boot', (_reason, count) => boots.push(count));
    connection.sendPayload(
      '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"self.reboot","arguments":{}}}',
    );
    await until(() => boots.length > 0 && connection.closeCode !== undefined, {
      what: 'the reboot',
    });
    expect(connection.mcpPayloads.some((p) => p.startsWith('{"jsonrpc":"2.0","id":5,'))).toBe(
      false,
    );
    await board.waitForState('idle', 20_000);
  });
});

describe('a replica tool', () => {
  it('answers the n-th call with the same values with the n-th recorded reply, then the last', async () => {
    const status = (id: number, volume: number) =>
      `{"jsonrpc":"2.0","id":${id},"result":{"content":[{"type":"text","text":"{\\"volume\\":${volume}}"}],"isError":false}}`;
    const r = replicaFromTools(
      JSON.stringify({
        tools: [
          { name: 'self.status', description: 'Status' },
          {
            name: 'self.set_volume',
            description: 'Volume',
            properties: [{ name: 'volume', type: 'integer', min: 0, max: 100 }],
          },
        ],
      }),
    );
    r.calls = [
      { tool: 'self.status', arguments: {}, reply: status(1, 70), delayMs: 0 },
      {
        tool: 'self.set_volume',
        arguments: { volume: 50 },
        reply:
          '{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"true"}],"isError":false}}',
        delayMs: 0,
      },
      { tool: 'self.status', arguments: {}, reply: status(3, 50), delayMs: 0 },
    ];
    const preset = replicaPreset(parseReplica(formatReplica(r)));
    const storage = {};
    const run = async (
      server: McpServer,
      sent: string[],
      id: number,
      name: string,
      args: object,
    ) => {
      server.handlePayload(
        JSON.stringify({
          jsonrpc: '2.0',
          id,
          method: 'tools/call',
          params: { name, arguments: args },
        }),
      );
      await server.idle();
      return sent.at(-1);
    };
    const boot = () => {
      const server = new McpServer({ board: { name: 'replica', version: '1.0.0' } });
      const sent: string[] = [];
      server.setSender((payload) => sent.push(payload));
      preset.registerTools(server, { storage } as unknown as BoardApi);
      return { server, sent };
    };
    const first = boot();
    expect(await run(first.server, first.sent, 1, 'self.status', {})).toBe(status(1, 70));
    await run(first.server, first.sent, 2, 'self.set_volume', { volume: 50 });
    // Counted per board across its reboots: a new MCP server on the same board goes on.
    const second = boot();
    expect(await run(second.server, second.sent, 3, 'self.status', {})).toBe(status(3, 50));
    expect(await run(second.server, second.sent, 4, 'self.status', {})).toBe(status(4, 50));
    // Another board from the same replica replays from the start.
    const server = new McpServer({ board: { name: 'replica', version: '1.0.0' } });
    const sent: string[] = [];
    server.setSender((payload) => sent.push(payload));
    preset.registerTools(server, { storage: {} } as unknown as BoardApi);
    expect(await run(server, sent, 1, 'self.status', {})).toBe(status(1, 70));
  });

  it('answers a recorded call after its recorded delay, and others at once', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout'] });
    try {
      const server = new McpServer({ board: { name: 'arm-cn', version: '2.0.1' } });
      const sent: string[] = [];
      server.setSender((payload) => sent.push(payload));
      // Only the MCP server is used by a replica's tools: no hardware behind them.
      replicaPreset(replica()).registerTools(server, { storage: {} } as unknown as BoardApi);
      server.handlePayload(
        '{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"self.servo.move","arguments":{"angle":180,"speed":100}}}',
      );
      await vi.advanceTimersByTimeAsync(19);
      expect(sent).toEqual([]);
      await vi.advanceTimersByTimeAsync(1);
      await server.idle();
      expect(sent).toEqual([CALLS[1]?.reply]);
      server.handlePayload(
        '{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{"name":"self.servo.move","arguments":{"angle":1}}}',
      );
      await server.idle();
      expect(sent[1]).toBe('{"jsonrpc":"2.0","id":30,"error":{"message":"Servo "jammed" at 180"}}');
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('a recorded reply read back', () => {
  it('gives an error message as recorded, quotes and backslashes byte for byte', () => {
    for (const reply of [
      '{"jsonrpc":"2.0","id":8,"error":{"message":"Servo "jammed" at 180"}}',
      '{"jsonrpc":"2.0","id":4,"error":{"message":"no file C:\\new\\\\x"}}',
    ]) {
      const answer = replyAnswer(reply);
      expect(answer.value).toBeUndefined();
      expect(encodeDeviceError(Number(/"id":(\d+)/.exec(reply)?.[1]), answer.error ?? '')).toBe(
        reply,
      );
    }
  });

  it('gives a text item its text and an image item its bytes', () => {
    const image = new ImageContent('image/png', Uint8Array.of(1, 2, 3));
    expect(replyAnswer(`{"jsonrpc":"2.0","id":3,"result":${encodeToolResult('角度 30')}}`)).toEqual(
      {
        value: '角度 30',
      },
    );
    expect(replyAnswer(`{"jsonrpc":"2.0","id":3,"result":${encodeToolResult(image)}}`)).toEqual({
      value: image,
    });
  });
});
