/**
 * Flashing a firmware file onto a board: where the file goes (a merged image at 0x0, an app
 * image at an app partition, raw data only at an explicit offset), whether the board can take
 * it (flash size, app slot), and the {@link Flasher} wired to a resolved port. The `flash`
 * command and `hil run` both go through here.
 */
import {
  type ChipName,
  FirmwareError,
  identifyImage,
  type PartitionTable,
} from '@xiaozhi-mcp/firmware';
import { SerialError } from './errors.js';
import {
  type ConnectedChip,
  Flasher,
  type FlasherOptions,
  type FlashOptions,
  type FlashResult,
} from './flasher.js';
import type { ResolvedPort } from './port-provider.js';
import { NodeWebSerialPort } from './web-serial.js';

const SECTOR = 0x1000;

/** What is in the image file and where it goes. */
export interface ImageToFlash {
  readonly kind: 'merged' | 'app' | 'data';
  /** Undefined for an app image whose slot is read from the board (its first app partition). */
  readonly offset: number | undefined;
  readonly data: Uint8Array;
  readonly chip?: ChipName;
  readonly version?: string;
  readonly project?: string;
  readonly board?: string;
  /** Merged images: the end of the last partition, to refuse a board with a smaller flash. */
  readonly partitionsEnd?: number;
}

export function hex(value: number): string {
  return `0x${value.toString(16)}`;
}

function invalid(message: string): SerialError {
  return new SerialError('OPTION_INVALID', message);
}

/** `--offset`: a sector-aligned flash offset, hex (`0x20000`) or decimal. */
export function parseOffset(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  const offset = /^0x[0-9a-f]+$/i.test(text)
    ? Number.parseInt(text.slice(2), 16)
    : /^\d+$/.test(text)
      ? Number(text)
      : Number.NaN;
  if (!Number.isSafeInteger(offset))
    throw invalid(`--offset must be a flash offset such as 0x20000, got ${JSON.stringify(value)}`);
  // The flasher erases whole 4 KiB sectors: an unaligned offset would erase the data before it.
  if (offset % SECTOR !== 0)
    throw invalid(`--offset ${value} is not a multiple of 0x1000 (a flash sector)`);
  return offset;
}

/**
 * Reads what the file is and where it goes: a merged image (bootloader and partition table)
 * belongs at 0x0; an app image (xiaozhi.bin) at an app partition (`offset`; undefined uses the
 * board's first app partition unless `appNeedsOffset`); anything else only at an explicit
 * non-zero offset.
 * Throws `OPTION_INVALID` (bad input, nothing touched) otherwise.
 */
export function placeImage(
  file: string,
  data: Uint8Array,
  offset: number | undefined,
  options: { readonly appNeedsOffset?: boolean } = {},
): ImageToFlash {
  let identified: ReturnType<typeof identifyImage>;
  try {
    identified = identifyImage(data);
  } catch (error) {
    throw invalid(
      `${file} is a damaged image: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  if (identified.kind === 'app') {
    const { app } = identified;
    if (offset === 0 || (offset === undefined && options.appNeedsOffset === true)) {
      throw invalid(
        `${file} is an app image (${app.project} ${app.version}), not a merged image: flash it at its app partition with --offset (e.g. --offset 0x20000 for ota_0), or flash the merged image at 0x0`,
      );
    }
    return {
      kind: 'app',
      offset,
      data,
      ...(app.chip === undefined ? {} : { chip: app.chip }),
      version: app.version,
      project: app.project,
      ...(app.board === undefined ? {} : { board: app.board }),
    };
  }
  if (
    identified.kind === 'merged' &&
    identified.merged.bootloader !== undefined &&
    identified.merged.partitionTable !== undefined
  ) {
    if (offset !== undefined && offset !== 0)
      throw invalid(
        `${file} is a merged image: it belongs at 0x0, not ${hex(offset)}; drop --offset`,
      );
    const { app } = identified;
    return {
      kind: 'merged',
      offset: 0,
      data,
      ...(identified.chip === undefined ? {} : { chip: identified.chip }),
      ...(app === undefined ? {} : { version: app.version, project: app.project }),
      ...(app?.board === undefined ? {} : { board: app.board }),
      partitionsEnd: identified.partitionsEnd,
    };
  }
  if (offset === undefined || offset === 0) {
    throw invalid(
      `${file} is neither a merged image (bootloader + partition table) nor an app image; raw data needs an explicit non-zero --offset`,
    );
  }
  return { kind: 'data', offset, data };
}

export function describeImage(image: ImageToFlash): string {
  const what =
    image.kind === 'merged' ? 'merged image' : image.kind === 'app' ? 'app image' : 'raw data';
  const app =
    image.version === undefined
      ? ''
      : `, ${image.project ?? 'app'} ${image.version}${image.board === undefined ? '' : ` for ${image.board}`}`;
  const chip = image.chip === undefined ? '' : ` for ${image.chip}`;
  const where = image.offset === undefined ? 'its app partition' : hex(image.offset);
  return `${what}${chip}${app}, ${image.data.length} bytes at ${where}`;
}

export function describeChip(chip: ConnectedChip): string {
  const flash = chip.flashSizeMb === undefined ? '' : `, ${chip.flashSizeMb} MB flash`;
  return `${chip.description}, MAC ${chip.mac}${flash}`;
}

export function formatBytes(bytes: number): string {
  if (bytes >= 1024 * 1024) return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
  if (bytes >= 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${bytes} bytes`;
}

/**
 * A Flasher on a resolved port: the same for a real and a provided (virtual) board. `reset`
 * (default `auto`) is how it gets the board into download mode; `auto` goes by the port's USB
 * ids, or its kind where it has none (an rfc2217:// port: the server's signature), so only a
 * native-USB board named by a bare path needs `reset: 'usb-jtag'`.
 */
export function flasherFor(
  port: ResolvedPort,
  options: Omit<FlasherOptions, 'port'> = {},
): Flasher {
  return new Flasher({
    portKind: port.info.kind,
    ...options,
    port: NodeWebSerialPort.fromPortInfo(port.binding, { ...port.info, path: port.path }),
  });
}

/**
 * Refuses what the board cannot take (a partition table for a bigger flash, an app off its
 * slot or too big for it) and returns the offset the image goes to.
 */
function fitOffset(
  image: ImageToFlash,
  chip: ConnectedChip,
  table: PartitionTable | undefined,
): number {
  const flashBytes = chip.flashSizeMb === undefined ? undefined : chip.flashSizeMb * 1024 * 1024;
  if (
    image.kind === 'merged' &&
    flashBytes !== undefined &&
    (image.partitionsEnd ?? 0) > flashBytes
  ) {
    throw invalid(
      `the image's partition table needs ${Math.ceil((image.partitionsEnd ?? 0) / 1024 / 1024)} MB of flash, the board has ${chip.flashSizeMb} MB; use the build for ${chip.flashSizeMb} MB boards`,
    );
  }
  if (image.kind !== 'app') return image.offset ?? 0;
  if (table === undefined) {
    throw new SerialError(
      'FLASH_FAILED',
      'the board has no valid partition table at 0x8000, so an app image has nowhere to go; flash a merged image first',
    );
  }
  const apps = table.partitions.filter((p) => p.typeName === 'app');
  const slot = image.offset === undefined ? apps[0] : apps.find((p) => p.offset === image.offset);
  if (slot === undefined) {
    throw invalid(
      `${image.offset === undefined ? 'the board has no app partition' : `${hex(image.offset)} is not an app partition on this board`}; its app partitions: ${apps.map((p) => `${p.label} at ${hex(p.offset)}`).join(', ') || 'none'}`,
    );
  }
  if (image.data.length > slot.size) {
    throw invalid(
      `the app image (${image.data.length} bytes) does not fit ${slot.label} (${slot.size} bytes)`,
    );
  }
  return slot.offset;
}

export interface FlashImageResult extends FlashResult {
  /** Where the image went. */
  readonly offset: number;
}

/**
 * Writes `image` to the board `flasher` is connected to (`chip`): checks that it fits, then
 * flashes it with MD5 verification, stepping down the flasher's baud ladder after a failed write.
 */
export async function flashImage(
  flasher: Flasher,
  chip: ConnectedChip,
  image: ImageToFlash,
  options: FlashOptions = {},
): Promise<FlashImageResult> {
  let table: PartitionTable | undefined;
  if (image.kind === 'app') {
    table = await flasher.readPartitionTable().catch((error: unknown) => {
      if (error instanceof FirmwareError && error.code === 'PARTITION_INVALID') return undefined;
      throw error;
    });
  }
  const offset = fitOffset(image, chip, table);
  const result = await flasher.flash([{ offset, data: image.data }], options);
  return { ...result, offset };
}
