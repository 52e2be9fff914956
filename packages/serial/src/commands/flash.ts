/**
 * `flash <image>`: writes a firmware build to a board through esptool-js (this package's
 * `Flasher`): a merged image at 0x0, or an app image (or raw data) at
 * `--offset`. Connects with esptool's reset into download mode, refuses an image for another
 * chip or flash size, writes compressed with MD5 verification, retries once at a lower baud
 * rate (and says so), and hard-resets the board into its new firmware.
 */
import { readFile } from 'node:fs/promises';
import { Presets, SingleBar } from 'cli-progress';
import { type Command, Option } from 'commander';
import {
  describeChip,
  describeImage,
  flasherFor,
  flashImage,
  formatBytes,
  hex,
  parseOffset,
  placeImage,
} from '../flash-image.js';
import type { FlashProgress } from '../flasher.js';
import {
  type PortOptions,
  parseBaud,
  runPortCommand,
  type SerialCommandContext,
  usageError,
} from './context.js';

export const DEFAULT_FLASH_BAUD = 921_600;
/** The retry after a failed write: the ROM's own rate, which every cable and bridge manages. */
export const RETRY_FLASH_BAUD = 115_200;

export interface FlashCommandOptions extends PortOptions {
  readonly baud?: string;
  readonly offset?: string;
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

/** `flash <image>`: resolves to the exit code; failures are reported as one line. */
export async function flashCommand(
  context: SerialCommandContext,
  file: string,
  options: FlashCommandOptions,
): Promise<number> {
  return runPortCommand(context, 'flash', options, async (open) => {
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
    const image = placeImage(file, data, offset, { appNeedsOffset: true });
    const port = await open();
    const flasher = flasherFor(port);
    const view = new FlashProgressView(context, image.data.length, baud);
    try {
      const chip = await flasher.connect();
      context.out.stdout(`${port.label}: ${describeChip(chip)}\n`);
      context.out.stdout(`image: ${describeImage(image)}\n`);
      const result = await flashImage(flasher, chip, image, {
        baudRate: baud,
        retryBaudRate: Math.min(RETRY_FLASH_BAUD, baud),
        onProgress: (progress) => view.update(progress),
        reset: true,
      });
      view.stop();
      const seconds = (result.durationMs / 1000).toFixed(1);
      const md5 = result.parts[0]?.md5 ?? '';
      context.out.stdout(
        `wrote ${result.bytes} bytes (${formatBytes(result.bytes)}) at ${hex(result.offset)} in ${seconds} s at ${result.baudRate} baud; MD5 verified (${md5})\n`,
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
    }
  });
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
