import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  APP_DESC_OFFSET,
  buildAppImage,
  chipRevisionMismatch,
  chipRevisionRange,
  readAppDescription,
  readAppImage,
  readImageHeader,
  verifyAppImage,
} from './app-image.js';
import type { ChipName } from './chips.js';
import { CHIPS, chipById, chipByName } from './chips.js';
import { FIRMWARE_ERROR_CODES, FirmwareError } from './errors.js';

const here = dirname(fileURLToPath(import.meta.url));
const imagesDir = resolve(here, '../../../fixtures/corpus/images');
const fixture = (name: string): Uint8Array => new Uint8Array(readFileSync(join(imagesDir, name)));

function codeOf(run: () => unknown): string | undefined {
  try {
    run();
  } catch (error) {
    if (error instanceof FirmwareError) return error.code;
    throw error;
  }
  return undefined;
}

describe('real images (fixtures/corpus/images)', () => {
  it('reads the ESP-IDF blink app for esp32s2', () => {
    const bytes = fixture('esp_idf_blink_esp32s2.bin');
    const image = readAppImage(bytes);
    expect(image.chipId).toBe(2);
    expect(image.chip).toBe('esp32s2');
    expect(image.entryAddress).toBe(0x40022f84);
    expect(image.segments).toEqual([
      { loadAddress: 0x3f000020, offset: 0x20, length: 35864 },
      { loadAddress: 0x3ffbde90, offset: 35904, length: 8268 },
      { loadAddress: 0x40022000, offset: 44180, length: 21380 },
      { loadAddress: 0x40080020, offset: 65568, length: 89320 },
      { loadAddress: 0x40027384, offset: 154896, length: 27404 },
      { loadAddress: 0x50000000, offset: 182308, length: 16 },
    ]);
    expect(image.checksum).toEqual({ stored: 0x18, computed: 0x18, valid: true });
    expect(image.hash).toEqual({
      stored: '10f48f4a71a48cc4c917d70d13bf717b1bc7f3187b3d564b00192f7e381531b7',
      computed: '10f48f4a71a48cc4c917d70d13bf717b1bc7f3187b3d564b00192f7e381531b7',
      valid: true,
    });
    expect(image.size).toBe(bytes.length);
    expect(image.header).toMatchObject({
      spiMode: 2,
      spiSpeed: 0xf,
      spiSize: 1,
      wpPin: 0xee,
      minChipRev: 0,
      minChipRevFull: 0,
      maxChipRevFull: 0,
      hashAppended: true,
    });
    expect(image.appDescription).toEqual({
      secureVersion: 0,
      version: 'qa-test-v5.0-20220830-4-g4532e6',
      projectName: 'blink',
      time: '19:46:07',
      date: 'Sep 13 2022',
      idfVersion: 'v5.0-beta1-427-g4532e6e0b2-dirt',
      elfSha256: '3059e6b55a965865febd28fa9f6028ad5cd0dab311febb0a3ea79eaa223ac2b0',
      minEfuseBlockRevFull: 0,
      maxEfuseBlockRevFull: 0,
      mmuPageSizeLog2: 0,
    });
    expect(verifyAppImage(bytes).appDescription.projectName).toBe('blink');
  });

  it('reads the app description from the image, its first bytes, or the bare structure', () => {
    const bytes = fixture('esp_idf_blink_esp32s2.bin');
    const full = readAppImage(bytes).appDescription;
    // What the firmware reads from an OTA download before writing it: headers + esp_app_desc_t.
    expect(readAppDescription(bytes.subarray(0, APP_DESC_OFFSET + 256))).toEqual(full);
    expect(readAppDescription(bytes.subarray(APP_DESC_OFFSET, APP_DESC_OFFSET + 256))).toEqual(
      full,
    );
    expect(codeOf(() => readAppDescription(bytes.subarray(0, 0x100)))).toBe('IMAGE_TRUNCATED');
  });

  it('reads the esp32 bootloader: 4 segments, checksum only, no app description', () => {
    const bytes = fixture('bootloader_esp32.bin');
    const image = readAppImage(bytes);
    expect(image.chipId).toBe(0);
    expect(image.chip).toBe('esp32');
    expect(image.entryAddress).toBe(0x4009816c);
    expect(image.segments).toEqual([
      { loadAddress: 0x3ffc0000, offset: 32, length: 0 },
      { loadAddress: 0x3ffc0000, offset: 40, length: 2876 },
      { loadAddress: 0x40078000, offset: 2924, length: 4200 },
      { loadAddress: 0x40098000, offset: 7132, length: 740 },
    ]);
    expect(image.checksum).toEqual({ stored: 0x83, computed: 0x83, valid: true });
    expect(image.header.hashAppended).toBe(false);
    expect(image.hash).toBeUndefined();
    expect(image.size).toBe(bytes.length);
    expect(image.appDescription).toBeUndefined();
    expect(codeOf(() => verifyAppImage(bytes))).toBe('APP_DESC_MISSING');
    expect(codeOf(() => readAppDescription(bytes))).toBe('APP_DESC_MISSING');
  });

  it('reads the esp32c3 bootloader: 4 segments, checksum and hash, no app description', () => {
    const bytes = fixture('bootloader_esp32c3.bin');
    const image = readAppImage(bytes);
    expect(image.chipId).toBe(5);
    expect(image.chip).toBe('esp32c3');
    expect(image.entryAddress).toBe(0x403c0000);
    expect(image.segments.map((s) => [s.loadAddress, s.length])).toEqual([
      [0x3fcd6100, 20],
      [0x3fcd6114, 6244],
      [0x403c0000, 3556],
      [0x403c2000, 7820],
    ]);
    expect(image.checksum).toEqual({ stored: 0x77, computed: 0x77, valid: true });
    expect(image.hash?.valid).toBe(true);
    expect(image.hash?.stored).toBe(
      '4faeab1bd3fd6a7d4adfa0fd38f41bfc67a8c3c0a9d6d882b65580da2e5e6347',
    );
    expect(image.size).toBe(bytes.length);
    expect(image.appDescription).toBeUndefined();
  });

  it('reads the header-only files', () => {
    const s3 = readImageHeader(fixture('esp32s3_header.bin'));
    expect(s3).toEqual({
      segmentCount: 1,
      spiMode: 2,
      spiSpeed: 0,
      spiSize: 1,
      entryAddress: 0xdeadbeef,
      wpPin: 0,
      spiPinDrive: [0, 0, 0],
      chipId: 9,
      chip: 'esp32s3',
      minChipRev: 10,
      minChipRevFull: 0,
      maxChipRevFull: 0,
      hashAppended: false,
    });
    const c3 = readImageHeader(fixture('esp32c3_header_min_rev.bin'));
    expect(c3).toMatchObject({ chipId: 5, chip: 'esp32c3', minChipRev: 0 });
    expect(c3.minChipRevFull).toBe(255);
    expect(c3.maxChipRevFull).toBe(0xffff);
  });

  it('reads the header-only files as degenerate images: one empty segment, seed checksum', () => {
    for (const name of ['esp32s3_header.bin', 'esp32c3_header_min_rev.bin']) {
      const image = readAppImage(fixture(name));
      expect(image.segments).toEqual([{ loadAddress: 0xdeadbeef, offset: 32, length: 0 }]);
      expect(image.checksum).toEqual({ stored: 0xef, computed: 0xef, valid: true });
      expect(image.size).toBe(48);
      expect(image.appDescription).toBeUndefined();
    }
  });
});

describe("the chip revisions an image runs on, as esptool's write_flash reads its header", () => {
  it("takes min_rev_full with no maximum from esptool's ESP32-C3 header (v2.55 and up)", () => {
    const c3 = readImageHeader(fixture('esp32c3_header_min_rev.bin'));
    expect(chipRevisionRange(c3)).toEqual({ kind: 'full', min: 255, max: undefined });
    // esptool: "requires chip revision in range [v2.55 - max rev not set]"
    expect(chipRevisionMismatch(c3, { major: 0, minor: 4 })).toBe(
      'the image needs chip revision >= v2.55, this chip is v0.4',
    );
    expect(chipRevisionMismatch(c3, { major: 2, minor: 55 })).toBeUndefined();
    expect(chipRevisionMismatch(c3, { major: 3, minor: 0 })).toBeUndefined();
  });

  it('takes the legacy min_rev of a header without the full fields: the ESP32-S3 header needs major 10', () => {
    const s3 = readImageHeader(fixture('esp32s3_header.bin'));
    expect(chipRevisionRange(s3)).toEqual({ kind: 'legacy', min: 10, counts: 'major' });
    expect(chipRevisionMismatch(s3, { major: 0, minor: 2 })).toBe(
      "the image needs a chip whose major revision is 10 or higher (its header's min_rev), this chip is v0.2",
    );
  });

  it('counts the ESP32-C3 legacy min_rev in minor revisions, as esptool does', () => {
    const header = readImageHeader(fixture('esp32c3_header_min_rev.bin'));
    const legacy = { ...header, minChipRev: 3, minChipRevFull: 0, maxChipRevFull: 0 };
    expect(chipRevisionRange(legacy)).toEqual({ kind: 'legacy', min: 3, counts: 'minor' });
    expect(chipRevisionMismatch(legacy, { major: 1, minor: 2 })).toMatch(/minor revision is 3/);
    expect(chipRevisionMismatch(legacy, { major: 0, minor: 3 })).toBeUndefined();
    // max_rev_full 0xFFFF with min_rev_full unset: min_rev still rules.
    expect(chipRevisionRange({ ...legacy, maxChipRevFull: 0xffff })).toMatchObject({
      kind: 'legacy',
    });
  });

  it('checks both ends of a range, and passes the corpus images that say nothing', () => {
    const blink = readImageHeader(fixture('esp_idf_blink_esp32s2.bin'));
    expect(chipRevisionMismatch(blink, { major: 0, minor: 0 })).toBeUndefined();
    const bytes = buildAppImage({
      chip: 'esp32s3',
      version: '1.0.0',
      minChipRevFull: 1,
      maxChipRevFull: 99,
    });
    const header = readImageHeader(bytes);
    expect(chipRevisionRange(header)).toEqual({ kind: 'full', min: 1, max: 99 });
    expect(chipRevisionMismatch(header, { major: 0, minor: 0 })).toBe(
      'the image needs chip revision v0.1 to v0.99, this chip is v0.0',
    );
    expect(chipRevisionMismatch(header, { major: 1, minor: 0 })).toMatch(/v0\.1 to v0\.99/);
    expect(chipRevisionMismatch(header, { major: 0, minor: 2 })).toBeUndefined();
  });
});

describe('damaged images', () => {
  const blink = () => fixture('esp_idf_blink_esp32s2.bin').slice();

  it('reports a corrupted data byte as a checksum (and hash) mismatch', () => {
    const bytes = blink();
    bytes[0x1000] = (bytes[0x1000] ?? 0) ^ 0x01;
    const image = readAppImage(bytes);
    expect(image.checksum.valid).toBe(false);
    expect(image.hash?.valid).toBe(false);
    expect(codeOf(() => verifyAppImage(bytes))).toBe('IMAGE_CHECKSUM');
  });

  it('reports a corrupted appended hash', () => {
    const bytes = blink();
    bytes[bytes.length - 1] = (bytes[bytes.length - 1] ?? 0) ^ 0xff;
    const image = readAppImage(bytes);
    expect(image.checksum.valid).toBe(true);
    expect(image.hash?.valid).toBe(false);
    expect(codeOf(() => verifyAppImage(bytes))).toBe('IMAGE_HASH');
  });

  it('rejects a wrong magic byte', () => {
    const bytes = blink();
    bytes[0] = 0xea;
    expect(codeOf(() => readAppImage(bytes))).toBe('IMAGE_INVALID');
    expect(codeOf(() => readImageHeader(bytes))).toBe('IMAGE_INVALID');
  });

  it('rejects more than 16 segments', () => {
    const bytes = blink();
    bytes[1] = 17;
    expect(codeOf(() => readAppImage(bytes))).toBe('IMAGE_INVALID');
  });

  it('rejects truncation anywhere: header, segment, checksum, hash', () => {
    const bytes = blink();
    for (const length of [0, 23, 30, 0x1000, bytes.length - 33, bytes.length - 1]) {
      expect(
        codeOf(() => readAppImage(bytes.subarray(0, length))),
        `length ${length}`,
      ).toBe('IMAGE_TRUNCATED');
    }
    expect(codeOf(() => readImageHeader(bytes.subarray(0, 23)))).toBe('IMAGE_TRUNCATED');
  });

  it('ignores bytes after the image (a partition read back with its 0xFF tail)', () => {
    const bytes = fixture('esp_idf_blink_esp32s2.bin');
    const padded = new Uint8Array(bytes.length + 4096).fill(0xff);
    padded.set(bytes);
    const image = readAppImage(padded);
    expect(image.size).toBe(bytes.length);
    expect(image.hash?.valid).toBe(true);
  });

  it('treats a first segment without the magic word as no app description', () => {
    const bytes = blink();
    bytes[APP_DESC_OFFSET] = 0;
    expect(readAppImage(bytes).appDescription).toBeUndefined();
    expect(codeOf(() => readAppDescription(bytes))).toBe('APP_DESC_MISSING');
  });
});

describe('buildAppImage', () => {
  const chips: ChipName[] = ['esp32', 'esp32s3', 'esp32c3', 'esp32c5', 'esp32c6', 'esp32p4'];

  it.each(chips)('builds a valid image for %s that reads back', (chip) => {
    const bytes = buildAppImage({ chip, version: '2.0.4' });
    const image = verifyAppImage(bytes);
    expect(image.chip).toBe(chip);
    expect(image.chipId).toBe(chipByName(chip).id);
    expect(image.checksum.valid).toBe(true);
    expect(image.hash?.valid).toBe(true);
    expect(image.size).toBe(bytes.length);
    expect(image.segments).toEqual([
      { loadAddress: chipByName(chip).dromBase + 0x20, offset: 0x20, length: 256 },
    ]);
    expect(image.appDescription).toEqual({
      secureVersion: 0,
      version: '2.0.4',
      projectName: 'xiaozhi',
      time: '00:00:00',
      date: 'Jan  1 2025',
      idfVersion: 'v5.5',
      elfSha256: '0'.repeat(64),
      minEfuseBlockRevFull: 0,
      maxEfuseBlockRevFull: 0,
      mmuPageSizeLog2: 0,
    });
    // The appended hash is the SHA-256 of everything before it.
    const digest = createHash('sha256')
      .update(bytes.subarray(0, bytes.length - 32))
      .digest('hex');
    expect(image.hash?.stored).toBe(digest);
  });

  it('is deterministic', () => {
    expect(buildAppImage({ chip: 'esp32s3', version: '1.0.0' })).toEqual(
      buildAppImage({ chip: 'esp32s3', version: '1.0.0' }),
    );
  });

  it('writes every option and extra segments (padded to 4 bytes)', () => {
    const sha = 'AB'.repeat(32);
    const bytes = buildAppImage({
      chip: 'esp32s3',
      version: '1.9.2-beta',
      projectName: 'xiaozhi-custom',
      idfVersion: 'v5.4.2-dirty',
      time: '12:34:56',
      date: 'Mar  5 2026',
      elfSha256: sha,
      secureVersion: 3,
      segments: [
        { loadAddress: 0x3fc90000, data: new Uint8Array([1, 2, 3, 4, 5]) },
        { loadAddress: 0x40380000, data: new Uint8Array(64).fill(0x5a) },
      ],
      hashAppended: false,
      spiMode: 3,
      spiSpeed: 0,
      spiSize: 3,
      minChipRevFull: 1,
      maxChipRevFull: 199,
      mmuPageSizeLog2: 16,
    });
    const image = verifyAppImage(bytes);
    expect(image.hash).toBeUndefined();
    expect(bytes.length % 16).toBe(0);
    expect(image.entryAddress).toBe(0x3fc90000);
    expect(image.segments.map((s) => [s.loadAddress, s.length])).toEqual([
      [0x3c000020, 256],
      [0x3fc90000, 8],
      [0x40380000, 64],
    ]);
    expect(image.header).toMatchObject({
      spiMode: 3,
      spiSpeed: 0,
      spiSize: 3,
      wpPin: 0xee,
      minChipRevFull: 1,
      maxChipRevFull: 199,
    });
    expect(image.appDescription).toEqual({
      secureVersion: 3,
      version: '1.9.2-beta',
      projectName: 'xiaozhi-custom',
      time: '12:34:56',
      date: 'Mar  5 2026',
      idfVersion: 'v5.4.2-dirty',
      elfSha256: 'ab'.repeat(32),
      minEfuseBlockRevFull: 0,
      maxEfuseBlockRevFull: 0,
      mmuPageSizeLog2: 16,
    });
    const raw = new Uint8Array(32).fill(7);
    const fromBytes = readAppImage(buildAppImage({ chip: 'esp32', version: 'x', elfSha256: raw }));
    expect(fromBytes.appDescription?.elfSha256).toBe('07'.repeat(32));
  });

  it('pads to an exact size by growing the first segment', () => {
    const bytes = buildAppImage({ chip: 'esp32c3', version: '1.0.0', padTo: 0x10000 });
    expect(bytes.length).toBe(0x10000);
    const image = verifyAppImage(bytes);
    expect(image.size).toBe(0x10000);
    // Unpadded: 24 + 8 + 256 bytes, checksum block to 304, hash to 336.
    expect(image.segments[0]?.length).toBe(256 + 0x10000 - 336);
    expect(
      verifyAppImage(
        buildAppImage({ chip: 'esp32', version: 'v', padTo: 320, hashAppended: false }),
      ).size,
    ).toBe(320);
  });

  it('rejects invalid options', () => {
    const cases: [string, () => unknown][] = [
      ['OPTION_INVALID', () => buildAppImage({ chip: 'esp32s3', version: 'x'.repeat(32) })],
      ['OPTION_INVALID', () => buildAppImage({ chip: 'esp32s3', version: '版'.repeat(11) })],
      ['OPTION_INVALID', () => buildAppImage({ chip: 'esp32s3', version: '' })],
      ['OPTION_INVALID', () => buildAppImage({ chip: 'esp32s3', version: 'a\0b' })],
      [
        'OPTION_INVALID',
        () => buildAppImage({ chip: 'esp32s3', version: '1', projectName: 'p'.repeat(32) }),
      ],
      [
        'OPTION_INVALID',
        () => buildAppImage({ chip: 'esp32s3', version: '1', date: 'd'.repeat(16) }),
      ],
      ['OPTION_INVALID', () => buildAppImage({ chip: 'esp32s3', version: '1', elfSha256: 'abc' })],
      [
        'OPTION_INVALID',
        () => buildAppImage({ chip: 'esp32s3', version: '1', elfSha256: new Uint8Array(31) }),
      ],
      ['OPTION_INVALID', () => buildAppImage({ chip: 'esp32s3', version: '1', padTo: 100 })],
      ['OPTION_INVALID', () => buildAppImage({ chip: 'esp32s3', version: '1', padTo: 0x1008 })],
      ['OPTION_INVALID', () => buildAppImage({ chip: 'esp32s3', version: '1', entryAddress: -1 })],
      ['OPTION_INVALID', () => buildAppImage({ chip: 'esp32s3', version: '1', spiSize: 16 })],
      [
        'OPTION_INVALID',
        () =>
          buildAppImage({
            chip: 'esp32s3',
            version: '1',
            segments: Array.from({ length: 16 }, () => ({
              loadAddress: 0x40380000,
              data: new Uint8Array(4),
            })),
          }),
      ],
      // A caller outside TypeScript can still pass any string.
      ['CHIP_UNKNOWN', () => buildAppImage({ chip: 'esp8266' as ChipName, version: '1' })],
    ];
    for (const [code, run] of cases) expect(codeOf(run)).toBe(code);
    // 31 bytes is the limit, not 32.
    expect(codeOf(() => buildAppImage({ chip: 'esp32s3', version: 'x'.repeat(31) }))).toBe(
      undefined,
    );
  });

  it('round-trips any 1..31 character ASCII version', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 31, unit: fc.constantFrom(...printableAscii()) }),
        fc.constantFrom(...CHIPS.map((c) => c.name)),
        (version, chip) => {
          const image = verifyAppImage(buildAppImage({ chip, version }));
          expect(image.appDescription.version).toBe(version);
          expect(image.chip).toBe(chip);
        },
      ),
      { numRuns: 200 },
    );
  });
});

function printableAscii(): string[] {
  return Array.from({ length: 0x7f - 0x20 }, (_, i) => String.fromCharCode(0x20 + i));
}

describe('chips', () => {
  it('maps the image chip ids ESP-IDF uses', () => {
    const ids = Object.fromEntries(CHIPS.map((c) => [c.name, c.id]));
    expect(ids).toMatchObject({
      esp32: 0,
      esp32s2: 2,
      esp32c3: 5,
      esp32s3: 9,
      esp32c2: 12,
      esp32c6: 13,
      esp32h2: 16,
      esp32p4: 18,
      esp32c5: 23,
    });
    expect(chipById(9)?.name).toBe('esp32s3');
    expect(chipById(0xffff)).toBeUndefined();
    expect(new Set(CHIPS.map((c) => c.id)).size).toBe(CHIPS.length);
  });

  it('reads an unknown chip id without failing', () => {
    const bytes = buildAppImage({ chip: 'esp32s3', version: '1' });
    bytes[12] = 0x63;
    const image = readAppImage(bytes);
    expect(image.chipId).toBe(0x63);
    expect(image.chip).toBeUndefined();
  });
});

describe('@xiaozhi-mcp/firmware', () => {
  it('documents every error code in its README and exports by name only', () => {
    const readme = readFileSync(join(here, '../README.md'), 'utf8');
    for (const code of FIRMWARE_ERROR_CODES) expect(readme).toContain(`| \`${code}\` |`);
    expect(readFileSync(join(here, 'index.ts'), 'utf8')).not.toMatch(/export \*/);
  });

  it('keeps the cause of an error', () => {
    const cause = new Error('inner');
    const error = new FirmwareError('IMAGE_INVALID', 'outer', { cause });
    expect(error.cause).toBe(cause);
    expect(error.code).toBe('IMAGE_INVALID');
    expect(error.name).toBe('FirmwareError');
  });
});
