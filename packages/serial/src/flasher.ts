/**
 * Flashing over esptool-js (unmodified), through a {@link NodeWebSerialPort}: the same code
 * path reaches a real board (bindings-cpp) and a virtual one (the device package's binding).
 * It detects the chip and refuses an image built for another one, writes compressed with MD5
 * verification, reports progress, retries a failed write once at a lower baud rate (and says
 * the flash was flaky), and hard-resets the board into its new firmware. Every step is
 * bounded by a timeout and its errors name the step and what to try.
 */
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { deflateSync } from 'node:zlib';
import {
  type ChipName,
  chipById,
  encodeWords,
  IMAGE_MAGIC,
  PARTITION_TABLE_MAX_SIZE,
  PARTITION_TABLE_OFFSET,
  type PartitionTable,
  readImageHeader,
  readPartitionTable,
} from '@xiaozhi-mcp/firmware';
import { ESPLoader, type IEspLoaderTerminal, Transport } from 'esptool-js';
import { SerialError } from './errors.js';
import type { NodeWebSerialPort } from './web-serial.js';

export interface FlasherTimeouts {
  /** Reset, sync, chip detection and stub upload. Default 30 s. */
  readonly connectMs: number;
  /** Added per MiB of image to twice its wire time, for a whole write. Default 20 s. */
  readonly writeMsPerMb: number;
  /** Any other step (baud change, register reads, reset, a read of 4 KiB). Default 10 s. */
  readonly stepMs: number;
}

export const DEFAULT_FLASHER_TIMEOUTS: FlasherTimeouts = {
  connectMs: 30_000,
  writeMsPerMb: 20_000,
  stepMs: 10_000,
};

export interface FlasherOptions {
  readonly port: NodeWebSerialPort;
  /** The rate for the ROM (connect, stub upload) and the console. Default 115200. */
  readonly romBaudRate?: number;
  readonly timeouts?: Partial<FlasherTimeouts>;
  /** esptool's messages, line by line. */
  readonly log?: (line: string) => void;
}

export interface ConnectedChip {
  readonly chip: ChipName;
  /** The image header chip id (`esp_chip_id_t`). */
  readonly chipId: number;
  /** esptool's description, e.g. `ESP32-S3 (QFN56) (revision v0.0)`. */
  readonly description: string;
  /** Lowercase `aa:bb:cc:dd:ee:ff`. */
  readonly mac: string;
  /** From the SPI flash's JEDEC id; undefined when it does not say. */
  readonly flashSizeMb?: number;
  readonly flashId: number;
}

export interface FlashPart {
  readonly offset: number;
  readonly data: Uint8Array;
}

export interface FlashProgress {
  /** Index of the part being written. */
  readonly part: number;
  /** Bytes of that part written so far (image bytes, estimated from the compressed stream). */
  readonly written: number;
  /** Size of that part. */
  readonly total: number;
  /** Over all parts, 0 to 100, never decreasing within an attempt. */
  readonly percent: number;
  /** 1, or 2 for the retry at the lower rate. */
  readonly attempt: number;
}

export interface FlashOptions {
  /** The rate for writing. Default 460800. */
  readonly baudRate?: number;
  /** The rate of the one retry after a failed write. Default 115200. */
  readonly retryBaudRate?: number;
  /** Refuse unless the board is this chip (the rig's inventory says what it should be). */
  readonly expectedChip?: ChipName;
  readonly onProgress?: (progress: FlashProgress) => void;
  /** Erase the whole flash first. */
  readonly eraseAll?: boolean;
  /** Hard-reset into the new firmware afterwards (default true), then close the port. */
  readonly reset?: boolean;
}

export interface FlashResult {
  readonly chip: ConnectedChip;
  /** The rate of the attempt that succeeded. */
  readonly baudRate: number;
  /** The first attempt failed and the retry succeeded. */
  readonly flaky: boolean;
  /** Why the first attempt failed, when flaky. */
  readonly firstError?: string;
  readonly parts: readonly {
    readonly offset: number;
    readonly size: number;
    readonly md5: string;
  }[];
  readonly bytes: number;
  readonly durationMs: number;
}

interface Session {
  readonly transport: QuietTransport;
  readonly loader: ESPLoader;
  readonly chip: ConnectedChip;
  baudRate: number;
}

const BOOTLOADER_OFFSETS = [0x0, 0x1000, 0x2000] as const;
const APP_ALIGN = 0x10000;

function padTo4(data: Uint8Array): Uint8Array {
  const padded = new Uint8Array(Math.ceil(data.length / 4) * 4).fill(0xff);
  padded.set(data);
  return padded;
}

function md5Hex(data: Uint8Array): string {
  return createHash('md5').update(data).digest('hex');
}

function hex(value: number): string {
  return `0x${value.toString(16)}`;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Where an image header sits in a part, if the part holds an image (bootloader or app). */
function imageHeaderAt(part: FlashPart): number | undefined {
  const { offset, data } = part;
  const isImageOffset = (at: number) =>
    (BOOTLOADER_OFFSETS as readonly number[]).includes(at) || at % APP_ALIGN === 0;
  if (data[0] === IMAGE_MAGIC && isImageOffset(offset)) return 0;
  if (offset !== 0) return undefined;
  // A merged image for a chip whose bootloader is not at 0x0 (ESP32, ESP32-P4).
  for (const at of BOOTLOADER_OFFSETS) if (at > 0 && data[at] === IMAGE_MAGIC) return at;
  return undefined;
}

/** esptool-js's Transport prints some trace lines to the console even with tracing off. */
class QuietTransport extends Transport {
  readonly #sink: (line: string) => void;

  constructor(device: NodeWebSerialPort, sink: (line: string) => void) {
    super(device, false);
    this.#sink = sink;
  }

  override trace(message: string): void {
    this.#sink(message);
  }
}

export class Flasher {
  readonly #port: NodeWebSerialPort;
  readonly #romBaudRate: number;
  readonly #timeouts: FlasherTimeouts;
  readonly #logLine: ((line: string) => void) | undefined;
  readonly #log: string[] = [];
  #session: Session | undefined;

  constructor(options: FlasherOptions) {
    this.#port = options.port;
    this.#romBaudRate = options.romBaudRate ?? 115_200;
    this.#timeouts = { ...DEFAULT_FLASHER_TIMEOUTS, ...options.timeouts };
    this.#logLine = options.log;
  }

  /** esptool's recent messages (bounded). */
  get log(): readonly string[] {
    return this.#log;
  }

  /** The chip of the current session, if connected. */
  get connected(): ConnectedChip | undefined {
    return this.#session?.chip;
  }

  /**
   * Resets the board into download mode, syncs, detects the chip, reads its MAC and flash id,
   * and starts esptool's flasher stub. The port is opened here (and closed by `disconnect`).
   */
  async connect(): Promise<ConnectedChip> {
    await this.#endSession();
    const transport = new QuietTransport(this.#port, (line) => this.#push(`trace: ${line}`));
    const loader = new ESPLoader({
      transport,
      baudrate: this.#romBaudRate,
      romBaudrate: this.#romBaudRate,
      terminal: this.#terminal(),
      debugLogging: false,
    });
    const path = this.#port.path;
    try {
      await this.#bounded('connect', this.#timeouts.connectMs, () =>
        loader.detectChip('default_reset'),
      );
    } catch (error) {
      await this.#close(transport);
      if (error instanceof SerialError && error.code !== 'FLASH_FAILED') throw error;
      throw this.#failure(
        'connect',
        error,
        `no answer from the ROM bootloader on ${path}: check that it is the board's port, that the board is powered, and that it can enter download mode (hold BOOT, tap RESET, release BOOT)`,
      );
    }
    let step = 'detect';
    try {
      const chip = await this.#bounded(step, this.#timeouts.connectMs, async () => {
        const id = loader.chip.IMAGE_CHIP_ID ?? -1;
        const name = chipById(id)?.name;
        if (name === undefined)
          throw new Error(
            `esptool found ${loader.chip.CHIP_NAME}, which this toolkit does not know`,
          );
        if (loader.secureDownloadMode)
          throw new Error(
            'the chip is in secure download mode: its registers and flash cannot be read',
          );
        const description = await loader.chip.getChipDescription(loader);
        const mac = (await loader.chip.readMac(loader)).toLowerCase();
        await loader.chip.postConnect?.(loader);
        step = 'stub';
        await loader.runStub();
        if (!loader.IS_STUB)
          throw new Error(`esptool has no flasher stub for ${loader.chip.CHIP_NAME}`);
        step = 'flash id';
        const flashId = await loader.readFlashId();
        const sizeId = (flashId >>> 16) & 0xff;
        const flashSizeMb = sizeId >= 0x14 && sizeId <= 0x1c ? 2 ** sizeId / 0x100000 : undefined;
        return {
          chip: name,
          chipId: id,
          description,
          mac,
          flashId,
          ...(flashSizeMb === undefined ? {} : { flashSizeMb }),
        } satisfies ConnectedChip;
      });
      this.#session = { transport, loader, chip, baudRate: this.#romBaudRate };
      return chip;
    } catch (error) {
      await this.#close(transport);
      throw this.#failure(
        step,
        error,
        step === 'stub'
          ? 'the flasher stub did not start; reset the board and retry'
          : 'the chip answered the ROM handshake but not the next step; reset the board and retry',
      );
    }
  }

  /**
   * Writes `parts` (offset and bytes each; a merged image is one part at 0x0), verifies each
   * by MD5, and hard-resets the board. Refuses, before writing anything, an image whose chip
   * id differs from the board's (`CHIP_MISMATCH`). A failed write is retried once at
   * `retryBaudRate`; the result says `flaky` then.
   */
  async flash(parts: readonly FlashPart[], options: FlashOptions = {}): Promise<FlashResult> {
    const started = performance.now();
    const chip = (await this.#requireSession()).chip;
    this.#checkParts(parts, chip, options.expectedChip);
    const baudRate = options.baudRate ?? 460_800;
    const retryBaudRate = Math.min(options.retryBaudRate ?? 115_200, baudRate);
    let firstError: SerialError | undefined;
    let usedBaudRate = baudRate;
    try {
      await this.#changeBaudRate(baudRate);
      await this.#write(parts, options, 1);
    } catch (error) {
      if (error instanceof SerialError && error.code === 'CHIP_MISMATCH') throw error;
      firstError = error instanceof SerialError ? error : this.#failure('write', error, '');
      usedBaudRate = retryBaudRate;
      try {
        await this.#recover(retryBaudRate);
        await this.#write(parts, options, 2);
      } catch (retryError) {
        await this.#endSession();
        throw new SerialError(
          'FLASH_FAILED',
          `${message(retryError)} (first attempt at ${baudRate} baud: ${firstError.message})`,
          { cause: retryError },
        );
      }
    }
    if (options.reset ?? true) {
      await this.#hardReset();
    }
    return {
      chip,
      baudRate: usedBaudRate,
      flaky: firstError !== undefined,
      ...(firstError === undefined ? {} : { firstError: firstError.message }),
      parts: parts.map((p) => ({ offset: p.offset, size: p.data.length, md5: md5Hex(p.data) })),
      bytes: parts.reduce((sum, p) => sum + p.data.length, 0),
      durationMs: performance.now() - started,
    };
  }

  /** Reads flash through the stub, checking the stub's MD5 of what it sent. */
  async readFlash(offset: number, size: number): Promise<Uint8Array> {
    const session = await this.#requireSession();
    const step = `read ${hex(offset)}+${hex(size)}`;
    const wireMs = (size * 10 * 1000) / session.baudRate;
    try {
      return await this.#bounded(step, this.#timeouts.stepMs + 3 * wireMs, async () => {
        const data = await session.loader.readFlash(offset, size);
        // After the data the stub sends the MD5 of what it read; esptool-js leaves it unread.
        const digest = await session.transport.read(this.#timeouts.stepMs);
        if (Buffer.from(digest).toString('hex') !== md5Hex(data))
          throw new Error('the data does not match the MD5 the stub sent after it');
        return data;
      });
    } catch (error) {
      await this.#endSession();
      throw this.#failure(
        step,
        error,
        'retry; if it keeps failing, use a lower baud rate or another cable',
      );
    }
  }

  /** Reads and parses the partition table at 0x8000. */
  async readPartitionTable(): Promise<PartitionTable> {
    return readPartitionTable(
      await this.readFlash(PARTITION_TABLE_OFFSET, PARTITION_TABLE_MAX_SIZE),
    );
  }

  /**
   * Closes the port. The board keeps running what it runs (the stub, after a read), unless
   * `reset` asks for a hard reset into its firmware first.
   */
  async disconnect(options: { reset?: boolean } = {}): Promise<void> {
    if (options.reset === true && this.#session !== undefined) await this.#hardReset();
    else await this.#endSession();
  }

  async #requireSession(): Promise<Session> {
    if (this.#session === undefined) await this.connect();
    const session = this.#session;
    if (session === undefined) throw new SerialError('FLASH_FAILED', 'connect: no session');
    return session;
  }

  #push(line: string): void {
    this.#log.push(line);
    if (this.#log.length > 200) this.#log.shift();
    this.#logLine?.(line);
  }

  #terminal(): IEspLoaderTerminal {
    let partial = '';
    const push = (line: string) => this.#push(line);
    return {
      clean: () => {},
      write: (data: string) => {
        partial += data;
      },
      writeLine: (data: string) => {
        push(partial + data);
        partial = '';
      },
    };
  }

  #checkParts(
    parts: readonly FlashPart[],
    chip: ConnectedChip,
    expected: ChipName | undefined,
  ): void {
    if (expected !== undefined && expected !== chip.chip) {
      throw new SerialError(
        'CHIP_MISMATCH',
        `refusing to flash: the board on ${this.#port.path} is an ${chip.chip}, not the expected ${expected}; check which board is on this port`,
      );
    }
    const flashSize = chip.flashSizeMb === undefined ? undefined : chip.flashSizeMb * 0x100000;
    parts.forEach((part, i) => {
      const at = imageHeaderAt(part);
      if (at !== undefined) {
        const header = readImageHeader(part.data.subarray(at));
        if (header.chipId !== chip.chipId) {
          throw new SerialError(
            'CHIP_MISMATCH',
            `refusing to flash: part ${i + 1} at ${hex(part.offset)} is an image for ${header.chip ?? `chip id ${header.chipId}`} (chip id ${header.chipId}), the board is an ${chip.chip} (chip id ${chip.chipId}); use the ${chip.chip} build`,
          );
        }
      }
      if (flashSize !== undefined && part.offset + part.data.length > flashSize) {
        throw new SerialError(
          'OPTION_INVALID',
          `part ${i + 1} (${hex(part.offset)}+${hex(part.data.length)}) does not fit the board's ${chip.flashSizeMb} MB flash; use the image built for this flash size`,
        );
      }
    });
  }

  async #write(parts: readonly FlashPart[], options: FlashOptions, attempt: number): Promise<void> {
    const session = this.#session;
    if (session === undefined) throw new SerialError('FLASH_FAILED', 'write: not connected');
    const sizes = parts.map((p) => p.data.length);
    const total = sizes.reduce((a, b) => a + b, 0) || 1;
    const before = sizes.map((_, i) => sizes.slice(0, i).reduce((a, b) => a + b, 0));
    let current = 0;
    let lastPercent = -1;
    const onProgress = (part: number, written: number, compressedTotal: number) => {
      current = part;
      const size = sizes[part] ?? 0;
      const done = compressedTotal === 0 ? size : Math.round((written / compressedTotal) * size);
      const percent = Math.max(
        lastPercent,
        Math.floor((((before[part] ?? 0) + done) * 100) / total),
      );
      lastPercent = percent;
      options.onProgress?.({ part, written: done, total: size, percent, attempt });
    };
    const budget =
      this.#timeouts.stepMs +
      parts.reduce((sum, p) => {
        const mb = p.data.length / 0x100000;
        return (
          sum +
          (2 * p.data.length * 10 * 1000) / session.baudRate +
          mb * this.#timeouts.writeMsPerMb
        );
      }, 0);
    try {
      await this.#bounded('write', budget, () =>
        this.#writeParts(session, parts, options, onProgress),
      );
    } catch (error) {
      const part = parts[current];
      const where = `part ${current + 1} at ${hex(part?.offset ?? 0)}`;
      const verify = /md5/i.test(message(error));
      throw this.#failure(
        verify ? `verify ${where}` : `write ${where}`,
        error,
        verify
          ? 'the flash does not hold what was written; retry at a lower baud rate, and if it persists the flash chip may be failing'
          : 'the board stopped answering during the write; check the cable and USB hub, or use a lower baud rate',
      );
    }
  }

  /**
   * esptool's compressed write, driven block by block through the loader's public commands.
   * `ESPLoader.writeFlash` re-inflates every block on the host one byte at a time just to
   * report progress (about 10 ms per 16 KiB block, over 10% of the wire time at 921600 baud);
   * here progress counts compressed bytes, as the wire does, and the MD5 is checked after each part.
   */
  async #writeParts(
    session: Session,
    parts: readonly FlashPart[],
    options: FlashOptions,
    onProgress: (part: number, written: number, compressedTotal: number) => void,
  ): Promise<void> {
    const { loader } = session;
    if (options.eraseAll === true) await loader.eraseFlash();
    for (const [index, part] of parts.entries()) {
      if (part.data.length === 0) continue;
      const image = part.data.length % 4 === 0 ? part.data : padTo4(part.data);
      const compressed = new Uint8Array(deflateSync(image, { level: 9 }));
      // The messages esptool prints, so flash logs read as they do with esptool's own write.
      this.#push(`Compressed ${image.length} bytes to ${compressed.length}...`);
      const started = performance.now();
      const blocks = await loader.flashDeflBegin(image.length, compressed.length, part.offset);
      const blockSize = loader.FLASH_WRITE_SIZE;
      for (let seq = 0; seq < blocks; seq++) {
        const block = compressed.subarray(seq * blockSize, (seq + 1) * blockSize);
        // A block can inflate to a lot of erasing (padding): bound it by what deflate can expand to.
        const mayInflateTo = Math.min(image.length, block.length * 1032);
        const timeout = Math.max(
          3000,
          loader.timeoutPerMb(loader.ERASE_WRITE_TIMEOUT_PER_MB, mayInflateTo),
        );
        const at = part.offset + Math.floor((seq * image.length) / blocks);
        this.#push(`Writing at ${hex(at)}... (${Math.floor((seq * 100) / blocks)}%)`);
        await loader.flashDeflBlock(block, seq, timeout);
        onProgress(index, Math.min((seq + 1) * blockSize, compressed.length), compressed.length);
      }
      await loader.flashDeflFinish(false);
      const seconds = ((performance.now() - started) / 1000).toFixed(2);
      this.#push(
        `Wrote ${image.length} bytes (${compressed.length} compressed) at ${hex(part.offset)} in ${seconds} seconds.`,
      );
      const expected = md5Hex(image);
      const actual = await loader.flashMd5sum(part.offset, image.length);
      if (actual !== expected) {
        throw new Error(
          `MD5 of file does not match data in flash! (file ${expected}, flash ${actual})`,
        );
      }
      this.#push(`Hash of data verified. (${expected})`);
    }
  }

  /** Moves both ends to `baudRate` without reopening the port (the stub first, then the host). */
  async #changeBaudRate(baudRate: number): Promise<void> {
    const session = this.#session;
    if (session === undefined || session.baudRate === baudRate) return;
    const { loader, transport } = session;
    await this.#bounded(`change to ${baudRate} baud`, this.#timeouts.stepMs, async () => {
      const old = session.baudRate;
      await loader.command(
        loader.ESP_CHANGE_BAUDRATE,
        encodeWords(baudRate, loader.IS_STUB ? old : 0),
      );
      // The chip switches once its reply is out; give it the pause esptool gives it.
      await sleep(50);
      await transport.changeBaudrate(baudRate);
      session.baudRate = baudRate;
      await transport.drainInput(20, 200);
      await loader.readReg(loader.CHIP_DETECT_MAGIC_REG_ADDR, 1000);
    });
  }

  /** After a failed write: the same stub at the lower rate, or a fresh connection. */
  async #recover(baudRate: number): Promise<void> {
    try {
      const session = this.#session;
      if (session === undefined) throw new Error('not connected');
      session.transport.flushInput();
      await session.loader.readReg(session.loader.CHIP_DETECT_MAGIC_REG_ADDR, 1000);
      await this.#changeBaudRate(baudRate);
    } catch {
      await this.connect();
      await this.#changeBaudRate(baudRate);
    }
  }

  /** RTS pulse with DTR released: EN low, then high with GPIO0 high, so the app boots. */
  async #hardReset(): Promise<void> {
    const session = this.#session;
    try {
      await this.#bounded('reset', this.#timeouts.stepMs, async () => {
        await this.#port.setSignals({ dataTerminalReady: false, requestToSend: true });
        await sleep(100);
        await this.#port.setSignals({ dataTerminalReady: false, requestToSend: false });
        // The firmware's console runs at the ROM rate.
        if (session !== undefined && session.baudRate !== this.#romBaudRate)
          await this.#port.setBaudRate(this.#romBaudRate);
      });
    } catch (error) {
      await this.#endSession();
      throw this.#failure(
        'reset',
        error,
        'the image is written and verified; reset the board by hand (EN/RST button or power)',
      );
    }
    await this.#endSession();
  }

  async #endSession(): Promise<void> {
    const session = this.#session;
    this.#session = undefined;
    if (session !== undefined) await this.#close(session.transport);
    else if (this.#port.isOpen) await this.#port.close().catch(() => {});
  }

  async #close(transport: QuietTransport): Promise<void> {
    try {
      await this.#bounded('disconnect', this.#timeouts.stepMs, () => transport.disconnect());
    } catch {
      await this.#port.close().catch(() => {});
    }
  }

  async #bounded<T>(step: string, ms: number, work: () => Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new SerialError('FLASH_FAILED', `${step}: no progress within ${Math.round(ms)} ms`),
          ),
        ms,
      );
    });
    try {
      return await Promise.race([work(), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  #failure(step: string, error: unknown, hint: string): SerialError {
    const text = message(error);
    const stepped = (text.startsWith(`${step}:`) ? text : `${step}: ${text}`).replace(
      /[.!\s]+$/,
      '',
    );
    return new SerialError('FLASH_FAILED', hint === '' ? stepped : `${stepped}; ${hint}`, {
      cause: error,
    });
  }
}
