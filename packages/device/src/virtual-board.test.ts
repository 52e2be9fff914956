import {
  buildAppImage,
  buildVirtualFirmware,
  readPartitionTable,
  writeNvsPartition,
  writePartitionTable,
  XIAOZHI_PARTITIONS_4M,
} from '@xiaozhi-mcp/firmware';
import {
  buildDeviceHello,
  type JsonRpcMessage,
  parseOtaRequest,
  readToolResult,
  toolResultText,
  walkToolsPages,
} from '@xiaozhi-mcp/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { openSession } from './board-session.test-helper.js';
import { FlashStorage } from './flash-storage.js';
import { TestBackend } from './testing/backend.js';
import { FAST_TIMING } from './testing/timing.js';
import { type BoardTiming, VirtualBoard, type VirtualBoardOptions } from './virtual-board.js';

/** The firmware's pauses shortened; an HTTP timeout short enough for the tests of one. */
const FAST: Partial<BoardTiming> = { ...FAST_TIMING, httpTimeoutMs: 3000 };
const MAC = 'f4:12:fa:00:00:01';

let backend: TestBackend | undefined;
const boards: VirtualBoard[] = [];

afterEach(async () => {
  for (const board of boards.splice(0)) board.powerOff();
  await backend?.close();
  backend = undefined;
});

async function start(
  backendOptions: Parameters<typeof TestBackend.start>[0] = {},
  boardOptions: VirtualBoardOptions = {},
): Promise<{ backend: TestBackend; board: VirtualBoard }> {
  backend = await TestBackend.start(backendOptions);
  const board = new VirtualBoard({
    mac: MAC,
    wifi: { ssid: 'rig-wifi', password: 'secret' },
    otaUrl: backend.otaUrl,
    timing: FAST,
    ...boardOptions,
  });
  boards.push(board);
  board.powerOn();
  return { backend, board };
}

function result(message: JsonRpcMessage): unknown {
  if (message.kind === 'result') return message.result;
  throw new Error(`expected a result, got ${JSON.stringify(message)}`);
}

describe('VirtualBoard end to end', () => {
  it('posts its OTA check, connects with the real headers and hello, and answers MCP', async () => {
    const { backend, board } = await start({}, { preset: 'otto-robot' });
    await board.waitForState('idle', 20_000);

    const ota = backend.otaRequests[0];
    expect(ota).toBeDefined();
    if (ota === undefined) return;
    expect(ota.headers['device-id']).toBe(MAC);
    expect(ota.headers['client-id']).toBe(board.uuid);
    expect(ota.headers['user-agent']).toBe('otto-robot/2.4.2');
    expect(ota.headers['activation-version']).toBe('1');
    expect(ota.headers['content-type']).toBe('application/json');
    const request = parseOtaRequest({ headers: ota.headers, body: ota.body });
    expect(request).toMatchObject({
      deviceId: MAC,
      clientId: board.uuid,
      version: '2.4.2',
      board: 'otto-robot',
    });
    expect(JSON.parse(ota.body)).toMatchObject({
      version: 2,
      mac_address: MAC,
      chip_model_name: 'esp32s3',
      application: { name: 'xiaozhi', version: '2.4.2' },
      board: { type: 'wifi', name: 'otto-robot', ssid: 'rig-wifi' },
    });
    expect(board.storage.open('websocket').getString('url')).toBe(backend.wsUrl);

    const connection = await openSession(board, backend);
    const upgrade = connection.upgrade.headers;
    expect(upgrade.authorization).toBe('Bearer test-token');
    expect(upgrade['protocol-version']).toBe('1');
    expect(upgrade['device-id']).toBe(MAC);
    expect(upgrade['client-id']).toBe(board.uuid);
    expect(upgrade.host).toBe('127.0.0.1');
    expect(upgrade['sec-websocket-protocol']).toBeUndefined();
    expect(connection.texts[0]).toBe(
      JSON.stringify(buildDeviceHello({ transport: 'websocket', version: 1 })),
    );
    await connection.until(() =>
      connection.texts.includes(
        '{"session_id":"session-1","type":"listen","state":"start","mode":"auto"}',
      ),
    );

    const init = result(await connection.request('initialize', { capabilities: {} }));
    expect(init).toEqual({
      protocolVersion: '2024-11-05',
      capabilities: { tools: {} },
      serverInfo: { name: 'otto-robot', version: '2.4.2' },
    });

    const pages: unknown[] = [];
    const walk = await walkToolsPages(async (params) => {
      const page = result(await connection.request('tools/list', params));
      pages.push(page);
      return page;
    });
    expect(pages.length).toBeGreaterThanOrEqual(3);
    expect(walk.violations).toEqual([]);
    expect(walk.tools.map((t) => t.name)).toEqual(
      board.mcp.tools.filter((t) => !t.userOnly).map((t) => t.name),
    );
    const withUser = await walkToolsPages(
      async (params) => result(await connection.request('tools/list', params)),
      {
        withUserTools: true,
      },
    );
    expect(withUser.tools.length).toBe(board.mcp.tools.length);

    const set = readToolResult(
      result(
        await connection.request('tools/call', {
          name: 'self.audio_speaker.set_volume',
          arguments: { volume: 33 },
        }),
      ),
    );
    expect(toolResultText(set)).toBe('true');
    const status = readToolResult(
      result(await connection.request('tools/call', { name: 'self.get_device_status' })),
    );
    expect(JSON.parse(toolResultText(status))).toMatchObject({ audio_speaker: { volume: 33 } });
    const bad = await connection.request('tools/call', {
      name: 'self.audio_speaker.set_volume',
      arguments: { volume: 101 },
    });
    expect(bad.kind === 'error' && [bad.error.message, bad.error.codeless]).toEqual([
      'Value exceeds maximum allowed: 100',
      true,
    ]);
  });

  it('loses the reply to self.reboot, drops TCP without a close frame, boots and opens a new session', async () => {
    const { backend, board } = await start();
    const first = await openSession(board, backend);
    expect((await first.request('initialize')).kind).toBe('result');

    // Waiting starts before the reboot is asked for, so the reset line cannot slip past.
    const rebooted = board.waitForLine(/rst:0xc \(RTC_SW_CPU_RST\)/, 20_000);
    first.sendPayload(
      '{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"self.reboot"}}',
    );
    await first.until(() => first.closeCode, 5000, 'close');
    expect(first.closeCode).toBe(1006);
    expect(first.mcpPayloads.some((p) => p.includes('"id":77'))).toBe(false);

    await rebooted;
    await board.waitForState('idle', 20_000);
    expect(board.bootCount).toBe(2);
    expect(backend.otaRequests).toHaveLength(2);

    const second = await openSession(board, backend, 1);
    expect(second.sessionId).toBe('session-2');
    expect(board.sessionId).toBe('session-2');
    expect(result(await second.request('initialize'))).toMatchObject({
      serverInfo: { name: 'bread-compact-wifi' },
    });
    expect(second.mcpPayloads.some((p) => p.includes('"id":77'))).toBe(false);
  });

  it('upgrades from a firmware offer and reports the new version in the next initialize', async () => {
    const image = buildAppImage({ chip: 'esp32s3', version: '2.5.0' });
    const { backend, board } = await start({
      files: { 'xiaozhi.bin': image },
      otaReply: (request, server) => {
        const running = (JSON.parse(request.body) as { application: { version: string } })
          .application.version;
        return {
          body: {
            websocket: { url: server.wsUrl, token: 'test-token', version: 1 },
            firmware:
              running === '2.4.2'
                ? { version: '2.5.0', url: server.fileUrl('xiaozhi.bin') }
                : { version: running, url: '' },
          },
        };
      },
    });
    await board.waitForLine(/Ota: Firmware upgrade successful/, 20_000);
    const connection = await openSession(board, backend);
    expect(board.version).toBe('2.5.0');
    expect(backend.otaRequests.map((r) => r.headers['user-agent'])).toEqual([
      'bread-compact-wifi/2.4.2',
      'bread-compact-wifi/2.5.0',
    ]);
    expect(result(await connection.request('initialize'))).toMatchObject({
      serverInfo: { version: '2.5.0' },
    });
    expect(board.console.history.some((l) => l.text.includes('Progress: 100%'))).toBe(true);
  });

  it('refuses a chunked firmware download, as the firmware needs a Content-Length', async () => {
    const { board } = await start({
      otaReply: (_request, server) => ({
        body: {
          websocket: { url: server.wsUrl },
          firmware: { version: '9.0.0', url: `http://127.0.0.1:${server.port}/nowhere.bin` },
        },
      }),
    });
    await board.waitForLine(/Firmware upgrade failed/, 20_000);
    await board.waitForState('idle', 20_000);
    expect(board.version).toBe('2.4.2');
  });
});

describe('VirtualBoard crashes like the firmware', () => {
  it('panics and reboots on a server hello without transport', async () => {
    const { backend, board } = await start({
      serverHello: (_hello, id) => ({ type: 'hello', session_id: id }),
    });
    await board.waitForState('idle', 20_000);
    const panicked = new Promise((resolve) => board.once('panic', resolve));
    board.click();
    await panicked;
    await board.waitForLine(/rst:0xc/, 20_000);
    expect(board.console.history.map((l) => l.text)).toContain(
      "Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.",
    );
    await board.waitForState('idle', 20_000);
    expect(board.bootCount).toBe(2);
    expect(backend.connections).toHaveLength(1);
  });

  it('reboot-loops on an OTA reply with a websocket key longer than 15 bytes', async () => {
    const { board } = await start({
      otaReply: (_request, server) => ({
        body: { websocket: { url: server.wsUrl, authorization_token: 'x' } },
      }),
    });
    await new Promise<void>((resolve) => {
      board.on('boot', (_reason, count) => count === 3 && resolve());
    });
    const text = board.console.history.map((l) => l.text);
    expect(text.some((t) => t.startsWith('abort() was called'))).toBe(true);
    expect(text.filter((t) => t.startsWith('rst:0xc')).length).toBeGreaterThanOrEqual(2);
  });

  it('aborts on a firmware version segment std::stoi cannot read', async () => {
    const { board } = await start({
      otaReply: (_request, server) => ({
        body: {
          websocket: { url: server.wsUrl },
          firmware: { version: '2.beta', url: 'http://x/y' },
        },
      }),
    });
    await board.waitForLine(/abort\(\) was called/, 20_000);
    expect(board.console.history.some((l) => l.text.includes('std::invalid_argument'))).toBe(true);
  });
});

describe('VirtualBoard channel and boot behaviour', () => {
  it('times out a hello with the wrong transport and goes back to idle', async () => {
    const { board } = await start(
      { serverHello: (_hello, id) => ({ type: 'hello', transport: 'udp', session_id: id }) },
      { timing: { ...FAST, helloTimeoutMs: 100 } },
    );
    await board.waitForState('idle', 20_000);
    board.click();
    await board.waitForLine(/WS: Failed to receive server hello/, 20_000);
    await board.waitForState('idle', 20_000);
    expect(board.console.history.some((l) => l.text.includes('Unsupported transport: udp'))).toBe(
      true,
    );
  });

  it('treats the channel as dead after its idle time, even while the server pings', async () => {
    const { backend, board } = await start({}, { timing: { ...FAST, channelIdleMs: 300 } });
    const connection = await openSession(board, backend);
    const pinger = setInterval(() => connection.socket.ping(), 50);
    try {
      await board.waitForLine(/Protocol: Channel timeout/, 20_000);
      await connection.until(() => connection.closeCode, 5000, 'close');
      await board.waitForState('idle', 20_000);
    } finally {
      clearInterval(pinger);
    }
    expect(connection.closeCode).toBe(1006);
  });

  it('enters Wi-Fi config mode without credentials and never checks OTA', async () => {
    backend = await TestBackend.start();
    const board = new VirtualBoard({ otaUrl: backend.otaUrl, timing: FAST });
    boards.push(board);
    board.powerOn();
    await board.waitForState('wifi_configuring', 20_000);
    expect(
      board.console.history.some((l) => l.text.endsWith('WifiBoard: WiFi config mode entered')),
    ).toBe(true);
    expect(backend.otaRequests).toHaveLength(0);
  });

  it('retries a failed OTA check with a doubling delay', async () => {
    let calls = 0;
    const { board } = await start({
      otaReply: (_request, server) =>
        ++calls <= 2 ? { status: 500, body: {} } : { body: { websocket: { url: server.wsUrl } } },
    });
    await board.waitForState('idle', 20_000);
    const lines = board.console.history
      .map((l) => l.text)
      .filter((t) => t.includes('Check new version failed'));
    expect(lines.map((t) => t.replace(/^W \(\d+\) /, ''))).toEqual([
      'Application: Check new version failed, retry in 0.02 seconds (1/10)',
      'Application: Check new version failed, retry in 0.04 seconds (2/10)',
    ]);
  });

  it('activates with a challenge, retrying on 202, then checks again', async () => {
    let activations = 0;
    const { backend, board } = await start({
      otaReply: (request, server) => {
        if (request.url.endsWith('/activate'))
          return { status: ++activations === 1 ? 202 : 200, body: {} };
        const activated = activations >= 2;
        return {
          body: {
            websocket: { url: server.wsUrl },
            ...(activated
              ? {}
              : { activation: { message: 'say the code', code: '123456', challenge: 'c-1' } }),
          },
        };
      },
    });
    await board.waitForState('idle', 20_000);
    expect(backend.otaRequests.map((r) => r.url)).toEqual([
      '/xiaozhi/ota/',
      '/xiaozhi/ota/activate',
      '/xiaozhi/ota/activate',
      '/xiaozhi/ota/',
    ]);
  });

  it('reboots on a system reboot command', async () => {
    const { backend, board } = await start();
    const connection = await openSession(board, backend);
    connection.socket.send(
      JSON.stringify({ session_id: connection.sessionId, type: 'system', command: 'reboot' }),
    );
    await connection.until(() => connection.closeCode, 5000, 'close');
    await board.waitForState('idle', 20_000);
    expect(board.bootCount).toBe(2);
  });
});

describe('VirtualBoard fault knobs', () => {
  it('delays replies, keeping their order', async () => {
    const { backend, board } = await start({}, { faults: { replyLatencyMs: 150 } });
    const connection = await openSession(board, backend);
    const started = performance.now();
    const [a, b] = await Promise.all([
      connection.request('initialize'),
      connection.request('tools/list'),
    ]);
    expect(performance.now() - started).toBeGreaterThanOrEqual(140);
    expect(a.kind).toBe('result');
    expect(b.kind).toBe('result');
    expect(connection.mcpPayloads.map((p) => JSON.parse(p).id)).toEqual([1, 2]);
  });

  it('drops the replies it is told to drop', async () => {
    const { backend, board } = await start(
      {},
      { faults: { dropReply: (payload) => payload.includes('"inputSchema"') } },
    );
    const connection = await openSession(board, backend);
    await expect(connection.request('tools/list', undefined, 300)).rejects.toThrow(
      /no reply to tools\/list/,
    );
    expect((await connection.request('initialize')).kind).toBe('result');
  });

  it('drops the connection mid-call', async () => {
    const { backend, board } = await start(
      {},
      { faults: { disconnectOnCall: 'self.lamp.turn_on' } },
    );
    const connection = await openSession(board, backend);
    connection.sendPayload(
      '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"self.lamp.turn_on"}}',
    );
    await connection.until(() => connection.closeCode, 5000, 'close');
    expect(connection.closeCode).toBe(1006);
    expect(connection.mcpPayloads).toEqual([]);
    await board.waitForState('idle', 20_000);
  });
});

describe('VirtualBoard system info', () => {
  it('reports the flash size it has and the partition table in its flash (a 4 MB board)', async () => {
    backend = await TestBackend.start();
    const flash = new FlashStorage({ size: 4 * 1024 * 1024 });
    const firmware = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '2.4.2',
      board: 'bread-compact-wifi',
      flashSizeMb: 4,
    });
    flash.program(0, firmware.merged);
    const nvs = [
      { namespace: 'wifi', key: 'ssid', value: 'rig-wifi' },
      { namespace: 'wifi', key: 'ota_url', value: backend.otaUrl },
    ];
    flash.program(
      0x9000,
      writeNvsPartition(
        nvs.map((e) => ({ ...e, type: 'string' as const })),
        0x4000,
      ),
    );
    const board = new VirtualBoard({ mac: MAC, flash, timing: FAST });
    boards.push(board);
    board.powerOn();
    await board.waitForState('idle', 20_000);

    const table = readPartitionTable(writePartitionTable(XIAOZHI_PARTITIONS_4M)).partitions;
    const expected = {
      flash_size: 4 * 1024 * 1024,
      partition_table: table.map((p) => ({
        label: p.label,
        type: p.type,
        subtype: p.subtype,
        address: p.offset,
        size: p.size,
      })),
      // The 4 MB table has no OTA slots: the app runs from the factory partition.
      ota: { label: 'factory' },
    };
    expect(board.systemInfo()).toMatchObject(expected);
    // ...and that is what the OTA check posted.
    const posted = backend.otaRequests[0];
    expect(posted && JSON.parse(posted.body)).toMatchObject(expected);
  });

  it('reports the preset flash and its xiaozhi table without a modelled flash', () => {
    const board = new VirtualBoard({ mac: MAC, timing: FAST });
    const info = board.systemInfo();
    expect(info.flash_size).toBe(16 * 1024 * 1024);
    expect(info.partition_table.map((p) => [p.label, p.address, p.size])).toEqual([
      ['nvs', 0x9000, 0x4000],
      ['otadata', 0xd000, 0x2000],
      ['phy_init', 0xf000, 0x1000],
      ['ota_0', 0x20000, 0x3f0000],
      ['ota_1', 0x410000, 0x3f0000],
      ['assets', 0x800000, 0x800000],
    ]);
    expect(info.ota).toEqual({ label: 'ota_0' });
    expect(info.chip_info).toEqual({ model: 9, cores: 2, revision: 2, features: 18 });
  });
});
