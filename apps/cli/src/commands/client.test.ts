import { type ChildProcessWithoutNullStreams, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer as createHttpServer, type IncomingMessage } from 'node:http';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { VirtualBoard } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { XiaozhiServer } from '@xiaozhi-mcp/server';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../io.test-helper.js';
import {
  buildArguments,
  checkArguments,
  closeNames,
  formatContent,
  normalizeDeviceId,
  toolSignature,
} from './client.js';
import { simMac } from './sim.js';

const WIFI = { ssid: 'cli-test', password: 'secret' };
const MAC = 'f4:12:fa:00:00:21';
const OTHER = 'f4:12:fa:00:00:22';

async function startBoard(server: XiaozhiServer, mac: string): Promise<VirtualBoard> {
  const board = new VirtualBoard({ mac, wifi: WIFI, otaUrl: server.urls.ota, timing: FAST_TIMING });
  board.powerOn();
  await board.waitForState('idle', 5000);
  board.click();
  await server.registry.waitForReady(mac, 10_000);
  return board;
}

describe('xiaozhi-mcp devices, tools and call', { timeout: 20_000 }, () => {
  let server: XiaozhiServer;
  let board: VirtualBoard;
  let other: VirtualBoard;
  let url: string;

  beforeAll(async () => {
    server = await XiaozhiServer.start({ port: 0, logLevel: 'silent' });
    url = server.urls.http;
    board = await startBoard(server, MAC);
    other = await startBoard(server, OTHER);
  }, 30_000);

  afterAll(async () => {
    board?.powerOff();
    other?.powerOff();
    await server?.stop();
  });

  it('lists devices as a table or as the API JSON', async () => {
    const table = await runCli('devices', '--server', url);
    expect(table.code).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^DEVICE +BOARD +VERSION +STATE +TRANSPORT +TOOLS +LAST OTA CHECK$/);
    expect(lines.slice(1)).toEqual([
      expect.stringMatching(
        /^f4:12:fa:00:00:21 {2}bread-compact-wifi {2}2\.4\.2 {4}ready {2}websocket {2}14 {5}\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/,
      ),
      expect.stringMatching(/^f4:12:fa:00:00:22 {2}bread-compact-wifi/),
    ]);

    const json = await runCli('devices', '--server', url, '--json');
    expect(json.code).toBe(0);
    const body = JSON.parse(json.stdout) as { devices: Record<string, unknown>[] };
    expect(body.devices[0]).toMatchObject({
      deviceId: MAC,
      board: 'bread-compact-wifi',
      connected: true,
      ready: true,
      transport: 'websocket',
      toolCount: 14,
    });
  });

  it('lists tools as signatures, the device given as an upper-case MAC', async () => {
    const tools = await runCli('tools', MAC.toUpperCase(), '--server', url);
    expect(tools.code).toBe(0);
    const lines = tools.stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(14);
    expect(lines).toContain('self.audio_speaker.set_volume(volume: integer 0..100)');
    expect(lines).toContain('self.lamp.turn_on()');
    expect(lines).toContain('self.reboot() [user]');
    expect(lines).toContain(
      'self.screen.snapshot(url: string, quality?: integer 1..100 = 80) [user]',
    );

    const json = await runCli('tools', MAC.replaceAll(':', '-'), '--server', url, '--json');
    expect(json.code).toBe(0);
    const body = JSON.parse(json.stdout) as { tools: Record<string, unknown>[] };
    expect(body.tools).toHaveLength(14);
    expect(body.tools.find((t) => t.name === 'self.reboot')).toMatchObject({ userOnly: true });
  });

  it('calls a tool with converted arguments and prints the text result', async () => {
    const call = await runCli(
      'call',
      MAC.toUpperCase(),
      'self.audio_speaker.set_volume',
      'volume=30',
      '--server',
      url,
    );
    expect(call).toEqual({ code: 0, stdout: 'true\n', stderr: '' });
    expect(board.hardware.volume).toBe(30);

    const json = await runCli('call', MAC, 'self.lamp.turn_on', '--server', url, '--json');
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual({
      result: { content: [{ type: 'text', text: 'true' }], isError: false },
    });
    expect(board.hardware.lamp).toBe(true);
  });

  it('refuses bad arguments with exit 2 before anything is sent', async () => {
    const call = (...words: string[]) =>
      runCli('call', MAC, 'self.audio_speaker.set_volume', ...words, '--server', url);
    const before = board.hardware.volume;
    const sent: string[] = [];
    const onCall = (name: string) => sent.push(name);
    board.on('tool-call', onCall);
    const cases: [string[], string][] = [
      [['volume=loud'], 'self.audio_speaker.set_volume: volume must be an integer, got "loud"'],
      [['volume=3.5'], 'self.audio_speaker.set_volume: volume must be an integer, got "3.5"'],
      [['level=3'], 'self.audio_speaker.set_volume has no property "level"; it takes volume'],
      [['volume'], 'arguments are key=value, got "volume"'],
      [['volume=1', 'volume=2'], 'volume is given twice'],
      [[], 'self.audio_speaker.set_volume needs volume=<integer 0..100>'],
      [
        ['volume=300'],
        'self.audio_speaker.set_volume: volume must be an integer from 0 to 100, got 300 (the device would answer "Value exceeds maximum allowed: 100"); --no-check sends it anyway',
      ],
      [
        ['volume=-1'],
        'self.audio_speaker.set_volume: volume must be an integer from 0 to 100, got -1 (the device would answer "Value is below minimum allowed: 0"); --no-check sends it anyway',
      ],
      // The firmware saturates to int32 before its range check.
      [
        ['volume=99999999999'],
        'self.audio_speaker.set_volume: volume must be an integer from 0 to 100, got 99999999999 (the device would answer "Value exceeds maximum allowed: 100"); --no-check sends it anyway',
      ],
    ];
    for (const [words, message] of cases) {
      const result = await call(...words);
      expect(result, words.join(' ')).toEqual({
        code: 2,
        stdout: '',
        stderr: `xiaozhi-mcp: ${message}\n`,
      });
    }
    const noArgs = await runCli('call', MAC, 'self.lamp.turn_on', 'on=1', '--server', url);
    expect(noArgs.stderr).toBe(
      'xiaozhi-mcp: self.lamp.turn_on has no property "on"; it takes no arguments\n',
    );
    expect(board.hardware.volume).toBe(before);
    board.off('tool-call', onCall);
    expect(sent).toEqual([]);

    const typo = await runCli('call', MAC, 'self.lamp.turnon', '--server', url);
    expect(typo.code).toBe(2);
    expect(typo.stderr).toBe(
      `xiaozhi-mcp: ${MAC} has no tool "self.lamp.turnon"; did you mean self.lamp.turn_on, self.lamp.turn_off?\n`,
    );
    const unknown = await runCli('call', MAC, 'self.fly', '--server', url);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toBe(
      `xiaozhi-mcp: ${MAC} has no tool "self.fly"; "xiaozhi-mcp tools ${MAC}" lists its 14 tools\n`,
    );
    const timeout = await runCli('call', MAC, 'self.lamp.turn_on', '--timeout', '0');
    expect(timeout.code).toBe(2);
    expect(timeout.stderr).toMatch(/^xiaozhi-mcp: --timeout must be a positive integer/);
  });

  it("sends unchecked arguments with --no-check and reports the device's error reply with exit 1", async () => {
    const result = await runCli(
      'call',
      MAC,
      'self.audio_speaker.set_volume',
      'volume=101',
      '--no-check',
      '--server',
      url,
    );
    expect(result).toEqual({
      code: 1,
      stdout: '',
      stderr: `xiaozhi-mcp: ${MAC} answered with an error: Value exceeds maximum allowed: 100\n`,
    });
    // As given: a value of the wrong type, and a tool the device does not list.
    const wrongType = await runCli(
      'call',
      MAC,
      'self.audio_speaker.set_volume',
      'volume=loud',
      '--no-check',
      '--server',
      url,
    );
    expect(wrongType.stderr).toBe(
      `xiaozhi-mcp: ${MAC} answered with an error: Missing valid argument: volume\n`,
    );
    const unknown = await runCli(
      'call',
      MAC,
      'self.fly',
      'high=true',
      '--no-check',
      '--server',
      url,
    );
    expect(unknown.stderr).toBe(
      `xiaozhi-mcp: ${MAC} answered with an error: Unknown tool: self.fly\n`,
    );
  });

  it('reports a call without a reply in time (504) with exit 1', async () => {
    board.faults.dropReply = () => true;
    try {
      const result = await runCli(
        'call',
        MAC,
        'self.lamp.turn_off',
        '--timeout',
        '100',
        '--server',
        url,
      );
      expect(result.code).toBe(1);
      expect(result.stderr).toBe(`xiaozhi-mcp: tools/call to ${MAC} got no reply within 100 ms\n`);
    } finally {
      board.faults.dropReply = undefined;
    }
  });

  it('reports an unknown device and a device that is not connected with exit 1', async () => {
    const unknown = await runCli('call', 'F4:12:FA:00:00:99', 'self.lamp.turn_on', '--server', url);
    expect(unknown).toEqual({
      code: 1,
      stdout: '',
      stderr: 'xiaozhi-mcp: no device f4:12:fa:00:00:99 has been seen\n',
    });
    const tools = await runCli('tools', 'f4:12:fa:00:00:99', '--server', url);
    expect(tools.code).toBe(1);

    other.powerOff();
    await until(() => server.registry.get(OTHER)?.session === undefined, {
      what: 'the board to disconnect',
    });
    const offline = await runCli('call', OTHER, 'self.lamp.turn_on', '--server', url);
    expect(offline).toEqual({
      code: 1,
      stdout: '',
      stderr: `xiaozhi-mcp: device ${OTHER} is not connected\n`,
    });
    const devices = await runCli('devices', '--server', url);
    expect(devices.stdout).toMatch(new RegExp(`^${OTHER} .* offline `, 'm'));

    // Its tools are those of its last session: listed, with a word that it is offline.
    const cached = await runCli('tools', OTHER, '--server', url);
    expect(cached.code).toBe(0);
    expect(cached.stdout).toContain('self.audio_speaker.set_volume(volume: integer 0..100)\n');
    expect(cached.stderr).toMatch(
      new RegExp(
        `^xiaozhi-mcp: device ${OTHER} is offline \\(last seen \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ\\); this list is from its last session\n$`,
      ),
    );
    const json = await runCli('tools', OTHER, '--server', url, '--json');
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ connected: false, cached: true });
    expect((JSON.parse(json.stdout) as { tools: unknown[] }).tools).toHaveLength(14);
    const online = await runCli('tools', OTHER, '--server', url, '--online');
    expect(online).toEqual({
      code: 1,
      stdout: '',
      stderr: expect.stringMatching(
        new RegExp(
          `^xiaozhi-mcp: device ${OTHER} is offline \\(last seen .*\\); --online wants its live tool list\n$`,
        ),
      ),
    });
    // A connected device's list is live: no note.
    const live = await runCli('tools', MAC, '--server', url, '--online', '--json');
    expect(live.code).toBe(0);
    expect(live.stderr).toBe('');
    expect(JSON.parse(live.stdout)).toMatchObject({ connected: true, cached: false });

    // Forgotten, it is gone from the list; forgetting it again is an unknown device.
    expect(await runCli('devices', 'forget', OTHER.toUpperCase(), '--server', url)).toEqual({
      code: 0,
      stdout: `forgot ${OTHER}; the next board with this id registers as a new device\n`,
      stderr: '',
    });
    expect((await runCli('devices', '--server', url)).stdout).not.toContain(OTHER);
    expect(await runCli('devices', 'forget', OTHER, '--server', url)).toEqual({
      code: 1,
      stdout: '',
      stderr: `xiaozhi-mcp: no device ${OTHER} has been seen\n`,
    });
  });

  it('reads --server and --token from the environment; a missing token is refused', async () => {
    // The API token; device tokens alike for a server from before they were apart.
    const guarded = await XiaozhiServer.start({
      port: 0,
      logLevel: 'silent',
      tokens: ['s3cret'],
      apiTokens: ['s3cret'],
    });
    const saved = { server: process.env.XIAOZHI_SERVER, token: process.env.XIAOZHI_TOKEN };
    try {
      process.env.XIAOZHI_SERVER = guarded.urls.http;
      delete process.env.XIAOZHI_TOKEN;
      const refused = await runCli('devices');
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(
        new RegExp(
          `^xiaozhi-mcp: the server at ${guarded.urls.http} refused the request: .* \\(pass its API token with --token or \\$XIAOZHI_TOKEN\\)\n$`,
        ),
      );
      process.env.XIAOZHI_TOKEN = 's3cret';
      expect(await runCli('devices')).toEqual({
        code: 0,
        stdout: `no device has been seen by the server at ${guarded.urls.http}\n`,
        stderr: '',
      });
      // The API URL itself is accepted too.
      expect((await runCli('devices', '--server', guarded.urls.api, '--json')).stdout).toBe(
        '{"devices":[]}\n',
      );
    } finally {
      for (const [name, value] of [
        ['XIAOZHI_SERVER', saved.server],
        ['XIAOZHI_TOKEN', saved.token],
      ] as const) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
      await guarded.stop();
    }
  });

  it('reports an unreachable server with exit 1 and a bad --server with exit 2', async () => {
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const address = probe.address();
    const port = typeof address === 'object' && address !== null ? address.port : 0;
    await new Promise<void>((r) => probe.close(() => r()));
    const closed = `http://127.0.0.1:${port}`;
    const result = await runCli('devices', '--server', closed);
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(
      `xiaozhi-mcp: cannot reach the server at ${closed}: connect ECONNREFUSED 127.0.0.1:${port}\n`,
    );
    const bad = await runCli('tools', MAC, '--server', 'ftp://example');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe('xiaozhi-mcp: --server must be an http:// URL, got "ftp://example"\n');
  });
});

/** A stand-in API server for routes the real one does not have yet; it records each request. */
async function fakeApi(
  answer: (req: IncomingMessage, url: URL) => { status: number; body: unknown },
): Promise<{ url: string; requests: string[]; close: () => Promise<void> }> {
  const requests: string[] = [];
  const server = createHttpServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    requests.push(`${req.method} ${url.pathname}${url.search}`);
    const { status, body } = answer(req, url);
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

function device(n: number): Record<string, unknown> {
  return {
    deviceId: `f4:12:fa:00:01:${n.toString(16).padStart(2, '0')}`,
    board: 'bread-compact-wifi',
    version: '2.4.2',
    connected: false,
    ready: false,
    toolCount: 14,
    lastOtaCheck: null,
  };
}

describe('devices pages and devices forget', () => {
  it('follows nextCursor until the last page', async () => {
    const all = Array.from({ length: 5 }, (_, i) => device(i));
    const api = await fakeApi((_req, url) => {
      const from = Number(url.searchParams.get('cursor') ?? 0);
      const page = all.slice(from, from + 2);
      return {
        status: 200,
        body: { devices: page, ...(from + 2 < all.length ? { nextCursor: String(from + 2) } : {}) },
      };
    });
    try {
      const json = await runCli('devices', '--server', api.url, '--json');
      expect(json.code).toBe(0);
      expect(JSON.parse(json.stdout)).toEqual({ devices: all });
      expect(api.requests).toEqual([
        'GET /api/devices',
        'GET /api/devices?cursor=2',
        'GET /api/devices?cursor=4',
      ]);
      const table = await runCli('devices', '--server', api.url);
      expect(table.stdout.trimEnd().split('\n')).toHaveLength(6);
    } finally {
      await api.close();
    }
  });

  it('stops on a cursor given twice instead of looping', async () => {
    const api = await fakeApi(() => ({
      status: 200,
      body: { devices: [device(1)], nextCursor: 'again' },
    }));
    try {
      const result = await runCli('devices', '--server', api.url);
      expect(result.code).toBe(1);
      expect(result.stderr).toBe(
        `xiaozhi-mcp: the server at ${api.url} gave the device list cursor "again" twice\n`,
      );
      expect(api.requests).toHaveLength(2);
    } finally {
      await api.close();
    }
  });

  it('forgets a device by DELETE /devices/:id; an unknown one is exit 1', async () => {
    const known = new Set(['f4:12:fa:00:00:21']);
    let authorization: string | undefined;
    const api = await fakeApi((req, url) => {
      authorization = req.headers.authorization;
      const id = decodeURIComponent(url.pathname.split('/').pop() ?? '');
      if (req.method !== 'DELETE')
        return { status: 404, body: { error: { code: 'NOT_FOUND', message: 'no route' } } };
      if (!known.delete(id))
        return {
          status: 404,
          body: { error: { code: 'DEVICE_NOT_FOUND', message: `no device ${id} has been seen` } },
        };
      return { status: 200, body: { forgotten: id } };
    });
    try {
      const forgot = await runCli(
        'devices',
        'forget',
        'F4-12-FA-00-00-21',
        '--server',
        api.url,
        '--token',
        'api-secret',
      );
      expect(forgot).toEqual({
        code: 0,
        stdout: 'forgot f4:12:fa:00:00:21; the next board with this id registers as a new device\n',
        stderr: '',
      });
      expect(authorization).toBe('Bearer api-secret');
      expect(api.requests).toEqual(['DELETE /api/devices/f4%3A12%3Afa%3A00%3A00%3A21']);
      // The options may come before `forget` too.
      const again = await runCli('devices', '--server', api.url, 'forget', 'f4:12:fa:00:00:21');
      expect(again).toEqual({
        code: 1,
        stdout: '',
        stderr: 'xiaozhi-mcp: no device f4:12:fa:00:00:21 has been seen\n',
      });
      known.add('board-7');
      const json = await runCli('devices', 'forget', 'Board-7', '--server', api.url, '--json');
      expect(json.stdout).toBe('{"forgotten":"board-7"}\n');
    } finally {
      await api.close();
    }
  });

  it('says so when the server has no route to forget devices', async () => {
    const api = await fakeApi((req, url) => ({
      status: 404,
      body: { error: { code: 'NOT_FOUND', message: `no API route ${req.method} ${url.pathname}` } },
    }));
    try {
      const result = await runCli('devices', 'forget', 'f4:12:fa:00:00:21', '--server', api.url);
      expect(result.code).toBe(1);
      expect(result.stderr).toBe(
        `xiaozhi-mcp: the server at ${api.url} cannot forget devices (no DELETE /devices/:id route); it is older than this client\n`,
      );
    } finally {
      await api.close();
    }
  });

  it('describes --token as the API token', async () => {
    for (const command of [['devices'], ['devices', 'forget'], ['tools'], ['call']]) {
      const help = await runCli(...command, '--help');
      expect(help.stdout, command.join(' ')).toMatch(/--token <token> +the server's API token/);
    }
  });
});

describe('client helpers', () => {
  const tool = {
    name: 'self.display.show_text',
    description: '',
    userOnly: false,
    inputSchema: {
      type: 'object',
      properties: {
        text: { type: 'string' },
        seconds: { type: 'integer', default: 5, minimum: 1, maximum: 60 },
        blink: { type: 'boolean', default: false },
      },
      required: ['text'],
    },
  };

  it('prints compact signatures', () => {
    expect(toolSignature(tool)).toBe(
      'self.display.show_text(text: string, seconds?: integer 1..60 = 5, blink?: boolean = false)',
    );
    expect(toolSignature({ ...tool, inputSchema: {} })).toBe('self.display.show_text()');
  });

  it('converts values by schema type', () => {
    expect(buildArguments(tool, ['text=a=b c', 'seconds=-3', 'blink=TRUE'])).toEqual({
      text: 'a=b c',
      seconds: -3,
      blink: true,
    });
    expect(buildArguments(tool, ['text=', 'blink=0'])).toEqual({ text: '', blink: false });
    expect(() => buildArguments(tool, ['text=x', 'blink=yes'])).toThrow(
      'self.display.show_text: blink must be true, false, 1 or 0, got "yes"',
    );
  });

  it('checks values by the firmware rules of the listed schema', () => {
    const ranged = {
      ...tool,
      inputSchema: {
        type: 'object',
        properties: {
          seconds: { type: 'integer', minimum: 1, maximum: 60 },
          floor: { type: 'integer', minimum: 10 },
          ratio: { type: 'number', minimum: 0, maximum: 1 },
          text: { type: 'string' },
        },
      },
    };
    expect(() =>
      checkArguments(ranged, { seconds: 60, floor: 2 ** 40, ratio: 7, text: 'x' }),
    ).not.toThrow();
    expect(() => checkArguments(ranged, { seconds: 61 })).toThrow(
      'self.display.show_text: seconds must be an integer from 1 to 60, got 61',
    );
    // One-sided (not what the firmware lists, but another server's may be).
    expect(() => checkArguments(ranged, { floor: 9 })).toThrow(
      'floor must be an integer of at least 10, got 9 (the device would answer "Value is below minimum allowed: 10")',
    );
    // Declaration order decides which is named first, as on the device.
    expect(() => checkArguments(ranged, { floor: 9, seconds: 0 })).toThrow(/: seconds must/);
  });

  it('suggests close tool names', () => {
    const names = [
      'self.lamp.turn_on',
      'self.lamp.turn_off',
      'self.reboot',
      'self.get_system_info',
    ];
    expect(closeNames('self.lamp.turnon', names)).toEqual([
      'self.lamp.turn_on',
      'self.lamp.turn_off',
    ]);
    expect(closeNames('turn_on', names)[0]).toBe('self.lamp.turn_on');
    expect(closeNames('self.rebot', names)).toEqual(['self.reboot']);
    expect(closeNames('self.fly', names)).toEqual([]);
  });

  it('normalises MACs and describes images', () => {
    expect(normalizeDeviceId(' F412FA00002A ')).toBe('f4:12:fa:00:00:2a');
    expect(normalizeDeviceId('Board-7')).toBe('board-7');
    expect(formatContent({ type: 'image', mimeType: 'image/jpeg', data: 'AAECAw==' })).toBe(
      '[image image/jpeg, 4 bytes]',
    );
    expect(formatContent({ type: 'resource', uri: 'x' })).toBe('[resource content]');
  });
});

const bin = join(
  resolve(dirname(fileURLToPath(import.meta.url)), '../../..'),
  'cli/bin/xiaozhi-mcp.js',
);
const execBin = promisify(execFile);

/** Runs the real binary to completion (bounded). */
async function shell(...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await execBin(process.execPath, [bin, ...argv], { timeout: 30_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: unknown; stdout?: string; stderr?: string };
    return {
      code: typeof failed.code === 'number' ? failed.code : -1,
      stdout: failed.stdout ?? '',
      stderr: failed.stderr ?? '',
    };
  }
}

function spawnBin(...argv: string[]): ChildProcessWithoutNullStreams & { output: () => string } {
  const child = spawn(process.execPath, [bin, ...argv], { stdio: 'pipe' });
  let stdout = '';
  child.stdout.on('data', (chunk) => {
    stdout += chunk;
  });
  return Object.assign(child, { output: () => stdout });
}

async function stopChild(child: ChildProcessWithoutNullStreams): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode;
  const exited = once(child, 'exit');
  child.kill('SIGINT');
  // A hang guard only: a busy machine may take seconds to run the Ctrl-C handler, and a kill
  // here would read as a wrong exit code.
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const [code] = (await exited) as [number | null];
  clearTimeout(timer);
  return code;
}

describe('serve, sim and call from a shell', () => {
  it('work together as separate processes', { timeout: 120_000 }, async () => {
    const serve = spawnBin('serve', '--port', '0', '--log-level', 'warn');
    let sim: ReturnType<typeof spawnBin> | undefined;
    const codes: (number | null)[] = [];
    try {
      await until(() => /^API .*\n/m.test(serve.output()) || serve.exitCode !== null, {
        what: 'serve to print its endpoints',
        seen: serve.output,
      });
      expect(serve.exitCode).toBeNull();
      const ota = /^OTA +(\S+)$/m.exec(serve.output())?.[1] ?? '';
      const http = ota.replace(/\/xiaozhi\/ota\/$/, '');
      expect(ota).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/xiaozhi\/ota\/$/);

      sim = spawnBin('sim', '--ota-url', ota, '--count', '2');
      const macs = [simMac('bread-compact-wifi', 0), simMac('bread-compact-wifi', 1)];
      // serve says when each board is ready: watching its output costs nothing, where polling
      // with `devices` started a node process every look and starved the boards on a busy machine.
      await until(
        () => macs.every((mac) => new RegExp(`^ready ${mac} `, 'm').test(serve.output())),
        { what: 'both simulated boards to be ready', seen: serve.output },
      );
      const listed = await shell('devices', '--server', http, '--json');
      const devices = (
        JSON.parse(listed.stdout) as { devices: { deviceId: string; ready: boolean }[] }
      ).devices;
      for (const mac of macs)
        expect(devices.find((d) => d.deviceId === mac)).toMatchObject({ ready: true });

      const call = await shell(
        'call',
        (macs[1] ?? '').toUpperCase(),
        'self.lamp.turn_on',
        '--server',
        http,
      );
      expect(call).toEqual({ code: 0, stdout: 'true\n', stderr: '' });
      const state = await shell('call', macs[1] ?? '', 'self.lamp.get_state', '--server', http);
      expect(state.stdout).toMatch(/"power": ?true/);
      const tools = await shell('tools', macs[0] ?? '', '--server', http);
      expect(tools.code).toBe(0);
      expect(tools.stdout).toContain('self.audio_speaker.set_volume(volume: integer 0..100)\n');
      const usage = await shell(
        'call',
        macs[0] ?? '',
        'self.audio_speaker.set_volume',
        'volume=x',
        '--server',
        http,
      );
      expect(usage.code).toBe(2);
      expect(usage.stderr).toBe(
        'xiaozhi-mcp: self.audio_speaker.set_volume: volume must be an integer, got "x"\n',
      );

      expect(serve.output()).toMatch(
        new RegExp(`^ready ${macs[0]} bread-compact-wifi 2\\.4\\.2 14 tools$`, 'm'),
      );
      expect(serve.output()).toMatch(new RegExp(`^ready ${macs[1]} `, 'm'));
    } finally {
      // Both stopped even when an expectation failed; their exit codes are checked below.
      codes.push(sim === undefined ? null : await stopChild(sim), await stopChild(serve));
    }
    // Ctrl-C ends both with 130, as a shell reports it.
    expect(codes).toEqual([130, 130]);
  });
});
