import { createHash } from 'node:crypto';
import { buildVirtualFirmware, readPartitionTable } from '@xiaozhi-mcp/firmware';
import { Flasher, type FlashProgress, NodeWebSerialPort } from '@xiaozhi-mcp/serial';
import { afterEach, describe, expect, it } from 'vitest';
import type { ChipModel } from '../board-api.js';
import { FlashStorage } from '../flash-storage.js';
import { boardPreset } from '../presets.js';
import { type BoardTiming, VirtualBoard } from '../virtual-board.js';
import { VirtualSerialBinding, type VirtualSerialDeviceOptions } from './virtual-binding.js';

const MB = 1024 * 1024;
const TIMING: Partial<BoardTiming> = { bootMs: 20, wifiConnectMs: 20, panicRebootMs: 200 };
const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const md5 = (data: Uint8Array) => createHash('md5').update(data).digest('hex');

/** A powered board with an empty 4 MB flash on a CP2102, and a Flasher on its port. */
async function rig(options: VirtualSerialDeviceOptions = {}, chip?: ChipModel) {
  const flash = new FlashStorage({ size: 4 * MB });
  const preset = chip === undefined ? undefined : { ...boardPreset('bread-compact-wifi'), chip };
  const board = new VirtualBoard({
    flash,
    timing: TIMING,
    mac: 'f4:12:fa:5e:00:01',
    ...(preset === undefined ? {} : { preset }),
  });
  const binding = new VirtualSerialBinding();
  const device = binding.attach(board, options);
  board.powerOn();
  const [info] = await binding.list();
  if (info === undefined) throw new Error('the board is not listed');
  const port = NodeWebSerialPort.fromPortInfo(binding, info);
  const flasher = new Flasher({ port });
  cleanups.push(async () => {
    await flasher.disconnect();
    board.powerOff();
    binding.detach(device);
  });
  return { flash, board, binding, device, port, flasher };
}

const firmware = (chip: 'esp32s3' | 'esp32c3', version = '2.6.0') =>
  buildVirtualFirmware({
    chip,
    version,
    board: 'bread-compact-wifi',
    flashSizeMb: 4,
    padToFlashSize: true,
  });

describe('flashing a virtual board with esptool-js through the virtual serial binding', () => {
  it('writes a 4 MB merged image at 921600 baud, verifies it, resets, and the board runs it', {
    timeout: 60_000,
  }, async () => {
    const { flash, board, device, flasher } = await rig();
    const fw = firmware('esp32s3');
    expect(fw.merged.length).toBe(4 * MB);
    const progress: FlashProgress[] = [];
    const booted = board.waitForLine(/app_init: App version:\s+2\.6\.0$/, 30_000);
    const started = performance.now();
    const result = await flasher.flash([{ offset: 0, data: fw.merged }], {
      baudRate: 921_600,
      onProgress: (p) => progress.push(p),
    });
    const wallMs = performance.now() - started;

    expect(result.chip).toMatchObject({
      chip: 'esp32s3',
      chipId: 9,
      mac: board.mac,
      flashSizeMb: 4,
    });
    expect(result).toMatchObject({ flaky: false, baudRate: 921_600, bytes: 4 * MB });
    expect(flash.md5(0, 4 * MB)).toBe(md5(fw.merged));
    await booted;
    expect(board.version).toBe('2.6.0');
    expect(
      board.console.history.some((l) => l.text.includes('app_init: App version:      2.6.0')),
    ).toBe(true);

    const percents = progress.map((p) => p.percent);
    expect(percents.every((p, i) => i === 0 || p >= (percents[i - 1] ?? 0))).toBe(true);
    expect(percents.at(-1)).toBe(100);
    expect(progress.every((p) => p.attempt === 1)).toBe(true);

    // The ROM and the stub saw esptool's real sequence, through the lines and the wire.
    expect(device.lineEvents).toContainEqual({ kind: 'reset', download: true });
    expect(device.lineEvents.at(-1)).toEqual({ kind: 'reset', download: false });
    const { toBoard } = device.stats;
    expect(wallMs).toBeGreaterThan(toBoard.wireMs);
  });

  it('refuses an esp32c3 image for an esp32s3 board before writing anything', {
    timeout: 60_000,
  }, async () => {
    const { flash, device, flasher } = await rig();
    const before = flash.md5(0, 4 * MB);
    const error = await flasher
      .flash([{ offset: 0, data: firmware('esp32c3').merged }], { baudRate: 921_600 })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'CHIP_MISMATCH' });
    expect((error as Error).message).toMatch(/esp32c3.*esp32s3/);
    expect(flash.md5(0, 4 * MB)).toBe(before);
    expect(device.emulator?.history.filter((c) => c.startsWith('FLASH'))).toEqual([]);
    await expect(
      flasher.flash([{ offset: 0, data: firmware('esp32s3').merged }], { expectedChip: 'esp32c3' }),
    ).rejects.toMatchObject({ code: 'CHIP_MISMATCH' });
  });

  it('reads back the partition table it wrote', { timeout: 60_000 }, async () => {
    const { board, flasher } = await rig();
    const fw = firmware('esp32s3', '2.6.1');
    await flasher.flash([{ offset: 0, data: fw.merged }], { baudRate: 921_600 });
    const raw = await flasher.readFlash(0x8000, 0xc00);
    expect(raw).toEqual(fw.partitionTable);
    const table = await flasher.readPartitionTable();
    expect(table).toEqual(readPartitionTable(fw.partitionTable));
    expect(table.partitions.map((p) => p.label)).toContain('nvs');
    const booted = board.waitForLine(/app_init: App version:\s+2\.6\.1$/, 10_000);
    await flasher.disconnect({ reset: true });
    await booted;
  });

  it('retries once at a lower baud rate after a failed verify, and reports the flash as flaky', {
    timeout: 60_000,
  }, async () => {
    let corrupted = false;
    const { flash, board, flasher } = await rig({
      faults: {
        flashBlock: () => {
          if (corrupted) return undefined;
          corrupted = true;
          return 'corrupt';
        },
      },
    });
    const fw = firmware('esp32s3');
    const booted = board.waitForLine(/app_init: App version:\s+2\.6\.0$/, 30_000);
    const progress: FlashProgress[] = [];
    const result = await flasher.flash([{ offset: 0, data: fw.merged }], {
      baudRate: 921_600,
      onProgress: (p) => progress.push(p),
    });
    expect(result.flaky).toBe(true);
    expect(result.baudRate).toBe(115_200);
    expect(result.firstError).toMatch(/^verify part 1 at 0x0: .*MD5/);
    expect(flash.md5(0, 4 * MB)).toBe(md5(fw.merged));
    expect(progress.filter((p) => p.attempt === 2).at(-1)?.percent).toBe(100);
    await booted;
    expect(board.version).toBe('2.6.0');
  });

  it('detects an ESP32 by its magic register (its ROM has no GET_SECURITY_INFO)', {
    timeout: 60_000,
  }, async () => {
    const { board, device, flasher } = await rig({}, 'esp32');
    const chip = await flasher.connect();
    expect(chip).toMatchObject({ chip: 'esp32', chipId: 0, mac: board.mac, flashSizeMb: 4 });
    expect(device.emulator?.history.slice(0, 3)).toEqual(['SYNC', 'GET_SECURITY_INFO', 'READ_REG']);
    expect(device.emulator?.stage).toBe('stub');
  });

  it("connects over USB-Serial-JTAG with esptool's USB reset sequence", {
    timeout: 60_000,
  }, async () => {
    const { board, device, flasher } = await rig({ usbJtag: true }, 'esp32c3');
    const chip = await flasher.connect();
    expect(chip).toMatchObject({ chip: 'esp32c3', chipId: 5, mac: board.mac });
    expect(device.lineEvents).toContainEqual({ kind: 'reset', download: true });
    await flasher.disconnect();
    // Closing the port drops no line into a reset: the chip stays in the stub.
    expect(board.state).toBe('download');
  });

  it('fails naming the part when both attempts fail, and leaves the port closed', {
    timeout: 60_000,
  }, async () => {
    const { port, flasher } = await rig({ faults: { flashBlock: () => 'fail' } });
    const error = await flasher
      .flash([{ offset: 0, data: firmware('esp32s3').merged }], { baudRate: 460_800 })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'FLASH_FAILED' });
    expect((error as Error).message).toMatch(
      /^write part 1 at 0x0: .*; .*\(first attempt at 460800 baud: write part 1 at 0x0: /,
    );
    expect(port.isOpen).toBe(false);
  });

  it('sees an unplugged board as a lost port', { timeout: 60_000 }, async () => {
    const { binding, device, port } = await rig();
    await port.open({ baudRate: 115200 });
    const reader = port.readable?.getReader();
    const pending = reader?.read();
    binding.unplug(device.path);
    await expect(pending).rejects.toMatchObject({ name: 'NetworkError' });
    expect(port.lost?.message).toMatch(/disconnected/);
    expect(port.readable).toBeNull();
    await expect(port.open({ baudRate: 115200 })).rejects.toMatchObject({
      code: 'PORT_NOT_FOUND',
    });
  });
});
