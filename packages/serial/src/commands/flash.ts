/**
 * `flash <image>`: writes a firmware build to a board through esptool-js (this package's
 * `Flasher`): a merged image at 0x0, or an app image (or raw data) at
 * `--offset`. Connects with esptool's reset into download mode (`--reset`: the port's own by
 * default), refuses an image for another chip or flash size, writes compressed with MD5
 * verification, steps down the baud ladder after a failed write (and says so), and hard-resets
 * the board into its new firmware.
 */
import { readFile } from 'node:fs/promises';
import { Presets, SingleBar } from 'cli-progress';
import type { Command } from 'commander';
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
import { FLASH_BAUD_LADDER, flashBaudLadder } from '../flash-timing.js';
import type { FlashProgress } from '../flasher.js';
import type { ResetStrategy } from '../reset/plan.js';
import {
  type PortOptions,
  parseBaud,
  runPortCommand,
  type SerialCommandContext,
  usageError,
  withPortOptions,
} from './context.js';

/** The first rung of the baud ladder (`--baud`). */
export const DEFAULT_FLASH_BAUD = 921_600;
/** The last rung: the ROM's own rate, which every cable and bridge manages. */
export const RETRY_FLASH_BAUD = 115_200;
/** What `--reset` takes: a reset strategy, or `auto` (the port's own; the default). */
export const RESET_CHOICES: readonly (ResetStrategy | 'auto')[] = [
  'auto',
  'classic',
  'tight',
  'usb-jtag',
  'none',
];

export interface FlashCommandOptions extends PortOptions {
  readonly baud?: string;
  readonly offset?: string;
  readonly reset?: string;
}

/** `--reset`: one of {@link RESET_CHOICES}; default `auto`. */
export function parseResetOption(value: string | undefined): ResetStrategy | 'auto' {
  const choice = (value ?? 'auto').trim();
  const found = RESET_CHOICES.find((c) => c === choice);
  if (found === undefined)
    throw usageError(
      `--reset must be one of ${RESET_CHOICES.join(', ')}, got ${JSON.stringify(value)}`,
    );
  return found;
}

/** The help of `--reset`, shared by `flash` and `provision`. */
export const RESET_OPTION_HELP =
  "how to reset into download mode: auto (the port's own: usb-jtag on a native-USB 303a:1001 port, else tight then classic; classic on Windows), classic, tight, usb-jtag, or none (hold BOOT while resetting)";

/** The help of `--baud`, shared by `flash` and `provision`. */
export const BAUD_OPTION_HELP = `write rate, the first rung of the ladder a failed write steps down (${FLASH_BAUD_LADDER.join(' → ')})`;

/**
 * Progress: a cli-progress bar on a terminal, `flash: N%` lines every 10% otherwise (logs and
 * pipes get a readable record instead of carriage returns).
 */
export class FlashProgressView {
  readonly #context: SerialCommandContext;
  readonly #total: number;
  #baud: number;
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
        `flash: the write at ${this.#baud} baud failed; retrying at ${progress.baudRate} baud\n`,
      );
      this.#baud = progress.baudRate;
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
    const reset = parseResetOption(options.reset);
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
    // An rfc2217:// port writes its lines one after the other: the flasher plans its resets
    // for that (`ResolvedPort.linePlatform`).
    const flasher = flasherFor(port, {
      reset,
      ...(port.linePlatform === undefined ? {} : { platform: port.linePlatform }),
    });
    const view = new FlashProgressView(context, image.data.length, baud);
    try {
      const chip = await flasher.connect();
      context.out.stdout(`${port.label}: ${describeChip(chip)}\n`);
      context.out.stdout(`image: ${describeImage(image)}\n`);
      const result = await flashImage(flasher, chip, image, {
        baudRates: flashBaudLadder(baud),
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
        const failed = result.failures.map((f) => `at ${f.baudRate} baud: ${f.error}`).join('; ');
        context.out.stdout(
          `flaky: ${result.failures.length === 1 ? 'the first attempt' : `${result.failures.length} attempts`} failed (${failed}); the write at ${result.baudRate} baud succeeded. Try a shorter cable, or --baud ${result.baudRate}\n`,
        );
      }
      // Reset none: no line touched (esptool's --after no_reset); a person presses RESET.
      context.out.stdout(
        reset === 'none'
          ? `${port.label}: left in its bootloader (reset none: no line touched): press RESET on the board to run its new firmware\n`
          : `${port.label}: hard reset; the board runs its new firmware\n`,
      );
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
  return withPortOptions(program.command('flash'))
    .description(
      'flash a firmware build: a merged image at 0x0, or an app image at --offset; verifies MD5, resets the board',
    )
    .argument('<image>', 'merged-binary.bin (at 0x0), or xiaozhi.bin with --offset')
    .option('--baud <rate>', BAUD_OPTION_HELP, String(DEFAULT_FLASH_BAUD))
    .option('--reset <strategy>', RESET_OPTION_HELP, 'auto')
    .option('--offset <offset>', 'where the image goes (default 0x0: a merged image)')
    .action(async (image: string, options: FlashCommandOptions) =>
      setExit(await flashCommand(context, image, options)),
    );
}
