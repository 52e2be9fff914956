/**
 * Virtual xiaozhi firmware: a small but structurally valid release for a chip, shaped like
 * what the xiaozhi-esp32 build ships: `merged-binary.bin` (bootloader, partition table,
 * app) and `xiaozhi.bin` (the OTA app image). Every checksum, appended SHA-256 and the table
 * MD5 are correct, so the readers here, esptool's `image_info` and a virtual board's
 * flasher all accept it. Nothing in it runs: segment contents are filler.
 *
 * The board: esp_app_desc_t has no board field. A real xiaozhi build compiles its board
 * name (BOARD_NAME) into the app as a string constant in .rodata; the virtual app carries
 * it the same way, as the string `XIAOZHI_BOARD=<name>` + NUL in a read-only data segment
 * (mapped from flash, right after the app description segment), which
 * {@link readVirtualFirmwareBoard} and `readMergedImage` find by its prefix.
 */
import { createHash } from 'node:crypto';
import type { AppImage, BuildAppImageOptions } from './app-image.js';
import {
  APP_DESC_SIZE,
  buildAppImage,
  IMAGE_HEADER_SIZE,
  IMAGE_MAGIC,
  readAppImage,
  SEGMENT_HEADER_SIZE,
  writeImage,
} from './app-image.js';
import type { ChipName } from './chips.js';
import { chipByName } from './chips.js';
import { FirmwareError } from './errors.js';
import {
  BOARD_MARKER,
  bootloaderOffset,
  mergeImages,
  readAppBoard,
  readMergedImage,
} from './merged-image.js';
import type { PartitionInput } from './partition-table.js';
import {
  PARTITION_TABLE_OFFSET,
  PARTITION_TYPE_APP,
  readPartitionTable,
  writePartitionTable,
  XIAOZHI_PARTITIONS_4M,
  XIAOZHI_PARTITIONS_8M,
  XIAOZHI_PARTITIONS_16M,
} from './partition-table.js';

export interface VirtualFirmwareOptions {
  chip: ChipName;
  /** The app description's version (at most 31 bytes). */
  version: string;
  /** Default `xiaozhi`. */
  projectName?: string;
  /** Board name, e.g. `bread-compact-wifi`: 1 to 64 printable ASCII characters, no spaces. */
  board: string;
  /** Selects the xiaozhi v2 partition table; default 16. */
  flashSizeMb?: 4 | 8 | 16 | undefined;
  /** Default `v5.5` (buildAppImage's default). */
  idfVersion?: string;
  /** Default false: the merged image ends after the app; true: padded with 0xFF to the flash size. */
  padToFlashSize?: boolean;
  /**
   * The chip revisions the build runs on, written into the bootloader's and the app's headers as
   * ESP-IDF writes its Kconfig minimum and maximum (major * 100 + minor; default 0 and 0: none).
   */
  minChipRevFull?: number;
  maxChipRevFull?: number;
}

export interface VirtualFirmware {
  /** `merged-binary.bin`, flashed at 0x0. */
  merged: Uint8Array;
  /** `xiaozhi.bin`, the OTA app image. */
  app: Uint8Array;
  bootloader: Uint8Array;
  /** `partition-table.bin`, 0xC00 bytes. */
  partitionTable: Uint8Array;
  /** Flash offset of the first app partition (ota_0 at 0x20000, or factory at 0x10000 on 4 MB). */
  appOffset: number;
  board: string;
  version: string;
  chip: ChipName;
}

interface RamLayout {
  bootloaderDram: number;
  bootloaderIram: number;
  appDram: number;
  appIram: number;
}

/**
 * Representative load addresses in each chip's internal SRAM (bootloader near the top,
 * where ESP-IDF links it so it can load the app below). Nothing here checks them; they
 * only keep the images looking like the real thing.
 */
function ramLayout(chip: ChipName): RamLayout {
  switch (chip) {
    case 'esp32':
      return {
        bootloaderDram: 0x3fff_0000,
        bootloaderIram: 0x4007_8000,
        appDram: 0x3ffb_0000,
        appIram: 0x4008_0000,
      };
    case 'esp32s2':
      return {
        bootloaderDram: 0x3ffe_8000,
        bootloaderIram: 0x4005_0000,
        appDram: 0x3ffb_e000,
        appIram: 0x4002_2000,
      };
    case 'esp32c3':
    case 'esp32c2':
      return {
        bootloaderDram: 0x3fcd_5800,
        bootloaderIram: 0x403c_e000,
        appDram: 0x3fc8_a000,
        appIram: 0x4038_0000,
      };
    case 'esp32s3':
      return {
        bootloaderDram: 0x3fce_3800,
        bootloaderIram: 0x403c_9700,
        appDram: 0x3fc9_2000,
        appIram: 0x4037_8000,
      };
    case 'esp32p4':
      return {
        bootloaderDram: 0x4ff2_9000,
        bootloaderIram: 0x4ff2_d000,
        appDram: 0x4ff1_0000,
        appIram: 0x4ff0_0000,
      };
    default:
      // C5, C6, C61, H2, H21, H4: one SRAM at 0x40800000 for both code and data.
      return {
        bootloaderDram: 0x4083_0000,
        bootloaderIram: 0x4083_8000,
        appDram: 0x4081_0000,
        appIram: 0x4080_0000,
      };
  }
}

/** esp_image_flash_size_t: 2 = 4 MB, 3 = 8 MB, 4 = 16 MB. */
const SPI_SIZE: Readonly<Record<number, number>> = { 4: 2, 8: 3, 16: 4 };
const PARTITIONS: Readonly<Record<number, readonly PartitionInput[]>> = {
  4: XIAOZHI_PARTITIONS_4M,
  8: XIAOZHI_PARTITIONS_8M,
  16: XIAOZHI_PARTITIONS_16M,
};
const SPI_MODE_DIO = 2;
const SPI_SPEED_80M = 0xf;
const BOARD_PATTERN = /^[\x21-\x7e]{1,64}$/;

function invalid(message: string): FirmwareError {
  return new FirmwareError('OPTION_INVALID', message);
}

/** Deterministic filler bytes, so the same options always give the same image. */
function filler(seed: string, length: number): Uint8Array {
  const out = new Uint8Array(length);
  let block = createHash('sha256').update(seed).digest();
  for (let at = 0; at < length; at += block.length) {
    out.set(block.subarray(0, Math.min(block.length, length - at)), at);
    block = createHash('sha256').update(block).digest();
  }
  return out;
}

function padTo4(data: Uint8Array): Uint8Array {
  const out = new Uint8Array(Math.ceil(data.length / 4) * 4);
  out.set(data);
  return out;
}

/**
 * A second-stage bootloader image for `chip`: three RAM segments (data, loader code, code),
 * none starting with an app description, checksum, and the SHA-256 except on the ESP32,
 * whose ROM does not check it (the corpus ESP32 bootloader has none either).
 */
export function buildVirtualBootloader(
  chip: ChipName,
  flashSizeMb: 4 | 8 | 16 = 16,
  revisions: Pick<VirtualFirmwareOptions, 'minChipRevFull' | 'maxChipRevFull'> = {},
): Uint8Array {
  const info = chipByName(chip);
  const ram = ramLayout(info.name);
  const text = new TextEncoder().encode(`xiaozhi-mcp virtual bootloader for ${info.name}\0`);
  const segments = [
    { loadAddress: ram.bootloaderDram, data: padTo4(text) },
    { loadAddress: ram.bootloaderIram, data: filler(`${info.name}/loader`, 256) },
    { loadAddress: ram.bootloaderIram + 0x2000, data: filler(`${info.name}/text`, 512) },
  ];
  // The ESP32's ROM does not check a bootloader hash (the corpus ESP32 bootloader has none).
  return writeImage(
    {
      chipId: info.id,
      spiMode: SPI_MODE_DIO,
      spiSizeSpeed: ((SPI_SIZE[flashSizeMb] ?? 4) << 4) | SPI_SPEED_80M,
      entryAddress: ram.bootloaderIram + 0x2000,
      hashAppended: info.name !== 'esp32',
      ...revisions,
    },
    segments,
  );
}

/**
 * Builds a virtual xiaozhi release: bootloader at the chip's bootloader offset, the v2
 * partition table for the flash size at 0x8000, and the app (project, version, board) at
 * the first app partition. Throws `OPTION_INVALID` or `CHIP_UNKNOWN` for bad options.
 */
export function buildVirtualFirmware(options: VirtualFirmwareOptions): VirtualFirmware {
  const chip = chipByName(options.chip);
  const flashSizeMb = options.flashSizeMb ?? 16;
  const partitions = PARTITIONS[flashSizeMb];
  const spiSize = SPI_SIZE[flashSizeMb];
  if (partitions === undefined || spiSize === undefined) {
    throw invalid(`flashSizeMb must be 4, 8 or 16, got ${flashSizeMb}`);
  }
  if (!BOARD_PATTERN.test(options.board)) {
    throw invalid(
      `board must be 1 to 64 printable ASCII characters without spaces, got "${options.board}"`,
    );
  }
  const projectName = options.projectName ?? 'xiaozhi';
  const ram = ramLayout(chip.name);

  const partitionTable = writePartitionTable(partitions);
  const appPartition = readPartitionTable(partitionTable)
    .partitions.filter((p) => p.type === PARTITION_TYPE_APP)
    .sort((a, b) => a.offset - b.offset)[0];
  if (appPartition === undefined) throw invalid('the partition table has no app partition');

  // The rodata segment is mapped from flash like the first one, so its load address keeps
  // the image offset of its data (0x20 + the app description + a segment header).
  const rodataOffset =
    IMAGE_HEADER_SIZE + SEGMENT_HEADER_SIZE + APP_DESC_SIZE + SEGMENT_HEADER_SIZE;
  const rodata = new TextEncoder().encode(`${BOARD_MARKER}${options.board}\0`);
  const identity = `${chip.name}/${projectName}/${options.version}/${options.board}`;
  const revisions = {
    ...(options.minChipRevFull === undefined ? {} : { minChipRevFull: options.minChipRevFull }),
    ...(options.maxChipRevFull === undefined ? {} : { maxChipRevFull: options.maxChipRevFull }),
  };
  const appOptions: BuildAppImageOptions = {
    chip: chip.name,
    version: options.version,
    projectName,
    idfVersion: options.idfVersion,
    // A stand-in for the ELF hash: differs whenever chip, project, version or board do.
    elfSha256: createHash('sha256').update(identity).digest('hex'),
    mmuPageSizeLog2: 16,
    spiSize,
    entryAddress: ram.appIram,
    ...revisions,
    segments: [
      { loadAddress: chip.dromBase + rodataOffset, data: rodata },
      { loadAddress: ram.appDram, data: filler(`${identity}/data`, 64) },
      { loadAddress: ram.appIram, data: filler(`${identity}/iram`, 256) },
    ],
  };
  const app = buildAppImage(appOptions);
  if (app.length > appPartition.size) {
    throw invalid(`the app (${app.length} bytes) does not fit "${appPartition.label}"`);
  }

  const bootloader = buildVirtualBootloader(chip.name, flashSizeMb, revisions);
  const bootOffset = bootloaderOffset(chip.name);
  if (bootOffset + bootloader.length > PARTITION_TABLE_OFFSET) {
    throw invalid('the bootloader runs into the partition table');
  }
  const mergeOptions = options.padToFlashSize === true ? { size: flashSizeMb * 0x10_0000 } : {};
  const merged = mergeImages(
    [
      { offset: bootOffset, data: bootloader },
      { offset: PARTITION_TABLE_OFFSET, data: partitionTable },
      { offset: appPartition.offset, data: app },
    ],
    mergeOptions,
  );
  return {
    merged,
    app,
    bootloader,
    partitionTable,
    appOffset: appPartition.offset,
    board: options.board,
    version: options.version,
    chip: chip.name,
  };
}

/**
 * The board name carried by a virtual (or any marked) firmware: from an app image
 * (`xiaozhi.bin`; pass its parsed `image` to skip parsing again) or from a merged image
 * (the first app partition's). Undefined when there is no `XIAOZHI_BOARD=` string.
 * An {@link AppImage} alone is not enough: it holds segment offsets, not their bytes.
 */
export function readVirtualFirmwareBoard(bytes: Uint8Array, image?: AppImage): string | undefined {
  if (image !== undefined) return readAppBoard(bytes, image);
  if (bytes[0] === IMAGE_MAGIC) {
    const parsed = readAppImage(bytes);
    if (parsed.appDescription !== undefined) return readAppBoard(bytes, parsed);
  }
  return readMergedImage(bytes).apps[0]?.board;
}
