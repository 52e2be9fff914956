import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { FirmwareError } from './errors.js';
import type { PartitionInput } from './partition-table.js';
import {
  findPartition,
  PARTITION_TABLE_MAX_SIZE,
  PARTITION_TABLE_OFFSET,
  parsePartitionCsv,
  readPartitionTable,
  writePartitionTable,
  XIAOZHI_PARTITIONS_4M,
  XIAOZHI_PARTITIONS_8M,
  XIAOZHI_PARTITIONS_16M,
} from './partition-table.js';

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

/** xiaozhi-esp32 partitions/v2/16m.csv as the firmware repository has it (ota_1 offset empty). */
const V2_16M_CSV = `# ESP-IDF Partition Table
# Name,   Type, SubType, Offset,  Size, Flags
nvs,      data, nvs,     0x9000,    0x4000,
otadata,  data, ota,     0xd000,    0x2000,
phy_init, data, phy,     0xf000,    0x1000,
ota_0,    app,  ota_0,   0x20000,   0x3f0000,
ota_1,    app,  ota_1,   ,          0x3f0000,
assets,   data, spiffs,  0x800000,  8M
`;

const V2_8M_CSV = `# Name,   Type, SubType, Offset,  Size, Flags
nvs,      data, nvs,     0x9000,    0x4000,
otadata,  data, ota,     0xd000,    0x2000,
phy_init, data, phy,     0xf000,    0x1000,
ota_0,    app,  ota_0,   0x20000,   0x2f0000,
ota_1,    app,  ota_1,   ,          0x2f0000,
assets,   data, spiffs,  0x600000,  2M
`;

const V2_4M_CSV = `nvs,      data, nvs,     0x9000,    16K,
otadata,  data, ota,     0xd000,    8K,
phy_init, data, phy,     0xf000,    4K,
factory,  app,  factory, 0x10000,   0x2f0000,
assets,   data, spiffs,  0x300000,  1M,
`;

const common = (name: string) => ({ flags: 0, typeName: 'data', subtypeName: name });

describe('real tables (fixtures/corpus/images)', () => {
  it('reads the v2 16 MB table exactly, MD5 valid', () => {
    const table = readPartitionTable(fixture('partitions-v2-16m.bin'));
    expect(table.partitions).toEqual([
      { label: 'nvs', type: 1, subtype: 2, offset: 0x9000, size: 0x4000, ...common('nvs') },
      { label: 'otadata', type: 1, subtype: 0, offset: 0xd000, size: 0x2000, ...common('ota') },
      { label: 'phy_init', type: 1, subtype: 1, offset: 0xf000, size: 0x1000, ...common('phy') },
      {
        label: 'ota_0',
        type: 0,
        subtype: 0x10,
        offset: 0x20000,
        size: 0x3f0000,
        flags: 0,
        typeName: 'app',
        subtypeName: 'ota_0',
      },
      {
        label: 'ota_1',
        type: 0,
        subtype: 0x11,
        offset: 0x410000,
        size: 0x3f0000,
        flags: 0,
        typeName: 'app',
        subtypeName: 'ota_1',
      },
      {
        label: 'assets',
        type: 1,
        subtype: 0x82,
        offset: 0x800000,
        size: 0x800000,
        ...common('spiffs'),
      },
    ]);
    expect(table.md5).toEqual({
      stored: 'b4c09b75dddcdf05493ca1d3cc627121',
      computed: 'b4c09b75dddcdf05493ca1d3cc627121',
      valid: true,
    });
  });

  it('reads the v2 4 MB table exactly, MD5 valid', () => {
    const table = readPartitionTable(fixture('partitions-v2-4m.bin'));
    expect(
      table.partitions.map((p) => [p.label, p.typeName, p.subtypeName, p.offset, p.size]),
    ).toEqual([
      ['nvs', 'data', 'nvs', 0x9000, 0x4000],
      ['otadata', 'data', 'ota', 0xd000, 0x2000],
      ['phy_init', 'data', 'phy', 0xf000, 0x1000],
      ['factory', 'app', 'factory', 0x10000, 0x2f0000],
      ['assets', 'data', 'spiffs', 0x300000, 0x100000],
    ]);
    expect(table.md5?.valid).toBe(true);
    expect(table.md5?.stored).toBe('9ea9cf725d43d40f8c3851cb86bd3750');
  });

  it('writes XIAOZHI_PARTITIONS_16M and _4M back byte for byte', () => {
    const bin16 = fixture('partitions-v2-16m.bin');
    const bin4 = fixture('partitions-v2-4m.bin');
    expect(bin16.length).toBe(PARTITION_TABLE_MAX_SIZE);
    expect(writePartitionTable(XIAOZHI_PARTITIONS_16M)).toEqual(bin16);
    expect(writePartitionTable(XIAOZHI_PARTITIONS_4M)).toEqual(bin4);
    // A table read back is itself valid input.
    expect(writePartitionTable(readPartitionTable(bin16).partitions)).toEqual(bin16);
    expect(writePartitionTable(readPartitionTable(bin4).partitions)).toEqual(bin4);
  });

  it('reads partitions_singleapp.bin (no MD5 entry, no padding) and writes it back with md5: false', () => {
    const bin = fixture('partitions_singleapp.bin');
    expect(bin.length).toBe(96);
    const table = readPartitionTable(bin);
    expect(table.md5).toBeUndefined();
    expect(
      table.partitions.map((p) => [p.label, p.typeName, p.subtypeName, p.offset, p.size]),
    ).toEqual([
      ['factory', 'app', 'factory', 0x10000, 0x100000],
      ['rfdata', 'data', 'phy', 0x110000, 0x40000],
      ['wifidata', 'data', 'nvs', 0x150000, 0x40000],
    ]);
    const written = writePartitionTable(table.partitions, { md5: false });
    expect(written.length).toBe(PARTITION_TABLE_MAX_SIZE);
    expect(written.subarray(0, bin.length)).toEqual(bin);
    expect(written.subarray(bin.length).every((b) => b === 0xff)).toBe(true);
    expect(readPartitionTable(written)).toEqual(table);
  });

  it('reads the table at 0x8000 of a whole flash image', () => {
    const flash = new Uint8Array(0x10000).fill(0xff);
    flash[0] = 0xe9;
    flash.set(fixture('partitions-v2-4m.bin'), PARTITION_TABLE_OFFSET);
    expect(readPartitionTable(flash)).toEqual(readPartitionTable(fixture('partitions-v2-4m.bin')));
  });
});

describe('parsePartitionCsv', () => {
  it('parses the firmware CSVs into the built-in tables and the fixture bytes', () => {
    expect(parsePartitionCsv(V2_16M_CSV)).toEqual(XIAOZHI_PARTITIONS_16M);
    expect(parsePartitionCsv(V2_8M_CSV)).toEqual(XIAOZHI_PARTITIONS_8M);
    expect(parsePartitionCsv(V2_4M_CSV)).toEqual(XIAOZHI_PARTITIONS_4M);
    expect(writePartitionTable(parsePartitionCsv(V2_16M_CSV))).toEqual(
      fixture('partitions-v2-16m.bin'),
    );
    expect(writePartitionTable(parsePartitionCsv(V2_4M_CSV))).toEqual(
      fixture('partitions-v2-4m.bin'),
    );
  });

  it('computes empty offsets with app 0x10000 and data 0x1000 alignment', () => {
    const csv = [
      '# comment',
      '',
      'nvs, data, nvs, , 0x6000',
      'phy_init, data, phy, , 4K',
      'factory, app, factory, , 1M',
      'storage, data, fat, , 100000',
      'spare, data, 0x40, , 0x1000, encrypted:readonly',
      'custom, 0x40, 0x01, , 8K',
      'ota_1, app, ota_1, , 1M',
    ].join('\r\n');
    expect(parsePartitionCsv(csv)).toEqual([
      { label: 'nvs', type: 'data', subtype: 'nvs', offset: 0x9000, size: 0x6000 },
      { label: 'phy_init', type: 'data', subtype: 'phy', offset: 0xf000, size: 0x1000 },
      { label: 'factory', type: 'app', subtype: 'factory', offset: 0x10000, size: 0x100000 },
      { label: 'storage', type: 'data', subtype: 'fat', offset: 0x110000, size: 100000 },
      // 0x110000 + 100000 = 0x1286a0, rounded up to the next 4 KB.
      { label: 'spare', type: 'data', subtype: 0x40, offset: 0x129000, size: 0x1000, flags: 3 },
      { label: 'custom', type: 0x40, subtype: 1, offset: 0x12a000, size: 0x2000 },
      { label: 'ota_1', type: 'app', subtype: 'ota_1', offset: 0x130000, size: 0x100000 },
    ]);
  });

  it('gives data partitions without subtype the "undefined" subtype and honours tableOffset', () => {
    const parts = parsePartitionCsv('blob, data, , , 4K', { tableOffset: 0xf000 });
    expect(parts).toEqual([
      { label: 'blob', type: 'data', subtype: 'undefined', offset: 0x10000, size: 0x1000 },
    ]);
    const table = readPartitionTable(writePartitionTable(parts, { tableOffset: 0xf000 }));
    expect(table.partitions[0]?.subtype).toBe(0x06);
    expect(table.partitions[0]?.subtypeName).toBe('undefined');
  });

  it('reports bad lines with their line number', () => {
    const cases: [string, RegExp][] = [
      ['nvs, data, nvs, 0x9000, 0x6000\nphy, data, phy, 0xa000, 0x1000', /line 2: .*overlaps/],
      ['nvs, data, nvs, 0x8000, 0x1000', /line 1: .*partition table/],
      ['nvs, data, nvs, 0x9000', /line 1: the size is empty/],
      ['app0, app, , 0x10000, 1M', /line 1: an app partition needs a subtype/],
      ['x, data, nope, , 4K', /line 1: unknown subtype "nope"/],
      ['x, weird, nvs, , 4K', /line 1: unknown partition type "weird"/],
      ['x, data, nvs, , 4K, secret', /line 1: unknown flag "secret"/],
      ['x, data, nvs, , 4G', /line 1: size "4G" is not a number/],
      ['factory, app, factory, 0x11000, 1M', /app offset 0x11000 is not aligned to 0x10000/],
    ];
    for (const [csv, message] of cases) {
      const error = errorOf(() => parsePartitionCsv(csv));
      expect(error.code).toBe('PARTITION_INVALID');
      expect(error.message).toMatch(message);
    }
  });
});

describe('writePartitionTable errors', () => {
  const base: PartitionInput[] = [
    { label: 'nvs', type: 'data', subtype: 'nvs', offset: 0x9000, size: 0x6000 },
    { label: 'factory', type: 'app', subtype: 'factory', offset: 0x10000, size: 0x100000 },
  ];
  const withPart = (part: PartitionInput): PartitionInput[] => [...base, part];

  it.each<[string, PartitionInput[], RegExp]>([
    [
      'overlapping partitions',
      withPart({ label: 'storage', type: 'data', subtype: 'fat', offset: 0x100000, size: 0x1000 }),
      /"storage" at 0x100000 overlaps "factory" \(0x10000-0x10ffff\)/,
    ],
    [
      'a misaligned app offset',
      withPart({ label: 'ota_0', type: 'app', subtype: 'ota_0', offset: 0x118000, size: 0x10000 }),
      /app offset 0x118000 is not aligned to 0x10000/,
    ],
    [
      'a misaligned data offset',
      withPart({ label: 'd', type: 'data', subtype: 'fat', offset: 0x110800, size: 0x1000 }),
      /data offset 0x110800 is not aligned to 0x1000/,
    ],
    [
      'a partition over the partition table',
      withPart({ label: 'low', type: 'data', subtype: 'fat', offset: 0x8000, size: 0x1000 }),
      /overlaps the bootloader or the partition table/,
    ],
    [
      'a duplicate label',
      withPart({ label: 'nvs', type: 'data', subtype: 'nvs', offset: 0x110000, size: 0x1000 }),
      /duplicate partition label "nvs"/,
    ],
    [
      'a label over 16 bytes',
      withPart({
        label: 'a-very-long-label',
        type: 'data',
        subtype: 'fat',
        offset: 0x110000,
        size: 0x1000,
      }),
      /label is 17 bytes/,
    ],
    [
      'an unknown subtype name',
      withPart({ label: 'x', type: 'app', subtype: 'spiffs', offset: 0x110000, size: 0x10000 }),
      /subtype "spiffs" is not a known name for type app/,
    ],
    [
      'an otadata that is not 8 KB',
      withPart({ label: 'otadata', type: 'data', subtype: 'ota', offset: 0x110000, size: 0x1000 }),
      /otadata partition "otadata" must be 0x2000 bytes/,
    ],
    [
      'a zero size',
      withPart({ label: 'z', type: 'data', subtype: 'fat', offset: 0x110000, size: 0 }),
      /size is 0/,
    ],
  ])('rejects %s with PARTITION_INVALID', (_name, partitions, message) => {
    const error = errorOf(() => writePartitionTable(partitions));
    expect(error.code).toBe('PARTITION_INVALID');
    expect(error.message).toMatch(message);
  });

  it('limits the number of entries so an end marker always fits', () => {
    const many = (count: number): PartitionInput[] =>
      Array.from({ length: count }, (_, i) => ({
        label: `p${i}`,
        type: 'data',
        subtype: 'fat',
        offset: 0x9000 + i * 0x1000,
        size: 0x1000,
      }));
    expect(readPartitionTable(writePartitionTable(many(94))).partitions).toHaveLength(94);
    expect(errorOf(() => writePartitionTable(many(95))).code).toBe('PARTITION_INVALID');
    expect(
      readPartitionTable(writePartitionTable(many(95), { md5: false })).partitions,
    ).toHaveLength(95);
  });
});

describe('readPartitionTable', () => {
  it('reports an MD5 mismatch as valid: false instead of throwing', () => {
    const bin = fixture('partitions-v2-16m.bin').slice();
    bin[8] = 0x50; // nvs size 0x4000 -> 0x4050
    const table = readPartitionTable(bin);
    expect(table.partitions[0]?.size).toBe(0x4050);
    expect(table.md5?.valid).toBe(false);
    expect(table.md5?.stored).toBe('b4c09b75dddcdf05493ca1d3cc627121');
    expect(table.md5?.computed).not.toBe(table.md5?.stored);
  });

  it('throws PARTITION_INVALID for a bad magic', () => {
    const noTable = new Uint8Array(0x9000).fill(0xff);
    expect(errorOf(() => readPartitionTable(noTable)).message).toMatch(/no partition table/);
    const bad = fixture('partitions-v2-4m.bin').slice();
    bad[0x40] = 0xab;
    const error = errorOf(() => readPartitionTable(bad));
    expect(error.code).toBe('PARTITION_INVALID');
    expect(error.message).toMatch(/bad partition entry magic ab50 at table offset 0x40/);
  });

  it('throws PARTITION_INVALID for a truncated entry', () => {
    const bin = fixture('partitions_singleapp.bin').subarray(0, 80);
    expect(errorOf(() => readPartitionTable(bin)).message).toMatch(/truncated/);
  });

  it('names unknown types and subtypes in hex, reads 16-byte labels and flags', () => {
    const bin = writePartitionTable([
      { label: 'sixteen-bytes-ab', type: 0x40, subtype: 0x07, offset: 0x9000, size: 0x1000 },
      { label: 'enc', type: 'data', subtype: 0x99, offset: 0xa000, size: 0x1000, flags: 3 },
    ]);
    const [first, second] = readPartitionTable(bin).partitions;
    expect(first).toMatchObject({
      label: 'sixteen-bytes-ab',
      typeName: '0x40',
      subtypeName: '0x07',
    });
    expect(second).toMatchObject({ typeName: 'data', subtypeName: '0x99', flags: 3 });
  });
});

describe('findPartition', () => {
  const table = readPartitionTable(fixture('partitions-v2-16m.bin'));

  it('finds by label, by type and subtype (names or numbers)', () => {
    expect(findPartition(table, { label: 'nvs' })?.offset).toBe(0x9000);
    expect(findPartition(table, { type: 'app' })?.label).toBe('ota_0');
    expect(findPartition(table, { type: 'app', subtype: 'ota_1' })?.offset).toBe(0x410000);
    expect(findPartition(table, { type: 0, subtype: 0x11 })?.label).toBe('ota_1');
    expect(findPartition(table, { type: 'data', subtype: 'spiffs' })?.label).toBe('assets');
    expect(findPartition(table, { type: 'data', subtype: 0x82 })?.label).toBe('assets');
    expect(findPartition(table, { type: 'data', subtype: 'ota' })?.label).toBe('otadata');
  });

  it('returns undefined when nothing matches', () => {
    expect(findPartition(table, { type: 'app', subtype: 'factory' })).toBeUndefined();
    expect(findPartition(table, { label: 'nvs', type: 'app' })).toBeUndefined();
    expect(findPartition(table, { label: 'model' })).toBeUndefined();
  });
});
