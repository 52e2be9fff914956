/**
 * Merged flash images: what `esptool.py merge_bin` (and `idf.py merge-bin`) writes as
 * `merged-binary.bin`, one file flashed at 0x0 that holds every part at its flash offset,
 * with 0xFF (erased flash) in the gaps.
 *
 * Parts of a xiaozhi merged image: the bootloader (at the chip's bootloader offset),
 * the partition table at 0x8000, and the app in the first app partition.
 */
import { Buffer } from 'node:buffer';
import type { AppImage, ImageHeader } from './app-image.js';
import { IMAGE_MAGIC, readAppImage, readImageHeader } from './app-image.js';
import type { ChipName } from './chips.js';
import { chipByName } from './chips.js';
import { FirmwareError } from './errors.js';
import type { Partition, PartitionTable } from './partition-table.js';
import {
  PARTITION_TABLE_OFFSET,
  PARTITION_TYPE_APP,
  readPartitionTable,
} from './partition-table.js';

/**
 * Marks the board name in an app's read-only data: `XIAOZHI_BOARD=<name>` then NUL.
 * esp_app_desc_t has no board field; xiaozhi builds compile the board name into the
 * firmware as a string constant (BOARD_NAME), and this prefix makes it findable.
 */
export const BOARD_MARKER = 'XIAOZHI_BOARD=';

export interface MergedImageApp {
  partition: Partition;
  image: AppImage;
  /** The board named by a {@link BOARD_MARKER} string in the image, if any. */
  board: string | undefined;
}

export interface MergedImageParts {
  bootloader?: { offset: number; image: AppImage };
  partitionTable?: PartitionTable;
  /** App partitions (factory, ota_n, test) whose first byte is the image magic 0xE9. */
  apps: MergedImageApp[];
  /** The bootloader's chip, else the first app's. */
  chip: ChipName | undefined;
  /** Length of the merged image in bytes. */
  size: number;
}

export interface MergePart {
  offset: number;
  data: Uint8Array;
}

export interface MergeImagesOptions {
  /** Pad with 0xFF to this total size (e.g. the flash size); the parts must fit. */
  size?: number;
}

/**
 * Where the second-stage bootloader sits in a merged image: the chip table's
 * `bootloaderOffset` (see `chips.ts` for where each value comes from; docs/protocol.md §9a puts
 * it at 0x0 on esp32c5, where esptool-js says 0x2000, and reading still finds a bootloader at
 * either offset). Throws `CHIP_UNKNOWN` for a name the table does not have.
 */
export function bootloaderOffset(chip: string): number {
  return chipByName(chip).bootloaderOffset;
}

const BOOTLOADER_CANDIDATES = [0x0, 0x1000, 0x2000] as const;

function hex(value: number): string {
  return `0x${value.toString(16)}`;
}

/**
 * The board name carried by an app image (`xiaozhi.bin`), or undefined when it carries
 * none: the text after {@link BOARD_MARKER} up to the NUL, searched in segment data only.
 * Pass `image` when the bytes were already parsed.
 */
export function readAppBoard(bytes: Uint8Array, image?: AppImage): string | undefined {
  const parsed = image ?? readAppImage(bytes);
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const marker = Buffer.from(BOARD_MARKER, 'latin1');
  for (const segment of parsed.segments) {
    const end = Math.min(segment.offset + segment.length, buffer.length);
    let at = buffer.indexOf(marker, segment.offset);
    while (at !== -1 && at + marker.length <= end) {
      const start = at + marker.length;
      const nul = buffer.indexOf(0, start);
      const stop = nul === -1 || nul > end ? end : nul;
      if (stop > start) return buffer.toString('utf8', start, stop);
      at = buffer.indexOf(marker, at + 1);
    }
  }
  return undefined;
}

function findBootloader(bytes: Uint8Array): MergedImageParts['bootloader'] {
  let fallback: MergedImageParts['bootloader'];
  // A later candidate inside an image already found is that image's data, not a header.
  let coveredUntil = 0;
  for (const offset of BOOTLOADER_CANDIDATES) {
    if (offset < coveredUntil || bytes[offset] !== IMAGE_MAGIC) continue;
    const rest = bytes.subarray(offset);
    let header: ImageHeader;
    try {
      header = readImageHeader(rest);
    } catch {
      continue;
    }
    const chip = header.chip;
    if (chip === undefined || header.segmentCount === 0) continue;
    const expected = bootloaderOffset(chip) === offset;
    let image: AppImage;
    if (expected) {
      // Where the ROM looks for it: a damaged image here is an error worth reporting.
      image = readAppImage(rest);
    } else {
      // Elsewhere 0xE9 may be a stray byte; keep the candidate only if it parses.
      try {
        image = readAppImage(rest);
      } catch {
        continue;
      }
    }
    coveredUntil = offset + image.size;
    // An image with an app description is an app (e.g. a bare xiaozhi.bin), not a bootloader.
    if (image.appDescription !== undefined) continue;
    if (expected) return { offset, image };
    fallback ??= { offset, image };
  }
  return fallback;
}

/**
 * Splits a merged image (or a whole flash dump) into its parts: the bootloader (found by
 * trying 0x0, 0x1000 and 0x2000 for the magic 0xE9 and preferring the offset its chip id
 * calls for), the partition table at 0x8000, and every app partition that starts with
 * 0xE9, each with its parsed image. Checksums, hashes and the table MD5 are reported,
 * not thrown; a damaged image structure throws as {@link readAppImage} does.
 */
export function readMergedImage(bytes: Uint8Array): MergedImageParts {
  const bootloader = findBootloader(bytes);
  const hasTable =
    bytes[PARTITION_TABLE_OFFSET] === 0xaa && bytes[PARTITION_TABLE_OFFSET + 1] === 0x50;
  const partitionTable = hasTable
    ? readPartitionTable(bytes.subarray(PARTITION_TABLE_OFFSET))
    : undefined;
  const apps: MergedImageApp[] = [];
  for (const partition of partitionTable?.partitions ?? []) {
    if (partition.type !== PARTITION_TYPE_APP) continue;
    if (bytes[partition.offset] !== IMAGE_MAGIC) continue;
    const slice = bytes.subarray(partition.offset, partition.offset + partition.size);
    const image = readAppImage(slice);
    apps.push({ partition, image, board: readAppBoard(slice, image) });
  }
  const result: MergedImageParts = {
    apps,
    chip: bootloader?.image.chip ?? apps[0]?.image.chip,
    size: bytes.length,
  };
  if (bootloader !== undefined) result.bootloader = bootloader;
  if (partitionTable !== undefined) result.partitionTable = partitionTable;
  return result;
}

function invalid(message: string): FirmwareError {
  return new FirmwareError('OPTION_INVALID', message);
}

/**
 * esptool merge_bin: one image starting at flash offset 0 with each part at its offset,
 * 0xFF between parts and (with `size`) up to `size`. Overlapping parts, or parts that do
 * not fit in `size`, throw `OPTION_INVALID`.
 */
export function mergeImages(
  parts: readonly MergePart[],
  options: MergeImagesOptions = {},
): Uint8Array {
  parts.forEach((part, index) => {
    if (!Number.isInteger(part.offset) || part.offset < 0 || part.offset > 0xffff_ffff) {
      throw invalid(`parts[${index}].offset must be an integer from 0 to 0xffffffff`);
    }
  });
  const sorted = parts.filter((part) => part.data.length > 0).sort((a, b) => a.offset - b.offset);
  let end = 0;
  let previous: MergePart | undefined;
  for (const part of sorted) {
    if (previous !== undefined && part.offset < end) {
      throw invalid(
        `the part at ${hex(part.offset)} overlaps the part at ${hex(previous.offset)}-${hex(end - 1)}`,
      );
    }
    end = part.offset + part.data.length;
    previous = part;
  }
  let total = end;
  if (options.size !== undefined) {
    const size = options.size;
    if (!Number.isInteger(size) || size < 0) throw invalid(`size must be a non-negative integer`);
    if (end > size) throw invalid(`the parts end at ${hex(end)}, past the size ${hex(size)}`);
    total = size;
  }
  const out = new Uint8Array(total).fill(0xff);
  for (const part of sorted) out.set(part.data, part.offset);
  return out;
}
