import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  buildToolsPage,
  type OtaRequestBody,
  PAGE_BUDGET_BYTES,
  printCJson,
  type Tool,
} from '@xiaozhi-mcp/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import type { BoardApi, BoardPreset } from '../board-api.js';
import { McpServer } from '../mcp-server.js';
import { NvsStorage } from '../nvs-storage.js';
import { boardPreset } from '../presets.js';
import { initialOttoState, OTTO_HOME_POSE, ottoState, registerOttoTools } from './board-tools.js';
import {
  defaultDeviceStatus,
  registerCommonTools,
  registerUserOnlyTools,
  TINY_JPEG,
  UPGRADE_FIRMWARE_URL_DEFAULT,
} from './common-tools.js';

// ---------------------------------------------------------------------------------------
// A fake board around a real firmware-profile McpServer

const MAC = 'a0:85:e3:f4:12:7c';
const UUID = 'c3a1e2f0-4d5b-4e6a-9b7c-1d2e3f4a5b6c';

function systemInfo(): OtaRequestBody {
  return {
    version: 2,
    language: 'en-US',
    flash_size: 16_777_216,
    minimum_free_heap_size: '8191896',
    mac_address: MAC,
    uuid: UUID,
    chip_model_name: 'esp32s3',
    chip_info: { model: 9, cores: 2, revision: 2, features: 18 },
    application: {
      name: 'xiaozhi',
      version: '2.4.2',
      compile_time: 'Aug 20 2026T10:12:03Z',
      idf_version: 'v5.5.1',
      elf_sha256: '6f1c0d2e9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d',
    },
    partition_table: [{ label: 'nvs', type: 1, subtype: 2, address: 36_864, size: 16_384 }],
    ota: { label: 'ota_0' },
    board: { type: 'bread-compact-wifi', name: 'bread-compact-wifi', mac: MAC },
  };
}

interface Rig {
  readonly server: McpServer;
  readonly board: BoardApi;
  /** Scheduled tasks, log lines and hardware service calls, in order. */
  readonly events: string[];
  readonly replies: string[];
  /** Sends a `tools/call` and resolves with the reply, or undefined when none was sent. */
  call(name: string, args?: Record<string, unknown>): Promise<string | undefined>;
  send(payload: Record<string, unknown>): Promise<string | undefined>;
}

interface RigOptions {
  /** What `upgradeFirmware` answers; on true it reboots the board, as the firmware does. */
  readonly upgradeSucceeds?: boolean;
  readonly register?: (server: McpServer, board: BoardApi) => void;
}

let nextId = 1;

function rig(preset: BoardPreset, options: RigOptions = {}): Rig {
  const server = new McpServer({
    board: { name: preset.name, version: '2.4.2' },
    profile: 'firmware',
  });
  const replies: string[] = [];
  const events: string[] = [];
  server.setSender((payload) => replies.push(payload));
  const board: BoardApi = {
    hardware: preset.hardware(),
    storage: new NvsStorage(),
    schedule(task) {
      events.push('schedule');
      server.loop.schedule(task);
    },
    reboot() {
      events.push('reboot');
      // A rebooting board has no channel: whatever is queued is never sent.
      server.setSender(undefined);
    },
    async upgradeFirmware(url) {
      events.push(`upgrade ${url}`);
      if (options.upgradeSucceeds === true) board.reboot();
      return options.upgradeSucceeds === true;
    },
    systemInfo,
    deviceStatus: () => defaultDeviceStatus(board.hardware, { screen: true }),
    enterWifiConfigMode: () => events.push('wifi-config'),
    vision: () => server.vision,
    deviceId: MAC,
    clientId: UUID,
    log: (level, tag, text) => events.push(`${level} ${tag}: ${text}`),
  };
  (options.register ?? preset.registerTools)(server, board);
  const send = async (payload: Record<string, unknown>) => {
    const before = replies.length;
    server.handlePayload(JSON.stringify(payload));
    await server.idle();
    expect(replies.length - before).toBeLessThanOrEqual(1);
    return replies.length > before ? replies.at(-1) : undefined;
  };
  return {
    server,
    board,
    events,
    replies,
    send,
    call: (name, args) =>
      send({
        jsonrpc: '2.0',
        id: nextId++,
        method: 'tools/call',
        params: args === undefined ? { name } : { name, arguments: args },
      }),
  };
}

/** A successful tools/call reply with one text item, byte for byte. */
function ok(reply: string | undefined, text: string): void {
  const id = idOf(reply);
  expect(reply).toBe(
    `{"jsonrpc":"2.0","id":${id},"result":{"content":[{"type":"text","text":${JSON.stringify(text)}}],"isError":false}}`,
  );
}

/** The firmware's error reply: no code, the message unescaped. */
function failed(reply: string | undefined, message: string): void {
  const id = idOf(reply);
  expect(reply).toBe(`{"jsonrpc":"2.0","id":${id},"error":{"message":"${message}"}}`);
}

function idOf(reply: string | undefined): number {
  const match = /^\{"jsonrpc":"2\.0","id":(-?\d+),/.exec(reply ?? '');
  expect(match, `reply ${reply}`).not.toBeNull();
  return Number(match?.[1]);
}

function textOf(reply: string | undefined): string {
  const parsed = JSON.parse(reply ?? 'null') as { result?: { content?: { text?: string }[] } };
  const text = parsed.result?.content?.[0]?.text;
  if (text === undefined) throw new Error(`not a text result: ${reply}`);
  return text;
}

/** A preset with no screen, camera or backlight: only the unconditional built-ins. */
const BARE: BoardPreset = {
  name: 'bare',
  chip: 'esp32c3',
  flashSizeMb: 4,
  display: undefined,
  camera: false,
  backlight: false,
  hardware: () => ({
    volume: 50,
    brightness: 100,
    theme: 'light',
    lamp: false,
    battery: undefined,
    extra: {},
  }),
  registerTools: (server, board) => {
    registerCommonTools(server, board, BARE);
    registerUserOnlyTools(server, board, BARE);
  },
};

const FULL: BoardPreset = {
  ...BARE,
  name: 'full',
  display: { width: 320, height: 240, monochrome: false },
  camera: true,
  backlight: true,
  registerTools: (server, board) => {
    registerCommonTools(server, board, FULL);
    registerUserOnlyTools(server, board, FULL);
  },
};

// ---------------------------------------------------------------------------------------
// A real HTTP endpoint on 127.0.0.1

interface Received {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

interface Endpoint {
  readonly url: string;
  readonly received: Received[];
}

const servers: Server[] = [];

afterEach(async () => {
  await Promise.all(
    servers.splice(0).map((server) => new Promise((resolve) => server.close(resolve))),
  );
});

async function endpoint(
  answer: (request: Received) => { status: number; body: string | Uint8Array },
): Promise<Endpoint> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const request = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks),
      };
      received.push(request);
      const { status, body } = answer(request);
      res.writeHead(status, { 'Content-Type': 'text/plain' });
      res.end(body);
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, received };
}

/** A URL on a port nobody listens on. */
async function deadUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

async function multipart(request: Received): Promise<FormData> {
  const type = request.headers['content-type'] ?? '';
  expect(type).toMatch(/^multipart\/form-data; boundary=/);
  return new Response(request.body, { headers: { 'content-type': type } }).formData();
}

async function fileBytes(form: FormData, field: string): Promise<Uint8Array> {
  const file = form.get(field);
  if (file === null || typeof file === 'string') throw new Error(`${field} is not a file`);
  return new Uint8Array(await file.arrayBuffer());
}

function initialize(vision: Record<string, unknown>): Record<string, unknown> {
  return {
    jsonrpc: '2.0',
    id: nextId++,
    method: 'initialize',
    params: { protocolVersion: '2024-11-05', capabilities: { vision } },
  };
}

/** Every page of a plain or user `tools/list`, following the cursors as a client does. */
function pages(tools: readonly Tool[], withUserTools: boolean): Tool[][] {
  const out: Tool[][] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = buildToolsPage(tools, { cursor, withUserTools });
    if (!page.ok) throw new Error(page.message);
    out.push([...page.tools]);
    if (page.nextCursor === undefined) return out;
    expect(out.length).toBeLessThan(20);
    cursor = page.nextCursor;
  }
}

const names = (tools: readonly Tool[]) => tools.map((tool) => tool.name);

// ---------------------------------------------------------------------------------------

describe('registration', () => {
  it('registers only the unconditional tools on a board without screen, camera or backlight', () => {
    const { server } = rig(BARE);
    expect(names(server.tools)).toEqual([
      'self.get_device_status',
      'self.audio_speaker.set_volume',
      'self.get_system_info',
      'self.reboot',
      'self.upgrade_firmware',
      'self.assets.set_download_url',
    ]);
  });

  it('registers every built-in, common first, on a board with all the hardware', () => {
    const { server } = rig(FULL);
    expect(names(server.tools)).toEqual([
      'self.get_device_status',
      'self.audio_speaker.set_volume',
      'self.screen.set_brightness',
      'self.screen.set_theme',
      'self.camera.take_photo',
      'self.get_system_info',
      'self.reboot',
      'self.upgrade_firmware',
      'self.screen.get_info',
      'self.screen.snapshot',
      'self.screen.preview_image',
      'self.assets.set_download_url',
    ]);
    expect(server.tools.filter((tool) => tool.userOnly).length).toBe(7);
  });

  it('keeps common tools first even when board tools are registered before them', () => {
    const { server } = rig(BARE, {
      register: (server, board) => {
        registerOttoTools(server, board);
        registerUserOnlyTools(server, board, BARE);
        registerCommonTools(server, board, BARE);
      },
    });
    const list = names(server.tools);
    expect(list.slice(0, 2)).toEqual(['self.get_device_status', 'self.audio_speaker.set_volume']);
    expect(list.at(-1)).toBe('self.assets.set_download_url');
  });

  it('declares the schemas of docs/protocol.md §3.4', () => {
    const { server } = rig(FULL);
    const schema = (name: string) => {
      const tool = server.tools.find((t) => t.name === name);
      if (tool === undefined) throw new Error(`no ${name}`);
      const json = tool.json;
      return json.slice(json.indexOf(',"inputSchema":') + 15);
    };
    expect(schema('self.get_device_status')).toBe('{"type":"object","properties":{}}}');
    expect(schema('self.audio_speaker.set_volume')).toBe(
      '{"type":"object","properties":{"volume":{"type":"integer","minimum":0,"maximum":100}},"required":["volume"]}}',
    );
    expect(schema('self.screen.set_brightness')).toBe(
      '{"type":"object","properties":{"brightness":{"type":"integer","minimum":0,"maximum":100}},"required":["brightness"]}}',
    );
    expect(schema('self.screen.set_theme')).toBe(
      '{"type":"object","properties":{"theme":{"type":"string"}},"required":["theme"]}}',
    );
    expect(schema('self.camera.take_photo')).toBe(
      '{"type":"object","properties":{"question":{"type":"string"}},"required":["question"]}}',
    );
    expect(schema('self.reboot')).toBe(
      '{"type":"object","properties":{}},"annotations":{"audience":["user"]}}',
    );
    expect(schema('self.upgrade_firmware')).toBe(
      `{"type":"object","properties":{"url":{"type":"string","default":"${UPGRADE_FIRMWARE_URL_DEFAULT}"}}},"annotations":{"audience":["user"]}}`,
    );
    expect(schema('self.screen.snapshot')).toBe(
      '{"type":"object","properties":{"url":{"type":"string"},"quality":{"type":"integer","default":80,"minimum":1,"maximum":100}},"required":["url"]},"annotations":{"audience":["user"]}}',
    );
    expect(schema('self.screen.preview_image')).toBe(
      '{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]},"annotations":{"audience":["user"]}}',
    );
    expect(schema('self.assets.set_download_url')).toBe(
      '{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]},"annotations":{"audience":["user"]}}',
    );
  });

  it('gives every tool a description of its own', () => {
    const { server } = rig(boardPreset('otto-robot'));
    for (const tool of server.tools) {
      expect(tool.description.length, tool.name).toBeGreaterThan(15);
      expect(tool.description, tool.name).toMatch(/^[A-Z]/);
    }
    expect(new Set(server.tools.map((t) => t.description)).size).toBe(server.tools.length);
  });
});

describe('common tools', () => {
  it('self.get_device_status returns the board JSON', async () => {
    const { call } = rig(FULL);
    ok(
      await call('self.get_device_status'),
      '{"audio_speaker":{"volume":50},"screen":{"brightness":100,"theme":"light"},"network":{"type":"wifi","ssid":"","signal":"unknown"}}',
    );
  });

  it('self.audio_speaker.set_volume sets the volume and checks the range', async () => {
    const { call, board } = rig(FULL);
    ok(await call('self.audio_speaker.set_volume', { volume: 35 }), 'true');
    expect(board.hardware.volume).toBe(35);
    failed(
      await call('self.audio_speaker.set_volume', { volume: 101 }),
      'Value exceeds maximum allowed: 100',
    );
    failed(await call('self.audio_speaker.set_volume', {}), 'Missing valid argument: volume');
    expect(board.hardware.volume).toBe(35);
  });

  it('self.screen.set_brightness sets the backlight', async () => {
    const { call, board } = rig(FULL);
    ok(await call('self.screen.set_brightness', { brightness: 0 }), 'true');
    expect(board.hardware.brightness).toBe(0);
    failed(
      await call('self.screen.set_brightness', { brightness: -1 }),
      'Value is below minimum allowed: 0',
    );
  });

  it('self.screen.set_theme knows light and dark and answers false for anything else', async () => {
    const { call, board } = rig(FULL);
    ok(await call('self.screen.set_theme', { theme: 'dark' }), 'true');
    expect(board.hardware.theme).toBe('dark');
    ok(await call('self.screen.set_theme', { theme: 'blue' }), 'false');
    ok(await call('self.screen.set_theme', { theme: 'Light' }), 'false');
    expect(board.hardware.theme).toBe('dark');
    ok(await call('self.screen.set_theme', { theme: 'light' }), 'true');
    expect(board.hardware.theme).toBe('light');
  });

  describe('self.camera.take_photo', () => {
    it('fails without a vision endpoint from initialize', async () => {
      const { call } = rig(FULL);
      const reply = await call('self.camera.take_photo', { question: 'What is this?' });
      expect(reply).toBe(
        `{"jsonrpc":"2.0","id":${idOf(reply)},"error":{"message":"Image explain URL or token is not set"}}`,
      );
    });

    it('posts the question and a JPEG with the identification headers', async () => {
      const vision = await endpoint(() => ({
        status: 200,
        body: '{"success":true,"text":"A cat"}',
      }));
      const { call, send, server } = rig(FULL);
      await send(initialize({ url: `${vision.url}/vision/explain`, token: 'secret-token' }));
      expect(server.vision?.token).toBe('secret-token');
      ok(
        await call('self.camera.take_photo', { question: 'What animal is this?' }),
        '{"success":true,"text":"A cat"}',
      );

      expect(vision.received).toHaveLength(1);
      const [request] = vision.received;
      if (request === undefined) throw new Error('no request');
      expect(request.method).toBe('POST');
      expect(request.url).toBe('/vision/explain');
      expect(request.headers.authorization).toBe('Bearer secret-token');
      expect(request.headers['device-id']).toBe(MAC);
      expect(request.headers['client-id']).toBe(UUID);
      const form = await multipart(request);
      expect(form.get('question')).toBe('What animal is this?');
      expect(await fileBytes(form, 'file')).toEqual(TINY_JPEG);
      const file = form.get('file');
      expect(typeof file === 'object' && file?.type).toBe('image/jpeg');
    });

    it('sends no Authorization header without a token', async () => {
      const vision = await endpoint(() => ({ status: 200, body: 'ok' }));
      const { call, send } = rig(FULL);
      await send(initialize({ url: vision.url }));
      ok(await call('self.camera.take_photo', { question: 'q' }), 'ok');
      expect(vision.received[0]?.headers.authorization).toBeUndefined();
    });

    it('turns a non-200 answer into an error reply with the status', async () => {
      const vision = await endpoint(() => ({ status: 503, body: 'busy' }));
      const { call, send, events } = rig(FULL);
      await send(initialize({ url: vision.url, token: 't' }));
      failed(
        await call('self.camera.take_photo', { question: 'q' }),
        'Failed to upload photo, status code: 503',
      );
      expect(events).toContain('E Esp32Camera: Failed to upload photo, status code: 503');
    });

    it('turns a connection failure into an error reply', async () => {
      const { call, send } = rig(FULL);
      await send(initialize({ url: await deadUrl(), token: 't' }));
      failed(
        await call('self.camera.take_photo', { question: 'q' }),
        'Failed to connect to explain URL',
      );
    });
  });
});

describe('user-only tools', () => {
  it('self.get_system_info returns the OTA body as compact JSON', async () => {
    const { call } = rig(FULL);
    const reply = await call('self.get_system_info');
    ok(reply, printCJson(systemInfo()));
    expect(JSON.parse(textOf(reply))).toEqual(systemInfo());
  });

  it('self.reboot reboots on the main loop before its reply can leave', async () => {
    const { call, events, replies, board } = rig(FULL);
    const sent = replies.length;
    expect(await call('self.reboot')).toBeUndefined();
    expect(replies.length).toBe(sent);
    // The handler queued the reboot; it ran (log, then reboot) ahead of the queued reply.
    expect(events).toEqual(['schedule', 'W MCP: User requested reboot', 'reboot']);
    // Nothing is sent after the reboot either.
    expect(await call('self.audio_speaker.set_volume', { volume: 1 })).toBeUndefined();
    expect(board.hardware.volume).toBe(1);
  });

  it('self.reboot returns true: seen only on a board whose reboot keeps the channel', async () => {
    const { call } = rig(FULL, {
      register: (server, board) =>
        registerUserOnlyTools(server, { ...board, reboot: () => undefined }, FULL),
    });
    ok(await call('self.reboot'), 'true');
  });

  it('self.upgrade_firmware without url downloads from the default sentence, and logs the failure', async () => {
    const { call, events } = rig(FULL);
    ok(await call('self.upgrade_firmware'), 'true');
    expect(events).toEqual([
      'schedule',
      `I MCP: User requested firmware upgrade from URL: ${UPGRADE_FIRMWARE_URL_DEFAULT}`,
      `upgrade ${UPGRADE_FIRMWARE_URL_DEFAULT}`,
      'E MCP: Failed to upgrade firmware',
    ]);
  });

  it('self.upgrade_firmware that succeeds reboots before the reply', async () => {
    const { call, events } = rig(FULL, { upgradeSucceeds: true });
    expect(
      await call('self.upgrade_firmware', { url: 'http://ota.local/xiaozhi.bin' }),
    ).toBeUndefined();
    expect(events).toEqual([
      'schedule',
      'I MCP: User requested firmware upgrade from URL: http://ota.local/xiaozhi.bin',
      'upgrade http://ota.local/xiaozhi.bin',
      'reboot',
    ]);
  });

  it('self.upgrade_firmware logs an upgrade that throws', async () => {
    const { call, events } = rig(FULL, {
      register: (server, board) =>
        registerUserOnlyTools(
          server,
          {
            ...board,
            upgradeFirmware: () => Promise.reject(new Error('flash write failed')),
          },
          FULL,
        ),
    });
    ok(await call('self.upgrade_firmware', { url: 'http://x/y.bin' }), 'true');
    expect(events.slice(-2)).toEqual([
      'E MCP: Firmware upgrade error: Error: flash write failed',
      'E MCP: Failed to upgrade firmware',
    ]);
  });

  it('self.screen.get_info describes the display', async () => {
    ok(
      await rig(FULL).call('self.screen.get_info'),
      '{"width":320,"height":240,"monochrome":false}',
    );
    ok(
      await rig(boardPreset('bread-compact-wifi')).call('self.screen.get_info'),
      '{"width":128,"height":64,"monochrome":true}',
    );
  });

  it('self.screen.snapshot uploads a JPEG as multipart field file', async () => {
    const target = await endpoint(() => ({ status: 200, body: 'stored' }));
    const { call, events } = rig(FULL);
    ok(await call('self.screen.snapshot', { url: `${target.url}/upload?x=1` }), 'true');
    const [request] = target.received;
    if (request === undefined) throw new Error('no request');
    expect(request.method).toBe('POST');
    expect(request.url).toBe('/upload?x=1');
    expect(await fileBytes(await multipart(request), 'file')).toEqual(TINY_JPEG);
    expect(events).toContain('I MCP: Snapshot screen result: stored');
    failed(
      await call('self.screen.snapshot', { url: target.url, quality: 0 }),
      'Value is below minimum allowed: 1',
    );
  });

  it('self.screen.snapshot fails on a non-200 answer or an unreachable URL', async () => {
    const target = await endpoint(() => ({ status: 404, body: 'no' }));
    const { call } = rig(FULL);
    failed(
      await call('self.screen.snapshot', { url: target.url, quality: 50 }),
      'Unexpected status code: 404',
    );
    const dead = await deadUrl();
    failed(await call('self.screen.snapshot', { url: dead }), `Failed to open URL: ${dead}`);
  });

  it('self.screen.preview_image downloads the image', async () => {
    const target = await endpoint((request) =>
      request.url === '/cat.jpg' ? { status: 200, body: TINY_JPEG } : { status: 404, body: '' },
    );
    const { call, events } = rig(FULL);
    ok(await call('self.screen.preview_image', { url: `${target.url}/cat.jpg` }), 'true');
    expect(target.received[0]?.method).toBe('GET');
    expect(events).toContain(
      `I MCP: Preview image ${target.url}/cat.jpg: ${TINY_JPEG.length} bytes`,
    );
    failed(
      await call('self.screen.preview_image', { url: `${target.url}/dog.jpg` }),
      'Unexpected status code: 404',
    );
    failed(
      await call('self.screen.preview_image', { url: 'not a url' }),
      'Failed to open URL: not a url',
    );
    failed(await call('self.screen.preview_image', {}), 'Missing valid argument: url');
  });

  it('self.assets.set_download_url stores the URL in NVS', async () => {
    const { call, board } = rig(FULL);
    ok(
      await call('self.assets.set_download_url', { url: 'https://cdn.example/assets.bin' }),
      'true',
    );
    expect(board.storage.open('assets').getString('download_url')).toBe(
      'https://cdn.example/assets.bin',
    );
  });

  it('user-only tools are callable without withUserTools and hidden from a plain list', async () => {
    const { send } = rig(FULL);
    const plain = JSON.parse(
      (await send({ jsonrpc: '2.0', id: 90, method: 'tools/list' })) ?? 'null',
    ) as { result: { tools: { name: string; annotations?: unknown }[] } };
    expect(plain.result.tools.map((t) => t.name)).toEqual([
      'self.get_device_status',
      'self.audio_speaker.set_volume',
      'self.screen.set_brightness',
      'self.screen.set_theme',
      'self.camera.take_photo',
    ]);
    const all = JSON.parse(
      (await send({
        jsonrpc: '2.0',
        id: 91,
        method: 'tools/list',
        params: { withUserTools: true },
      })) ?? 'null',
    ) as { result: { tools: { name: string; annotations?: unknown }[] } };
    expect(all.result.tools).toHaveLength(12);
    for (const tool of all.result.tools.slice(5)) {
      expect(tool.annotations).toEqual({ audience: ['user'] });
    }
  });
});

describe('lamp and Wi-Fi tools', () => {
  it('self.lamp.* switch the lamp and report it with the firmware text', async () => {
    const { call, board } = rig(boardPreset('bread-compact-wifi'));
    ok(await call('self.lamp.get_state'), '{"power": false}');
    ok(await call('self.lamp.turn_on'), 'true');
    expect(board.hardware.lamp).toBe(true);
    ok(await call('self.lamp.get_state'), '{"power": true}');
    expect(JSON.parse(textOf(await call('self.lamp.get_state')))).toEqual({ power: true });
    ok(await call('self.lamp.turn_off'), 'true');
    expect(board.hardware.lamp).toBe(false);
  });

  it('self.system.reconfigure_wifi enters Wi-Fi config mode on the main loop', async () => {
    const { call, events } = rig(boardPreset('bread-compact-wifi'));
    ok(await call('self.system.reconfigure_wifi'), 'true');
    expect(events).toEqual(['schedule', 'wifi-config']);
  });
});

describe('otto tools', () => {
  const otto = () => rig(boardPreset('otto-robot'));

  it('self.otto.walk with defaults records the action and ends at home', async () => {
    const { call, board } = otto();
    ok(await call('self.otto.walk'), 'true');
    const state = ottoState(board.hardware);
    expect(state.last_action).toEqual({
      name: 'walk',
      steps: 3,
      speed: 1000,
      direction: 1,
      arm_swing: 50,
    });
    expect(state.action_count).toBe(1);
    expect(state.pose).toEqual(OTTO_HOME_POSE);
  });

  it('checks ranges of the motion properties', async () => {
    const { call } = otto();
    failed(await call('self.otto.walk', { steps: 0 }), 'Value is below minimum allowed: 1');
    failed(await call('self.otto.walk', { speed: 2000 }), 'Value exceeds maximum allowed: 1500');
    failed(await call('self.otto.turn', { direction: -2 }), 'Value is below minimum allowed: -1');
    failed(await call('self.otto.walk', { arm_swing: 171 }), 'Value exceeds maximum allowed: 170');
    failed(await call('self.otto.jitter', { amount: 30 }), 'Value exceeds maximum allowed: 25');
  });

  it('runs every motion and reports it in get_status', async () => {
    const { call } = otto();
    const motions = [
      'walk',
      'turn',
      'jump',
      'swing',
      'moonwalk',
      'bend',
      'shake_leg',
      'updown',
      'tiptoe_swing',
      'jitter',
      'ascending_turn',
      'crusaito',
      'flapping',
      'kick',
      'look_around',
      'hand_wave',
      'windmill',
      'dance',
    ];
    for (const motion of motions) ok(await call(`self.otto.${motion}`), 'true');
    ok(
      await call('self.otto.moonwalk', { steps: 5, speed: 600, direction: -1, amount: 40 }),
      'true',
    );
    const status = JSON.parse(textOf(await call('self.otto.get_status'))) as Record<
      string,
      unknown
    >;
    expect(status).toMatchObject({
      moving: false,
      hands: true,
      pose: OTTO_HOME_POSE,
      last_action: { name: 'moonwalk', steps: 5, speed: 600, direction: -1, amount: 40 },
      action_count: motions.length + 1,
    });
  });

  it('self.otto.dance knows three styles', async () => {
    const { call, board } = otto();
    ok(await call('self.otto.dance', { style: 'party', steps: 8 }), 'true');
    expect(ottoState(board.hardware).last_action).toEqual({
      name: 'dance',
      steps: 8,
      speed: 1000,
      style: 'party',
    });
    failed(
      await call('self.otto.dance', { style: 'tango' }),
      'Unknown dance style: tango; use random, party or calm',
    );
  });

  it('holding poses keep their angles until home', async () => {
    const { call, board } = otto();
    ok(await call('self.otto.hands_up', { direction: -1 }), 'true');
    expect(ottoState(board.hardware).pose).toMatchObject({ left_hand: 180, right_hand: 135 });
    ok(await call('self.otto.hands_up'), 'true');
    expect(ottoState(board.hardware).pose).toMatchObject({ left_hand: 180, right_hand: 0 });
    ok(await call('self.otto.hands_down', { direction: 1 }), 'true');
    expect(ottoState(board.hardware).pose).toMatchObject({ left_hand: 180, right_hand: 135 });
    ok(await call('self.otto.sit'), 'true');
    expect(ottoState(board.hardware).pose).toMatchObject({
      left_foot: 150,
      right_foot: 30,
      left_hand: 180,
    });
    ok(await call('self.otto.home'), 'true');
    expect(ottoState(board.hardware).pose).toEqual(OTTO_HOME_POSE);
    ok(await call('self.otto.hands_up'), 'true');
    ok(await call('self.otto.stop'), 'true');
    expect(ottoState(board.hardware)).toMatchObject({
      pose: OTTO_HOME_POSE,
      last_action: { name: 'stop' },
    });
  });

  it('self.otto.set_trim stores trims in the state and NVS; get_trims returns them', async () => {
    const { call, board } = otto();
    ok(await call('self.otto.set_trim', { servo: 'left_leg', trim: -7 }), 'true');
    ok(await call('self.otto.set_trim', { servo: 'right_hand', trim: 12 }), 'true');
    ok(
      await call('self.otto.get_trims'),
      '{"left_leg":-7,"right_leg":0,"left_foot":0,"right_foot":0,"left_hand":0,"right_hand":12}',
    );
    expect(board.storage.open('otto_trims').getInt('left_leg')).toBe(-7);
    failed(
      await call('self.otto.set_trim', { servo: 'left_leg', trim: 51 }),
      'Value exceeds maximum allowed: 50',
    );
    failed(
      await call('self.otto.set_trim', { servo: 'tail', trim: 1 }),
      'Invalid servo: tail; use one of left_leg, right_leg, left_foot, right_foot, left_hand, right_hand',
    );
  });

  it('loads trims saved in NVS when the tools are registered', async () => {
    const preset = boardPreset('otto-robot');
    const { call } = rig(preset, {
      register: (server, board) => {
        board.storage.open('otto_trims').setInt('right_foot', 9);
        preset.registerTools(server, board);
      },
    });
    const trims = JSON.parse(textOf(await call('self.otto.get_trims'))) as Record<string, number>;
    expect(trims.right_foot).toBe(9);
  });

  it('self.otto.servo_sequences moves servos and holds the last frame', async () => {
    const { call, board } = otto();
    const sequence = JSON.stringify([
      { left_leg: 60, right_leg: 120, ms: 400 },
      { left_leg: 70, left_hand: 170 },
    ]);
    ok(await call('self.otto.servo_sequences', { sequence, repeat: 2 }), 'true');
    const state = ottoState(board.hardware);
    expect(state.pose).toEqual({ ...OTTO_HOME_POSE, left_leg: 70, right_leg: 120, left_hand: 170 });
    expect(state.last_action).toEqual({ name: 'servo_sequences', frames: 2, repeat: 2 });
    failed(
      await call('self.otto.servo_sequences', { sequence: '[{' }),
      'Invalid sequence: not valid JSON',
    );
    failed(
      await call('self.otto.servo_sequences', { sequence: '[]' }),
      'Invalid sequence: expected a non-empty array of frames',
    );
    failed(
      await call('self.otto.servo_sequences', { sequence: '[{"left_leg":200}]' }),
      'Invalid sequence: frame 0: left_leg must be 0-180',
    );
    failed(
      await call('self.otto.servo_sequences', { sequence: '[{"ms":50}]' }),
      'Invalid sequence: frame 0: ms must be 100-3000',
    );
    failed(
      await call('self.otto.servo_sequences', { sequence: '[{"head":90}]' }),
      'Invalid sequence: frame 0: unknown servo head',
    );
  });

  it('self.battery.get_level reports the battery', async () => {
    const { call, board } = otto();
    ok(await call('self.battery.get_level'), '{"level":85,"charging":false}');
    board.hardware.battery = undefined;
    failed(await call('self.battery.get_level'), 'Battery is not available');
  });

  it('a robot without arms has no arm tools and no arm servos', async () => {
    const { server, call, board } = rig(BARE, {
      register: (server, board) => {
        board.hardware.extra.otto = initialOttoState({ hands: false });
        registerOttoTools(server, board, { hands: false });
      },
    });
    const list = names(server.tools);
    for (const name of [
      'self.otto.hand_wave',
      'self.otto.windmill',
      'self.otto.hands_up',
      'self.otto.hands_down',
    ]) {
      expect(list).not.toContain(name);
    }
    ok(
      await call('self.otto.get_trims'),
      '{"left_leg":0,"right_leg":0,"left_foot":0,"right_foot":0}',
    );
    failed(
      await call('self.otto.set_trim', { servo: 'left_hand', trim: 1 }),
      'Invalid servo: left_hand; use one of left_leg, right_leg, left_foot, right_foot',
    );
    expect(ottoState(board.hardware).hands).toBe(false);
  });

  it('repairs a missing or partial state in hardware.extra', async () => {
    const { call, board } = otto();
    board.hardware.extra.otto = { pose: { left_leg: 10 }, last_action: 'garbage' };
    const status = JSON.parse(textOf(await call('self.otto.get_status'))) as Record<
      string,
      unknown
    >;
    expect(status).toMatchObject({
      pose: { ...OTTO_HOME_POSE, left_leg: 10 },
      last_action: null,
      action_count: 0,
    });
  });
});

describe('paging', () => {
  it('the otto robot needs at least three plain pages, every page within budget', () => {
    const { server } = rig(boardPreset('otto-robot'));
    const plain = pages(server.tools, false);
    expect(plain.length).toBeGreaterThanOrEqual(3);
    const listed = plain.flat();
    expect(names(listed)).toEqual(names(server.tools.filter((tool) => !tool.userOnly)));
    for (const page of plain) {
      const bytes = 10 + page.reduce((sum, tool) => sum + tool.jsonBytes + 1, 0);
      expect(bytes + 30).toBeLessThanOrEqual(PAGE_BUDGET_BYTES);
    }
  });

  it('user-only tools appear only with withUserTools, after the board tools', () => {
    const { server } = rig(boardPreset('otto-robot'));
    const plain = pages(server.tools, false).flat();
    const withUser = pages(server.tools, true);
    expect(withUser.length).toBeGreaterThanOrEqual(pages(server.tools, false).length);
    expect(plain.some((tool) => tool.userOnly)).toBe(false);
    const all = withUser.flat();
    expect(names(all)).toEqual(names(server.tools));
    expect(names(all.filter((tool) => tool.userOnly))).toEqual(names(all.slice(-7)));
  });

  it('the server pages the same way over tools/list', async () => {
    const { send, server } = rig(boardPreset('otto-robot'));
    let cursor: string | undefined;
    const seen: string[] = [];
    for (let page = 0; page < 10; page++) {
      const reply = await send({
        jsonrpc: '2.0',
        id: 100 + page,
        method: 'tools/list',
        params: cursor === undefined ? {} : { cursor },
      });
      const parsed = JSON.parse(reply ?? 'null') as {
        result: { tools: { name: string }[]; nextCursor?: string };
      };
      seen.push(...parsed.result.tools.map((tool) => tool.name));
      cursor = parsed.result.nextCursor;
      if (cursor === undefined) break;
    }
    expect(seen).toEqual(names(server.tools.filter((tool) => !tool.userOnly)));
  });
});

describe('helpers', () => {
  it('TINY_JPEG is a well-formed baseline JPEG', () => {
    const bytes = TINY_JPEG;
    expect(bytes.length).toBe(159);
    expect([bytes[0], bytes[1]]).toEqual([0xff, 0xd8]);
    expect([bytes.at(-2), bytes.at(-1)]).toEqual([0xff, 0xd9]);
    // Walk the marker segments up to the scan: each length must land on the next marker.
    const markers: number[] = [];
    let at = 2;
    for (;;) {
      expect(bytes[at]).toBe(0xff);
      const marker = bytes[at + 1] ?? 0;
      markers.push(marker);
      const length = ((bytes[at + 2] ?? 0) << 8) | (bytes[at + 3] ?? 0);
      at += 2 + length;
      if (marker === 0xda) break;
    }
    expect(markers).toEqual([0xe0, 0xdb, 0xc0, 0xc4, 0xc4, 0xda]);
    expect(bytes.length - at).toBe(3); // one byte of scan data, then EOI
  });

  it('defaultDeviceStatus includes the screen and battery when asked or present', () => {
    const hardware = {
      ...BARE.hardware(),
      battery: { level: 40, charging: true },
    };
    expect(
      defaultDeviceStatus(hardware, {
        network: { type: 'wifi', ssid: 'lab', signal: 'strong' },
        chipTemperature: 41,
      }),
    ).toEqual({
      audio_speaker: { volume: 50 },
      battery: { level: 40, charging: true },
      network: { type: 'wifi', ssid: 'lab', signal: 'strong' },
      chip: { temperature: 41 },
    });
  });
});
