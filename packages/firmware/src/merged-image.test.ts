import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { buildAppImage, readAppImage } from './app-image.js';
import { CHIPS } from './chips.js';
import { FirmwareError } from './errors.js';
import { bootloaderOffset, mergeImages, readAppBoard, readMergedImage } from './merged-image.js';
import { PARTITION_TABLE_OFFSET, readPartitionTable } from './partition-table.js';
import { buildVirtualBootloader } from './virtual-firmware.js';

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

describe('bootloaderOffset', () => {
  it('follows docs/protocol.md §9a: 0x1000 for ESP32/S2, 0x2000 for P4, 0x0 otherwise (C5 included)', () => {
    const offsets = Object.fromEntries(CHIPS.map((c) => [c.name, bootloaderOffset(c.name)]));
    expect(offsets).toEqual({
      esp32: 0x1000,
      esp32s2: 0x1000,
      esp32c3: 0,
      esp32s3: 0,
      esp32c2: 0,
      esp32c6: 0,
      esp32h2: 0,
      esp32p4: 0x2000,
      esp32c61: 0,
      esp32c5: 0,
      esp32h21: 0,
      esp32h4: 0,
    });
  });

  it('throws CHIP_UNKNOWN for other names', () => {
    expect(errorOf(() => bootloaderOffset('esp8266')).code).toBe('CHIP_UNKNOWN');
  });
});

describe('mergeImages', () => {
  it('places parts at their offsets with 0xFF between, in any input order', () => {
    const merged = mergeImages([
      { offset: 0x20, data: Uint8Array.of(4, 5) },
      { offset: 0x2, data: Uint8Array.of(1, 2, 3) },
    ]);
    expect(merged.length).toBe(0x22);
    expect(Array.from(merged.subarray(0, 6))).toEqual([0xff, 0xff, 1, 2, 3, 0xff]);
    expect(allFf(merged.subarray(5, 0x20))).toBe(true);
    expect(Array.from(merged.subarray(0x20))).toEqual([4, 5]);
  });

  it('pads to size and accepts touching parts and empty parts', () => {
    const merged = mergeImages(
      [
        { offset: 0, data: Uint8Array.of(1, 2) },
        { offset: 2, data: Uint8Array.of(3) },
        { offset: 1, data: new Uint8Array(0) },
      ],
      { size: 0x100 },
    );
    expect(merged.length).toBe(0x100);
    expect(Array.from(merged.subarray(0, 4))).toEqual([1, 2, 3, 0xff]);
    expect(allFf(merged.subarray(3))).toBe(true);
    expect(mergeImages([])).toEqual(new Uint8Array(0));
  });

  it('rejects overlapping parts, parts past size and bad offsets with OPTION_INVALID', () => {
    const overlap = errorOf(() =>
      mergeImages([
        { offset: 0x1000, data: new Uint8Array(0x10) },
        { offset: 0x100f, data: new Uint8Array(1) },
      ]),
    );
    expect(overlap.code).toBe('OPTION_INVALID');
    expect(overlap.message).toBe('the part at 0x100f overlaps the part at 0x1000-0x100f');
    const tooBig = errorOf(() =>
      mergeImages([{ offset: 0xff, data: new Uint8Array(2) }], { size: 0x100 }),
    );
    expect(tooBig.message).toMatch(/past the size 0x100/);
    expect(errorOf(() => mergeImages([{ offset: -1, data: new Uint8Array(1) }])).code).toBe(
      'OPTION_INVALID',
    );
  });
});

describe('readMergedImage', () => {
  it('splits real parts merged like idf.py merge-bin (esp32c3, 4 MB table, factory app)', () => {
    const bootloader = fixture('bootloader_esp32c3.bin');
    const table = fixture('partitions-v2-4m.bin');
    const app = buildAppImage({ chip: 'esp32c3', version: '2.0.1', spiSize: 2 });
    const merged = mergeImages(
      [
        { offset: 0x10000, data: app },
        { offset: 0x0, data: bootloader },
        { offset: PARTITION_TABLE_OFFSET, data: table },
      ],
      { size: 0x400000 },
    );
    const parts = readMergedImage(merged);
    expect(parts.chip).toBe('esp32c3');
    expect(parts.size).toBe(0x400000);
    expect(parts.bootloader?.offset).toBe(0);
    expect(parts.bootloader?.image).toEqual(readAppImage(bootloader));
    expect(parts.bootloader?.image.hash?.valid).toBe(true);
    expect(parts.partitionTable).toEqual(readPartitionTable(table));
    expect(parts.apps).toHaveLength(1);
    const [first] = parts.apps;
    expect(first?.partition.label).toBe('factory');
    expect(first?.image.appDescription?.version).toBe('2.0.1');
    expect(first?.image.checksum.valid).toBe(true);
    expect(first?.image.hash?.valid).toBe(true);
    expect(first?.board).toBeUndefined();

    // Split back: each part's bytes come out unchanged.
    const size = parts.bootloader?.image.size ?? 0;
    expect(merged.subarray(0, size)).toEqual(bootloader);
    expect(merged.subarray(PARTITION_TABLE_OFFSET, PARTITION_TABLE_OFFSET + table.length)).toEqual(
      table,
    );
    expect(merged.subarray(0x10000, 0x10000 + (first?.image.size ?? 0))).toEqual(app);
  });

  it('finds the ESP32 bootloader at 0x1000 and skips app slots with no image', () => {
    const bootloader = fixture('bootloader_esp32.bin');
    const app = buildAppImage({ chip: 'esp32', version: 'v1' });
    const merged = mergeImages([
      { offset: 0x1000, data: bootloader },
      { offset: PARTITION_TABLE_OFFSET, data: fixture('partitions-v2-16m.bin') },
      { offset: 0x20000, data: app },
    ]);
    const parts = readMergedImage(merged);
    expect(parts.bootloader?.offset).toBe(0x1000);
    expect(parts.bootloader?.image.chip).toBe('esp32');
    expect(parts.bootloader?.image.checksum.valid).toBe(true);
    expect(parts.chip).toBe('esp32');
    // ota_1 (0x410000) lies past the end of this image.
    expect(parts.apps.map((a) => a.partition.label)).toEqual(['ota_0']);
    expect(parts.size).toBe(0x20000 + app.length);
  });

  it('reads every app slot that holds an image', () => {
    const app0 = buildAppImage({ chip: 'esp32s3', version: 'slot-0' });
    const app1 = buildAppImage({ chip: 'esp32s3', version: 'slot-1' });
    const merged = mergeImages([
      { offset: 0, data: buildVirtualBootloader('esp32s3') },
      { offset: PARTITION_TABLE_OFFSET, data: fixture('partitions-v2-16m.bin') },
      { offset: 0x20000, data: app0 },
      { offset: 0x410000, data: app1 },
    ]);
    const parts = readMergedImage(merged);
    expect(parts.apps.map((a) => [a.partition.label, a.image.appDescription?.version])).toEqual([
      ['ota_0', 'slot-0'],
      ['ota_1', 'slot-1'],
    ]);
  });

  it('prefers the offset the bootloader chip calls for', () => {
    // An ESP32 image at 0x0 (where an ESP32 bootloader never sits) and an ESP32-P4 one at 0x2000.
    const merged = mergeImages([
      { offset: 0x0, data: buildVirtualBootloader('esp32') },
      { offset: 0x2000, data: buildVirtualBootloader('esp32p4') },
    ]);
    const parts = readMergedImage(merged);
    expect(parts.bootloader?.offset).toBe(0x2000);
    expect(parts.chip).toBe('esp32p4');
    // With nothing at the right place, the image found is still reported.
    const misplaced = readMergedImage(
      mergeImages([{ offset: 0x1000, data: fixture('bootloader_esp32c3.bin') }]),
    );
    expect(misplaced.bootloader?.offset).toBe(0x1000);
    expect(misplaced.chip).toBe('esp32c3');
  });

  it('does not take an app image for a bootloader, and reports a damaged table MD5', () => {
    const app = buildAppImage({ chip: 'esp32s3', version: '1.0.0' });
    const bare = readMergedImage(app);
    expect(bare.bootloader).toBeUndefined();
    expect(bare.partitionTable).toBeUndefined();
    expect(bare.apps).toEqual([]);
    // A stray 0xE9 at 0x1000 inside that app (chip id 0 = esp32 follows) is not a bootloader.
    const padded = buildAppImage({ chip: 'esp32s3', version: '1.0.0', padTo: 0x4000 }).slice();
    padded[0x1000] = 0xe9;
    padded[0x1001] = 1;
    expect(readMergedImage(padded).bootloader).toBeUndefined();

    const table = fixture('partitions-v2-16m.bin').slice();
    table[0x20 + 12] = 0x4f; // otadata -> Otadata
    const parts = readMergedImage(mergeImages([{ offset: PARTITION_TABLE_OFFSET, data: table }]));
    expect(parts.partitionTable?.md5?.valid).toBe(false);
    expect(parts.partitionTable?.partitions[1]?.label).toBe('Otadata');
  });
});

describe('readAppBoard', () => {
  it('finds the marker in segment data; an empty name is none', () => {
    const withBoard = buildAppImage({
      chip: 'esp32s3',
      version: '1',
      segments: [
        { loadAddress: 0x3fc90000, data: new TextEncoder().encode('x\0XIAOZHI_BOARD=atoms3r\0') },
      ],
    });
    expect(readAppBoard(withBoard)).toBe('atoms3r');
    expect(readAppBoard(fixture('esp_idf_blink_esp32s2.bin'))).toBeUndefined();
    // An empty name is no name.
    const empty = buildAppImage({
      chip: 'esp32s3',
      version: '1',
      segments: [{ loadAddress: 0x3fc90000, data: new TextEncoder().encode('XIAOZHI_BOARD=\0') }],
    });
    expect(readAppBoard(empty)).toBeUndefined();
  });
});
