/**
 * Flashing over esptool-js (unmodified), through a {@link NodeWebSerialPort}: the same code
 * path reaches a real board (bindings-cpp) and a virtual one (the device package's binding).
 * It resets the board into download mode with our own line sequences (the port's reset
 * strategy, {@link resetPlan}), lets esptool-js sync and detect the chip, tames the watchdogs of
 * a chip on its USB-Serial-JTAG as esptool does, refuses an image built for another chip, writes
 * compressed with MD5 verification and esptool's per-block timeouts, reports progress, steps
 * down a baud-rate ladder after a failed write (and says the flash was flaky), and hard-resets
 * the board into its new firmware. Every step is bounded, a timed-out attempt is cancelled
 * before the next one starts, and errors name the step and what to try.
 *
 * Where esptool's facts come from is said where they are used: `esptool/loader.py`
 * (timeouts, connect attempts, reset strategies), `esptool/reset.py` (reset delays),
 * `esptool/cmds.py` (`write_flash`: per-block timeouts), `esptool/targets/*.py`
 * (`disable_watchdogs`, via the firmware package's chip table), and esptool-js 0.7's
 * `lib/esploader.js` (what it does and does not do).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import {
  type ChipName,
  type ChipRevision,
  type ChipRomFacts,
  type ChipSecurity,
  chipById,
  chipRevisionNumber,
  chipRevisionRegisters,
  decodeChipRevision,
  encodeWords,
  IMAGE_MAGIC,
  PARTITION_TABLE_MAX_SIZE,
  PARTITION_TABLE_OFFSET,
  type PartitionTable,
  readImageHeader,
  readPartitionTable,
  uartDevBufNoFor,
} from '@xiaozhi-mcp/firmware';
import {
  type ClassicReset,
  ESPLoader,
  type IEspLoaderTerminal,
  type UsbJtagSerialReset,
} from 'esptool-js';
import { type FlashPart, md5Hex, NoReply, writeCompressed } from './compressed-write.js';
import { connectAdvice } from './connect-advice.js';
import { SerialError } from './errors.js';
import { QuietTransport } from './esptool-transport.js';
import {
  DEFAULT_CONNECT_ATTEMPTS,
  DEFAULT_FLASHER_TIMEOUTS,
  ERASE_REGION_TIMEOUT_PER_MB_MS,
  type FlasherTimeouts,
  flashBaudLadder,
} from './flash-timing.js';
import { runLineSteps } from './line-steps.js';
import type { PortKind } from './port-info.js';
import { PortLease } from './port-lease.js';
import {
  describeReset,
  type ResetStep,
  type ResetStrategy,
  resetPlan,
  resetSteps,
} from './reset/plan.js';
import { RESET_SEQUENCES } from './reset/sequences.js';
import { isUsbJtagSerialPort } from './reset/usb.js';
import { PrintedText } from './rom-boot-line.js';
import { readChipSecurity, runStubUnderSecureBoot, writeRefusal } from './security.js';
import type { NodeWebSerialPort } from './web-serial.js';

export interface FlasherOptions {
  readonly port: NodeWebSerialPort;
  /** The rate for the ROM (connect, stub upload) and the console. Default 115200. */
  readonly romBaudRate?: number;
  readonly timeouts?: Partial<FlasherTimeouts>;
  /** esptool's messages, line by line. */
  readonly log?: (line: string) => void;
  /**
   * How each connect attempt resets the board into download mode (see {@link resetPlan}).
   * Default `auto`: USB-JTAG on a USB-Serial-JTAG port (303a:1001), esptool's default otherwise
   * (tight, then classic, on Unix; classic on Windows). `none`: the board is put into download
   * mode by hand (hold BOOT, tap RESET).
   */
  readonly reset?: ResetStrategy | 'auto';
  /** Connect attempts, each a reset and up to five syncs. Default 7, esptool's. */
  readonly connectAttempts?: number;
  /** The host, for the `auto` reset (Windows gets classic). Default `process.platform`. */
  readonly platform?: NodeJS.Platform;
  /**
   * What the port is, for the `auto` reset where its USB ids cannot say: an rfc2217:// port
   * has none, and its server's signature gives the kind (`ResolvedPort.info.kind`). Without
   * it, a native-USB board behind a server got ClassicReset, whose lone RTS holds a
   * USB-Serial-JTAG chip in reset until a release boots its app.
   */
  readonly portKind?: PortKind;
}

export interface ConnectedChip {
  readonly chip: ChipName;
  /** The image header chip id (`esp_chip_id_t`). */
  readonly chipId: number;
  /** esptool's description, e.g. `ESP32-S3 (QFN56) (revision v0.0)`. */
  readonly description: string;
  /** The revision in eFuse, decoded as esptool's `get_chip_revision()` decodes it. */
  readonly revision: ChipRevision;
  /**
   * Secure Boot, flash encryption and whether download mode may write encrypted, as esptool
   * reads them before it writes (`security.ts`): what {@link Flasher.flash} refuses by.
   */
  readonly security: ChipSecurity;
  /** Lowercase `aa:bb:cc:dd:ee:ff`. */
  readonly mac: string;
  /** From the SPI flash's JEDEC id; undefined when it does not say. */
  readonly flashSizeMb?: number;
  readonly flashId: number;
  /**
   * Download mode talks over the chip's own USB-Serial-JTAG (by the port's USB ids, or by what
   * the ROM says, as esptool tells it); its RTC watchdog was disabled and its super watchdog
   * set to feed itself.
   */
  readonly usbJtagSerial: boolean;
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
  /** 1 for the first attempt, then one more for each rung of the ladder stepped down to. */
  readonly attempt: number;
  /** The rate of this attempt. */
  readonly baudRate: number;
}

export interface FlashOptions {
  /** The first rung of the baud ladder (see {@link flashBaudLadder}). Default 460800. */
  readonly baudRate?: number;
  /**
   * The whole ladder, tried in order: a failed write steps down to the next rate; a ladder of
   * one rate retries once at it. Default `baudRate`, then the rungs of
   * {@link FLASH_BAUD_LADDER} below it.
   */
  readonly baudRates?: readonly number[];
  /** Refuse unless the board is this chip (the rig's inventory says what it should be). */
  readonly expectedChip?: ChipName;
  readonly onProgress?: (progress: FlashProgress) => void;
  /** Erase the whole flash first. */
  readonly eraseAll?: boolean;
  /**
   * Reset into the new firmware afterwards (default true), then close the port: esptool's
   * `--after hard_reset`; with the flasher's reset `none`, `no_reset` (back to the ROM
   * bootloader, no line touched: someone presses RESET).
   */
  readonly reset?: boolean;
}

export interface FlashResult {
  readonly chip: ConnectedChip;
  /** The rate of the attempt that succeeded. */
  readonly baudRate: number;
  /** An attempt failed before one succeeded (the rate is then below the first rung). */
  readonly flaky: boolean;
  /** Why the first attempt failed, when flaky. */
  readonly firstError?: string;
  /** Every failed attempt, in order: its rate and why. */
  readonly failures: readonly { readonly baudRate: number; readonly error: string }[];
  readonly parts: readonly {
    readonly offset: number;
    readonly size: number;
    readonly md5: string;
  }[];
  readonly bytes: number;
  readonly durationMs: number;
}

interface Session {
  readonly lease: PortLease;
  readonly transport: QuietTransport;
  readonly loader: ESPLoader;
  readonly chip: ConnectedChip;
  baudRate: number;
}

const BOOTLOADER_OFFSETS = [0x0, 0x1000, 0x2000] as const;
const APP_ALIGN = 0x10000;

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

export class Flasher {
  readonly #port: NodeWebSerialPort;
  readonly #romBaudRate: number;
  readonly #timeouts: FlasherTimeouts;
  readonly #logLine: ((line: string) => void) | undefined;
  readonly #log: string[] = [];
  readonly #strategy: ResetStrategy | 'auto';
  readonly #plan: readonly ResetStep[];
  readonly #connectAttempts: number;
  readonly #platform: NodeJS.Platform;
  readonly #portKind: PortKind | undefined;
  #session: Session | undefined;

  constructor(options: FlasherOptions) {
    this.#port = options.port;
    this.#romBaudRate = options.romBaudRate ?? 115_200;
    this.#timeouts = { ...DEFAULT_FLASHER_TIMEOUTS, ...options.timeouts };
    this.#logLine = options.log;
    this.#strategy = options.reset ?? 'auto';
    this.#platform = options.platform ?? process.platform;
    this.#portKind = options.portKind;
    this.#plan = resetPlan(
      this.#strategy,
      { ...this.#port.getInfo(), kind: this.#portKind },
      this.#platform,
    );
    const attempts = options.connectAttempts ?? DEFAULT_CONNECT_ATTEMPTS;
    if (!Number.isInteger(attempts) || attempts < 1)
      throw new SerialError('OPTION_INVALID', `connectAttempts must be 1 or more, got ${attempts}`);
    this.#connectAttempts = attempts;
  }

  /** esptool's recent messages (bounded). */
  get log(): readonly string[] {
    return this.#log;
  }

  /** The chip of the current session, if connected. */
  get connected(): ConnectedChip | undefined {
    return this.#session?.chip;
  }

  /** The resets of successive connect attempts (cycled); empty with `reset: 'none'`. */
  get resetPlan(): readonly ResetStep[] {
    return this.#plan;
  }

  /**
   * Resets the board into download mode, syncs, detects the chip, reads its MAC, tames the
   * watchdogs of a chip on its USB-Serial-JTAG, starts esptool's flasher stub and reads the
   * flash id. The port is opened here (and closed by `disconnect`).
   */
  async connect(): Promise<ConnectedChip> {
    await this.#endSession();
    const lease = new PortLease(this.#port);
    const transport = new QuietTransport(lease, (line) => this.#push(`trace: ${line}`));
    // esptool-js builds its own resets (`constructResetSequence`: the USB-JTAG one by VID/PID,
    // else classic 50/550 ms) and calls one per attempt, cycling. Every one it builds runs the
    // next reset of our plan instead, through the port's lines, one set() per step.
    let next = 0;
    const ours = {
      transport,
      resetDelay: 0,
      reset: async () => {
        const step = this.#plan[next++ % this.#plan.length];
        if (step === undefined) return;
        this.#push(`Resetting into download mode (${describeReset(step)})...`);
        await runLineSteps(this.#lineSetter(lease), resetSteps(step));
      },
    };
    const loader = new ESPLoader({
      transport,
      baudrate: this.#romBaudRate,
      romBaudrate: this.#romBaudRate,
      terminal: this.#terminal(),
      debugLogging: false,
      resetConstructors: {
        classicReset: () => ours as unknown as ClassicReset,
        usbJTAGSerialReset: () => ours as unknown as UsbJtagSerialReset,
      },
    });
    loader.ERASE_REGION_TIMEOUT_PER_MB = ERASE_REGION_TIMEOUT_PER_MB_MS;
    const path = this.#port.path;
    // What the board prints while we try: the ROM's boot line says which mode it came up in.
    const printed = new PrintedText(16 * 1024);
    const stopListening = this.#port.addDataListener((bytes) => printed.push(bytes));
    try {
      // `no_reset`: esptool-js resets nothing itself (constructResetSequence returns none).
      const mode = this.#plan.length === 0 ? 'no_reset' : 'default_reset';
      await this.#bounded('connect', this.#timeouts.connectMs, () =>
        loader.detectChip(mode, this.#connectAttempts),
      );
    } catch (error) {
      await this.#shut(lease, transport);
      if (error instanceof SerialError && error.code !== 'FLASH_FAILED') throw error;
      const tried =
        this.#plan.length === 0
          ? 'reset none'
          : `reset ${[...new Set(this.#plan.map(describeReset))].join(', ')}`;
      throw this.#failure(
        'connect',
        new Error(
          `no answer from the ROM bootloader on ${path} after ${this.#connectAttempts} attempt${this.#connectAttempts === 1 ? '' : 's'} (${tried})`,
          { cause: error },
        ),
        connectAdvice(printed.text, this.#strategy, this.#usbJtagSerialPort()),
      );
    } finally {
      stopListening();
    }
    let step = 'detect';
    try {
      const chip = await this.#bounded(step, this.#timeouts.connectMs, async () => {
        const id = loader.chip.IMAGE_CHIP_ID ?? -1;
        const info = chipById(id);
        if (info === undefined)
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
        step = 'revision';
        const words = new Map<number, number>();
        for (const address of chipRevisionRegisters(info.rom.efuse))
          words.set(address, (await loader.readReg(address)) >>> 0);
        const revision = decodeChipRevision(info.rom.efuse, words);
        // Read in the ROM, before the stub: GET_SECURITY_INFO is the ROM's command.
        step = 'security';
        const security = await readChipSecurity(loader, info, revision);
        if (security.secureBoot) this.#push('Secure Boot is enabled.');
        if (security.flashEncryption)
          this.#push(
            `Flash encryption is enabled${security.encryptedDownloadDisabled ? ', and encrypted download disabled' : ''}.`,
          );
        step = 'watchdogs';
        const usbJtagSerial = await this.#tameWatchdogs(loader, info.rom, revision);
        step = 'stub';
        const hook = info.rom.secureBootStubHook;
        if (security.secureBoot && hook !== undefined)
          await runStubUnderSecureBoot(loader, hook, revision);
        else await loader.runStub();
        if (!loader.IS_STUB)
          throw new Error(`esptool has no flasher stub for ${loader.chip.CHIP_NAME}`);
        step = 'flash id';
        const flashId = await loader.readFlashId();
        const sizeId = (flashId >>> 16) & 0xff;
        const flashSizeMb = sizeId >= 0x14 && sizeId <= 0x1c ? 2 ** sizeId / 0x100000 : undefined;
        return {
          chip: info.name,
          chipId: id,
          description,
          revision,
          security,
          mac,
          flashId,
          usbJtagSerial,
          ...(flashSizeMb === undefined ? {} : { flashSizeMb }),
        } satisfies ConnectedChip;
      });
      this.#session = { lease, transport, loader, chip, baudRate: this.#romBaudRate };
      return chip;
    } catch (error) {
      await this.#shut(lease, transport);
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
   * esptool's `disable_watchdogs` (see the chip table's `rom.usbJtagSerial`): on a chip talking
   * over its USB-Serial-JTAG, which a reset through it leaves with the RTC watchdog and the
   * super watchdog running, disable the first and let the hardware feed the second, so neither
   * resets the chip mid-flash. esptool tells the USB-Serial-JTAG by the ROM's UARTDEV_BUF_NO;
   * the port's USB ids (303a:1001) say it too, without a register read. Where the ROM keeps that
   * byte depends on the chip's revision on some chips (the ESP32-C3 from v1.1). Skipped where
   * esptool skips it: a chip without such facts, secure download mode, a stub already running
   * (`sync_stub_detected`). Returns whether the chip is on its USB-Serial-JTAG.
   */
  async #tameWatchdogs(
    loader: ESPLoader,
    rom: ChipRomFacts,
    revision: ChipRevision,
  ): Promise<boolean> {
    const usb = rom.usbJtagSerial;
    const byPort = this.#usbJtagSerialPort();
    if (usb === undefined || loader.secureDownloadMode) return byPort;
    const where = uartDevBufNoFor(usb, chipRevisionNumber(revision));
    const byRom =
      byPort || ((await loader.readReg(where.uartDevBufNo)) & 0xff) === where.usbJtagSerial;
    if (!byRom) return false;
    // esptool-js keeps esptool's `sync_stub_detected` as a private field.
    if ((loader as unknown as { syncStubDetected?: boolean }).syncStubDetected === true)
      return true;
    await loader.writeReg(usb.rtcWdtWprotect, usb.rtcWdtKey);
    await loader.writeReg(usb.rtcWdtConfig0, 0);
    await loader.writeReg(usb.rtcWdtWprotect, 0);
    await loader.writeReg(usb.swdWprotect, usb.swdKey);
    const swd = await loader.readReg(usb.swdConf);
    await loader.writeReg(usb.swdConf, (swd | usb.swdAutoFeedEn) >>> 0);
    await loader.writeReg(usb.swdWprotect, 0);
    this.#push('USB-Serial-JTAG: RTC watchdog disabled, super watchdog set to auto-feed.');
    return true;
  }

  /**
   * Writes `parts` (offset and bytes each; a merged image is one part at 0x0), verifies each
   * by MD5, and hard-resets the board. Refuses, before writing anything, an image whose chip
   * id differs from the board's (`CHIP_MISMATCH`), and what the board's security eFuses or its
   * chip revision forbid (`WRITE_REFUSED`, `security.ts`). A failed write steps down the baud
   * ladder (`baudRates`, or `baudRate` and the rungs below it); the result says `flaky` then. An
   * attempt whose board stopped answering is cancelled (its port session closed, nothing of it
   * sent any more) and the next one reconnects.
   */
  async flash(parts: readonly FlashPart[], options: FlashOptions = {}): Promise<FlashResult> {
    const started = performance.now();
    const chip = (await this.#requireSession()).chip;
    this.#checkParts(parts, chip, options.expectedChip);
    const refusal = writeRefusal(parts, chip, this.#port.path);
    if (refusal !== undefined) throw new SerialError('WRITE_REFUSED', refusal);
    const ladder = flashBaudLadder(
      options.baudRate ?? (options.baudRates === undefined ? 460_800 : undefined),
      options.baudRates,
    );
    // A ladder of one rate still gets one retry, as the flasher always had.
    const attempts = Math.max(ladder.length, 2);
    const failures: { baudRate: number; error: string }[] = [];
    let usedBaudRate = ladder[0] ?? this.#romBaudRate;
    for (let attempt = 1; ; attempt++) {
      const baudRate = ladder[Math.min(attempt, ladder.length) - 1] ?? usedBaudRate;
      usedBaudRate = baudRate;
      try {
        if (attempt === 1) await this.#changeBaudRate(baudRate);
        else await this.#recover(baudRate);
        await this.#write(parts, options, attempt, baudRate);
        break;
      } catch (error) {
        if (error instanceof SerialError && error.code === 'CHIP_MISMATCH') throw error;
        const failure = error instanceof SerialError ? error : this.#failure('write', error, '');
        if (attempt >= attempts) {
          await this.#endSession();
          const ordinal = ['first', 'second', 'third', 'fourth', 'fifth'];
          const earlier = failures
            .map((f, i) => `${ordinal[i] ?? `#${i + 1}`} attempt at ${f.baudRate} baud: ${f.error}`)
            .join('; ');
          throw new SerialError(
            'FLASH_FAILED',
            earlier === '' ? failure.message : `${failure.message} (${earlier})`,
            { cause: error },
          );
        }
        failures.push({ baudRate, error: failure.message });
        this.#push(`Write at ${baudRate} baud failed: ${failure.message}`);
      }
    }
    if (options.reset ?? true) {
      await this.#after();
    }
    const first = failures[0];
    return {
      chip,
      baudRate: usedBaudRate,
      flaky: first !== undefined,
      ...(first === undefined ? {} : { firstError: first.error }),
      failures,
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
   * `reset` asks for the after-write step first: a hard reset into its firmware, or with reset
   * `none` esptool's `no_reset` (back to the ROM bootloader, no line touched).
   */
  async disconnect(options: { reset?: boolean } = {}): Promise<void> {
    if (options.reset === true && this.#session !== undefined) await this.#after();
    else await this.#endSession();
  }

  async #requireSession(): Promise<Session> {
    if (this.#session === undefined) await this.connect();
    const session = this.#session;
    if (session === undefined) throw new SerialError('FLASH_FAILED', 'connect: no session');
    return session;
  }

  /** The port is a USB-Serial-JTAG, by its USB ids or the kind it was given. */
  #usbJtagSerialPort(): boolean {
    return isUsbJtagSerialPort(this.#port.getInfo()) || this.#portKind === 'usb-serial-jtag';
  }

  /** The port's lines as `runLineSteps` drives them: one set() per step, both lines named. */
  #lineSetter(lease: PortLease) {
    const port = this.#port;
    // `platform` and `lines` let runLineSteps plan the steps for a host whose set() writes one
    // line after the other (line-steps.ts); a runLineSteps that does not plan ignores them.
    return {
      platform: this.#platform,
      get lines() {
        return port.isOpen ? { dtr: port.lines.dtr, rts: port.lines.rts } : undefined;
      },
      set: (state: { dtr: boolean; rts: boolean }) =>
        lease.setSignals({ dataTerminalReady: state.dtr, requestToSend: state.rts }),
    };
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

  async #write(
    parts: readonly FlashPart[],
    options: FlashOptions,
    attempt: number,
    baudRate: number,
  ): Promise<void> {
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
      options.onProgress?.({ part, written: done, total: size, percent, attempt, baudRate });
    };
    const attemptControl = new AbortController();
    session.transport.cancelWith(attemptControl.signal);
    try {
      await writeCompressed(
        {
          loader: session.loader,
          baudRate: session.baudRate,
          timeouts: this.#timeouts,
          control: attemptControl,
          log: (line) => this.#push(line),
        },
        parts,
        options.eraseAll === true,
        (part) => {
          current = part;
        },
        onProgress,
      );
    } catch (error) {
      const cause = attemptControl.signal.aborted ? attemptControl.signal.reason : error;
      if (cause instanceof NoReply) {
        // The board stopped answering: cancel the attempt before anything else happens. Its
        // reads end (the signal), its session can send nothing more (the lease), the port closes;
        // the next attempt reconnects.
        attemptControl.abort(cause);
        await this.#endSession();
      }
      const part = parts[current];
      const where = `part ${current + 1} at ${hex(part?.offset ?? 0)}`;
      const verify = /md5/i.test(message(cause));
      throw this.#failure(
        verify ? `verify ${where}` : `write ${where}`,
        cause,
        verify
          ? 'the flash does not hold what was written; retry at a lower baud rate, and if it persists the flash chip may be failing'
          : 'the board stopped answering during the write; check the cable and USB hub, or use a lower baud rate',
      );
    } finally {
      session.transport.cancelWith(undefined);
    }
  }

  /** Moves both ends to `baudRate` without reopening the port (the stub first, then the host). */
  async #changeBaudRate(baudRate: number): Promise<void> {
    const session = this.#session;
    if (session === undefined || session.baudRate === baudRate) return;
    const { loader, transport } = session;
    const step = `change to ${baudRate} baud`;
    await this.#bounded(step, this.#timeouts.stepMs, async () => {
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
    }).catch((error: unknown) => {
      throw this.#failure(step, error, 'the board does not answer at this rate');
    });
  }

  /**
   * Before the next attempt: the same stub at the next rate when the last attempt ended with
   * the board answering, else (or when the stub does not answer now) a fresh connection.
   */
  async #recover(baudRate: number): Promise<void> {
    const session = this.#session;
    if (session !== undefined) {
      try {
        session.transport.flushInput();
        await session.loader.readReg(session.loader.CHIP_DETECT_MAGIC_REG_ADDR, 1000);
        await this.#changeBaudRate(baudRate);
        return;
      } catch {
        await this.#endSession();
      }
    }
    await this.connect();
    await this.#changeBaudRate(baudRate);
  }

  /**
   * What esptool does after its operation (`--after`, esptool/__init__.py): a hard reset through
   * RTS, so the chip boots its new firmware (`hard_reset`, the default); with reset `none` no line
   * is touched at all, and the chip stays in its ROM bootloader (`no_reset`) until someone
   * presses RESET.
   */
  async #after(): Promise<void> {
    if (this.#strategy === 'none') await this.#noReset();
    else await this.#hardReset();
  }

  /**
   * esptool's `--after no_reset` ("Staying in bootloader.", esptool/__init__.py): the stub is
   * left for the ROM loader (`soft_reset(True)`, loader.py: FLASH_BEGIN of 0 bytes at 0, then
   * FLASH_END asking to reboot, which a system reset does with the straps as latched, so the
   * chip is back in download mode), no line touched. The ROM answers any rate (autobaud), so a
   * next connect without a reset finds it; pressing RESET runs the new firmware. Not leaving the
   * stub is no failure: the image is written, and RESET runs it all the same.
   */
  async #noReset(): Promise<void> {
    const session = this.#session;
    if (session?.loader.IS_STUB === true) {
      try {
        await this.#bounded('leave the stub', this.#timeouts.stepMs, async () => {
          await session.loader.flashBegin(0, 0);
          await session.loader.flashFinish(true);
        });
        this.#push('Staying in bootloader.');
      } catch (error) {
        this.#push(
          `Staying in the flasher stub: it did not leave for the ROM (${message(error)}).`,
        );
      }
    }
    this.#push('Reset none: no line touched; press RESET on the board to run its firmware.');
    await this.#endSession();
  }

  /**
   * esptool's HardReset: an RTS pulse with DTR released, so the chip boots its app; the longer
   * one (`uses_usb`) where the chip's `hard_reset` asks for it on its USB-Serial-JTAG (the
   * ESP32-C5).
   */
  async #hardReset(): Promise<void> {
    const session = this.#session;
    const chip = session?.chip;
    const long =
      chip?.usbJtagSerial === true &&
      chipById(chip.chipId)?.rom.usbJtagSerial?.hardResetUsesUsb === true;
    try {
      await this.#bounded('reset', this.#timeouts.stepMs, async () => {
        const lease = session?.lease ?? new PortLease(this.#port);
        await runLineSteps(
          this.#lineSetter(lease),
          long ? RESET_SEQUENCES.hardUsb : RESET_SEQUENCES.hard,
        );
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
    if (session !== undefined) await this.#shut(session.lease, session.transport);
    else if (this.#port.isOpen) await this.#port.close().catch(() => {});
  }

  /**
   * Ends a session for good: its reads stop, it can send nothing more (the lease is revoked
   * first), and the port closes.
   */
  async #shut(lease: PortLease, transport: QuietTransport): Promise<void> {
    const stop = new AbortController();
    stop.abort(new NoReply('the session was closed'));
    transport.cancelWith(stop.signal);
    lease.revoke();
    try {
      await this.#bounded('disconnect', this.#timeouts.stepMs, () => transport.disconnect());
    } catch {
      // Closed below.
    }
    await this.#port.close().catch(() => {});
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
