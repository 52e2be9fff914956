import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { readAppImage, verifyAppImage } from './app-image.js';
import type { ChipName } from './chips.js';
import { CHIPS } from './chips.js';
import { FirmwareError } from './errors.js';
import { bootloaderOffset, readMergedImage } from './merged-image.js';
import { PARTITION_TABLE_OFFSET, readPartitionTable } from './partition-table.js';
import type { VirtualFirmwareOptions } from './virtual-firmware.js';
import {
  buildVirtualBootloader,
  buildVirtualFirmware,
  readVirtualFirmwareBoard,
} from './virtual-firmware.js';

const here = dirname(fileURLToPath(import.meta.url));
const imagesDir = resolve(here, '../../../fixtures/corpus/images');
const fixture = (name: string): Uint8Array => new Uint8Array(readFileSync(join(imagesDir, name)));

function errorOf(run: () => unknown): FirmwareError {
  try {
    run();
  } catch (error) {
    if (error instanceof FirmwareError) return error;
    throw error;
  }
  throw new Error('expected a FirmwareError');
}

const allFf = (bytes: Uint8Array): boolean => bytes.every((b) => b === 0xff);

/** Reads a virtual release back through the public readers and checks every integrity field. */
function readBack(firmware: ReturnType<typeof buildVirtualFirmware>) {
  const parts = readMergedImage(firmware.merged);
  const bootloader = parts.bootloader;
  const app = parts.apps[0];
  if (bootloader === undefined || app === undefined || parts.partitionTable === undefined) {
    throw new Error('incomplete merged image');
  }
  expect(bootloader.image.checksum.valid).toBe(true);
  expect(bootloader.image.appDescription).toBeUndefined();
  if (bootloader.image.header.hashAppended) expect(bootloader.image.hash?.valid).toBe(true);
  expect(parts.partitionTable.md5?.valid).toBe(true);
  expect(app.image.checksum.valid).toBe(true);
  expect(app.image.hash?.valid).toBe(true);
  expect(() => verifyAppImage(firmware.app)).not.toThrow();
  return { parts, bootloader, app };
}

describe('buildVirtualFirmware', () => {
  it('builds an esp32s3 16 MB release readable in full', () => {
    const firmware = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '2.0.3',
      board: 'bread-compact-wifi',
    });
    const { parts, bootloader, app } = readBack(firmware);
    expect(firmware.chip).toBe('esp32s3');
    expect(firmware.board).toBe('bread-compact-wifi');
    expect(firmware.version).toBe('2.0.3');
    expect(firmware.appOffset).toBe(0x20000);
    expect(parts.chip).toBe('esp32s3');
    expect(bootloader.offset).toBe(0);
    expect(bootloader.image.chip).toBe('esp32s3');
    expect(bootloader.image.header.hashAppended).toBe(true);
    expect(bootloader.image.header.spiSize).toBe(4);
    // The table is the firmware's own v2 16 MB table, byte for byte.
    expect(firmware.partitionTable).toEqual(fixture('partitions-v2-16m.bin'));
    expect(app.partition.label).toBe('ota_0');
    expect(app.partition.offset).toBe(0x20000);
    expect(app.board).toBe('bread-compact-wifi');
    expect(app.image.chip).toBe('esp32s3');
    expect(app.image.appDescription).toMatchObject({
      projectName: 'xiaozhi',
      version: '2.0.3',
      idfVersion: 'v5.5',
      mmuPageSizeLog2: 16,
    });
    expect(app.image.size).toBe(firmware.app.length);
    // Without padding the image ends right after the app.
    expect(firmware.merged.length).toBe(0x20000 + firmware.app.length);
    expect(firmware.merged.subarray(0x20000)).toEqual(firmware.app);
    expect(firmware.merged.subarray(0, firmware.bootloader.length)).toEqual(firmware.bootloader);
    expect(
      firmware.merged.subarray(PARTITION_TABLE_OFFSET, PARTITION_TABLE_OFFSET + 0xc00),
    ).toEqual(firmware.partitionTable);
    expect(
      allFf(firmware.merged.subarray(firmware.bootloader.length, PARTITION_TABLE_OFFSET)),
    ).toBe(true);
    expect(readVirtualFirmwareBoard(firmware.app)).toBe('bread-compact-wifi');
    expect(readVirtualFirmwareBoard(firmware.merged)).toBe('bread-compact-wifi');
    expect(readVirtualFirmwareBoard(firmware.app, readAppImage(firmware.app))).toBe(
      'bread-compact-wifi',
    );
  });

  it('builds an esp32c3 4 MB release: factory app at 0x10000, no OTA slots, padded to 4 MB', () => {
    const firmware = buildVirtualFirmware({
      chip: 'esp32c3',
      version: '1.9.0-rc1',
      board: 'xmini-c3',
      flashSizeMb: 4,
      padToFlashSize: true,
      projectName: 'xiaozhi-c3',
      idfVersion: 'v5.4.2',
    });
    const { parts, app } = readBack(firmware);
    expect(firmware.appOffset).toBe(0x10000);
    expect(firmware.partitionTable).toEqual(fixture('partitions-v2-4m.bin'));
    expect(firmware.merged.length).toBe(4 * 1024 * 1024);
    expect(allFf(firmware.merged.subarray(0x10000 + firmware.app.length))).toBe(true);
    expect(parts.chip).toBe('esp32c3');
    expect(parts.partitionTable?.partitions.filter((p) => p.type === 0)).toHaveLength(1);
    expect(app.partition.subtypeName).toBe('factory');
    expect(app.board).toBe('xmini-c3');
    expect(app.image.appDescription).toMatchObject({
      projectName: 'xiaozhi-c3',
      version: '1.9.0-rc1',
      idfVersion: 'v5.4.2',
    });
    expect(app.image.header.spiSize).toBe(2);
  });

  it('puts the esp32 bootloader at 0x1000, without an appended hash', () => {
    const firmware = buildVirtualFirmware({ chip: 'esp32', version: '1.0.0', board: 'esp-box' });
    const { parts, bootloader, app } = readBack(firmware);
    expect(bootloader.offset).toBe(0x1000);
    expect(bootloader.image.header.hashAppended).toBe(false);
    expect(bootloader.image.hash).toBeUndefined();
    expect(allFf(firmware.merged.subarray(0, 0x1000))).toBe(true);
    expect(parts.chip).toBe('esp32');
    expect(app.image.chip).toBe('esp32');
    expect(app.board).toBe('esp-box');
  });

  it('builds an 8 MB release with the v2 8 MB table', () => {
    const firmware = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '1',
      board: 'b',
      flashSizeMb: 8,
      padToFlashSize: true,
    });
    const { parts } = readBack(firmware);
    expect(firmware.merged.length).toBe(8 * 1024 * 1024);
    expect(parts.partitionTable?.partitions.map((p) => [p.label, p.offset])).toEqual([
      ['nvs', 0x9000],
      ['otadata', 0xd000],
      ['phy_init', 0xf000],
      ['ota_0', 0x20000],
      ['ota_1', 0x310000],
      ['assets', 0x600000],
    ]);
  });

  it('builds every chip with its bootloader at its offset', () => {
    for (const { name } of CHIPS) {
      const firmware = buildVirtualFirmware({ chip: name, version: '0.1', board: `board-${name}` });
      const { parts, bootloader, app } = readBack(firmware);
      expect(bootloader.offset).toBe(bootloaderOffset(name));
      expect(parts.chip).toBe(name);
      expect(app.image.chip).toBe(name);
      expect(app.board).toBe(`board-${name}`);
    }
  });

  it('is deterministic, and the ELF hash stand-in follows the board', () => {
    const options: VirtualFirmwareOptions = { chip: 'esp32s3', version: '1.0.0', board: 'a' };
    expect(buildVirtualFirmware(options)).toEqual(buildVirtualFirmware(options));
    const a = readAppImage(buildVirtualFirmware(options).app).appDescription?.elfSha256;
    const b = readAppImage(buildVirtualFirmware({ ...options, board: 'b' }).app).appDescription
      ?.elfSha256;
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(a).not.toBe(b);
  });

  it('rejects bad options', () => {
    const base: VirtualFirmwareOptions = { chip: 'esp32s3', version: '1.0.0', board: 'ok' };
    for (const board of ['', 'has space', 'x'.repeat(65), 'nul\0']) {
      expect(errorOf(() => buildVirtualFirmware({ ...base, board })).code).toBe('OPTION_INVALID');
    }
    expect(errorOf(() => buildVirtualFirmware({ ...base, version: 'v'.repeat(32) })).code).toBe(
      'OPTION_INVALID',
    );
    const flashSizeMb = 32 as VirtualFirmwareOptions['flashSizeMb'];
    expect(errorOf(() => buildVirtualFirmware({ ...base, flashSizeMb })).message).toMatch(
      /flashSizeMb must be 4, 8 or 16/,
    );
    const chip = 'esp8266' as ChipName;
    expect(errorOf(() => buildVirtualFirmware({ ...base, chip })).code).toBe('CHIP_UNKNOWN');
  });
});

describe('buildVirtualBootloader', () => {
  it('is a valid bootloader image like the corpus ones: no app description, a few segments', () => {
    for (const { name } of CHIPS) {
      const image = readAppImage(buildVirtualBootloader(name));
      expect(image.chip).toBe(name);
      expect(image.appDescription).toBeUndefined();
      expect(image.segments).toHaveLength(3);
      expect(image.checksum.valid).toBe(true);
      expect(image.hash?.valid ?? name === 'esp32').toBe(true);
    }
  });
});

describe('readVirtualFirmwareBoard', () => {
  it('returns undefined for images without the marker', () => {
    expect(readVirtualFirmwareBoard(fixture('esp_idf_blink_esp32s2.bin'))).toBeUndefined();
    expect(readVirtualFirmwareBoard(fixture('bootloader_esp32c3.bin'))).toBeUndefined();
    expect(readVirtualFirmwareBoard(fixture('partitions-v2-16m.bin'))).toBeUndefined();
  });
});

describe('property: any version and board survive the round trip', () => {
  const printable = Array.from({ length: 0x7f - 0x20 }, (_, i) => String.fromCharCode(0x20 + i));
  const boardChars = printable.filter((c) => c !== ' ');
  it('reads back chip, version, board and valid integrity fields', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 31, unit: fc.constantFrom(...printable) }),
        fc.string({ minLength: 1, maxLength: 64, unit: fc.constantFrom(...boardChars) }),
        fc.constantFrom(...CHIPS.map((c) => c.name)),
        fc.constantFrom<4 | 8 | 16>(4, 8, 16),
        (version, board, chip, flashSizeMb) => {
          const firmware = buildVirtualFirmware({ chip, version, board, flashSizeMb });
          const { parts, app } = readBack(firmware);
          expect(parts.chip).toBe(chip);
          expect(app.image.appDescription?.version).toBe(version);
          expect(app.board).toBe(board);
          expect(readVirtualFirmwareBoard(firmware.app)).toBe(board);
          expect(app.partition.offset).toBe(flashSizeMb === 4 ? 0x10000 : 0x20000);
          expect(readPartitionTable(firmware.merged).md5?.valid).toBe(true);
        },
      ),
      { numRuns: 60 },
    );
  });
});
