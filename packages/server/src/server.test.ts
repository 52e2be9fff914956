import { once } from 'node:events';
import { VirtualBoard, type VirtualBoardOptions } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { buildAppImage } from '@xiaozhi-mcp/firmware';
import { toolResultText, WireError } from '@xiaozhi-mcp/protocol';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { ServerError } from './errors.js';
import { FirmwareStore } from './firmware-store.js';
import { type StartOptions, XiaozhiServer } from './server.js';

let server: XiaozhiServer | undefined;
const boards: VirtualBoard[] = [];
let macCounter = 0;

afterEach(async () => {
  for (const board of boards.splice(0)) board.powerOff();
  await server?.stop();
  server = undefined;
});

async function startServer(options: StartOptions = {}): Promise<XiaozhiServer> {
  server = await XiaozhiServer.start({ port: 0, logLevel: 'silent', ...options });
  return server;
}

function newBoard(target: XiaozhiServer, options: VirtualBoardOptions = {}): VirtualBoard {
  macCounter++;
  const board = new VirtualBoard({
    mac: `f4:12:fa:10:00:${macCounter.toString(16).padStart(2, '0')}`,
    wifi: { ssid: 'lab' },
    otaUrl: target.urls.ota,
    timing: FAST_TIMING,
    ...options,
  });
  boards.push(board);
  return board;
}

/** Powers a board on, presses BOOT once idle, and waits until the server has listed its tools. */
async function connect(target: XiaozhiServer, board: VirtualBoard) {
  board.powerOn();
  await board.waitForState('idle', 5000);
  board.click();
  return target.registry.waitForReady(board.mac, 5000);
}

describe('XiaozhiServer with virtual boards', () => {
  it('takes a board from OTA to WebSocket, hello, initialize and a multi-page tools/list', async () => {
    const target = await startServer();
    const board = newBoard(target, { preset: 'otto-robot' });
    const events: string[] = [];
    for (const event of ['ota-check', 'connected', 'ready', 'tools-changed'] as const) {
      target.registry.on(event, () => events.push(event));
    }
    const record = await connect(target, board);

    expect(events).toEqual(['ota-check', 'connected', 'tools-changed', 'ready']);
    expect(target.registry.otaChecks()).toEqual([
      expect.objectContaining({
        deviceId: board.mac,
        clientId: board.uuid,
        board: 'otto-robot',
        version: '2.4.2',
        offered: undefined,
        // The request body as received, for hil's comparison of builds (free heap, ...).
        body: expect.objectContaining({ minimum_free_heap_size: expect.any(String) }),
      }),
    ]);
    // The board stored our WebSocket URL and the token issued for it.
    expect(board.storage.open('websocket').getString('url')).toBe(target.urls.websocket);
    expect(board.storage.open('websocket').getString('token')).toBe(target.tokenFor(board.mac));
    expect(record.initialize?.serverInfo).toEqual({ name: 'otto-robot', version: '2.4.2' });
    expect(record.tools.map((t) => t.name)).toEqual(board.mcp.tools.map((t) => t.name));
    expect(record.tools.filter((t) => t.userOnly).map((t) => t.name)).toEqual(
      board.mcp.tools.filter((t) => t.userOnly).map((t) => t.name),
    );
    expect(record.pages.plain.length).toBeGreaterThanOrEqual(3);
    expect(record.pageViolations).toEqual([]);
    expect(record.session?.info).toMatchObject({
      deviceId: board.mac,
      clientId: board.uuid,
      protocolVersion: 1,
    });
    expect(board.sessionId).toBe(record.session?.info.sessionId);
  });

  it('calls tools: success, every validation error with the device message, unknown tool', async () => {
    const target = await startServer();
    const board = newBoard(target);
    await connect(target, board);
    const session = target.registry.session(board.mac);

    expect(
      toolResultText(
        await target.registry.callTool(board.mac, 'self.audio_speaker.set_volume', { volume: 40 }),
      ),
    ).toBe('true');
    expect(board.hardware.volume).toBe(40);
    const status = JSON.parse(
      toolResultText(await target.registry.callTool(board.mac, 'self.get_device_status')),
    );
    expect(status.audio_speaker.volume).toBe(40);

    const failures: [string, unknown, string][] = [
      ['tools/call', undefined, 'Missing params'],
      ['tools/call', { arguments: {} }, 'Missing name'],
      [
        'tools/call',
        { name: 'self.audio_speaker.set_volume', arguments: null },
        'Invalid arguments',
      ],
      ['tools/call', { name: 'self.nope' }, 'Unknown tool: self.nope'],
      ['tools/call', { name: 'self.audio_speaker.set_volume' }, 'Missing valid argument: volume'],
      [
        'tools/call',
        { name: 'self.audio_speaker.set_volume', arguments: { volume: 'loud' } },
        'Missing valid argument: volume',
      ],
      [
        'tools/call',
        { name: 'self.audio_speaker.set_volume', arguments: { volume: -1 } },
        'Value is below minimum allowed: 0',
      ],
      [
        'tools/call',
        { name: 'self.audio_speaker.set_volume', arguments: { volume: 101 } },
        'Value exceeds maximum allowed: 100',
      ],
      ['ping', undefined, 'Method not implemented: ping'],
    ];
    for (const [method, params, message] of failures) {
      const error = await session.request(method, params).catch((e: unknown) => e);
      expect(error, JSON.stringify(params)).toBeInstanceOf(WireError);
      expect((error as WireError).message).toBe(message);
      expect((error as WireError).codeless).toBe(true);
    }
  });

  it('surfaces an unescaped error reply (invalid JSON) as a typed error with the device text', async () => {
    const target = await startServer();
    const board = newBoard(target);
    await connect(target, board);
    const error = await target.registry.callTool(board.mac, 'bad"name\\x').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WireError);
    expect(error).toMatchObject({
      message: 'Unknown tool: bad"name\\x',
      recovered: true,
      codeless: true,
    });
  });

  it('matches replies that arrive out of order by id', async () => {
    const target = await startServer();
    const board = newBoard(target);
    await connect(target, board);
    const session = target.registry.session(board.mac);
    const settled: string[] = [];
    // A successful call takes one more hop on the device than initialize: its reply comes second.
    await Promise.all([
      session.callTool('self.lamp.turn_on').then((r) => settled.push(`call:${toolResultText(r)}`)),
      session.initialize().then((r) => settled.push(`init:${r.serverInfo.name}`)),
    ]);
    expect(settled).toEqual(['init:bread-compact-wifi', 'call:true']);
    expect(board.hardware.lamp).toBe(true);
  });

  it('rejects a pending call with DEVICE_DISCONNECTED at a disconnect mid-call, not at its timeout', async () => {
    const target = await startServer();
    const board = newBoard(target, { faults: { disconnectOnCall: 'self.lamp.turn_on' } });
    await connect(target, board);
    let dropped = false;
    board.console.on('line', (line) => {
      if (line.text.endsWith('WS: Websocket disconnected')) dropped = true;
    });
    // The call's timeout is far beyond the test's: only the disconnect can end it, and its code
    // says which did.
    const error = await target.registry
      .callTool(board.mac, 'self.lamp.turn_on', {}, { timeoutMs: 600_000 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ServerError);
    expect((error as ServerError).code).toBe('DEVICE_DISCONNECTED');
    expect(dropped).toBe(true);
    await expect(target.registry.callTool(board.mac, 'self.lamp.get_state')).rejects.toMatchObject({
      code: 'DEVICE_DISCONNECTED',
    });
  });

  it('survives a reboot mid-session: the reply is lost, the board reconnects, is initialised again', async () => {
    const target = await startServer();
    const board = newBoard(target);
    const first = await connect(target, board);
    const firstSession = first.session?.info.sessionId;
    const disconnected = once(target.registry, 'disconnected');
    const rebooted = board.waitForLine(/rst:0xc/, 5000);
    const lost = await target.registry.callTool(board.mac, 'self.reboot').catch((e: unknown) => e);
    expect((lost as ServerError).code).toBe('DEVICE_DISCONNECTED');
    await disconnected;
    await rebooted;
    const again = await connect(target, board);
    expect(again.sessions).toBe(2);
    expect(again.session?.info.sessionId).not.toBe(firstSession);
    expect(target.registry.otaChecks().length).toBe(2);
    expect(toolResultText(await target.registry.callTool(board.mac, 'self.lamp.get_state'))).toBe(
      '{"power": false}',
    );
  });

  it('times out a call that gets no reply, and cancels one by AbortSignal', async () => {
    const target = await startServer();
    const board = newBoard(target, {
      faults: { dropReply: (payload) => payload.includes('"text":"true"') },
    });
    await connect(target, board);
    await expect(
      target.registry.callTool(board.mac, 'self.lamp.turn_on', {}, { timeoutMs: 150 }),
    ).rejects.toMatchObject({
      code: 'REQUEST_TIMEOUT',
    });
    const abort = new AbortController();
    const call = target.registry.callTool(
      board.mac,
      'self.lamp.turn_off',
      {},
      { signal: abort.signal },
    );
    abort.abort();
    await expect(call).rejects.toMatchObject({ code: 'REQUEST_ABORTED' });
    expect(target.registry.session(board.mac).pending).toBe(0);
  });

  it('refuses an upgrade without the issued token with 401, before the upgrade', async () => {
    const target = await startServer();
    const board = newBoard(target);
    await connect(target, board);
    for (const headers of [
      { 'Device-Id': board.mac, Authorization: 'Bearer wrong' },
      { 'Device-Id': board.mac },
    ]) {
      const ws = new WebSocket(target.urls.websocket, { headers });
      ws.on('error', () => {});
      const [, response] = (await once(ws, 'unexpected-response')) as [
        unknown,
        { statusCode: number },
      ];
      expect(response.statusCode).toBe(401);
      ws.terminate();
    }
    const configured = await XiaozhiServer.start({
      port: 0,
      logLevel: 'silent',
      tokens: ['lab-token'],
    });
    try {
      const ws = new WebSocket(configured.urls.websocket, {
        headers: { 'Device-Id': 'f4:12:fa:99:99:99', Authorization: 'Bearer lab-token' },
      });
      await once(ws, 'open');
      ws.terminate();
    } finally {
      await configured.stop();
    }
  });

  it('sends its hello, with transport and a session id, only after the device hello, and counts audio', async () => {
    const target = await startServer({ auth: 'off' });
    const ws = new WebSocket(target.urls.websocket, {
      headers: { 'Device-Id': 'f4:12:fa:88:88:88', 'Client-Id': 'c' },
    });
    const received: string[] = [];
    ws.on('message', (data: Buffer) => received.push(data.toString()));
    await once(ws, 'open');
    // Nothing is sent before the device's hello: a ping's pong comes after anything the server
    // had sent or queued on the connection, without guessing how long that takes.
    ws.ping();
    await once(ws, 'pong');
    expect(received).toEqual([]);
    ws.send(
      '{"type":"hello","version":1,"features":{"mcp":true},"transport":"websocket","audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}',
    );
    await until(() => received.length >= 2, { what: 'the hello answer and the first MCP request' });
    const hello = JSON.parse(received[0] ?? '');
    expect(hello).toMatchObject({
      type: 'hello',
      transport: 'websocket',
      session_id: expect.any(String),
    });
    expect(JSON.parse(received[1] ?? '')).toMatchObject({
      type: 'mcp',
      session_id: hello.session_id,
      payload: { method: 'initialize', id: 1 },
    });
    ws.send(Buffer.from([1, 2, 3, 4]));
    ws.send(Buffer.from([5, 6]));
    await until(() => target.registry.session('f4:12:fa:88:88:88').stats.audioFrames === 2, {
      what: 'both audio frames counted',
    });
    expect(target.registry.session('f4:12:fa:88:88:88').stats).toMatchObject({
      audioFrames: 2,
      audioBytes: 6,
    });
    ws.terminate();
  });

  it('drops a connection that sends a frame over the size limit', async () => {
    const target = await startServer({ auth: 'off', maxFrameBytes: 1024 });
    const ws = new WebSocket(target.urls.websocket, {
      headers: { 'Device-Id': 'f4:12:fa:77:77:77' },
    });
    await once(ws, 'open');
    ws.send('x'.repeat(2048));
    const [code] = (await once(ws, 'close')) as [number];
    expect(code).toBe(1009);
  });
});

describe('the OTA endpoint', () => {
  it('answers a bad request with 400 and a reason naming the field', async () => {
    const target = await startServer();
    const response = await fetch(target.urls.ota, {
      method: 'POST',
      headers: { 'Device-Id': 'AA-BB', 'Client-Id': 'x', 'Content-Type': 'application/json' },
      body: '{}',
    });
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({
      field: 'Device-Id',
      error: expect.stringContaining('Device-Id'),
    });
  });

  it('offers newer firmware, served with a Content-Length, and the board upgrades', async () => {
    const firmware = new FirmwareStore();
    firmware.add(buildAppImage({ chip: 'esp32s3', version: '2.5.0' }), {
      name: 'xiaozhi-2.5.0.bin',
    });
    firmware.add(buildAppImage({ chip: 'esp32c3', version: '9.0.0' }), { name: 'other-chip.bin' });
    const target = await startServer({ firmware });
    const board = newBoard(target);
    board.powerOn();
    await board.waitForLine(/Firmware upgrade successful/, 5000);
    const record = await connect(target, board);
    expect(record.version).toBe('2.5.0');
    expect(target.registry.otaChecks().map((c) => [c.version, c.offered])).toEqual([
      ['2.4.2', '2.5.0'],
      ['2.5.0', undefined],
    ]);
  });

  it.each([
    ['a configured token too long for NVS', { tokens: ['t'.repeat(4000)] }, /websocket\.token/],
    [
      'a websocket member key over 15 bytes',
      { websocketExtra: { authorization_token: 'x' } },
      /websocket\.authorization_token/,
    ],
    [
      'websocket.version as a string',
      { websocketVersion: '1' as unknown as 1 },
      /websocketVersion/,
    ],
  ])('refuses to start with %s', async (_, options, field) => {
    const error = await XiaozhiServer.start({ port: 0, logLevel: 'silent', ...options }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ServerError);
    expect((error as ServerError).code).toBe('CONFIG_HAZARD');
    expect((error as ServerError).message).toMatch(field);
  });

  it('refuses firmware whose version boards cannot parse', () => {
    const store = new FirmwareStore();
    expect(() => store.add(buildAppImage({ chip: 'esp32s3', version: '2.5.beta' }))).toThrow(
      expect.objectContaining({ code: 'CONFIG_HAZARD' }),
    );
    expect(() => store.add(new Uint8Array(100))).toThrow(
      expect.objectContaining({ code: 'CONFIG_INVALID' }),
    );
  });

  it('answers /activate with 200', async () => {
    const target = await startServer();
    const response = await fetch(`${target.urls.ota}activate`, { method: 'POST', body: '{}' });
    expect(response.status).toBe(200);
  });
});

describe('the HTTP API', () => {
  it('lists devices and tools, calls tools, maps errors to statuses, lists OTA checks', async () => {
    const target = await startServer();
    const board = newBoard(target);
    await connect(target, board);
    const api = (path: string, init?: RequestInit) => fetch(`${target.urls.api}${path}`, init);
    const id = encodeURIComponent(board.mac);

    const devices = (await (await api('/devices')).json()) as {
      devices: { deviceId: string; ready: boolean; toolCount: number }[];
    };
    expect(devices.devices).toEqual([
      expect.objectContaining({
        deviceId: board.mac,
        ready: true,
        toolCount: board.mcp.tools.length,
      }),
    ]);
    const tools = (await (await api(`/devices/${id}/tools`)).json()) as {
      tools: { name: string; userOnly: boolean }[];
    };
    expect(tools.tools.find((t) => t.name === 'self.reboot')?.userOnly).toBe(true);

    const call = (body: unknown) =>
      api(`/devices/${id}/call`, { method: 'POST', body: JSON.stringify(body) });
    const ok = await call({ name: 'self.audio_speaker.set_volume', arguments: { volume: 12 } });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({
      result: { content: [{ type: 'text', text: 'true' }], isError: false },
    });
    const deviceError = await call({
      name: 'self.audio_speaker.set_volume',
      arguments: { volume: 500 },
    });
    expect(deviceError.status).toBe(502);
    expect(await deviceError.json()).toEqual({
      error: {
        code: -32000,
        codeless: true,
        message: 'Value exceeds maximum allowed: 100',
        source: 'device',
      },
    });
    expect((await call({ arguments: {} })).status).toBe(400);
    expect((await api('/devices/aa%3Abb/tools')).status).toBe(404);
    expect((await (await api('/ota-checks')).json()) as object).toEqual({
      otaChecks: [expect.objectContaining({ deviceId: board.mac })],
    });

    board.powerOff();
    await once(target.registry, 'disconnected');
    expect((await call({ name: 'self.lamp.get_state' })).status).toBe(409);
  });
});
