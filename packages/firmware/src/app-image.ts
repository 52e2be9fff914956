/**
 * The ESP-IDF application image: what `idf.py build` writes as `xiaozhi.bin`, what the
 * OTA partition holds and what the bootloader verifies before it jumps to the app.
 *
 * Layout (all little-endian):
 * - 24-byte header (`esp_image_header_t`): magic 0xE9, segment count, SPI mode,
 *   SPI speed/size nibbles, entry address, then the extended header: WP pin, SPI pin
 *   drive settings, chip id (u16 at 12), min chip revision (u8 at 14), min/max full chip
 *   revision (u16 at 15 and 17), 4 reserved bytes, hash_appended (u8 at 23).
 * - segments, each an 8-byte header (load address, data length) and its data.
 * - zero padding so that the checksum byte (0xEF XOR every segment data byte) is the last
 *   byte of a 16-byte block.
 * - when hash_appended is 1: the SHA-256 of every byte before it.
 *
 * An app's first segment starts with `esp_app_desc_t` (256 bytes, magic 0xABCD5432), so
 * it sits at image offset 0x20.
 */
import { Buffer } from 'node:buffer';
import { createHash } from 'node:crypto';
import type { ChipName } from './chips.js';
import { chipById, chipByName } from './chips.js';
import { FirmwareError } from './errors.js';

export const IMAGE_MAGIC = 0xe9;
export const IMAGE_HEADER_SIZE = 24;
export const SEGMENT_HEADER_SIZE = 8;
/** ESP_IMAGE_MAX_SEGMENTS: the bootloader rejects images with more. */
export const MAX_SEGMENTS = 16;
export const APP_DESC_MAGIC = 0xabcd5432;
export const APP_DESC_SIZE = 256;
/** Where the app description sits in an app image: after the image and segment headers. */
export const APP_DESC_OFFSET = IMAGE_HEADER_SIZE + SEGMENT_HEADER_SIZE;

const CHECKSUM_SEED = 0xef;
const HASH_SIZE = 32;
/** What ESP-IDF writes in wp_pin: WP is configured by software, not by the ROM. */
const WP_PIN_DISABLED = 0xee;

export interface ImageHeader {
  segmentCount: number;
  /** esp_image_spi_mode_t: 0 QIO, 1 QOUT, 2 DIO, 3 DOUT, 4 FAST_READ, 5 SLOW_READ. */
  spiMode: number;
  /** Low nibble of byte 3 (esp_image_spi_freq_t). */
  spiSpeed: number;
  /** High nibble of byte 3 (esp_image_flash_size_t: 0 = 1 MB ... 4 = 16 MB). */
  spiSize: number;
  entryAddress: number;
  wpPin: number;
  spiPinDrive: readonly [number, number, number];
  chipId: number;
  /** Undefined when the chip id is not one this package knows. */
  chip: ChipName | undefined;
  /** Deprecated single-byte revision, kept by ESP-IDF for old ROMs. */
  minChipRev: number;
  /** major * 100 + minor. */
  minChipRevFull: number;
  /** major * 100 + minor; 0 and 0xFFFF both mean "no maximum". */
  maxChipRevFull: number;
  hashAppended: boolean;
}

export interface ImageSegment {
  loadAddress: number;
  /** Offset in the image of the segment's data (its 8-byte header is just before). */
  offset: number;
  length: number;
}

export interface AppDescription {
  secureVersion: number;
  version: string;
  projectName: string;
  time: string;
  date: string;
  idfVersion: string;
  /** SHA-256 of the ELF file the image was made from, lowercase hex. */
  elfSha256: string;
  /** major * 100 + minor. */
  minEfuseBlockRevFull: number;
  maxEfuseBlockRevFull: number;
  /** log2 of the MMU page size; 0 when the image predates the field (IDF < 5.1). */
  mmuPageSizeLog2: number;
}

export interface AppImage {
  header: ImageHeader;
  chipId: number;
  chip: ChipName | undefined;
  entryAddress: number;
  segments: ImageSegment[];
  checksum: { stored: number; computed: number; valid: boolean };
  hash: { stored: string; computed: string; valid: boolean } | undefined;
  /** Bytes used by the image, through the checksum or the appended hash; any bytes after are ignored. */
  size: number;
  /** Undefined when the first segment does not start with an app description (bootloaders). */
  appDescription: AppDescription | undefined;
}

export type VerifiedAppImage = AppImage & { appDescription: AppDescription };

function view(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function need(bytes: Uint8Array, end: number, what: string): void {
  if (bytes.length < end) {
    throw new FirmwareError(
      'IMAGE_TRUNCATED',
      `image truncated: ${what} needs ${end} bytes, have ${bytes.length}`,
    );
  }
}

function byteAt(bytes: Uint8Array, offset: number): number {
  return bytes[offset] ?? 0;
}

function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
}

/** Fixed-size C string field: text up to the first NUL (or the whole field). */
function cString(bytes: Uint8Array, offset: number, size: number): string {
  const field = bytes.subarray(offset, offset + size);
  const end = field.indexOf(0);
  return new TextDecoder().decode(end === -1 ? field : field.subarray(0, end));
}

/** The checksum byte is the last byte of the 16-byte block the segments end in. */
function checksumOffsetAfter(position: number): number {
  return position + 15 - (position % 16);
}

/** Parses the 24-byte header; enough for header-only files and for a download's first bytes. */
export function readImageHeader(bytes: Uint8Array): ImageHeader {
  need(bytes, IMAGE_HEADER_SIZE, 'the image header');
  const dv = view(bytes);
  const magic = dv.getUint8(0);
  if (magic !== IMAGE_MAGIC) {
    throw new FirmwareError(
      'IMAGE_INVALID',
      `not an ESP image: magic 0x${magic.toString(16).padStart(2, '0')}, expected 0xe9`,
    );
  }
  const speedSize = dv.getUint8(3);
  const chipId = dv.getUint16(12, true);
  return {
    segmentCount: dv.getUint8(1),
    spiMode: dv.getUint8(2),
    spiSpeed: speedSize & 0x0f,
    spiSize: speedSize >> 4,
    entryAddress: dv.getUint32(4, true),
    wpPin: dv.getUint8(8),
    spiPinDrive: [dv.getUint8(9), dv.getUint8(10), dv.getUint8(11)],
    chipId,
    chip: chipById(chipId)?.name,
    minChipRev: dv.getUint8(14),
    minChipRevFull: dv.getUint16(15, true),
    maxChipRevFull: dv.getUint16(17, true),
    // ESP-IDF treats only the value 1 as "hash appended".
    hashAppended: dv.getUint8(23) === 1,
  };
}

/**
 * The chip revisions an image runs on, as esptool's `write_flash` reads its header
 * (`esptool/cmds.py`): a header without the full fields (`max_rev_full` 0), or whose
 * `min_rev_full` is unset while its deprecated `min_rev` is not (with `max_rev_full` 0xFFFF, "not
 * set"), says only `min_rev`, which ESP-IDF's Kconfig sets to the major revision, the minor one on
 * the ESP32-C3; any other is the range `min_rev_full`..`max_rev_full` (major * 100 + minor;
 * 0xFFFF: no maximum).
 */
export type ChipRevisionRange =
  | { readonly kind: 'full'; readonly min: number; readonly max: number | undefined }
  | { readonly kind: 'legacy'; readonly min: number; readonly counts: 'major' | 'minor' };

const NO_MAX_REV = 0xffff;

/** See {@link ChipRevisionRange}. */
export function chipRevisionRange(header: ImageHeader): ChipRevisionRange {
  const legacy = (): ChipRevisionRange => ({
    kind: 'legacy',
    min: header.minChipRev,
    counts: header.chipId === chipByName('esp32c3').id ? 'minor' : 'major',
  });
  if (header.maxChipRevFull === 0) return legacy();
  if (
    header.maxChipRevFull === NO_MAX_REV &&
    header.minChipRevFull === 0 &&
    header.minChipRev !== 0
  )
    return legacy();
  return {
    kind: 'full',
    min: header.minChipRevFull,
    max: header.maxChipRevFull === NO_MAX_REV ? undefined : header.maxChipRevFull,
  };
}

const revisionText = (full: number) => `v${Math.floor(full / 100)}.${full % 100}`;

/**
 * Why a chip of `revision` cannot run the image `header` heads (its second-stage bootloader or
 * ESP-IDF's app loader refuses it, and the board never boots it), in esptool's terms; undefined
 * when it can.
 */
export function chipRevisionMismatch(
  header: ImageHeader,
  revision: { readonly major: number; readonly minor: number },
): string | undefined {
  const range = chipRevisionRange(header);
  const chip = `v${revision.major}.${revision.minor}`;
  if (range.kind === 'legacy') {
    const have = range.counts === 'major' ? revision.major : revision.minor;
    if (have >= range.min) return undefined;
    return `the image needs a chip whose ${range.counts} revision is ${range.min} or higher (its header's min_rev), this chip is ${chip}`;
  }
  const full = revision.major * 100 + revision.minor;
  if (full >= range.min && (range.max === undefined || full <= range.max)) return undefined;
  const needs =
    range.max === undefined
      ? `>= ${revisionText(range.min)}`
      : `${revisionText(range.min)} to ${revisionText(range.max)}`;
  return `the image needs chip revision ${needs}, this chip is ${chip}`;
}

function parseAppDescription(bytes: Uint8Array, offset: number): AppDescription {
  const dv = view(bytes);
  const magic = dv.getUint32(offset, true);
  if (magic !== APP_DESC_MAGIC) {
    throw new FirmwareError(
      'APP_DESC_MISSING',
      `no app description: magic 0x${magic.toString(16).padStart(8, '0')}, expected 0xabcd5432`,
    );
  }
  return {
    secureVersion: dv.getUint32(offset + 4, true),
    version: cString(bytes, offset + 16, 32),
    projectName: cString(bytes, offset + 48, 32),
    time: cString(bytes, offset + 80, 16),
    date: cString(bytes, offset + 96, 16),
    idfVersion: cString(bytes, offset + 112, 32),
    elfSha256: hex(bytes.subarray(offset + 144, offset + 176)),
    minEfuseBlockRevFull: dv.getUint16(offset + 176, true),
    maxEfuseBlockRevFull: dv.getUint16(offset + 178, true),
    mmuPageSizeLog2: dv.getUint8(offset + 180),
  };
}

/**
 * Reads an `esp_app_desc_t` from either an app image (or just its first 0x120 bytes, as the
 * firmware does with an OTA download) or the 256 bytes of the structure itself.
 * Throws `APP_DESC_MISSING` when the magic word is absent or the first segment is too short.
 */
export function readAppDescription(bytes: Uint8Array): AppDescription {
  // The structure's own first byte is 0x32 (magic LE), so 0xE9 can only be an image.
  if (byteAt(bytes, 0) !== IMAGE_MAGIC) {
    need(bytes, APP_DESC_SIZE, 'the app description');
    return parseAppDescription(bytes, 0);
  }
  const header = readImageHeader(bytes);
  need(bytes, APP_DESC_OFFSET, 'the first segment header');
  const firstLength = view(bytes).getUint32(IMAGE_HEADER_SIZE + 4, true);
  if (header.segmentCount === 0 || firstLength < APP_DESC_SIZE) {
    throw new FirmwareError(
      'APP_DESC_MISSING',
      'no app description: the first segment is shorter than esp_app_desc_t',
    );
  }
  need(bytes, APP_DESC_OFFSET + APP_DESC_SIZE, 'the app description');
  return parseAppDescription(bytes, APP_DESC_OFFSET);
}

/**
 * Parses a whole image: header, segments, checksum, appended hash, app description.
 * A wrong checksum or hash is reported (`valid: false`), not thrown, so a caller can show
 * what is wrong; {@link verifyAppImage} throws instead. Structural damage throws
 * `IMAGE_INVALID` or `IMAGE_TRUNCATED`.
 */
export function readAppImage(bytes: Uint8Array): AppImage {
  const header = readImageHeader(bytes);
  if (header.segmentCount > MAX_SEGMENTS) {
    throw new FirmwareError(
      'IMAGE_INVALID',
      `image has ${header.segmentCount} segments, at most ${MAX_SEGMENTS} are allowed`,
    );
  }
  const dv = view(bytes);
  const segments: ImageSegment[] = [];
  let computed = CHECKSUM_SEED;
  let position = IMAGE_HEADER_SIZE;
  for (let index = 0; index < header.segmentCount; index++) {
    need(bytes, position + SEGMENT_HEADER_SIZE, `segment ${index} header`);
    const loadAddress = dv.getUint32(position, true);
    const length = dv.getUint32(position + 4, true);
    const offset = position + SEGMENT_HEADER_SIZE;
    need(bytes, offset + length, `segment ${index} data (${length} bytes)`);
    for (let i = offset; i < offset + length; i++) computed ^= byteAt(bytes, i);
    segments.push({ loadAddress, offset, length });
    position = offset + length;
  }

  const checksumOffset = checksumOffsetAfter(position);
  need(bytes, checksumOffset + 1, 'the checksum');
  const stored = byteAt(bytes, checksumOffset);
  let size = checksumOffset + 1;

  let hash: AppImage['hash'];
  if (header.hashAppended) {
    need(bytes, size + HASH_SIZE, 'the appended SHA-256');
    const storedHash = hex(bytes.subarray(size, size + HASH_SIZE));
    const computedHash = createHash('sha256').update(bytes.subarray(0, size)).digest('hex');
    hash = { stored: storedHash, computed: computedHash, valid: storedHash === computedHash };
    size += HASH_SIZE;
  }

  const first = segments[0];
  const appDescription =
    first !== undefined &&
    first.length >= APP_DESC_SIZE &&
    dv.getUint32(first.offset, true) === APP_DESC_MAGIC
      ? parseAppDescription(bytes, first.offset)
      : undefined;

  return {
    header,
    chipId: header.chipId,
    chip: header.chip,
    entryAddress: header.entryAddress,
    segments,
    checksum: { stored, computed, valid: stored === computed },
    hash,
    size,
    appDescription,
  };
}

/**
 * {@link readAppImage}, then throws what the bootloader or the OTA code would refuse:
 * `IMAGE_CHECKSUM`, `IMAGE_HASH` (only when a hash is appended), `APP_DESC_MISSING`.
 */
export function verifyAppImage(bytes: Uint8Array): VerifiedAppImage {
  const image = readAppImage(bytes);
  const { checksum, hash, appDescription } = image;
  if (!checksum.valid) {
    throw new FirmwareError(
      'IMAGE_CHECKSUM',
      `checksum mismatch: stored 0x${checksum.stored.toString(16)}, computed 0x${checksum.computed.toString(16)}`,
    );
  }
  if (hash !== undefined && !hash.valid) {
    throw new FirmwareError(
      'IMAGE_HASH',
      `appended SHA-256 mismatch: stored ${hash.stored}, computed ${hash.computed}`,
    );
  }
  if (appDescription === undefined) {
    throw new FirmwareError('APP_DESC_MISSING', 'the first segment has no app description');
  }
  return { ...image, appDescription };
}

export interface BuildSegment {
  loadAddress: number;
  data: Uint8Array;
}

export interface BuildAppImageOptions {
  chip: ChipName;
  /** At most 31 UTF-8 bytes (the field is 32 bytes, NUL-terminated). */
  version: string;
  /** Default `xiaozhi`. */
  projectName?: string;
  /** Default `v5.5`. */
  idfVersion?: string | undefined;
  /** `__TIME__` format; default `00:00:00` so builds are reproducible. */
  time?: string;
  /** `__DATE__` format; default `Jan  1 2025`. */
  date?: string;
  /** 32 bytes or 64 hex digits; default all zeros. */
  elfSha256?: Uint8Array | string;
  secureVersion?: number;
  /** Default: the first extra segment's load address, else 0. */
  entryAddress?: number;
  /** Segments after the app description segment; data is zero-padded to a multiple of 4. */
  segments?: BuildSegment[];
  /**
   * Total image size in bytes, reached by growing the first segment with zeros; must be a
   * multiple of 16 and at least the unpadded size.
   */
  padTo?: number;
  /** Default true, as ESP-IDF builds apps. */
  hashAppended?: boolean;
  /** Default 2 (DIO). */
  spiMode?: number;
  /** Default 0xF (flash clock = source clock, 80 MHz). */
  spiSpeed?: number;
  /** Default 4 (16 MB, the usual xiaozhi board). */
  spiSize?: number;
  minChipRevFull?: number;
  maxChipRevFull?: number;
  mmuPageSizeLog2?: number;
}

function invalid(message: string): FirmwareError {
  return new FirmwareError('OPTION_INVALID', message);
}

function checkInteger(name: string, value: number, max: number): number {
  if (!Number.isInteger(value) || value < 0 || value > max) {
    throw invalid(`${name} must be an integer from 0 to ${max}, got ${value}`);
  }
  return value;
}

function encodeField(name: string, value: string, fieldSize: number): Uint8Array {
  // A NUL would silently cut the string short when the device reads it back.
  if (value.includes('\0')) throw invalid(`${name} must not contain NUL`);
  const encoded = new TextEncoder().encode(value);
  if (encoded.length > fieldSize - 1) {
    throw invalid(
      `${name} is ${encoded.length} bytes, at most ${fieldSize - 1} fit in esp_app_desc_t`,
    );
  }
  return encoded;
}

function elfShaBytes(value: Uint8Array | string | undefined): Uint8Array {
  if (value === undefined) return new Uint8Array(32);
  if (typeof value === 'string') {
    if (!/^[0-9a-fA-F]{64}$/.test(value)) throw invalid('elfSha256 must be 64 hex digits');
    return Uint8Array.from(Buffer.from(value, 'hex'));
  }
  if (value.length !== 32) throw invalid(`elfSha256 must be 32 bytes, got ${value.length}`);
  return value;
}

function encodeAppDescription(options: BuildAppImageOptions): Uint8Array {
  const out = new Uint8Array(APP_DESC_SIZE);
  const dv = view(out);
  dv.setUint32(0, APP_DESC_MAGIC, true);
  dv.setUint32(4, checkInteger('secureVersion', options.secureVersion ?? 0, 0xffff_ffff), true);
  out.set(encodeField('version', options.version, 32), 16);
  out.set(encodeField('projectName', options.projectName ?? 'xiaozhi', 32), 48);
  out.set(encodeField('time', options.time ?? '00:00:00', 16), 80);
  out.set(encodeField('date', options.date ?? 'Jan  1 2025', 16), 96);
  out.set(encodeField('idfVersion', options.idfVersion ?? 'v5.5', 32), 112);
  out.set(elfShaBytes(options.elfSha256), 144);
  out[180] = checkInteger('mmuPageSizeLog2', options.mmuPageSizeLog2 ?? 0, 0xff);
  return out;
}

function imageSize(lengths: readonly number[], hashAppended: boolean): number {
  const end = lengths.reduce(
    (sum, length) => sum + SEGMENT_HEADER_SIZE + length,
    IMAGE_HEADER_SIZE,
  );
  return checksumOffsetAfter(end) + 1 + (hashAppended ? HASH_SIZE : 0);
}

/**
 * Builds a valid app image: header for `chip`, a first segment at the chip's DROM address
 * holding the app description, the extra segments, checksum and (by default) the SHA-256.
 */
export function buildAppImage(options: BuildAppImageOptions): Uint8Array {
  const chip = chipByName(options.chip);
  if (options.version.length === 0) throw invalid('version must not be empty');
  const hashAppended = options.hashAppended ?? true;
  const extras = (options.segments ?? []).map((segment, index) => {
    checkInteger(`segments[${index}].loadAddress`, segment.loadAddress, 0xffff_ffff);
    const padded = new Uint8Array(Math.ceil(segment.data.length / 4) * 4);
    padded.set(segment.data);
    return { loadAddress: segment.loadAddress, data: padded };
  });
  if (extras.length + 1 > MAX_SEGMENTS) {
    throw invalid(`at most ${MAX_SEGMENTS - 1} extra segments fit, got ${extras.length}`);
  }

  let first = encodeAppDescription(options);
  const natural = imageSize([first.length, ...extras.map((s) => s.data.length)], hashAppended);
  if (options.padTo !== undefined) {
    const padTo = checkInteger('padTo', options.padTo, 0xffff_ffff);
    if (padTo % 16 !== 0 || padTo < natural) {
      throw invalid(`padTo must be a multiple of 16 and at least ${natural}, got ${padTo}`);
    }
    // Growing by a multiple of 16 keeps the checksum at the end of its 16-byte block.
    const grown = new Uint8Array(first.length + padTo - natural);
    grown.set(first);
    first = grown;
  }
  const segments = [{ loadAddress: chip.dromBase + APP_DESC_OFFSET, data: first }, ...extras];
  return writeImage(
    {
      chipId: chip.id,
      spiMode: checkInteger('spiMode', options.spiMode ?? 2, 0xff),
      spiSizeSpeed:
        (checkInteger('spiSize', options.spiSize ?? 4, 0xf) << 4) |
        checkInteger('spiSpeed', options.spiSpeed ?? 0xf, 0xf),
      entryAddress: checkInteger(
        'entryAddress',
        options.entryAddress ?? extras[0]?.loadAddress ?? 0,
        0xffff_ffff,
      ),
      minChipRevFull: checkInteger('minChipRevFull', options.minChipRevFull ?? 0, 0xffff),
      maxChipRevFull: checkInteger('maxChipRevFull', options.maxChipRevFull ?? 0, 0xffff),
      hashAppended,
    },
    segments,
  );
}

/** The header fields {@link writeImage} needs. */
export interface ImageFields {
  readonly chipId: number;
  readonly spiMode: number;
  /** Flash size in the high nibble, speed in the low one. */
  readonly spiSizeSpeed: number;
  readonly entryAddress: number;
  readonly minChipRevFull?: number;
  readonly maxChipRevFull?: number;
  readonly hashAppended: boolean;
}

/**
 * Writes an ESP image: the 24-byte header, each segment with its header, the XOR checksum
 * at the end of its 16-byte block, and the SHA-256 of everything before it when asked.
 * App images and bootloaders share this layout.
 */
export function writeImage(
  fields: ImageFields,
  segments: readonly { loadAddress: number; data: Uint8Array }[],
): Uint8Array {
  const total = imageSize(
    segments.map((s) => s.data.length),
    fields.hashAppended,
  );
  const out = new Uint8Array(total);
  const dv = view(out);
  out[0] = IMAGE_MAGIC;
  out[1] = segments.length;
  out[2] = fields.spiMode;
  out[3] = fields.spiSizeSpeed;
  dv.setUint32(4, fields.entryAddress, true);
  out[8] = WP_PIN_DISABLED;
  dv.setUint16(12, fields.chipId, true);
  dv.setUint16(15, fields.minChipRevFull ?? 0, true);
  dv.setUint16(17, fields.maxChipRevFull ?? 0, true);
  out[23] = fields.hashAppended ? 1 : 0;

  let position = IMAGE_HEADER_SIZE;
  let checksum = CHECKSUM_SEED;
  for (const segment of segments) {
    dv.setUint32(position, segment.loadAddress, true);
    dv.setUint32(position + 4, segment.data.length, true);
    out.set(segment.data, position + SEGMENT_HEADER_SIZE);
    for (const byte of segment.data) checksum ^= byte;
    position += SEGMENT_HEADER_SIZE + segment.data.length;
  }
  const checksumOffset = checksumOffsetAfter(position);
  out[checksumOffset] = checksum;
  if (fields.hashAppended) {
    const digest = createHash('sha256')
      .update(out.subarray(0, checksumOffset + 1))
      .digest();
    out.set(digest, checksumOffset + 1);
  }
  return out;
}
