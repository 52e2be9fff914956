import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { crc32 } from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FirmwareError } from './errors.js';
import type { NvsEntry } from './nvs.js';
import {
  inspectNvsPartition,
  NVS_MAX_BLOB_SIZE,
  NVS_PAGE_SIZE,
  readNvsPartition,
  writeNvsPartition,
} from './nvs.js';
import { parseNvsCsv } from './nvs-csv.js';

const here = dirname(fileURLToPath(import.meta.url));
const nvsDir = resolve(here, '../../../fixtures/corpus/nvs');
const fixture = (name: string): Uint8Array => new Uint8Array(readFileSync(join(nvsDir, name)));
const csvFixture = (name: string): NvsEntry[] =>
  parseNvsCsv(readFileSync(join(nvsDir, name), 'utf8'));

function codeOf(run: () => unknown): string | undefined {
  try {
    run();
  } catch (error) {
    if (error instanceof FirmwareError) return error.code;
    throw error;
  }
  return undefined;
}

function messageOf(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    if (error instanceof Error) return error.message;
  }
  return '';
}

const ENTRY_FIELDS: [number, string][] = [
  [0, 'namespace index'],
  [1, 'type'],
  [2, 'span'],
  [3, 'chunk index'],
  [4, 'crc32'],
  [8, 'key'],
  [24, 'data'],
];

/** Where two partitions first differ, as page / header field / bitmap / entry field. */
function firstDifference(got: Uint8Array, want: Uint8Array): string | undefined {
  if (got.length !== want.length) return `length ${got.length}, want ${want.length}`;
  const at = got.findIndex((byte, i) => byte !== want[i]);
  if (at === -1) return undefined;
  const page = Math.floor(at / NVS_PAGE_SIZE);
  const offset = at % NVS_PAGE_SIZE;
  let where: string;
  if (offset < 32) {
    const field =
      offset < 4 ? 'state' : offset < 8 ? 'sequence' : offset < 28 ? 'version/reserved' : 'crc32';
    where = `header ${field}`;
  } else if (offset < 64) {
    where = `state bitmap (entries ${(offset - 32) * 4}..${(offset - 32) * 4 + 3})`;
  } else {
    const entry = Math.floor((offset - 64) / 32);
    const inEntry = (offset - 64) % 32;
    const field = [...ENTRY_FIELDS].reverse().find(([start]) => inEntry >= start)?.[1] ?? '?';
    where = `entry ${entry} byte ${inEntry} (${field} if a header)`;
  }
  const hex = (b: number | undefined): string => `0x${(b ?? 0).toString(16).padStart(2, '0')}`;
  return `offset 0x${at.toString(16)}: page ${page} ${where}: got ${hex(got[at])}, want ${hex(want[at])}`;
}

function entryBytes(bytes: Uint8Array, page: number, entry: number): Uint8Array {
  const at = page * NVS_PAGE_SIZE + 64 + entry * 32;
  return bytes.subarray(at, at + 32);
}

function u32(bytes: Uint8Array, at: number): number {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(at, true);
}

function entryState(bytes: Uint8Array, page: number, entry: number): number {
  const byte = bytes[page * NVS_PAGE_SIZE + 32 + (entry >> 2)] ?? 0;
  return (byte >> ((entry & 3) * 2)) & 3;
}

/** Recomputes an entry's header CRC, as a deliberate (valid) edit would. */
function fixEntryCrc(bytes: Uint8Array, page: number, entry: number): void {
  const item = entryBytes(bytes, page, entry);
  const covered = new Uint8Array([...item.subarray(0, 4), ...item.subarray(8, 32)]);
  new DataView(item.buffer, item.byteOffset, 32).setUint32(4, crc32(covered, 0xffffffff), true);
}

const ns = (namespace: string, list: Omit<NvsEntry, 'namespace'>[]): NvsEntry[] =>
  list.map((entry) => ({ namespace, ...entry }));

describe('writeNvsPartition matches nvs_partition_gen.py', () => {
  it.each([
    ['provision.csv', 'provision-16k.bin'],
    ['multipage.csv', 'multipage-24k.bin'],
  ])('%s -> %s byte for byte', (csv, bin) => {
    const want = fixture(bin);
    const got = writeNvsPartition(csvFixture(csv), want.length);
    expect(firstDifference(got, want)).toBeUndefined();
    expect(Buffer.from(got).equals(Buffer.from(want))).toBe(true);
  });

  it('lays out page 0 of the provisioning partition as the generator does', () => {
    const bytes = writeNvsPartition(csvFixture('provision.csv'), 0x4000);
    // Header: ACTIVE, sequence 0, version 0xFE, 0xFF filler, CRC32 of bytes 4..27 seeded 0xFFFFFFFF.
    expect(u32(bytes, 0)).toBe(0xfffffffe);
    expect(u32(bytes, 4)).toBe(0);
    expect(bytes[8]).toBe(0xfe);
    expect(bytes.subarray(9, 28).every((b) => b === 0xff)).toBe(true);
    expect(u32(bytes, 28)).toBe(crc32(bytes.subarray(4, 28), 0xffffffff));
    // 14 written entries: 0b10 pairs, the rest 0b11.
    for (let i = 0; i < 126; i++) expect(entryState(bytes, 0, i)).toBe(i < 14 ? 0b10 : 0b11);
    // Namespace entry: ns 0, U8, span 1, chunk 0xFF, key "wifi" zero padded, value 1 then 0xFF.
    const wifi = entryBytes(bytes, 0, 0);
    expect([...wifi.subarray(0, 4)]).toEqual([0, 0x01, 1, 0xff]);
    expect(Buffer.from(wifi.subarray(8, 24)).toString('latin1')).toBe(`wifi${'\0'.repeat(12)}`);
    expect([...wifi.subarray(24)]).toEqual([1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    // String "rig-lab": SZ, span 2, size 8 (with NUL), 0xFFFF, data CRC; payload padded with 0xFF.
    const ssid = entryBytes(bytes, 0, 1);
    expect([...ssid.subarray(0, 4)]).toEqual([1, 0x21, 2, 0xff]);
    expect([...ssid.subarray(24, 28)]).toEqual([8, 0, 0xff, 0xff]);
    expect(u32(ssid, 28)).toBe(crc32(Buffer.from('rig-lab\0'), 0xffffffff));
    expect(Buffer.from(entryBytes(bytes, 0, 2)).toString('latin1')).toBe(
      `rig-lab\0${'\xff'.repeat(24)}`,
    );
    // i32 70: little-endian in the first 4 data bytes, 0xFF after.
    const volume = entryBytes(bytes, 0, 13);
    expect([...volume.subarray(0, 4)]).toEqual([3, 0x14, 1, 0xff]);
    expect([...volume.subarray(24)]).toEqual([70, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    // Pages after the last used one, and the reserved last page, stay erased.
    expect(bytes.subarray(NVS_PAGE_SIZE).every((b) => b === 0xff)).toBe(true);
  });

  it('moves a string that would reach the last entry to a new page and marks the old one FULL', () => {
    const bytes = fixture('multipage-24k.bin');
    const info = inspectNvsPartition(bytes);
    expect(info.pages.map((p) => p.state)).toEqual([
      'full',
      'active',
      'empty',
      'empty',
      'empty',
      'empty',
    ]);
    expect(info.pages.map((p) => p.sequence)).toEqual([
      0,
      1,
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
    // 86 entries + 49 for the 1533-byte download_url would be >= 126: it starts page 1.
    expect(info.pages[0]?.entriesUsed).toBe(86);
    expect(Buffer.from(entryBytes(bytes, 1, 0).subarray(8, 20)).toString()).toBe('download_url');
    expect(entryBytes(bytes, 1, 0)[2]).toBe(49);
  });
});

describe('readNvsPartition', () => {
  it.each([
    ['provision.csv', 'provision-16k.bin'],
    ['multipage.csv', 'multipage-24k.bin'],
  ])('reads %s back from %s', (csv, bin) => {
    expect(readNvsPartition(fixture(bin))).toEqual(csvFixture(csv));
    expect(inspectNvsPartition(fixture(bin)).errors).toEqual([]);
  });

  it('reads the provisioning values with their types', () => {
    expect(readNvsPartition(fixture('provision-16k.bin'))).toEqual([
      { namespace: 'wifi', key: 'ssid', type: 'string', value: 'rig-lab' },
      { namespace: 'wifi', key: 'password', type: 'string', value: 's3cret-pass-123' },
      {
        namespace: 'wifi',
        key: 'ota_url',
        type: 'string',
        value: 'http://192.168.1.50:8003/xiaozhi/ota/',
      },
      {
        namespace: 'board',
        key: 'uuid',
        type: 'string',
        value: '4b0d6c2e-8a47-4f0e-9a53-2d3f1c9b7e11',
      },
      { namespace: 'audio', key: 'output_volume', type: 'i32', value: 70 },
    ]);
  });

  it('orders pages by sequence number, not position', () => {
    const bytes = fixture('multipage-24k.bin').slice();
    const page0 = bytes.slice(0, NVS_PAGE_SIZE);
    bytes.copyWithin(0, NVS_PAGE_SIZE, 2 * NVS_PAGE_SIZE);
    bytes.set(page0, NVS_PAGE_SIZE);
    expect(readNvsPartition(bytes)).toEqual(csvFixture('multipage.csv'));
  });

  it('skips erased entries', () => {
    const bytes = fixture('provision-16k.bin').slice();
    // Entry 13 (output_volume) erased: its bitmap pair goes 0b10 -> 0b00.
    const at = 32 + (13 >> 2);
    bytes[at] = (bytes[at] ?? 0) & ~(0b11 << ((13 & 3) * 2));
    expect(readNvsPartition(bytes).map((e) => e.key)).toEqual([
      'ssid',
      'password',
      'ota_url',
      'uuid',
    ]);
    expect(inspectNvsPartition(bytes).errors).toEqual([]);
  });

  it('throws NVS_CORRUPT for a length that is not whole pages', () => {
    expect(codeOf(() => readNvsPartition(new Uint8Array(100)))).toBe('NVS_CORRUPT');
    expect(codeOf(() => readNvsPartition(new Uint8Array(0)))).toBe('NVS_CORRUPT');
    expect(inspectNvsPartition(new Uint8Array(NVS_PAGE_SIZE + 5).fill(0xff)).errors[0]).toMatch(
      /not a multiple of 4096/,
    );
  });
});

describe('round trips', () => {
  const every: NvsEntry[] = [
    ...ns('ints', [
      { key: 'u8min', type: 'u8', value: 0 },
      { key: 'u8max', type: 'u8', value: 255 },
      { key: 'i8min', type: 'i8', value: -128 },
      { key: 'i8max', type: 'i8', value: 127 },
      { key: 'u16max', type: 'u16', value: 65535 },
      { key: 'i16min', type: 'i16', value: -32768 },
      { key: 'u32max', type: 'u32', value: 4294967295 },
      { key: 'i32min', type: 'i32', value: -2147483648 },
      { key: 'u64max', type: 'u64', value: 18446744073709551615n },
      { key: 'i64min', type: 'i64', value: -9223372036854775808n },
      { key: 'i64max', type: 'i64', value: 9223372036854775807n },
    ]),
    ...ns('strings', [
      { key: 'empty', type: 'string', value: '' },
      { key: 's31', type: 'string', value: 'a'.repeat(31) },
      { key: 's32', type: 'string', value: 'b'.repeat(32) },
      { key: 's33', type: 'string', value: 'c'.repeat(33) },
      { key: 'unicode', type: 'string', value: 'héllo wörld ✓ 小智' },
      { key: 'long', type: 'string', value: 'x'.repeat(3000) },
    ]),
    ...ns('blobs', [
      { key: 'empty', type: 'blob', value: new Uint8Array() },
      { key: 'small', type: 'blob', value: new Uint8Array([0, 1, 2, 0xff, 0]) },
      {
        key: 'big',
        type: 'blob',
        value: Uint8Array.from({ length: 9000 }, (_, i) => (i * 7) & 0xff),
      },
    ]),
  ];

  it('keeps every type, strings spanning entries and blobs spanning pages', () => {
    const bytes = writeNvsPartition(every, 0x8000);
    expect(readNvsPartition(bytes)).toEqual(every);
    expect(inspectNvsPartition(bytes).errors).toEqual([]);
  });

  it('splits a blob into BLOB_DATA chunks that fill each page, then a BLOB_IDX', () => {
    const value = Uint8Array.from({ length: 9000 }, (_, i) => i & 0xff);
    const bytes = writeNvsPartition([{ namespace: 'n', key: 'blob', type: 'blob', value }], 0x5000);
    // Page 0: namespace entry, chunk 0 header (span 125: 124 data entries = 3968 bytes).
    const chunk0 = entryBytes(bytes, 0, 1);
    expect([...chunk0.subarray(0, 4)]).toEqual([1, 0x42, 125, 0]);
    expect(u32(chunk0, 24) & 0xffff).toBe(3968);
    const chunk1 = entryBytes(bytes, 1, 0);
    expect([...chunk1.subarray(0, 4)]).toEqual([1, 0x42, 126, 1]);
    const chunk2 = entryBytes(bytes, 2, 0);
    // The last 1032 bytes: 33 data entries.
    expect([...chunk2.subarray(0, 4)]).toEqual([1, 0x42, 34, 2]);
    const index = entryBytes(bytes, 2, chunk2[2] ?? 0);
    expect([...index.subarray(0, 4)]).toEqual([1, 0x48, 1, 0xff]);
    expect(u32(index, 24)).toBe(9000);
    expect([...index.subarray(28)]).toEqual([3, 0, 0xff, 0xff]);
    expect(inspectNvsPartition(bytes).pages.map((p) => p.state)).toEqual([
      'full',
      'full',
      'active',
      'empty',
      'empty',
    ]);
    expect(readNvsPartition(bytes)).toEqual([{ namespace: 'n', key: 'blob', type: 'blob', value }]);
  });

  it('writes an empty chunk when a blob starts at the last entry of a page', () => {
    // Namespace + 124 u8 entries leave exactly one free entry on page 0.
    const filler = Array.from({ length: 124 }, (_, i) => ({
      key: `k${i}`,
      type: 'u8' as const,
      value: i,
    }));
    const entries = [
      ...ns('n', filler),
      { namespace: 'n', key: 'blob', type: 'blob' as const, value: new Uint8Array([1, 2, 3]) },
    ];
    const bytes = writeNvsPartition(entries, 0x3000);
    expect([...entryBytes(bytes, 0, 125).subarray(0, 4)]).toEqual([1, 0x42, 1, 0]);
    expect([...entryBytes(bytes, 1, 0).subarray(0, 4)]).toEqual([1, 0x42, 2, 1]);
    expect(readNvsPartition(bytes)).toEqual(entries);
  });

  it('fills a whole page with a 4000-byte string (3999 characters and the NUL)', () => {
    const entries: NvsEntry[] = [
      { namespace: 'n', key: 'a', type: 'u8', value: 1 },
      { namespace: 'n', key: 'max', type: 'string', value: 'm'.repeat(3999) },
    ];
    const bytes = writeNvsPartition(entries, 0x3000);
    expect(entryBytes(bytes, 1, 0)[2]).toBe(126);
    expect(inspectNvsPartition(bytes).pages[1]?.entriesUsed).toBe(126);
    expect(readNvsPartition(bytes)).toEqual(entries);
  });

  it('reuses a namespace index when a namespace comes back', () => {
    const entries: NvsEntry[] = [
      { namespace: 'a', key: 'x', type: 'u8', value: 1 },
      { namespace: 'b', key: 'x', type: 'u8', value: 2 },
      { namespace: 'a', key: 'y', type: 'u8', value: 3 },
    ];
    const bytes = writeNvsPartition(entries, 0x3000);
    expect(inspectNvsPartition(bytes).pages[0]?.entriesUsed).toBe(5);
    expect(entryBytes(bytes, 0, 4)[0]).toBe(1);
    expect(readNvsPartition(bytes)).toEqual(entries);
  });

  it('round-trips random entry sets (property)', () => {
    const name = fc.stringMatching(/^[A-Za-z0-9_.-]{1,15}$/);
    const intEntry = fc.oneof(
      fc.record({ type: fc.constant('u8' as const), value: fc.integer({ min: 0, max: 255 }) }),
      fc.record({ type: fc.constant('i8' as const), value: fc.integer({ min: -128, max: 127 }) }),
      fc.record({ type: fc.constant('u16' as const), value: fc.integer({ min: 0, max: 0xffff }) }),
      fc.record({
        type: fc.constant('i16' as const),
        value: fc.integer({ min: -0x8000, max: 0x7fff }),
      }),
      fc.record({
        type: fc.constant('u32' as const),
        value: fc.integer({ min: 0, max: 0xffffffff }),
      }),
      fc.record({
        type: fc.constant('i32' as const),
        value: fc.integer({ min: -0x80000000, max: 0x7fffffff }),
      }),
      fc.record({
        type: fc.constant('u64' as const),
        value: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
      }),
      fc.record({
        type: fc.constant('i64' as const),
        value: fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }),
      }),
    );
    const varEntry = fc.oneof(
      fc.record({
        type: fc.constant('string' as const),
        value: fc.string({ unit: 'grapheme', maxLength: 100 }).filter((s) => !s.includes('\0')),
      }),
      fc.record({ type: fc.constant('blob' as const), value: fc.uint8Array({ maxLength: 1500 }) }),
    );
    const entry = fc
      .tuple(
        fc.constantFrom('wifi', 'board', 'ns3', 'a-long-namespac'),
        name,
        fc.oneof(intEntry, varEntry),
      )
      .map(([namespace, key, typed]): NvsEntry => ({ namespace, key, ...typed }));
    const entries = fc.uniqueArray(entry, {
      maxLength: 40,
      selector: (e) => `${e.namespace}/${e.key}`,
    });
    fc.assert(
      fc.property(entries, (list) => {
        const bytes = writeNvsPartition(list, 0x20000);
        expect(readNvsPartition(bytes)).toEqual(list);
        expect(inspectNvsPartition(bytes).errors).toEqual([]);
      }),
      { numRuns: 150 },
    );
  });
});

describe('writer limits', () => {
  const one = (entry: Partial<NvsEntry>): NvsEntry[] => [
    { namespace: 'n', key: 'k', type: 'u8', value: 0, ...entry } as NvsEntry,
  ];
  const write = (entry: Partial<NvsEntry>): string | undefined =>
    codeOf(() => writeNvsPartition(one(entry), 0x3000));

  it('accepts 15-byte keys and namespaces, rejects 16', () => {
    expect(write({ key: 'k'.repeat(15), namespace: 'n'.repeat(15) })).toBeUndefined();
    expect(write({ key: 'k'.repeat(16) })).toBe('NVS_INVALID');
    expect(write({ namespace: 'n'.repeat(16) })).toBe('NVS_INVALID');
    expect(write({ key: 'ééééééééé' })).toBe('NVS_INVALID'); // 9 characters, 18 bytes
    expect(write({ key: '' })).toBe('NVS_INVALID');
    expect(write({ key: 'a\0b' })).toBe('NVS_INVALID');
  });

  it('checks integer ranges and kinds', () => {
    expect(write({ type: 'u8', value: 256 })).toBe('NVS_INVALID');
    expect(write({ type: 'u8', value: -1 })).toBe('NVS_INVALID');
    expect(write({ type: 'i8', value: -129 })).toBe('NVS_INVALID');
    expect(write({ type: 'u16', value: 65536 })).toBe('NVS_INVALID');
    expect(write({ type: 'i16', value: 32768 })).toBe('NVS_INVALID');
    expect(write({ type: 'u32', value: 2 ** 32 })).toBe('NVS_INVALID');
    expect(write({ type: 'i32', value: 2 ** 31 })).toBe('NVS_INVALID');
    expect(write({ type: 'u64', value: 2n ** 64n })).toBe('NVS_INVALID');
    expect(write({ type: 'i64', value: -(2n ** 63n) - 1n })).toBe('NVS_INVALID');
    expect(write({ type: 'u8', value: 1.5 })).toBe('NVS_INVALID');
    expect(write({ type: 'u8', value: '1' })).toBe('NVS_INVALID');
    expect(write({ type: 'u64', value: 5 })).toBeUndefined(); // a safe number is fine too
    expect(write({ type: 'nope' as NvsEntry['type'] })).toBe('NVS_INVALID');
  });

  it('limits strings to 4000 bytes with the NUL and blobs to 508000 bytes', () => {
    expect(write({ type: 'string', value: 'x'.repeat(3999) })).toBeUndefined();
    expect(write({ type: 'string', value: 'x'.repeat(4000) })).toBe('NVS_INVALID');
    expect(write({ type: 'string', value: 'a\0b' })).toBe('NVS_INVALID');
    expect(write({ type: 'string', value: new Uint8Array() })).toBe('NVS_INVALID');
    expect(write({ type: 'blob', value: 'text' })).toBe('NVS_INVALID');
    expect(
      codeOf(() =>
        writeNvsPartition(
          one({ type: 'blob', value: new Uint8Array(NVS_MAX_BLOB_SIZE + 1) }),
          0x100000,
        ),
      ),
    ).toBe('NVS_INVALID');
  });

  it('rejects duplicate keys, a 255th namespace and bad sizes', () => {
    const twice = [...one({}), ...one({ value: 1 })];
    expect(codeOf(() => writeNvsPartition(twice, 0x3000))).toBe('NVS_INVALID');
    const many = Array.from(
      { length: 255 },
      (_, i): NvsEntry => ({
        namespace: `ns${i}`,
        key: 'k',
        type: 'u8',
        value: 0,
      }),
    );
    expect(codeOf(() => writeNvsPartition(many.slice(0, 254), 0x8000))).toBeUndefined();
    expect(messageOf(() => writeNvsPartition(many, 0x8000))).toMatch(/more than 254 namespaces/);
    expect(codeOf(() => writeNvsPartition([], 0x2000))).toBe('NVS_INVALID');
    expect(codeOf(() => writeNvsPartition([], 0x3001))).toBe('NVS_INVALID');
    expect(codeOf(() => writeNvsPartition([], 0x3000))).toBeUndefined();
  });

  it('throws NVS_FULL naming the entry that does not fit', () => {
    const entries = Array.from(
      { length: 3 },
      (_, i): NvsEntry => ({
        namespace: 'wifi',
        key: `s${i}`,
        type: 'string',
        value: 'x'.repeat(3000),
      }),
    );
    expect(codeOf(() => writeNvsPartition(entries.slice(0, 2), 0x3000))).toBeUndefined();
    expect(codeOf(() => writeNvsPartition(entries, 0x3000))).toBe('NVS_FULL');
    expect(messageOf(() => writeNvsPartition(entries, 0x3000))).toMatch(
      /entry wifi\/s2 does not fit/,
    );
    expect(codeOf(() => writeNvsPartition(entries, 0x4000))).toBeUndefined();
  });
});

describe('corruption', () => {
  it('reports a bad entry CRC and skips only that entry', () => {
    const bytes = fixture('provision-16k.bin').slice();
    // Entry 13 is output_volume (i32): change its value without fixing the CRC.
    const at = 64 + 13 * 32 + 24;
    bytes[at] = 71;
    const { errors } = inspectNvsPartition(bytes);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/^page 0 entry 13: CRC/);
    expect(readNvsPartition(bytes).map((e) => e.key)).toEqual([
      'ssid',
      'password',
      'ota_url',
      'uuid',
    ]);
  });

  it('reports a bad string data CRC and skips the whole span', () => {
    const bytes = fixture('provision-16k.bin').slice();
    bytes[64 + 2 * 32] = 'R'.charCodeAt(0); // first byte of "rig-lab"
    const { errors } = inspectNvsPartition(bytes);
    expect(errors).toEqual([expect.stringMatching(/^page 0 entry 1 \(ssid\): data CRC/)]);
    expect(readNvsPartition(bytes).map((e) => e.key)).toEqual([
      'password',
      'ota_url',
      'uuid',
      'output_volume',
    ]);
  });

  it('reports a bad span', () => {
    const bytes = fixture('provision-16k.bin').slice();
    const ssid = 64 + 32;
    bytes[ssid + 2] = 3; // span 3 for an 8-byte string
    fixEntryCrc(bytes, 0, 1);
    expect(inspectNvsPartition(bytes).errors[0]).toMatch(
      /entry 1 \(ssid\): bad span 3 for 8 bytes/,
    );
    expect(readNvsPartition(bytes).some((e) => e.key === 'ssid')).toBe(false);
  });

  it('reports a corrupt page header and skips the page', () => {
    const bytes = fixture('multipage-24k.bin').slice();
    bytes[NVS_PAGE_SIZE + 4] = 9; // sequence number of page 1
    const { pages, errors } = inspectNvsPartition(bytes);
    expect(pages[1]).toMatchObject({ state: 'corrupt', headerCrcValid: false, sequence: 9 });
    expect(errors).toEqual([expect.stringMatching(/^page 1: header CRC/)]);
    const read = readNvsPartition(bytes);
    expect(read.some((e) => e.key === 'download_url')).toBe(false);
    expect(read.some((e) => e.key === 'token')).toBe(true);
  });

  it('reports an unknown page state and an "erased" page holding data', () => {
    const bytes = fixture('provision-16k.bin').slice();
    bytes.set([0x12, 0x34, 0x56, 0x78], 0);
    bytes[2 * NVS_PAGE_SIZE + 100] = 0;
    const { pages, errors } = inspectNvsPartition(bytes);
    expect(pages[0]?.state).toBe('corrupt');
    expect(pages[2]).toMatchObject({ state: 'corrupt', sequence: undefined });
    expect(errors).toEqual([
      expect.stringMatching(/^page 0: unknown page state 0x78563412/),
      expect.stringMatching(/^page 2: state is erased but the page holds data/),
    ]);
    expect(readNvsPartition(bytes)).toEqual([]);
  });

  it('reports a blob whose chunk is missing', () => {
    const value = Uint8Array.from({ length: 5000 }, (_, i) => i & 0xff);
    const bytes = writeNvsPartition([{ namespace: 'n', key: 'b', type: 'blob', value }], 0x4000);
    // Chunks 0 and 1 (3968 + 1032 bytes); the index on page 1 after chunk 1 claims a third.
    const index = entryBytes(bytes, 1, 34);
    expect(index[1]).toBe(0x48);
    index[28] = 3;
    fixEntryCrc(bytes, 1, 34);
    expect(inspectNvsPartition(bytes).errors).toEqual([
      expect.stringMatching(/blob chunk 2 is missing/),
    ]);
    expect(readNvsPartition(bytes)).toEqual([]);
  });

  it('reports an entry whose namespace has no namespace entry', () => {
    const bytes = fixture('provision-16k.bin').slice();
    bytes[64 + 13 * 32] = 9;
    fixEntryCrc(bytes, 0, 13);
    expect(inspectNvsPartition(bytes).errors).toEqual([
      expect.stringMatching(/entry 13 \(output_volume\): no namespace has index 9/),
    ]);
  });
});
