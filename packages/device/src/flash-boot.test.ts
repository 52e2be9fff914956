import { buildVirtualFirmware, readNvsPartition, writeNvsPartition } from '@xiaozhi-mcp/firmware';
import { afterEach, describe, expect, it } from 'vitest';
import { FlashStorage } from './flash-storage.js';
import { TestBackend } from './testing/backend.js';
import { FAST_TIMING } from './testing/timing.js';
import { VirtualBoard } from './virtual-board.js';

const boards: VirtualBoard[] = [];
let backend: TestBackend | undefined;

afterEach(async () => {
  for (const board of boards.splice(0)) board.powerOff();
  await backend?.close();
  backend = undefined;
});

function flashWith(
  version: string,
  nvs: { namespace: string; key: string; value: string }[],
): FlashStorage {
  const flash = new FlashStorage({ size: 16 * 1024 * 1024 });
  const firmware = buildVirtualFirmware({ chip: 'esp32s3', version, board: 'bread-compact-wifi' });
  flash.program(0, firmware.merged);
  flash.program(
    0x9000,
    writeNvsPartition(
      nvs.map((e) => ({ ...e, type: 'string' as const })),
      0x4000,
    ),
  );
  return flash;
}

describe('VirtualBoard booting from its flash', () => {
  it('runs the flashed version and checks OTA at the URL provisioned in NVS, writing NVS back', async () => {
    backend = await TestBackend.start();
    const flash = flashWith('3.1.4', [
      { namespace: 'wifi', key: 'ssid', value: 'lab' },
      { namespace: 'wifi', key: 'password', value: 'pw' },
      { namespace: 'wifi', key: 'ota_url', value: backend.otaUrl },
    ]);
    const board = new VirtualBoard({ flash, timing: FAST_TIMING, mac: 'f4:12:fa:20:00:01' });
    boards.push(board);
    board.powerOn();
    await board.waitForState('idle', 20_000);
    expect(board.version).toBe('3.1.4');
    expect(backend.otaRequests[0]?.headers['user-agent']).toBe('bread-compact-wifi/3.1.4');
    const text = board.console.history.map((l) => l.text);
    expect(text.some((t) => /boot: Loaded app from partition at offset 0x20000$/.test(t))).toBe(
      true,
    );
    // The OTA reply's websocket section and the generated uuid are now in the flash's NVS partition.
    const stored = readNvsPartition(flash.read(0x9000, 0x4000));
    expect(stored).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ namespace: 'websocket', key: 'url', value: backend.wsUrl }),
        expect.objectContaining({ namespace: 'board', key: 'uuid', value: board.uuid }),
        expect.objectContaining({ namespace: 'wifi', key: 'ota_url', value: backend.otaUrl }),
      ]),
    );
    // A board made later from the same flash (a power cycle) keeps its uuid.
    const again = new VirtualBoard({ flash, timing: FAST_TIMING, mac: 'f4:12:fa:20:00:01' });
    boards.push(again);
    board.powerOff();
    again.powerOn();
    await again.waitForState('idle', 20_000);
    expect(again.uuid).toBe(board.uuid);
  });

  it('boot-loops with invalid header on an erased flash', async () => {
    const board = new VirtualBoard({
      flash: new FlashStorage({ size: 4 * 1024 * 1024 }),
      timing: FAST_TIMING,
    });
    boards.push(board);
    board.powerOn();
    await new Promise<void>((resolve) => board.on('boot', (_r, count) => count === 3 && resolve()));
    const text = board.console.history.map((l) => l.text);
    expect(
      text.filter((t) => t.startsWith('invalid header: 0xffffffff')).length,
    ).toBeGreaterThanOrEqual(2);
    expect(text.some((t) => t.startsWith('rst:0x10 (RTC_WDT_RTC_RST)'))).toBe(true);
  });

  it('waits in the ROM download mode when reset with GPIO0 low', async () => {
    const board = new VirtualBoard({ flash: flashWith('1.0.0', []), timing: FAST_TIMING });
    boards.push(board);
    board.reset('POWERON', { download: true });
    await board.waitForState('download', 20_000);
    expect(board.console.history.map((l) => l.text).slice(-2)).toEqual([
      'rst:0x1 (POWERON),boot:0x0 (DOWNLOAD(USB/UART0))',
      'waiting for download',
    ]);
    board.reset('EXT_SYS_RST');
    await board.waitForState('wifi_configuring', 20_000);
  });
});
