/**
 * The virtual board against a backend it cannot trust: it is bounded like a
 * board, so an oversized frame or OTA reply costs a session or a check, never megabytes of
 * memory or console output; and a board with an eFuse serial number activates as the firmware.
 */
import { createHmac } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { openSession } from './board-session.test-helper.js';
import { TestBackend } from './testing/backend.js';
import { FAST_TIMING } from './testing/timing.js';
import { type BoardTiming, VirtualBoard, type VirtualBoardOptions } from './virtual-board.js';

/** The firmware's pauses shortened; an HTTP timeout short enough for the tests of one. */
const FAST: Partial<BoardTiming> = { ...FAST_TIMING, httpTimeoutMs: 3000 };

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
): Promise<{ backend: TestBackend; board: VirtualBoard; output: () => number }> {
  backend = await TestBackend.start(backendOptions);
  const board = new VirtualBoard({
    mac: 'f4:12:fa:00:00:07',
    wifi: { ssid: 'rig-wifi', password: 'secret' },
    otaUrl: backend.otaUrl,
    timing: FAST,
    ...boardOptions,
  });
  boards.push(board);
  // Everything the board prints, as a CLI would receive it.
  let bytes = 0;
  board.console.on('line', (line) => {
    bytes += Buffer.byteLength(line.text) + 1;
  });
  board.powerOn();
  return { backend, board, output: () => bytes };
}

const texts = (board: VirtualBoard) =>
  board.console.history.map((line) => line.text.replace(/^(\w) \(\d+\) /, '$1 '));

describe('VirtualBoard bounded like a board', () => {
  it('ends the session on a 4 MB frame after the hello, prints little, and opens the next one', async () => {
    const { backend, board, output } = await start();
    const connection = await openSession(board, backend);
    const before = output();
    const panics: unknown[] = [];
    board.on('panic', (panic) => panics.push(panic));

    connection.socket.on('error', () => {});
    connection.socket.send(
      `{"session_id":"${connection.sessionId}","type":"stt","text":"${'x'.repeat(4 * 1024 * 1024)}"}`,
    );
    await board.waitForState('idle', 20_000);
    await connection.until(() => connection.closeCode, 3000, 'close');
    // Dropped TCP, as the firmware closes: no close frame.
    expect(connection.closeCode).toBe(1006);
    expect(output() - before).toBeLessThan(4096);
    expect(texts(board)).toContain('E WS: Received a frame over 65535 bytes');
    expect(board.powered).toBe(true);
    expect(panics).toEqual([]);
    expect(board.bootCount).toBe(1);

    board.click();
    const next = await backend.connection(1);
    await board.waitForState('listening', 20_000);
    const reply = await next.request('initialize', { protocolVersion: '2024-11-05' });
    expect(reply.kind).toBe('result');
  });

  it('refuses an OTA reply of several MB: the check fails and is retried, no session opens, NVS is untouched', async () => {
    const { backend, board, output } = await start({
      otaReply: (_, server) => ({
        body: `{"websocket":{"url":"${server.wsUrl}","token":"t"},"padding":"${'p'.repeat(8 * 1024 * 1024)}"}`,
      }),
    });
    let checks = 0;
    board.on('ota', () => checks++);
    await board.waitForLine(/retry in 0\.04 seconds \(2\/10\)/, 20_000);
    expect(checks).toBe(0);
    expect(board.lastOta).toBeUndefined();
    expect(board.storage.open('websocket').getString('url')).toBe('');
    expect(board.state).toBe('activating');
    const lines = texts(board);
    expect(lines).toContain('E Ota: Failed to read response: over 65536 bytes');
    expect(lines).toContain(
      'W Application: Check new version failed, retry in 0.02 seconds (1/10)',
    );
    expect(output()).toBeLessThan(64 * 1024);
    expect(backend.otaRequests.length).toBeGreaterThanOrEqual(2);
    expect(backend.connections).toEqual([]);
  });
});

describe('VirtualBoard activation with an eFuse serial number (docs/protocol.md §7)', () => {
  const SERIAL = 'SN0123456789ABCDEF0123456789ABCD';
  const KEY = '4f'.repeat(32);

  function activatingBackend(challenge: string) {
    let activations = 0;
    return {
      options: {
        otaReply: (request: { url: string }, server: TestBackend) => {
          if (request.url.endsWith('/activate'))
            return { status: ++activations === 1 ? 202 : 200, body: {} };
          return {
            body: {
              websocket: { url: server.wsUrl },
              ...(activations >= 2
                ? {}
                : { activation: { message: 'say the code', code: '123456', challenge } }),
            },
          };
        },
      },
    };
  }

  it('sends Serial-Number and Activation-Version 2, signs the challenge, retries on 202, then checks again', async () => {
    const challenge = 'f3a1c2d4-5b6e-4f70-8a9b-0c1d2e3f4a5b';
    const { backend, board } = await start(activatingBackend(challenge).options, {
      serialNumber: SERIAL,
      activationKey: KEY,
    });
    await board.waitForState('idle', 20_000);
    expect(backend.otaRequests.map((r) => r.url)).toEqual([
      '/xiaozhi/ota/',
      '/xiaozhi/ota/activate',
      '/xiaozhi/ota/activate',
      '/xiaozhi/ota/',
    ]);
    for (const request of backend.otaRequests) {
      expect(request.headers['activation-version']).toBe('2');
      expect(request.headers['serial-number']).toBe(SERIAL);
    }
    const hmac = createHmac('sha256', Buffer.from(KEY, 'hex')).update(challenge).digest('hex');
    const payload = `{"algorithm":"hmac-sha256","serial_number":"${SERIAL}","challenge":"${challenge}","hmac":"${hmac}"}`;
    expect(backend.otaRequests[1]?.body).toBe(payload);
    expect(backend.otaRequests[2]?.body).toBe(payload);
  });

  it('sends {} and Activation-Version 1 without a serial number', async () => {
    const { backend, board } = await start(activatingBackend('c-1').options);
    await board.waitForState('idle', 20_000);
    expect(backend.otaRequests[0]?.headers['activation-version']).toBe('1');
    expect(backend.otaRequests[0]?.headers['serial-number']).toBeUndefined();
    expect(backend.otaRequests[1]?.body).toBe('{}');
  });

  it('refuses a serial number or key eFuse cannot hold', () => {
    expect(() => new VirtualBoard({ serialNumber: 'x'.repeat(33) })).toThrow(/serialNumber/);
    expect(() => new VirtualBoard({ serialNumber: 'SN 1' })).toThrow(/serialNumber/);
    expect(() => new VirtualBoard({ serialNumber: 'SN1', activationKey: 'zz' })).toThrow(
      /activationKey/,
    );
    expect(() => new VirtualBoard({ activationKey: KEY })).toThrow(/serialNumber/);
  });
});
