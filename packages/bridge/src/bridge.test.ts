/**
 * The bridge seen by the official SDK's own `Client` (in process, over the SDK's
 * InMemoryTransport), against a real XiaozhiServer with virtual boards: listing with
 * standard pagination, calls, the board's errors, images, list_changed, a board that drops
 * mid-call, and cancellation.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import {
  ErrorCode,
  McpError,
  type Tool,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { type BridgeOptions, XiaozhiBridge } from './bridge.js';
import { BridgeError } from './errors.js';
import { FAILURE_TEXT, Gate, PNG_BASE64, Rig, testPreset } from './rig.test.js';

const rig = new Rig();
const bridges: XiaozhiBridge[] = [];
const clients: Client[] = [];

afterEach(async () => {
  for (const client of clients.splice(0)) await client.close();
  for (const bridge of bridges.splice(0)) await bridge.close();
  await rig.stop();
});

async function startBridge(options: Partial<BridgeOptions> = {}): Promise<XiaozhiBridge> {
  const bridge = new XiaozhiBridge({ server: rig.base, pollMs: 20, log: () => {}, ...options });
  bridges.push(bridge);
  await bridge.start();
  return bridge;
}

async function clientOf(bridge: XiaozhiBridge): Promise<Client> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await bridge.createServer().connect(serverSide);
  const client = new Client({ name: 'bridge-test', version: '1.0.0' });
  await client.connect(clientSide);
  clients.push(client);
  return client;
}

/** Every tool, page by page, as a standard client walks `tools/list`. */
async function listAll(client: Client): Promise<{ tools: Tool[]; pages: number }> {
  const tools: Tool[] = [];
  let cursor: string | undefined;
  let pages = 0;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    tools.push(...page.tools);
    cursor = page.nextCursor;
    pages++;
  } while (cursor !== undefined && pages < 100);
  return { tools, pages };
}

describe('XiaozhiBridge through the SDK client', () => {
  it('lists every tool of a board with three pages of tools through standard pagination', async () => {
    await rig.start();
    const board = rig.board({ preset: testPreset('many-tools', { many: 230 }) });
    await rig.connect(board);
    // The board itself needs several 8000-byte pages for these (docs/protocol.md §3.2).
    expect(rig.server?.registry.get(board.mac)?.pages.plain.length).toBeGreaterThanOrEqual(3);
    const bridge = await startBridge({ device: board.mac });
    const client = await clientOf(bridge);

    const { tools, pages } = await listAll(client);
    const plain = board.mcp.tools.filter((t) => !t.userOnly);
    expect(pages).toBe(3); // 100 + 100 + the rest, at the default page size
    expect(tools).toHaveLength(plain.length);
    // One board served: the board's names with '.' written '-'.
    expect(tools.map((t) => t.name)).toEqual(plain.map((t) => t.name.replaceAll('.', '-')));
    expect(tools.map((t) => t.title)).toEqual(plain.map((t) => t.name));
    const volume = tools.find((t) => t.name === 'self-audio_speaker-set_volume');
    // The board's schema, exactly (docs/protocol.md §3.4).
    expect(volume?.inputSchema).toEqual({
      type: 'object',
      properties: { volume: { type: 'integer', minimum: 0, maximum: 100 } },
      required: ['volume'],
    });
    expect(volume?.description).toBe(
      plain.find((t) => t.name === 'self.audio_speaker.set_volume')?.description,
    );
    // User-only tools stay hidden, as the board hides them from a model.
    expect(tools.some((t) => t.title === 'self.reboot')).toBe(false);
  });

  it('pages with opaque cursors and refuses an unknown or stale cursor as invalid params', async () => {
    await rig.start();
    const first = rig.board({ preset: testPreset('paged') });
    await rig.connect(first);
    const bridge = await startBridge({ pageSize: 4 });
    const client = await clientOf(bridge);

    const page1 = await client.listTools();
    expect(page1.tools).toHaveLength(4);
    expect(page1.nextCursor).toMatch(/^[A-Za-z0-9_-]+$/);
    const page2 = await client.listTools({ cursor: page1.nextCursor as string });
    expect(page2.tools[0]?.name).not.toBe(page1.tools[0]?.name);

    for (const cursor of ['self.lamp.turn_on', '', 'eyJnIjoxLCJvIjo0fQ==', 'x'.repeat(300)]) {
      const error = await client.listTools({ cursor }).catch((e: unknown) => e);
      expect(error, cursor).toBeInstanceOf(McpError);
      expect((error as McpError).code).toBe(ErrorCode.InvalidParams);
    }

    // A second board changes the list: the first page's cursor is stale now.
    const second = rig.board({ preset: testPreset('paged') });
    await rig.connect(second);
    await until(() => bridge.tools.some((t) => t.deviceId === second.mac), {
      what: 'the second board',
    });
    const stale = await client.listTools({ cursor: page1.nextCursor as string }).catch((e) => e);
    expect(stale).toBeInstanceOf(McpError);
    expect((stale as McpError).code).toBe(ErrorCode.InvalidParams);
    expect((stale as McpError).message).toContain('stale cursor');
  });

  it("words a refused request once: the client's prefix, then the bridge's reason", async () => {
    await rig.start();
    const board = rig.board({ preset: testPreset('refusals') });
    await rig.connect(board);
    const client = await clientOf(await startBridge({ device: board.mac }));

    // The client puts `MCP error <code>: ` before the message on the wire; the bridge must not
    // have put it there already.
    const unknown = await client.callTool({ name: 'self-nope' }).catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(McpError);
    expect((unknown as McpError).message).toBe('MCP error -32602: Unknown tool: self-nope');
    const cursor = await client.listTools({ cursor: 'x' }).catch((e: unknown) => e);
    expect((cursor as McpError).message).toMatch(/^MCP error -32602: (?!MCP error)/);
  });

  it('calls a tool on the board and passes its text result through', async () => {
    await rig.start();
    const board = rig.board({ preset: testPreset('calls') });
    await rig.connect(board);
    const client = await clientOf(await startBridge({ device: board.mac }));

    const result = await client.callTool({
      name: 'self-audio_speaker-set_volume',
      arguments: { volume: 33 },
    });
    expect(result).toEqual({ content: [{ type: 'text', text: 'true' }], isError: false });
    expect(board.hardware.volume).toBe(33);
    const status = await client.callTool({ name: 'self-get_device_status' });
    const text = (status.content as { text: string }[])[0]?.text ?? '';
    expect(JSON.parse(text).audio_speaker.volume).toBe(33);
  });

  it('names tools per board when serving several, and calls the right board', async () => {
    await rig.start();
    const a = rig.board({ preset: testPreset('board-a') });
    const b = rig.board({ preset: testPreset('board-b') });
    await rig.connect(a);
    await rig.connect(b);
    const bridge = await startBridge();
    const client = await clientOf(bridge);
    const { tools } = await listAll(client);
    const nameA = `${a.mac.replaceAll(':', '')}__self-audio_speaker-set_volume`;
    const nameB = `${b.mac.replaceAll(':', '')}__self-audio_speaker-set_volume`;
    expect(nameA).toBe('f412fa200001__self-audio_speaker-set_volume');
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining([nameA, nameB]));
    expect(tools.find((t) => t.name === nameB)?.description).toMatch(
      /^\[board-b f4:12:fa:20:00:02\] /,
    );
    await client.callTool({ name: nameB, arguments: { volume: 7 } });
    expect(b.hardware.volume).toBe(7);
    expect(a.hardware.volume).not.toBe(7);
  });

  it("turns the board's codeless, unescaped error into an isError result with its message verbatim", async () => {
    await rig.start();
    const board = rig.board({ preset: testPreset('errors') });
    await rig.connect(board);
    const client = await clientOf(await startBridge({ device: board.mac }));

    expect(await client.callTool({ name: 'self-test-fail' })).toEqual({
      content: [{ type: 'text', text: FAILURE_TEXT }],
      isError: true,
    });
    // The board's own argument checks (docs/protocol.md §3.3), verbatim too.
    expect(
      await client.callTool({ name: 'self-audio_speaker-set_volume', arguments: { volume: 101 } }),
    ).toEqual({
      content: [{ type: 'text', text: 'Value exceeds maximum allowed: 100' }],
      isError: true,
    });
    // A name the bridge does not serve is the client's mistake: a protocol error.
    const unknown = await client.callTool({ name: 'self-nope' }).catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(McpError);
    expect((unknown as McpError).code).toBe(ErrorCode.InvalidParams);
  });

  it('passes an image result through as MCP image content', async () => {
    await rig.start();
    const board = rig.board({ preset: testPreset('images') });
    await rig.connect(board);
    const client = await clientOf(await startBridge({ device: board.mac }));
    expect(await client.callTool({ name: 'self-test-image' })).toEqual({
      content: [{ type: 'image', data: PNG_BASE64, mimeType: 'image/png' }],
      isError: false,
    });
  });

  it('sends tools/list_changed when a board connects and when it goes', async () => {
    await rig.start();
    const bridge = await startBridge();
    const client = await clientOf(bridge);
    let changes = 0;
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      changes++;
    });
    expect((await client.listTools()).tools).toEqual([]);

    const board = rig.board({ preset: testPreset('comes-and-goes') });
    await rig.connect(board);
    await until(() => changes === 1, { what: 'list_changed after the board connected' });
    const listed = await listAll(client);
    expect(listed.tools.length).toBe(board.mcp.tools.filter((t) => !t.userOnly).length);

    board.powerOff();
    await until(() => changes === 2, { what: 'list_changed after the board went' });
    expect((await client.listTools()).tools).toEqual([]);
  });

  it('answers a call whose board drops mid-call with a clear error result, not a hang', async () => {
    await rig.start();
    const board = rig.board({
      preset: testPreset('drops'),
      faults: { disconnectOnCall: 'self.lamp.turn_on' },
    });
    await rig.connect(board);
    const client = await clientOf(await startBridge({ device: board.mac }));
    const result = await client.callTool({ name: 'self-lamp-turn_on' });
    expect(result.isError).toBe(true);
    const text = (result.content as { text: string }[])[0]?.text;
    expect(text).toContain('self.lamp.turn_on on f4:12:fa:20:00:01');
    expect(text).toContain('DEVICE_DISCONNECTED');
  });

  it('answers with an error result when the server itself goes away mid-call', async () => {
    await rig.start();
    const gate = new Gate();
    const board = rig.board({ preset: testPreset('server-goes', { gate }) });
    await rig.connect(board);
    const client = await clientOf(await startBridge({ device: board.mac }));
    const pending = client.callTool({ name: 'self-test-wait' });
    await gate.entered;
    await rig.stop();
    const result = await pending;
    expect(result.isError).toBe(true);
    expect((result.content as { text: string }[])[0]?.text).toMatch(/self\.test\.wait on /);
  });

  it('aborts the pending API call when the client cancels', async () => {
    await rig.start();
    const gate = new Gate();
    const board = rig.board({ preset: testPreset('cancels', { gate }) });
    await rig.connect(board);
    const signals: AbortSignal[] = [];
    const spy: typeof fetch = (input, init) => {
      if (String(input).endsWith('/call') && init?.signal) signals.push(init.signal);
      return fetch(input, init);
    };
    const client = await clientOf(await startBridge({ device: board.mac, fetch: spy }));
    const cancel = new AbortController();
    const pending = client
      .callTool({ name: 'self-test-wait' }, undefined, { signal: cancel.signal })
      .catch((e: unknown) => e);
    await gate.entered;
    expect(signals).toHaveLength(1);
    expect(signals[0]?.aborted).toBe(false);
    const session = rig.server?.registry.session(board.mac);
    cancel.abort('the user changed their mind');
    expect(await pending).toBeDefined();
    // notifications/cancelled reached the bridge, which aborted the API request...
    await until(() => signals[0]?.aborted === true, { what: 'the API request aborted' });
    // ...and the server dropped its request to the board (the board has no cancellation).
    await until(() => session?.pending === 0, { what: 'the server to drop the device request' });
    gate.open();
  });

  it('fails to start clearly: unreachable server, refused token, unknown device', async () => {
    await rig.start({ apiTokens: ['sesame'] });
    const unreachable = new XiaozhiBridge({ server: 'http://127.0.0.1:9', log: () => {} });
    await expect(unreachable.start()).rejects.toMatchObject({ code: 'SERVER_UNREACHABLE' });
    const refused = new XiaozhiBridge({ server: rig.base, token: 'wrong', log: () => {} });
    await expect(refused.start()).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    const missing = new XiaozhiBridge({ server: rig.base, log: () => {} });
    await expect(missing.start()).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    const unknown = new XiaozhiBridge({
      server: `${rig.base}/api/`,
      token: 'sesame',
      device: 'F4:12:FA:99:99:99',
      log: () => {},
    });
    const error = await unknown.start().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BridgeError);
    expect(error).toMatchObject({ code: 'DEVICE_NOT_FOUND' });
    expect((error as Error).message).toContain('f4:12:fa:99:99:99');
    await expect(startBridge({ token: 'sesame' })).resolves.toBeInstanceOf(XiaozhiBridge);
  });
});
