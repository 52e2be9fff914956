import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { VirtualBoard } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { type StartOptions, XiaozhiServer } from '@xiaozhi-mcp/server';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { runCli, spawnCommand } from '../io.test-helper.js';
import { isLoopback, parseHttpAddress } from './bridge.js';

// The binary needs the workspace built (`npx turbo run build`; `npm test` builds first).
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');
const xiaozhiMcp = join(root, 'apps/cli/bin/xiaozhi-mcp.js');

/** The firmware's pauses shortened, with a hello wait for a busy machine. */
const FAST = { ...FAST_TIMING, helloTimeoutMs: 5000 };
const MAC = 'f4:12:fa:30:00:01';
/** The board's tool as the bridge names it when it serves every board: MAC, `__`, `.` as `-`. */
const VOLUME_MANY = 'f412fa300001__self-audio_speaker-set_volume';
const VOLUME_ONE = 'self-audio_speaker-set_volume';

let server: XiaozhiServer | undefined;
const boards: VirtualBoard[] = [];
const cleanups: (() => Promise<unknown>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  for (const board of boards.splice(0)) board.powerOff();
  await server?.stop();
  server = undefined;
});

/** A real server with one virtual board whose tools are ready. */
async function serverWithBoard(options: StartOptions = {}): Promise<XiaozhiServer> {
  server = await XiaozhiServer.start({ port: 0, logLevel: 'silent', ...options });
  const board = new VirtualBoard({
    mac: MAC,
    wifi: { ssid: 'lab' },
    otaUrl: server.urls.ota,
    timing: FAST,
  });
  boards.push(board);
  board.powerOn();
  await board.waitForState('idle', 10_000);
  board.click();
  await server.registry.waitForReady(MAC, 20_000);
  return server;
}

/** Environment without the variables that would change what the command is told. */
function cleanEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extra };
  for (const name of ['FORCE_COLOR', 'XIAOZHI_SERVER', 'XIAOZHI_TOKEN', 'XIAOZHI_BRIDGE_TOKEN'])
    if (!(name in extra)) delete env[name];
  return env;
}

function start(args: string[], env: NodeJS.ProcessEnv = {}) {
  expect(existsSync(join(root, 'apps/cli/dist/bin.js')), 'build apps/cli first').toBe(true);
  // A hung bridge fails the test instead of hanging it.
  const started = spawnCommand(xiaozhiMcp, ['bridge', ...args], {
    env: cleanEnv(env),
    stdin: 'pipe',
  });
  const { child, done } = started;
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await done;
  });
  return started;
}

/** A port nothing listens on: taken from the OS, then given back. */
async function closedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const address = probe.address();
  await new Promise<void>((r) => probe.close(() => r()));
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

const INITIALIZE = `${JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: {
    protocolVersion: '2025-06-18',
    capabilities: {},
    clientInfo: { name: 'raw', version: '1' },
  },
})}\n`;

describe('parseHttpAddress', () => {
  it('takes HOST:PORT, [IPv6]:PORT, :PORT and PORT (host 127.0.0.1)', () => {
    expect(parseHttpAddress('127.0.0.1:8765')).toEqual({ host: '127.0.0.1', port: 8765 });
    expect(parseHttpAddress('localhost:0')).toEqual({ host: 'localhost', port: 0 });
    expect(parseHttpAddress('[::1]:9000')).toEqual({ host: '::1', port: 9000 });
    expect(parseHttpAddress(':9000')).toEqual({ host: '127.0.0.1', port: 9000 });
    expect(parseHttpAddress('9000')).toEqual({ host: '127.0.0.1', port: 9000 });
    expect(parseHttpAddress('0.0.0.0:80')).toEqual({ host: '0.0.0.0', port: 80 });
  });

  it('refuses what is not an address and port (exit 2)', () => {
    for (const bad of ['', 'nope', 'host:', 'host:port', '1.2.3.4:65536', '::1:80', 'a b:1']) {
      expect(() => parseHttpAddress(bad), bad).toThrow(
        expect.objectContaining({ exitCode: 2, message: expect.stringContaining('--http') }),
      );
    }
  });
});

describe('isLoopback', () => {
  it('knows 127.0.0.0/8, ::1 and localhost, and nothing else', () => {
    for (const host of ['127.0.0.1', '127.9.9.9', '::1', 'localhost', 'LOCALHOST'])
      expect(isLoopback(host), host).toBe(true);
    for (const host of ['0.0.0.0', '::', '192.168.1.2', 'example.com', '128.0.0.1'])
      expect(isLoopback(host), host).toBe(false);
  });
});

describe('xiaozhi-mcp bridge: bad usage (exit 2)', () => {
  it('refuses a bad --http, a bad --server and an open non-loopback HTTP endpoint', async () => {
    expect(await runCli('bridge', '--http', 'here')).toEqual({
      code: 2,
      stdout: '',
      stderr: 'xiaozhi-mcp: --http must be HOST:PORT (e.g. 127.0.0.1:8765) or PORT, got "here"\n',
    });
    expect(await runCli('bridge', '--server', 'ws://127.0.0.1:1')).toEqual({
      code: 2,
      stdout: '',
      stderr: 'xiaozhi-mcp: --server must be an http:// URL, got "ws://127.0.0.1:1"\n',
    });
    const open = await runCli('bridge', '--http', '0.0.0.0:0');
    expect(open.code).toBe(2);
    expect(open.stderr).toMatch(/is not a loopback address.*--http-token/);
    const poll = await runCli('bridge', '--poll-ms', '0');
    expect(poll).toMatchObject({ code: 2, stderr: expect.stringContaining('--poll-ms') });
  });
});

describe('xiaozhi-mcp bridge (the built binary)', { timeout: 90_000 }, () => {
  it('stdio: the SDK client lists and calls a board tool; notes go to stderr only', async () => {
    const target = await serverWithBoard({ apiTokens: ['sesame'] });
    const stderr: string[] = [];
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [xiaozhiMcp, 'bridge', '--server', target.urls.http, '--token', 'sesame'],
      stderr: 'pipe',
    });
    transport.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
    const client = new Client({ name: 'cli-bridge-test', version: '1.0.0' });
    await client.connect(transport);
    cleanups.push(() => client.close());

    expect(client.getServerVersion()).toMatchObject({ name: 'xiaozhi-mcp-bridge' });
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toContain(VOLUME_MANY);
    expect(await client.callTool({ name: VOLUME_MANY, arguments: { volume: 23 } })).toEqual({
      content: [{ type: 'text', text: 'true' }],
      isError: false,
    });
    expect(boards[0]?.hardware.volume).toBe(23);
    await until(() => stderr.join('').includes('speaking MCP on stdin/stdout'), {
      what: 'the note',
    });
    expect(stderr.join('')).toContain(
      `xiaozhi-mcp bridge: speaking MCP on stdin/stdout for the boards on ${target.urls.http}`,
    );
  });

  it('stdio: stdout carries JSON-RPC only, and the end of stdin ends the bridge with 0', async () => {
    const target = await serverWithBoard();
    // The server from the environment, as `devices` and `call` take it.
    const bridge = start([], { XIAOZHI_SERVER: target.urls.http });
    bridge.child.stdin?.write(INITIALIZE);
    await until(() => bridge.run.stdout.includes('\n'), { what: 'the initialize answer' });
    bridge.child.stdin?.write(
      `${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' })}\n${JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' })}\n`,
    );
    await until(() => bridge.run.stdout.split('\n').length > 2, { what: 'the tools/list answer' });
    bridge.child.stdin?.end();
    const run = await bridge.done;
    expect(run.code).toBe(0);
    const lines = run.stdout.split('\n').filter((line) => line !== '');
    // Every byte of stdout is a JSON-RPC message: no banner, no log line.
    expect(lines.map((line) => JSON.parse(line) as { jsonrpc: string; id: number })).toEqual([
      expect.objectContaining({ jsonrpc: '2.0', id: 1, result: expect.anything() }),
      expect.objectContaining({ jsonrpc: '2.0', id: 2, result: expect.anything() }),
    ]);
    expect(run.stdout).toContain(VOLUME_MANY);
    expect(run.stderr).toContain('xiaozhi-mcp bridge: ');
  });

  it('--device: serves that board alone, under its tools own names; the MAC in any case', async () => {
    const target = await serverWithBoard();
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [xiaozhiMcp, 'bridge', '--server', target.urls.http, '--device', 'F4-12-FA-30-00-01'],
      stderr: 'pipe',
    });
    const client = new Client({ name: 'cli-bridge-test', version: '1.0.0' });
    await client.connect(transport);
    cleanups.push(() => client.close());
    const names = (await client.listTools()).tools.map((t) => t.name);
    expect(names).toContain(VOLUME_ONE);
    expect(names.some((name) => name.includes('__'))).toBe(false);
    expect(await client.callTool({ name: VOLUME_ONE, arguments: { volume: 7 } })).toMatchObject({
      isError: false,
    });
    expect(boards[0]?.hardware.volume).toBe(7);
  });

  it('--http: Streamable HTTP with a bearer token; SIGTERM ends it with 0', async () => {
    const target = await serverWithBoard();
    const bridge = start([
      '--server',
      target.urls.http,
      '--http',
      '127.0.0.1:0',
      '--http-token',
      'open-sesame',
    ]);
    // The URL goes to stdout, then the note to stderr: two pipes, read in either order.
    await until(
      () => bridge.run.stdout.includes('\n') && bridge.run.stderr.includes('listening on'),
      { what: 'the URL line and the listening note', seen: () => bridge.run },
    );
    // stdout is free in HTTP mode: the endpoint alone, one line.
    const url = bridge.run.stdout.trim();
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    expect(bridge.run.stderr).toContain(`xiaozhi-mcp bridge: listening on ${url}`);

    const refused = new Client({ name: 'no-token', version: '1.0.0' });
    await expect(refused.connect(new StreamableHTTPClientTransport(new URL(url)))).rejects.toThrow(
      /401|Unauthorized/,
    );

    const client = new Client({ name: 'cli-bridge-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(url), {
        requestInit: { headers: { authorization: 'Bearer open-sesame' } },
      }),
    );
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toContain(VOLUME_MANY);
    expect(await client.callTool({ name: VOLUME_MANY, arguments: { volume: 41 } })).toEqual({
      content: [{ type: 'text', text: 'true' }],
      isError: false,
    });
    expect(boards[0]?.hardware.volume).toBe(41);
    await client.close();

    bridge.child.kill('SIGTERM');
    expect((await bridge.done).code).toBe(0);
  });

  it('Ctrl-C (SIGINT) ends it with 130', async () => {
    const target = await serverWithBoard();
    const bridge = start(['--server', target.urls.http, '--http', '0']);
    await until(() => bridge.run.stdout.includes('\n'), { what: 'the URL line' });
    bridge.child.kill('SIGINT');
    expect((await bridge.done).code).toBe(130);
  });

  it('exits 1 when the server is unreachable, refuses the token, or never saw --device', async () => {
    const port = await closedPort();
    const unreachable = await start(['--server', `http://127.0.0.1:${port}`]).done;
    expect(unreachable.code).toBe(1);
    expect(unreachable.stdout).toBe('');
    expect(unreachable.stderr).toMatch(/^xiaozhi-mcp: .*127\.0\.0\.1:\d+.*ECONNREFUSED/);

    const target = await serverWithBoard({ apiTokens: ['sesame'] });
    const refused = await start(['--server', target.urls.http], { XIAOZHI_TOKEN: 'wrong' }).done;
    expect(refused.code).toBe(1);
    expect(refused.stdout).toBe('');
    expect(refused.stderr).toMatch(/^xiaozhi-mcp: the server at .* refused the API token/);

    const unknown = await start(['--server', target.urls.http, '--device', 'aa:bb:cc:dd:ee:ff'], {
      XIAOZHI_TOKEN: 'sesame',
    }).done;
    expect(unknown.code).toBe(1);
    expect(unknown.stdout).toBe('');
    expect(unknown.stderr).toMatch(/aa:bb:cc:dd:ee:ff/);
  });
});
