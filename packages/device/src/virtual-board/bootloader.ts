/**
 * The board's boot ROM and second-stage bootloader, and its flash: the ROM banner, the
 * partition table, the app image in the first app partition, and the NVS partition (read at
 * boot, written back after every change, as `nvs_commit` does). Installing an app (a flasher
 * or an OTA upgrade) writes it to the app partition. Without a modelled flash, only the banner
 * and the image checks remain.
 */
import {
  type AppDescription,
  bootloaderOffset,
  type ChipName,
  findPartition,
  PARTITION_TABLE_MAX_SIZE,
  PARTITION_TABLE_OFFSET,
  PARTITION_TYPE_APP,
  type Partition,
  type PartitionTable,
  readAppImage,
  readNvsPartition,
  readPartitionTable,
  readVirtualFirmwareBoard,
  writeNvsPartition,
} from '@xiaozhi-mcp/firmware';
import type { BoardConsole } from '../console.js';
import { DeviceError } from '../errors.js';
import type { FlashStorage } from '../flash-storage.js';
import type { NvsStorage } from '../nvs-storage.js';
import { type ConsoleOutput, print, type ResetReason, type RunningApp } from './types.js';

/** The image magic byte every bootloader and app image starts with. */
const IMAGE_MAGIC = 0xe9;

/** `rst:` as the ROM prints each reset reason. */
export const RESET_CODES: Readonly<Record<ResetReason, string>> = {
  POWERON: '0x1 (POWERON)',
  RTC_SW_CPU_RST: '0xc (RTC_SW_CPU_RST)',
  // A system software reset (the ROM's `software_reset`, which esptool's flasher stub calls
  // after FLASH_END asking to reboot; ESP-IDF's `esp_rom_software_reset_system`): the ESP32-S3
  // ROM (ESP-ROM:esp32s3-20210327) prints `rst:0x3 (RTC_SW_SYS_RST)`.
  RTC_SW_SYS_RST: '0x3 (RTC_SW_SYS_RST)',
  RTC_WDT_RTC_RST: '0x10 (RTC_WDT_RTC_RST)',
  EXT_SYS_RST: '0x15 (USB_UART_HPSYS)',
};

/**
 * What the ROM prints coming out of reset, then (booting from flash) the bootloader's first
 * line. In download mode the ROM waits for a flasher instead.
 */
export function romBanner(
  chip: ChipName,
  reason: ResetReason,
  download: boolean,
  idfVersion: string,
): ConsoleOutput[] {
  const boot = download ? '0x0 (DOWNLOAD(USB/UART0))' : '0x8 (SPI_FAST_FLASH_BOOT)';
  const banner: ConsoleOutput[] = [
    { raw: `ESP-ROM:${chip}-20210327` },
    { raw: 'Build:Mar 27 2021' },
    { raw: `rst:${RESET_CODES[reason]},boot:${boot}` },
  ];
  if (download) return [...banner, { raw: 'waiting for download' }];
  return [
    ...banner,
    { raw: 'SPIWP:0xee' },
    { raw: 'mode:DIO, clock div:1' },
    { raw: 'entry 0x403c8924' },
    { level: 'I', tag: 'boot', text: `ESP-IDF ${idfVersion} 2nd stage bootloader` },
  ];
}

const hex8 = (value: number): string => value.toString(16).padStart(8, '0');

/** The bootloader's `Partition Table:` listing, one line per partition. */
export function partitionListing(partitions: readonly Partition[]): string[] {
  return [
    'Partition Table:',
    ...partitions.map(
      (p, i) =>
        `${String(i).padStart(2)} ${p.label.padEnd(16)} ${p.typeName.padEnd(4)} ${p.subtypeName.padEnd(8)} ${hex8(p.offset)} ${hex8(p.size)}`,
    ),
  ];
}

/** The partition the bootloader starts the app from: the first factory or ota_0 app partition. */
export function appPartitionOf(partitions: readonly Partition[]): Partition | undefined {
  return partitions.find(
    (p) => p.type === PARTITION_TYPE_APP && (p.subtype === 0x00 || p.subtype === 0x10),
  );
}

/** The running app an image's app description makes. */
export function runningApp(description: AppDescription): RunningApp {
  return {
    projectName: description.projectName,
    version: description.version,
    idfVersion: description.idfVersion,
    elfSha256: description.elfSha256,
    compileTime: `${description.date}T${description.time}Z`,
  };
}

/** The line the ROM or the bootloader prints when it cannot start an app (before it resets). */
export function bootFailureLine(error: Error): string {
  return error.message.startsWith('invalid header') ? error.message : `E boot: ${error.message}`;
}

function invalidHeader(bytes: Uint8Array): DeviceError {
  const word = Buffer.from(bytes.subarray(0, 4)).readUInt32LE(0);
  return new DeviceError('FLASH_INVALID', `invalid header: 0x${hex8(word)}`);
}

/**
 * Checks an app image as the OTA code does before it writes it (app description, checksum and
 * hash, chip) and returns the app it describes. Throws `OTA_DOWNLOAD_FAILED`.
 */
export function checkAppImage(image: Uint8Array, chip: ChipName): RunningApp {
  const read = readAppImage(image);
  const description = read.appDescription;
  if (description === undefined)
    throw new DeviceError('OTA_DOWNLOAD_FAILED', 'the image has no app description');
  if (!read.checksum.valid || read.hash?.valid === false) {
    throw new DeviceError('OTA_DOWNLOAD_FAILED', 'Image validation failed, image is corrupted');
  }
  if (read.chip !== chip) {
    throw new DeviceError(
      'OTA_DOWNLOAD_FAILED',
      `the image is built for ${read.chip}, this board is ${chip}`,
    );
  }
  return runningApp(description);
}

/** What the bootloader knows of the flash (see {@link Bootloader.flashFacts}). */
export interface FlashFacts {
  readonly sizeBytes: number;
  /** Undefined when no valid partition table is in flash. */
  readonly partitions: readonly Partition[] | undefined;
  readonly running: Partition | undefined;
}

export interface BootloaderOptions {
  readonly flash: FlashStorage | undefined;
  readonly storage: NvsStorage;
  readonly console: BoardConsole;
  readonly chip: ChipName;
  /** The board's preset name: an image built for another board boots with a warning. */
  readonly board: string;
}

export class Bootloader {
  readonly #options: BootloaderOptions;
  /** The partition table and app partition of the last boot from flash, if it got that far. */
  #table: PartitionTable | undefined;
  #running: Partition | undefined;
  /** The NVS partition changes are written back to (kept from the last boot that found one). */
  #nvsPartition: Partition | undefined;
  #loadingNvs = false;

  constructor(options: BootloaderOptions) {
    this.#options = options;
  }

  get flash(): FlashStorage | undefined {
    return this.#options.flash;
  }

  /**
   * The partition table in the board's flash: the one the last boot read (what the running
   * firmware's `esp_partition_*` calls see), else the one in flash now. Undefined without a
   * flash or when no valid table is there.
   */
  partitionTable(): PartitionTable | undefined {
    return this.#table ?? this.#readTable();
  }

  /** The app partition the last boot started from, else the one the table in flash names. */
  runningPartition(): Partition | undefined {
    if (this.#running !== undefined) return this.#running;
    const table = this.#readTable();
    return table === undefined ? undefined : appPartitionOf(table.partitions);
  }

  /**
   * The flash as the system info reports it: its size, the partition table and the running
   * app partition. Undefined without a modelled flash.
   */
  flashFacts(): FlashFacts | undefined {
    const flash = this.flash;
    if (flash === undefined) return undefined;
    return {
      sizeBytes: flash.size,
      partitions: this.partitionTable()?.partitions,
      running: this.runningPartition(),
    };
  }

  /** The ROM banner (and the bootloader's first line) after a reset. */
  banner(reason: ResetReason, download: boolean, idfVersion: string): void {
    this.#options.console.resetClock();
    print(this.#options.console, romBanner(this.#options.chip, reason, download, idfVersion));
  }

  /**
   * Reads what the second-stage bootloader and the app read from flash: the partition table,
   * the app image at the first app partition, and the NVS partition (into the board's storage).
   * Returns the app to run, or undefined without a modelled flash (the app and NVS then live in
   * memory). Throws FLASH_INVALID.
   */
  load(): RunningApp | undefined {
    const { console, chip, board, storage, flash } = this.#options;
    if (flash === undefined) return undefined;
    this.#table = undefined;
    this.#running = undefined;
    // The ROM first checks the second-stage bootloader's image header.
    const header = flash.read(bootloaderOffset(chip), 4);
    if (header[0] !== IMAGE_MAGIC) throw invalidHeader(header);
    let table: PartitionTable;
    try {
      table = readPartitionTable(flash.read(PARTITION_TABLE_OFFSET, PARTITION_TABLE_MAX_SIZE));
    } catch (error) {
      throw new DeviceError(
        'FLASH_INVALID',
        `Failed to verify partition table: ${(error as Error).message}`,
        { cause: error },
      );
    }
    const partition = appPartitionOf(table.partitions);
    if (partition === undefined)
      throw new DeviceError('FLASH_INVALID', 'no app partition in the partition table');
    for (const line of partitionListing(table.partitions)) console.log('I', 'boot', line);
    const image = flash.read(partition.offset, partition.size);
    if (image[0] !== IMAGE_MAGIC) throw invalidHeader(image);
    const read = readAppImage(image);
    const description = read.appDescription;
    if (description === undefined || !read.checksum.valid || read.hash?.valid === false) {
      throw new DeviceError(
        'FLASH_INVALID',
        `image at 0x${partition.offset.toString(16)} is corrupted (checksum or hash)`,
      );
    }
    console.log(
      'I',
      'boot',
      `Loaded app from partition at offset 0x${partition.offset.toString(16)}`,
    );
    const app = runningApp(description);
    const builtFor = readVirtualFirmwareBoard(image);
    if (builtFor !== undefined && builtFor !== board) {
      console.log('W', 'Board', `this firmware was built for ${builtFor}, not ${board}`);
    }
    this.#table = table;
    this.#running = partition;
    this.#nvsPartition =
      findPartition(table, { label: 'nvs' }) ??
      findPartition(table, { type: 'data', subtype: 'nvs' });
    const nvs = this.#nvsPartition;
    if (nvs !== undefined) {
      const bytes = flash.read(nvs.offset, nvs.size);
      // An erased partition (after a full-flash write) is an empty NVS: nvs_flash_init formats it.
      this.#loadingNvs = true;
      try {
        storage.load(bytes.every((b) => b === 0xff) ? [] : readNvsPartition(bytes));
      } finally {
        this.#loadingNvs = false;
      }
    }
    return app;
  }

  /**
   * Checks an app image and writes it to the app partition of the table in flash (when the
   * board has a flash); it runs from the next boot. Throws `OTA_DOWNLOAD_FAILED`.
   */
  install(image: Uint8Array): RunningApp {
    const app = checkAppImage(image, this.#options.chip);
    const flash = this.flash;
    const table = this.#readTable();
    const partition = table === undefined ? undefined : appPartitionOf(table.partitions);
    if (partition !== undefined && flash !== undefined) {
      if (image.length > partition.size)
        throw new DeviceError(
          'OTA_DOWNLOAD_FAILED',
          `the image (${image.length} bytes) does not fit ${partition.label}`,
        );
      flash.program(partition.offset, image);
    }
    return app;
  }

  /** Writes the NVS partition back after a change, as nvs_set_* followed by nvs_commit does. */
  persistNvs(): void {
    const flash = this.flash;
    const partition = this.#nvsPartition;
    if (flash === undefined || partition === undefined || this.#loadingNvs) return;
    flash.program(
      partition.offset,
      writeNvsPartition(this.#options.storage.nvsEntries(), partition.size),
    );
  }

  #readTable(): PartitionTable | undefined {
    if (this.flash === undefined) return undefined;
    try {
      return readPartitionTable(this.flash.read(PARTITION_TABLE_OFFSET, PARTITION_TABLE_MAX_SIZE));
    } catch {
      return undefined;
    }
  }
}
