/**
 * `flash <image>`: writes a firmware build to a board through esptool-js (the firmware
 * package's {@link Flasher}): a merged image at 0x0, or an app image (or raw data) at
 * `--offset`. Connects with esptool's reset into download mode, refuses an image for another
 * chip or flash size, writes compressed with MD5 verification, retries once at a lower baud
 * rate (and says so), and hard-resets the board into its new firmware.
 */
import { readFile } from 'node:fs/promises';
import {
  type ConnectedChip,
  FirmwareError,
  Flasher,
  type FlashPart,
  type FlashProgress,
  NodeWebSerialPort,
  type PartitionTable,
  readAppImage,
  readMergedImage,
  readVirtualFirmwareBoard,
} from '@xiaozhi-mcp/firmware';
import { Presets, SingleBar } from 'cli-progress';
import { type Command, Option } from 'commander';
import {
  openCommandPort,
  type PortOptions,
  parseBaud,
  type ResolvedPort,
  runReported,
  type SerialCommandContext,
  SerialCommandError,
  usageError,
} from './port-resolver.js';

export const DEFAULT_FLASH_BAUD = 921_600;
/** The retry after a failed write: the ROM's own rate, which every cable and bridge manages. */
export const RETRY_FLASH_BAUD = 115_200;
const SECTOR = 0x1000;

export interface FlashCommandOptions extends PortOptions {
  readonly baud?: string;
  readonly offset?: string;
}

/** What is in the image file and where it goes. */
export interface ImageToFlash {
  readonly kind: 'merged' | 'app' | 'data';
  readonly offset: number;
  readonly data: Uint8Array;
  readonly chip?: string;
  readonly version?: string;
  readonly project?: string;
  readonly board?: string;
  /** Merged images: the end of the last partition, to refuse a board with a smaller flash. */
  readonly partitionsEnd?: number;
}

export function hex(value: number): string {
  return `0x${value.toString(16)}`;
}

function parseOffset(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  const offset = /^0x[0-9a-f]+$/i.test(text)
    ? Number.parseInt(text.slice(2), 16)
    : /^\d+$/.test(text)
      ? Number(text)
      : Number.NaN;
  if (!Number.isSafeInteger(offset))
    throw usageError(
      `--offset must be a flash offset such as 0x20000, got ${JSON.stringify(value)}`,
    );
  // The flasher erases whole 4 KiB sectors: an unaligned offset would erase the data before it.
  if (offset % SECTOR !== 0)
    throw usageError(`--offset ${value} is not a multiple of 0x1000 (a flash sector)`);
  return offset;
}

/**
 * Reads what the file is: a merged image (bootloader and partition table) belongs at 0x0; an
 * app image (xiaozhi.bin) at its app partition, given by `--offset`; anything else (assets,
 * a bootloader alone) only at an explicit offset.
 */
export function classifyImage(
  file: string,
  data: Uint8Array,
  offset: number | undefined,
): ImageToFlash {
  let app: ReturnType<typeof readAppImage> | undefined;
  let merged: ReturnType<typeof readMergedImage> | undefined;
  try {
    if (data[0] === 0xe9) {
      const image = readAppImage(data);
      if (image.appDescription !== undefined) app = image;
    }
    if (app === undefined) {
      const parts = readMergedImage(data);
      if (parts.bootloader !== undefined && parts.partitionTable !== undefined) merged = parts;
    }
  } catch (error) {
    throw usageError(
      `${file} is a damaged image: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  if (app !== undefined) {
    const description = app.appDescription;
    if (offset === undefined || offset === 0) {
      throw usageError(
        `${file} is an app image (${description?.projectName ?? 'app'} ${description?.version ?? ''}), not a merged image: flash it at its app partition with --offset (e.g. --offset 0x20000 for ota_0), or flash the merged image at 0x0`,
      );
    }
    const board = readVirtualFirmwareBoard(data, app);
    return {
      kind: 'app',
      offset,
      data,
      ...(app.chip === undefined ? {} : { chip: app.chip }),
      ...(description === undefined
        ? {}
        : { version: description.version, project: description.projectName }),
      ...(board === undefined ? {} : { board }),
    };
  }
  if (merged !== undefined) {
    if (offset !== undefined && offset !== 0)
      throw usageError(
        `${file} is a merged image: it belongs at 0x0, not ${hex(offset)}; drop --offset`,
      );
    const first = merged.apps[0];
    const description = first?.image.appDescription;
    const partitionsEnd = Math.max(
      0,
      ...(merged.partitionTable?.partitions ?? []).map((p) => p.offset + p.size),
    );
    return {
      kind: 'merged',
      offset: 0,
      data,
      ...(merged.chip === undefined ? {} : { chip: merged.chip }),
      ...(description === undefined
        ? {}
        : { version: description.version, project: description.projectName }),
      ...(first?.board === undefined ? {} : { board: first.board }),
      partitionsEnd,
    };
  }
  if (offset === undefined || offset === 0) {
    throw usageError(
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
  return `${what}${chip}${app}, ${image.data.length} bytes at ${hex(image.offset)}`;
}

/** A Flasher on a resolved port: the same for a real and a virtual board. */
export function flasherFor(port: ResolvedPort): Flasher {
  const id = (text: string | undefined) =>
    text === undefined ? undefined : Number.parseInt(text, 16);
  return new Flasher({
    port: new NodeWebSerialPort({
      binding: port.binding,
      path: port.path,
      usbVendorId: id(port.info.vendorId),
      usbProductId: id(port.info.productId),
    }),
  });
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
 * Progress: a cli-progress bar on a terminal, `flash: N%` lines every 10% otherwise (logs and
 * pipes get a readable record instead of carriage returns).
 */
export class FlashProgressView {
  readonly #context: SerialCommandContext;
  readonly #total: number;
  readonly #baud: number;
  #bar: SingleBar | undefined;
  #attempt = 1;
  #lastDecile = -1;

  constructor(context: SerialCommandContext, total: number, baud: number) {
    this.#context = context;
    this.#total = total;
    this.#baud = baud;
  }

  update(progress: FlashProgress): void {
    if (progress.attempt !== this.#attempt) {
      this.#attempt = progress.attempt;
      this.#lastDecile = -1;
      this.#stopBar();
      this.#context.out.stdout(
        `flash: the write at ${this.#baud} baud failed; retrying once at ${RETRY_FLASH_BAUD} baud\n`,
      );
    }
    const terminal = this.#context.terminal;
    if (terminal?.isTTY === true) {
      if (this.#bar === undefined) {
        this.#bar = new SingleBar(
          {
            stream: terminal,
            format: `flash |{bar}| {percentage}% | {value}/{total} bytes | attempt ${progress.attempt}`,
            hideCursor: true,
          },
          Presets.shades_classic,
        );
        this.#bar.start(this.#total, 0);
      }
      this.#bar.update(Math.round((progress.percent * this.#total) / 100));
      return;
    }
    const decile = Math.floor(progress.percent / 10);
    if (decile > this.#lastDecile) {
      this.#lastDecile = decile;
      this.#context.out.stdout(`flash: ${decile * 10}%\n`);
    }
  }

  stop(): void {
    this.#stopBar();
  }

  #stopBar(): void {
    if (this.#bar === undefined) return;
    this.#bar.stop();
    this.#bar = undefined;
  }
}

/** Refuses what the board cannot take: a partition table for a bigger flash, an app off its slot. */
function checkFits(
  image: ImageToFlash,
  chip: ConnectedChip,
  table: PartitionTable | undefined,
): void {
  const flashBytes = chip.flashSizeMb === undefined ? undefined : chip.flashSizeMb * 1024 * 1024;
  if (
    image.kind === 'merged' &&
    flashBytes !== undefined &&
    (image.partitionsEnd ?? 0) > flashBytes
  ) {
    throw usageError(
      `the image's partition table needs ${Math.ceil((image.partitionsEnd ?? 0) / 1024 / 1024)} MB of flash, the board has ${chip.flashSizeMb} MB; use the build for ${chip.flashSizeMb} MB boards`,
    );
  }
  if (image.kind !== 'app') return;
  if (table === undefined) {
    throw new SerialCommandError(
      'the board has no valid partition table at 0x8000, so an app image has nowhere to go; flash a merged image first',
      'failed',
    );
  }
  const apps = table.partitions.filter((p) => p.typeName === 'app');
  const slot = apps.find((p) => p.offset === image.offset);
  if (slot === undefined) {
    throw usageError(
      `${hex(image.offset)} is not an app partition on this board; its app partitions: ${apps.map((p) => `${p.label} at ${hex(p.offset)}`).join(', ') || 'none'}`,
    );
  }
  if (image.data.length > slot.size) {
    throw usageError(
      `the app image (${image.data.length} bytes) does not fit ${slot.label} (${slot.size} bytes)`,
    );
  }
}

/** `flash <image>`: resolves to the exit code; failures are reported as one line. */
export async function flashCommand(
  context: SerialCommandContext,
  file: string,
  options: FlashCommandOptions,
): Promise<number> {
  let label = options.port ?? '';
  return runReported(
    context,
    () => `flash${label === '' ? '' : ` ${label}`}`,
    async () => {
      const baud = parseBaud(options.baud ?? String(DEFAULT_FLASH_BAUD));
      const offset = parseOffset(options.offset);
      let data: Uint8Array;
      try {
        data = new Uint8Array(await readFile(file));
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        throw usageError(
          `cannot read ${file}: ${code === 'ENOENT' ? 'no such file' : String(error)}`,
        );
      }
      const image = classifyImage(file, data, offset);
      const port = await openCommandPort(context, options, (selector) => {
        label = selector;
      });
      label = port.label;
      const flasher = flasherFor(port);
      const view = new FlashProgressView(context, image.data.length, baud);
      try {
        const chip = await flasher.connect();
        context.out.stdout(`${port.label}: ${describeChip(chip)}\n`);
        context.out.stdout(`image: ${describeImage(image)}\n`);
        let table: PartitionTable | undefined;
        if (image.kind === 'app') {
          table = await flasher.readPartitionTable().catch((error: unknown) => {
            if (error instanceof FirmwareError && error.code === 'PARTITION_INVALID')
              return undefined;
            throw error;
          });
        }
        checkFits(image, chip, table);
        const parts: FlashPart[] = [{ offset: image.offset, data: image.data }];
        const result = await flasher.flash(parts, {
          baudRate: baud,
          retryBaudRate: Math.min(RETRY_FLASH_BAUD, baud),
          onProgress: (progress) => view.update(progress),
          reset: true,
        });
        view.stop();
        const seconds = (result.durationMs / 1000).toFixed(1);
        const md5 = result.parts[0]?.md5 ?? '';
        context.out.stdout(
          `wrote ${result.bytes} bytes (${formatBytes(result.bytes)}) at ${hex(image.offset)} in ${seconds} s at ${result.baudRate} baud; MD5 verified (${md5})\n`,
        );
        if (result.flaky) {
          context.out.stdout(
            `flaky: the first attempt at ${baud} baud failed (${result.firstError ?? 'unknown error'}); the retry at ${result.baudRate} baud succeeded. Try a shorter cable or a lower --baud\n`,
          );
        }
        context.out.stdout(`${port.label}: hard reset; the board runs its new firmware\n`);
        return 0;
      } finally {
        view.stop();
        await flasher.disconnect().catch(() => {});
        port.virtual?.dispose();
      }
    },
  );
}

export function registerFlashCommand(
  program: Command,
  context: SerialCommandContext,
  setExit: (code: number) => void,
): Command {
  return program
    .command('flash')
    .description(
      'flash a firmware build: a merged image at 0x0, or an app image at --offset; verifies MD5, resets the board',
    )
    .argument('<image>', 'merged-binary.bin (at 0x0), or xiaozhi.bin with --offset')
    .option(
      '--port <selector>',
      'the board: a path, serial:<sn>, usb:<vid>:<pid>, by-id:<name> or virtual:<name> (default: the only board attached)',
    )
    .option(
      '--baud <rate>',
      `write rate (a failed write is retried once at ${RETRY_FLASH_BAUD})`,
      String(DEFAULT_FLASH_BAUD),
    )
    .option('--offset <offset>', 'where the image goes (default 0x0: a merged image)')
    .addOption(
      new Option('--board <preset>', "a new virtual board's preset (default bread-compact-wifi)"),
    )
    .addOption(
      new Option('--flash-size <mb>', "a new virtual board's flash: 4, 8 or 16 (default 16)"),
    )
    .action(async (image: string, options: FlashCommandOptions) =>
      setExit(await flashCommand(context, image, options)),
    );
}
