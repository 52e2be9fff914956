/**
 * The flasher's guard before a write, against virtual boards whose eFuses say Secure Boot, flash
 * encryption in release mode, or another chip revision: what the board would not survive is
 * refused before any byte is written (the ROM never sees a FLASH_BEGIN), naming the reason, and
 * what it may take is written as ever.
 */
import { createHash } from 'node:crypto';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { Flasher, NodeWebSerialPort } from '@xiaozhi-mcp/serial';
import { afterEach, describe, expect, it } from 'vitest';
import type { ChipModel } from '../board-api.js';
import { FlashStorage } from '../flash-storage.js';
import { boardPreset } from '../presets.js';
import { FAST_TIMING } from '../testing/timing.js';
import { VirtualBoard, type VirtualBoardOptions } from '../virtual-board.js';
import { VirtualSerialBinding } from './virtual-binding.js';

const MB = 1024 * 1024;
const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const md5 = (data: Uint8Array) => createHash('md5').update(data).digest('hex');

/** A powered board with an empty 4 MB flash on a CP2102, its chip's eFuses as `silicon` says. */
async function rig(chip: ChipModel, silicon: VirtualBoardOptions['silicon'] = {}) {
  const flash = new FlashStorage({ size: 4 * MB });
  const { inPackage: _s3r8, ...base } = boardPreset('bread-compact-wifi');
  const board = new VirtualBoard({
    flash,
    timing: FAST_TIMING,
    mac: 'f4:12:fa:5e:00:02',
    preset: { ...base, chip },
    silicon,
  });
  const binding = new VirtualSerialBinding();
  const device = binding.attach(board);
  board.powerOn();
  const [info] = await binding.list();
  if (info === undefined) throw new Error('the board is not listed');
  const flasher = new Flasher({
    platform: 'linux',
    port: NodeWebSerialPort.fromPortInfo(binding, info),
  });
  cleanups.push(async () => {
    await flasher.disconnect();
    board.powerOff();
    binding.detach(device);
  });
  /** The flash commands the ROM and the stub were sent. */
  const flashCommands = () =>
    device.emulator?.history.filter((c) => /^(FLASH|ERASE)/.test(c)) ?? ['no emulator'];
  return { flash, board, device, flasher, flashCommands, path: info.path };
}

const firmware = (chip: 'esp32s3' | 'esp32c3', revisions = {}) =>
  buildVirtualFirmware({
    chip,
    version: '2.6.0',
    board: 'bread-compact-wifi',
    flashSizeMb: 4,
    ...revisions,
  });

describe('a board with Secure Boot on', () => {
  it('refuses a merged image before any byte is written, and takes the app at its partition', {
    timeout: 60_000,
  }, async () => {
    const { flash, flasher, flashCommands, path } = await rig('esp32c3', { secureBoot: true });
    const chip = await flasher.connect();
    expect(chip.security).toEqual({
      secureBoot: true,
      flashEncryption: false,
      encryptedDownloadDisabled: false,
    });
    const before = flash.md5(0, 4 * MB);
    const fw = firmware('esp32c3');
    const error = await flasher
      .flash([{ offset: 0, data: fw.merged }], { baudRate: 921_600 })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'WRITE_REFUSED' });
    expect((error as Error).message).toBe(
      `refusing to flash ${path}: Secure Boot is enabled: the ROM refuses a bootloader written at 0x0..0x7fff (part 1 at 0x0 starts there); flash only the app and partition table at their offsets (or use espsecure)`,
    );
    expect(flashCommands()).toEqual([]);
    expect(flash.md5(0, 4 * MB)).toBe(before);

    const result = await flasher.flash([{ offset: fw.appOffset, data: fw.app }], {
      baudRate: 921_600,
      reset: false,
    });
    expect(result.parts[0]?.md5).toBe(md5(fw.app));
    expect(flash.md5(fw.appOffset, fw.app.length)).toBe(md5(fw.app));
    expect(flash.md5(0, 0x8000)).toBe(md5(new Uint8Array(0x8000).fill(0xff)));
  });

  it('reads it from eFuse alone on the ESP32, whose ROM has no GET_SECURITY_INFO, and refuses its bootloader at 0x1000', {
    timeout: 60_000,
  }, async () => {
    const { flasher, device, flashCommands } = await rig('esp32', { secureBoot: true });
    const chip = await flasher.connect();
    expect(chip).toMatchObject({ chip: 'esp32', revision: { major: 3, minor: 0 } });
    expect(chip.security.secureBoot).toBe(true);
    const fw = buildVirtualFirmware({
      chip: 'esp32',
      version: '2.6.0',
      board: 'bread-compact-wifi',
      flashSizeMb: 4,
    });
    const bootloader = fw.merged.subarray(0x1000, 0x8000);
    await expect(
      flasher.flash([{ offset: 0x1000, data: bootloader }], { baudRate: 921_600 }),
    ).rejects.toMatchObject({
      code: 'WRITE_REFUSED',
      message: /\(part 1 at 0x1000 starts there\)/,
    });
    expect(flashCommands()).toEqual([]);
    // Detected by its magic word: the one GET_SECURITY_INFO esptool-js sent was answered as unknown.
    expect(device.emulator?.history.filter((c) => c === 'GET_SECURITY_INFO')).toHaveLength(1);
  });

  it("starts the ESP32-S3's stub the way esptool works round its ROM, refuses the merged image, writes the app", {
    timeout: 60_000,
  }, async () => {
    const { flash, device, flasher, flashCommands } = await rig('esp32s3', { secureBoot: true });
    const chip = await flasher.connect();
    expect(chip.security.secureBoot).toBe(true);
    expect(device.emulator?.stage).toBe('stub');
    // MEM_END without an entry, the ROM's flash-read pointer moved, READ_FLASH_SLOW, put back.
    expect(device.emulator?.history).toEqual(
      expect.arrayContaining(['MEM_END', 'WRITE_REG', 'READ_FLASH_SLOW']),
    );
    const fw = firmware('esp32s3');
    await expect(
      flasher.flash([{ offset: 0, data: fw.merged }], { baudRate: 921_600 }),
    ).rejects.toMatchObject({ code: 'WRITE_REFUSED', message: /Secure Boot is enabled/ });
    expect(flashCommands()).toEqual([]);
    await flasher.flash([{ offset: fw.appOffset, data: fw.app }], {
      baudRate: 921_600,
      reset: false,
    });
    expect(flash.md5(fw.appOffset, fw.app.length)).toBe(md5(fw.app));
  });
});

describe('a board with flash encryption in release mode (encrypted download disabled)', () => {
  it('refuses any plaintext before a byte is written, and names why', {
    timeout: 60_000,
  }, async () => {
    const { flash, flasher, flashCommands } = await rig('esp32c3', { flashEncryption: true });
    const chip = await flasher.connect();
    expect(chip.security).toMatchObject({ flashEncryption: true, encryptedDownloadDisabled: true });
    const before = flash.md5(0, 4 * MB);
    const fw = firmware('esp32c3');
    for (const part of [
      { offset: 0, data: fw.merged },
      { offset: fw.appOffset, data: fw.app },
    ]) {
      await expect(flasher.flash([part], { baudRate: 921_600 })).rejects.toMatchObject({
        code: 'WRITE_REFUSED',
        message: expect.stringContaining(
          'flash encryption is on and encrypted download is disabled: a plaintext image would boot-loop',
        ),
      });
    }
    expect(flashCommands()).toEqual([]);
    expect(flash.md5(0, 4 * MB)).toBe(before);
  });
});

describe("an image for another chip revision than the board's", () => {
  it('is refused before a byte is written, naming both revisions; one that fits is written', {
    timeout: 60_000,
  }, async () => {
    // The virtual ESP32-S3 is a v0.2, as most boards' are.
    const { flash, flasher, flashCommands } = await rig('esp32s3');
    const chip = await flasher.connect();
    expect(chip.revision).toEqual({ major: 0, minor: 2 });
    const newer = firmware('esp32s3', { minChipRevFull: 3, maxChipRevFull: 0xffff });
    await expect(
      flasher.flash([{ offset: 0, data: newer.merged }], { baudRate: 921_600 }),
    ).rejects.toMatchObject({
      code: 'WRITE_REFUSED',
      message: expect.stringContaining(
        'the image needs chip revision >= v0.3, this chip is v0.2 (part 1 at 0x0, its bootloader at 0x0)',
      ),
    });
    // The app alone says the same from its own header.
    const older = firmware('esp32s3', { minChipRevFull: 0, maxChipRevFull: 1 });
    await expect(
      flasher.flash([{ offset: older.appOffset, data: older.app }], { baudRate: 921_600 }),
    ).rejects.toMatchObject({ message: /needs chip revision v0\.0 to v0\.1, this chip is v0\.2/ });
    expect(flashCommands()).toEqual([]);
    const fits = firmware('esp32s3', { minChipRevFull: 2, maxChipRevFull: 99 });
    await flasher.flash([{ offset: 0, data: fits.merged }], { baudRate: 921_600, reset: false });
    expect(flash.md5(0, fits.merged.length)).toBe(md5(fits.merged));
  });

  it('finds the app inside a merged image whose bootloader says nothing', {
    timeout: 60_000,
  }, async () => {
    const { flasher, flashCommands } = await rig('esp32c3', { revision: { major: 0, minor: 4 } });
    const fw = firmware('esp32c3');
    const strict = firmware('esp32c3', { minChipRevFull: 101, maxChipRevFull: 0xffff });
    // The merged image with the old bootloader and the new app: only the app's header speaks.
    const merged = fw.merged.slice();
    merged.set(strict.app, fw.appOffset);
    await expect(
      flasher.flash([{ offset: 0, data: merged }], { baudRate: 921_600 }),
    ).rejects.toMatchObject({
      code: 'WRITE_REFUSED',
      message:
        /needs chip revision >= v1\.1, this chip is v0\.4 \(part 1 at 0x0, ota_0 at 0x20000\)/,
    });
    expect(flashCommands()).toEqual([]);
  });
});
