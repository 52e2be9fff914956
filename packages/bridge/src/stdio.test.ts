/**
 * The bridge over stdio: a real process spoken to by the SDK's own StdioClientTransport, and
 * serveStdio on in-process streams.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { XiaozhiBridge } from './bridge.js';
import { Rig, testPreset } from './rig.test.js';
import { serveStdio } from './stdio.js';

const script = join(dirname(fileURLToPath(import.meta.url)), '../dist/testing/stdio-bridge.js');
const rig = new Rig();
const closers: (() => Promise<unknown>)[] = [];

afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
  await rig.stop();
});

describe('serveStdio', () => {
  it('serves a board to the SDK client through a spawned stdio process', async () => {
    // turbo builds the package before its tests; by hand: npx turbo run build --filter=@xiaozhi-mcp/bridge
    expect(existsSync(script), `${script} (build the package first)`).toBe(true);
    await rig.start({ apiTokens: ['sesame'] });
    const board = rig.board({ preset: testPreset('stdio') });
    await rig.connect(board);
    const stderr: string[] = [];
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [script, rig.base],
      env: { XIAOZHI_MCP_API_TOKEN: 'sesame' },
      stderr: 'pipe',
    });
    transport.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
    const client = new Client({ name: 'stdio-test', version: '1.0.0' });
    let changes = 0;
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      changes++;
    });
    await client.connect(transport);
    closers.push(() => client.close());

    expect(client.getServerVersion()).toMatchObject({ name: 'xiaozhi-mcp-bridge' });
    expect(client.getServerCapabilities()?.tools).toEqual({ listChanged: true });
    const { tools } = await client.listTools();
    const name = 'f412fa200001__self-audio_speaker-set_volume';
    expect(tools.map((t) => t.name)).toContain(name);
    expect(await client.callTool({ name, arguments: { volume: 12 } })).toEqual({
      content: [{ type: 'text', text: 'true' }],
      isError: false,
    });
    expect(board.hardware.volume).toBe(12);

    const second = rig.board({ preset: testPreset('stdio') });
    await rig.connect(second);
    await until(() => changes >= 1, { what: 'list_changed from the process' });
    expect((await client.listTools()).tools.length).toBe(tools.length * 2);
    // Its logs went to stderr, never into the protocol on stdout.
    expect(stderr.join('')).toContain('bridge: serving');
  });

  it('ends the session when the client closes stdin', async () => {
    await rig.start();
    const bridge = new XiaozhiBridge({ server: rig.base, log: () => {} });
    closers.push(() => bridge.close());
    await bridge.start();
    const stdin = new PassThrough();
    const stdout = new PassThrough();
    const output: string[] = [];
    stdout.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    const session = await serveStdio(bridge, { stdin, stdout });
    stdin.write(
      `${JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: {
          protocolVersion: '2025-06-18',
          capabilities: {},
          clientInfo: { name: 'pipe', version: '1' },
        },
      })}\n`,
    );
    await until(() => output.join('').includes('"id":1'), { what: 'the initialize reply' });
    expect(JSON.parse(output.join('').trim())).toMatchObject({
      id: 1,
      result: { capabilities: { tools: { listChanged: true } } },
    });
    stdin.end();
    await session.closed;
  });
});
