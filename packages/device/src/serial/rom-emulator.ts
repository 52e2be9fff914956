/**
 * The chip's serial download mode, as a host sees it on the UART: the ROM bootloader's
 * protocol and, once uploaded, esptool's flasher stub (esptool's "Serial Protocol" document;
 * `rom-protocol.ts` holds the packet format both ends share). It answers what esptool and
 * esptool-js send: SYNC (eight replies, ROM-style non-zero value), READ_REG / WRITE_REG over
 * a register file holding the chip's identity (detect magic, the eFuse words esptool decodes
 * into the MAC, the chip revision and the in-package flash and PSRAM (`efuse.ts`), UART divider)
 * and a SPI controller whose user commands reach the flash chip (`spi-flash.ts`: the JEDEC id
 * and the status registers), GET_SECURITY_INFO (chip id; the ESP32 ROM has no such command, the
 * ESP32-S2 ROM's reply has no chip id), SPI_ATTACH / SPI_SET_PARAMS, MEM_* (the stub upload,
 * then `OHAI` and stub behaviour), FLASH_* and FLASH_DEFL_* (zlib, streamed), SPI_FLASH_MD5
 * (32 hex digits from the ROM, 16 raw bytes from the stub), the ROM's READ_FLASH_SLOW (64 bytes
 * a command, `read_flash --no-stub`), and the stub's READ_FLASH, ERASE_FLASH, ERASE_REGION,
 * CHANGE_BAUDRATE and RUN_USER_CODE. Flash writes go to the board's `FlashStorage`: a region is
 * erased, then written, as the ROM and the stub do.
 *
 * Every reply ends with the status bytes esptool's targets give each loader: 4 from the ROM of
 * every chip here (status, error, 2 reserved), 2 from the stub (see `rom-protocol.ts`).
 *
 * Every chip of the firmware package's chip table can be emulated, from the emulator's own copy
 * of esptool's facts (`rom-chips.ts`, `efuse.ts`), never the table the flasher reads.
 *
 * On a chip with a USB-Serial-JTAG (`rom-chips.ts`'s `usbJtagSerial`), the emulator also holds
 * what esptool reads and writes there after connecting (esptool's `disable_watchdogs`): the ROM's
 * `UARTDEV_BUF_NO` (which console download mode talks on, see {@link RomConsole}; where it sits
 * depends on the chip revision on some chips) and the RTC
 * watchdog and super watchdog registers behind their write-protect keys. A reset over the
 * USB-Serial-JTAG resets neither watchdog, so a board on native USB enters download mode with
 * them running: {@link RomEmulator.armWatchdogs} arms them, and unless the host disabled the RTC
 * watchdog and set the super watchdog's auto-feed in time, they reset the chip (`reboot('watchdog')`).
 */
import { createHash } from 'node:crypto';
import { createInflate, type Inflate, constants as zlibConstants } from 'node:zlib';
import {
  type ChipName,
  decodeDataBlock,
  decodeRomRequest,
  decodeWords,
  encodeRomResponse,
  encodeRomStatus,
  encodeWords,
  isSyncPayload,
  ROM_COMMANDS,
  ROM_ERRORS,
  ROM_SYNC_VALUE,
  type RomRequest,
  romChecksum,
  romCommandName,
  SlipDecoder,
  STUB_ERRORS,
  STUB_HELLO,
  slipEncode,
} from '@xiaozhi-mcp/firmware';
import type { InPackageMemory } from '../board-api.js';
import type { FlashStorage } from '../flash-storage.js';
import {
  type BoardSilicon,
  type ChipRevision,
  DEFAULT_CHIP_REVISIONS,
  efuseRegisters,
} from './efuse.js';
import {
  CHIP_DETECT_MAGIC_REG,
  ROM_CHIPS,
  type RomChipProfile,
  romConsoleVariable,
} from './rom-chips.js';
import { runSpiFlashCommand } from './spi-flash.js';

export { spiFlashId } from './spi-flash.js';
export { CHIP_DETECT_MAGIC_REG, ROM_CHIPS, type RomChipProfile };

/**
 * Status bytes after every ROM reply: `STATUS_BYTES_LENGTH = 4` in esptool's `ESP32ROM`
 * (`esptool/targets/esp32.py`), which every later chip's ROM class inherits.
 */
const ROM_STATUS_BYTES = 4;
/** The stub's: `STATUS_BYTES_LENGTH = 2  # same as ESP8266, different to ESP32 ROM`. */
const STUB_STATUS_BYTES = 2;

export type RomStage = 'rom' | 'stub';

/** A flash data block as a fault hook sees it, before it is written. */
export interface RomBlockInfo {
  readonly command: 'FLASH_DATA' | 'FLASH_DEFL_DATA';
  readonly stage: RomStage;
  readonly seq: number;
  /** Flash address the block's (uncompressed) data starts at. */
  readonly address: number;
  /** Bytes in the packet (compressed for FLASH_DEFL_DATA). */
  readonly length: number;
}

/**
 * `corrupt`: write the block, then clear a bit of it in flash (what a marginal flash or a
 * glitch does; only the MD5 check notices). `fail`: answer with an error status (a flash
 * write error). `drop`: send no reply (a lost packet). `fail` and `drop` leave the block
 * unwritten, so the host's resend works. `hang`: the chip stops answering anything, this
 * block and every command after it, until it is reset (a stub stuck in a flash write).
 */
export type RomBlockFault = 'corrupt' | 'fail' | 'drop' | 'hang';

export interface RomFaults {
  /** Called for every flash data block; return a fault to inject it. */
  readonly flashBlock?: (block: RomBlockInfo) => RomBlockFault | undefined;
}

/**
 * The console download mode talks on, as the ROM records it in `UARTDEV_BUF_NO`: UART0 (0 there)
 * or the chip's USB-Serial-JTAG (`UARTDEV_BUF_NO_USB_JTAG_SERIAL`, esptool's `get_uart_no()`).
 */
export type RomConsole = 'uart' | 'usb-jtag-serial';

export interface RomWatchdogOptions {
  /**
   * Milliseconds after arming at which the watchdogs bite, unless tamed by then. Undefined: only
   * when {@link RomEmulator.expireWatchdogs} says their time is up (a test's event, no clock).
   */
  readonly timeoutMs?: number;
}

/** The watchdogs as the registers leave them. */
export interface RomWatchdogState {
  /** Armed (by {@link RomEmulator.armWatchdogs}) and not yet fired. */
  readonly armed: boolean;
  /** The RTC watchdog's enable bit (bit 31 of its config) is set. */
  readonly rtcWdtEnabled: boolean;
  /** The super watchdog's auto-feed bit is set: it never bites. */
  readonly swdAutoFeed: boolean;
}

/**
 * What esptool's `watchdog_reset` writes to RTC_CNTL_WDTCONFIG0 to arm the RTC watchdog:
 * `(1 << 31) | (5 << 28) | (1 << 8) | 2`, bit 31 being the enable bit (WDT_EN).
 */
const RTC_WDT_ARMED = ((1 << 31) | (5 << 28) | (1 << 8) | 2) >>> 0;
const RTC_WDT_EN = 0x8000_0000;

export interface RomEmulatorOptions {
  readonly chip: ChipName;
  /** Lowercase `aa:bb:cc:dd:ee:ff`, burnt in eFuse. */
  readonly mac: string;
  /** The board's SPI flash; without one every flash command fails as with no flash chip. */
  readonly flash: FlashStorage | undefined;
  /** Bytes to the host (SLIP frames), in order. */
  readonly send: (bytes: Uint8Array) => void;
  /** The UART's current rate (for the UART divider register and CHANGE_BAUDRATE). */
  readonly baudRate: () => number;
  /** CHANGE_BAUDRATE: called after the reply is queued at the old rate. */
  readonly setBaudRate?: (baudRate: number) => void;
  /**
   * Leave download mode: `reset` after FLASH_END / FLASH_DEFL_END asking to reboot (the
   * straps are sampled again), `run` for the ROM's "run user code" and the stub's RUN_USER_CODE,
   * `watchdog` when an armed watchdog bit (see {@link RomEmulator.armWatchdogs}).
   */
  readonly reboot?: (how: 'reset' | 'run' | 'watchdog') => void;
  readonly faults?: RomFaults;
  /**
   * The chip as its eFuse describes it: revision (default `efuse.ts`'s for the chip), what its
   * package holds (a preset's `inPackage`), and its security features (`BoardSilicon`).
   */
  readonly silicon?: BoardSilicon & { readonly inPackage?: InPackageMemory };
  /** The console download mode talks on (what `UARTDEV_BUF_NO` says). Default `uart`. */
  readonly console?: RomConsole;
  /** Arm the watchdogs at once, as a reset over the USB-Serial-JTAG leaves them. */
  readonly watchdogs?: RomWatchdogOptions;
}

interface FlashSession {
  readonly compressed: boolean;
  readonly start: number;
  readonly end: number;
  /** Next address to write. */
  next: number;
  readonly inflater: StreamInflater | undefined;
}

/** The stub's READ_FLASH in progress: `handle_flash_read` of esptool's flasher stub. */
interface ReadSession {
  next: number;
  readonly size: number;
  readonly packetSize: number;
  /** Unacknowledged bytes the stub lets out before it waits for an ack. */
  readonly maxInFlight: number;
  sent: number;
  acked: number;
  readonly md5: ReturnType<typeof createHash>;
}

/** zlib inflate fed block by block; each push resolves with that block's output. */
class StreamInflater {
  readonly #inflate: Inflate = createInflate();
  #output: Buffer[] = [];
  #error: Error | undefined;

  constructor() {
    this.#inflate.on('data', (chunk: Buffer) => this.#output.push(chunk));
    this.#inflate.on('error', (error: Error) => {
      this.#error = error;
    });
  }

  async push(block: Uint8Array): Promise<Uint8Array> {
    if (this.#error !== undefined) throw this.#error;
    await new Promise<void>((resolve) => {
      const onError = () => resolve();
      this.#inflate.once('error', onError);
      this.#inflate.write(block);
      this.#inflate.flush(zlibConstants.Z_SYNC_FLUSH, () => {
        this.#inflate.off('error', onError);
        resolve();
      });
    });
    if (this.#error !== undefined) throw this.#error;
    const output = Buffer.concat(this.#output);
    this.#output = [];
    return output;
  }

  close(): void {
    this.#inflate.destroy();
  }
}

function macWords(mac: string): [number, number] {
  const bytes = mac.split(':').map((part) => Number.parseInt(part, 16) & 0xff);
  const [b0 = 0, b1 = 0, b2 = 0, b3 = 0, b4 = 0, b5 = 0] = bytes;
  return [((b2 << 24) | (b3 << 16) | (b4 << 8) | b5) >>> 0, ((b0 << 8) | b1) >>> 0];
}

// The SPI controller as esptool's `run_spiflash_command` drives it: SPI_CMD_USR (bit 18 of the
// command register) starts a user command; SPI_USR_MOSI (bit 27) and SPI_USR_MISO (bit 28) of
// SPI_USR_REG turn its data phases on, each as long as its DLEN register says plus one bit.
const SPI_CMD_USR = 1 << 18;
const SPI_USR_MOSI = 1 << 27;
const SPI_USR_MISO = 1 << 28;
const SECTOR = 0x1000;
/** The stub's READ_FLASH buffer: `uint8_t buf[FLASH_SECTOR_SIZE]`; a larger packet is refused. */
const STUB_READ_BUFFER = 0x1000;
/** The ROM's READ_FLASH_SLOW: `BLOCK_LEN = 64  # ROM read limit per command` (`esptool/targets/esp32.py`). */
const ROM_READ_BLOCK = 64;
/** Below this, a chip with Secure Boot takes no write (esptool's `write_flash`: the bootloader). */
const SECURE_BOOT_PROTECTED_END = 0x8000;
/** GET_SECURITY_INFO's flag bit (esptool's `SECURITY_INFO_FLAG_MAP`, "taken from the ROM code"). */
const SECURITY_FLAG_SECURE_BOOT_EN = 1 << 0;
/** eFuse key purposes (esptool's `KEY_PURPOSES` of the ESP32-C3 and later). */
const KEY_PURPOSE_XTS_AES_128_KEY = 4;
const KEY_PURPOSE_SECURE_BOOT_DIGEST0 = 9;
/**
 * What the ESP32-S3's `rom_spiflash_legacy_funcs.read` pointer holds until a host changes it: a
 * stand-in address in the chip's ROM (the emulator runs no ROM code; esptool reads it and puts
 * it back, whatever it is).
 */
const ROM_SPIFLASH_READ = 0x4000_a1b0;

export class RomEmulator {
  readonly chip: RomChipProfile;
  readonly #options: RomEmulatorOptions;
  readonly #decoder = new SlipDecoder();
  readonly #registers = new Map<number, number>();
  readonly #history: string[] = [];
  #stage: RomStage = 'rom';
  #queue: Promise<void> = Promise.resolve();
  #flash: FlashSession | undefined;
  #read: ReadSession | undefined;
  #memLoaded = 0;
  /** RAM regions MEM_BEGIN opened: where an uploaded stub's entry can be. */
  readonly #memRegions: { readonly start: number; readonly end: number }[] = [];
  /** The ROM's reply to a command it does not know carries the last command it answered. */
  #lastOp = 0;
  #closed = false;
  /** A `hang` fault: nothing is answered any more. */
  #hung = false;
  #watchdogsArmed = false;
  #watchdogTimer: NodeJS.Timeout | undefined;
  readonly #revision: ChipRevision;

  constructor(options: RomEmulatorOptions) {
    this.#options = options;
    this.chip = ROM_CHIPS[options.chip];
    this.#revision = options.silicon?.revision ?? DEFAULT_CHIP_REVISIONS[options.chip];
    // A chip esptool knows only by its security info reads 0 there, as an unset register does.
    if (this.chip.detectMagic !== undefined)
      this.#registers.set(CHIP_DETECT_MAGIC_REG, this.chip.detectMagic);
    const efuse = efuseRegisters(options.chip, {
      ...options.silicon,
      xtalMhz: this.chip.xtalMhz,
    });
    for (const [address, word] of efuse) this.#registers.set(address, word);
    // The MAC's words share eFuse words with other fields (the ESP32-C2 keeps its revision
    // beside the MAC's top bytes): OR'ed in.
    const [mac0, mac1] = macWords(options.mac);
    const macEfuse = this.chip.macEfuse;
    this.#registers.set(macEfuse, (this.#register(macEfuse) | mac0) >>> 0);
    this.#registers.set(macEfuse + 4, (this.#register(macEfuse + 4) | mac1) >>> 0);
    const hook = this.chip.secureBootStubHook;
    if (hook !== undefined) this.#registers.set(hook, ROM_SPIFLASH_READ);
    if (options.console !== undefined) this.setConsole(options.console);
    if (options.watchdogs !== undefined) this.armWatchdogs(options.watchdogs);
  }

  /**
   * Which console download mode talks on: `UARTDEV_BUF_NO` (where this chip's revision keeps it)
   * then reads 0 (UART0) or the chip's USB-Serial-JTAG value. A chip without a USB-Serial-JTAG
   * has no such variable to set.
   */
  setConsole(console: RomConsole): void {
    const usb = this.chip.usbJtagSerial;
    if (usb === undefined) return;
    const variable = romConsoleVariable(usb, this.#revision.major * 100 + this.#revision.minor);
    this.#registers.set(
      variable.uartDevBufNo,
      console === 'usb-jtag-serial' ? variable.usbJtagSerial : 0,
    );
  }

  /**
   * The RTC watchdog running (its config as esptool's `watchdog_reset` arms it) and the super
   * watchdog without auto-feed, as download mode finds them after a reset over the
   * USB-Serial-JTAG. They reset the chip when their time is up (`timeoutMs`, or
   * {@link expireWatchdogs}) unless the host disabled the one and set the other's auto-feed, each
   * through its write-protect key. Does nothing on a chip without a USB-Serial-JTAG.
   */
  armWatchdogs(options: RomWatchdogOptions = {}): void {
    const usb = this.chip.usbJtagSerial;
    if (usb === undefined || this.#closed) return;
    this.#registers.set(usb.rtcWdtConfig0, RTC_WDT_ARMED);
    this.#registers.set(usb.rtcWdtWprotect, 0);
    const swd = this.#register(usb.swdConf);
    this.#registers.set(usb.swdConf, (swd & ~usb.swdAutoFeedEn) >>> 0);
    this.#registers.set(usb.swdWprotect, 0);
    this.#watchdogsArmed = true;
    clearTimeout(this.#watchdogTimer);
    this.#watchdogTimer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(() => this.expireWatchdogs(), options.timeoutMs);
  }

  /** What the watchdog registers say now. */
  get watchdogs(): RomWatchdogState {
    const usb = this.chip.usbJtagSerial;
    if (usb === undefined) return { armed: false, rtcWdtEnabled: false, swdAutoFeed: false };
    return {
      armed: this.#watchdogsArmed,
      rtcWdtEnabled: (this.#register(usb.rtcWdtConfig0) & RTC_WDT_EN) !== 0,
      swdAutoFeed: (this.#register(usb.swdConf) & usb.swdAutoFeedEn) !== 0,
    };
  }

  /**
   * The armed watchdogs' time is up: the RTC watchdog resets the chip if it is still enabled,
   * else the super watchdog if it is not fed automatically. Returns which one bit, if any.
   */
  expireWatchdogs(): 'rtc-wdt' | 'swd' | undefined {
    clearTimeout(this.#watchdogTimer);
    this.#watchdogTimer = undefined;
    if (!this.#watchdogsArmed || this.#closed) return undefined;
    this.#watchdogsArmed = false;
    const state = this.watchdogs;
    const which = state.rtcWdtEnabled ? 'rtc-wdt' : state.swdAutoFeed ? undefined : 'swd';
    if (which === undefined) return undefined;
    this.#record(`WATCHDOG_RESET (${which})`);
    this.close();
    this.#options.reboot?.('watchdog');
    return which;
  }

  /** `rom` until the stub runs, then `stub`. */
  get stage(): RomStage {
    return this.#stage;
  }

  /** Command names in the order they were handled (bounded), for tests and traces. */
  get history(): readonly string[] {
    return this.#history;
  }

  /** Bytes from the host. Commands are handled one at a time, in order. */
  receive(bytes: Uint8Array): void {
    if (this.#closed) return;
    for (const frame of this.#decoder.push(bytes)) {
      this.#queue = this.#queue.then(
        () => (this.#closed ? undefined : this.#handle(frame)),
        () => undefined,
      );
    }
  }

  /** Resolves when every command received so far has been handled. */
  async idle(): Promise<void> {
    await this.#queue;
  }

  /** The chip left download mode: stop answering, drop the inflater. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#watchdogTimer);
    this.#watchdogTimer = undefined;
    this.#flash?.inflater?.close();
    this.#flash = undefined;
    this.#read = undefined;
  }

  #record(name: string): void {
    this.#history.push(name);
    if (this.#history.length > 10_000) this.#history.shift();
  }

  #statusBytes(): 2 | 4 {
    return this.#stage === 'stub' ? STUB_STATUS_BYTES : ROM_STATUS_BYTES;
  }

  #reply(op: number, options: { value?: number; payload?: Uint8Array; error?: number } = {}): void {
    // A chip reset mid-command (a watchdog) sends nothing more.
    if (this.#closed) return;
    const payload = options.payload ?? new Uint8Array(0);
    const status = encodeRomStatus(options.error, this.#statusBytes());
    const data = new Uint8Array(payload.length + status.length);
    data.set(payload);
    data.set(status, payload.length);
    this.#options.send(slipEncode(encodeRomResponse(op, options.value ?? 0, data)));
    if (options.error === undefined) this.#lastOp = op;
  }

  #fail(op: number, romError: number, stubError: number): void {
    this.#reply(op, { error: this.#stage === 'stub' ? stubError : romError });
  }

  /** What the ROM sends for a command it does not have; the stub's is its own. */
  #invalid(op: number): void {
    if (this.#stage === 'stub') {
      this.#reply(op, { error: STUB_ERRORS.CMD_NOT_IMPLEMENTED });
      return;
    }
    // A different command byte with status 01 05: esptool's UnsupportedCommandError. The ROM
    // repeats it (esptool-js drains the repeats before its next command).
    const data = new Uint8Array(ROM_STATUS_BYTES);
    data[0] = 1;
    data[1] = ROM_ERRORS.INVALID_MESSAGE;
    const frame = slipEncode(encodeRomResponse(this.#lastOp === op ? 0 : this.#lastOp, 0, data));
    for (let i = 0; i < 8; i++) this.#options.send(frame);
  }

  async #handle(frame: Uint8Array): Promise<void> {
    if (this.#hung) return;
    if (this.#read !== undefined) {
      this.#onReadAck(frame);
      return;
    }
    let request: RomRequest;
    try {
      request = decodeRomRequest(frame);
    } catch {
      return; // Not a request (noise that happened to be framed): the ROM ignores it.
    }
    const name = romCommandName(request.command);
    this.#record(name ?? `0x${request.command.toString(16)}`);
    if (request.size !== request.data.length) {
      this.#fail(request.command, ROM_ERRORS.INVALID_MESSAGE, STUB_ERRORS.BAD_DATA_LEN);
      return;
    }
    const stubOnly =
      request.command === ROM_COMMANDS.ERASE_FLASH ||
      request.command === ROM_COMMANDS.ERASE_REGION ||
      request.command === ROM_COMMANDS.READ_FLASH ||
      request.command === ROM_COMMANDS.RUN_USER_CODE;
    // The slow read is the ROM's alone (esptool: "ROM only"); the stub has READ_FLASH instead.
    const romOnly = request.command === ROM_COMMANDS.READ_FLASH_SLOW;
    if (
      name === undefined ||
      (stubOnly && this.#stage === 'rom') ||
      (romOnly && this.#stage === 'stub')
    ) {
      this.#invalid(request.command);
      return;
    }
    switch (name) {
      case 'SYNC':
        this.#sync(request);
        return;
      case 'READ_REG':
        this.#readReg(request);
        return;
      case 'WRITE_REG':
        this.#writeReg(request);
        return;
      case 'GET_SECURITY_INFO':
        this.#securityInfo(request);
        return;
      case 'SPI_ATTACH':
      case 'SPI_SET_PARAMS':
        this.#reply(request.command);
        return;
      case 'MEM_BEGIN':
      case 'MEM_DATA':
      case 'MEM_END':
        this.#mem(name, request);
        return;
      case 'CHANGE_BAUDRATE':
        this.#changeBaudRate(request);
        return;
      case 'FLASH_BEGIN':
      case 'FLASH_DEFL_BEGIN':
        this.#flashBegin(request, name === 'FLASH_DEFL_BEGIN');
        return;
      case 'FLASH_DATA':
      case 'FLASH_DEFL_DATA':
        await this.#flashData(request, name);
        return;
      case 'FLASH_END':
      case 'FLASH_DEFL_END':
        await this.#flashEnd(request);
        return;
      case 'SPI_FLASH_MD5':
        this.#md5(request);
        return;
      case 'READ_FLASH':
        this.#readFlash(request);
        return;
      case 'READ_FLASH_SLOW':
        if (this.#hookedStub()) this.#startStub();
        else this.#readFlashSlow(request);
        return;
      case 'ERASE_FLASH':
        this.#erase(request.command, 0, this.#options.flash?.size ?? 0);
        return;
      case 'ERASE_REGION': {
        const [address = 0, size = 0] = decodeWords(request.data, 2) ?? [];
        if (address % SECTOR !== 0 || size % SECTOR !== 0) {
          this.#fail(request.command, ROM_ERRORS.INVALID_MESSAGE, STUB_ERRORS.BAD_DATA_LEN);
          return;
        }
        this.#erase(request.command, address, size);
        return;
      }
      case 'RUN_USER_CODE':
        // The stub does not answer; it jumps to the app.
        this.close();
        this.#options.reboot?.('run');
        return;
    }
  }

  #sync(request: RomRequest): void {
    if (!isSyncPayload(request.data)) {
      this.#fail(request.command, ROM_ERRORS.INVALID_MESSAGE, STUB_ERRORS.BAD_DATA_LEN);
      return;
    }
    // Eight replies; the ROM's carry a non-zero value, the stub's zero (how esptool tells them apart).
    const value = this.#stage === 'rom' ? ROM_SYNC_VALUE : 0;
    for (let i = 0; i < 8; i++) this.#reply(request.command, { value });
  }

  #register(address: number): number {
    if (address === this.chip.uartClkdivReg) {
      return Math.round((this.chip.xtalMhz * 1_000_000) / this.#options.baudRate()) & 0xfffff;
    }
    return this.#registers.get(address >>> 0) ?? 0;
  }

  #readReg(request: RomRequest): void {
    const words = decodeWords(request.data, 1);
    if (words === undefined || request.data.length !== 4) {
      this.#fail(request.command, ROM_ERRORS.INVALID_MESSAGE, STUB_ERRORS.BAD_DATA_LEN);
      return;
    }
    this.#reply(request.command, { value: this.#register(words[0] ?? 0) });
  }

  #writeReg(request: RomRequest): void {
    const count = request.data.length / 16;
    const words = decodeWords(request.data, count * 4);
    if (!Number.isInteger(count) || count === 0 || words === undefined) {
      this.#fail(request.command, ROM_ERRORS.INVALID_MESSAGE, STUB_ERRORS.NOT_ENOUGH_DATA);
      return;
    }
    for (let i = 0; i < count; i++) {
      const [address = 0, value = 0, mask = 0] = words.slice(i * 4, i * 4 + 3);
      const old = this.#register(address);
      this.#setRegister(address, ((old & ~mask) | (value & mask)) >>> 0);
    }
    this.#reply(request.command);
  }

  #setRegister(address: number, value: number): void {
    const spi = this.chip.spi;
    const usb = this.chip.usbJtagSerial;
    // The watchdogs' config registers take a write only while their protect register holds the
    // key (esptool writes the key, the config, then 0); otherwise the write is lost silently.
    if (usb !== undefined) {
      if (address === usb.rtcWdtConfig0 && this.#register(usb.rtcWdtWprotect) !== usb.rtcWdtKey)
        return;
      if (address === usb.swdConf && this.#register(usb.swdWprotect) !== usb.swdKey) return;
    }
    this.#registers.set(address >>> 0, value);
    if (address === spi.base && (value & SPI_CMD_USR) !== 0) {
      // The SPI controller runs the user command at once and clears the busy bit.
      this.#runSpiUserCommand();
      this.#registers.set(spi.base, value & ~SPI_CMD_USR);
    }
  }

  /**
   * The user command the SPI registers describe: the command byte in SPI_USR2's low byte, the
   * MOSI data from W0 onward (little-endian words), the MISO data back into W0, first byte in
   * the low byte; W0 is left alone without a MISO phase.
   */
  #runSpiUserCommand(): void {
    const spi = this.chip.spi;
    const usr = this.#register(spi.base + spi.usr);
    const command = this.#register(spi.base + spi.usr2) & 0xff;
    let mosi: Uint8Array = new Uint8Array(0);
    if ((usr & SPI_USR_MOSI) !== 0) {
      const bytes = Math.min(
        64,
        Math.ceil(((this.#register(spi.base + spi.mosiDlen) & 0xffff) + 1) / 8),
      );
      const words = Array.from({ length: Math.ceil(bytes / 4) }, (_, i) =>
        this.#register(spi.base + spi.w0 + 4 * i),
      );
      mosi = encodeWords(...words).subarray(0, bytes);
    }
    const result = runSpiFlashCommand(this.#options.flash, command, mosi);
    if ((usr & SPI_USR_MISO) === 0) return;
    const bits = Math.min(32, (this.#register(spi.base + spi.misoDlen) & 0xffff) + 1);
    this.#registers.set(
      spi.base + spi.w0,
      bits === 32 ? result >>> 0 : (result & (2 ** bits - 1)) >>> 0,
    );
  }

  /**
   * GET_SECURITY_INFO as esptool's `get_security_info` reads it (`esptool/loader.py`): flags u32
   * (bit 0 SECURE_BOOT_EN, the ROM's own mapping), flash_crypt_cnt u8 (one bit set: on),
   * key_purposes 7 × u8 (the Secure Boot digest, SECURE_BOOT_DIGEST0 = 9, in the first key
   * block, the flash encryption key, XTS_AES_128_KEY = 4, in the next), then, but on the
   * ESP32-S2, chip_id u32 and api_version u32.
   */
  #securityInfo(request: RomRequest): void {
    if (this.chip.securityInfo === 'none') {
      this.#invalid(request.command);
      return;
    }
    const silicon = this.#options.silicon;
    const info = new Uint8Array(this.chip.securityInfo === 'without-chip-id' ? 12 : 20);
    const purposes: number[] = [];
    if (silicon?.secureBoot === true) {
      info.set(encodeWords(SECURITY_FLAG_SECURE_BOOT_EN), 0);
      purposes.push(KEY_PURPOSE_SECURE_BOOT_DIGEST0);
    }
    if (silicon?.flashEncryption === true) {
      info[4] = 0b001;
      purposes.push(KEY_PURPOSE_XTS_AES_128_KEY);
    }
    info.set(purposes, 5);
    if (this.chip.securityInfo === 'with-chip-id') info.set(encodeWords(this.chip.imageChipId), 12);
    this.#reply(request.command, { payload: info });
  }

  /**
   * A write or erase below 0x8000 on a chip with Secure Boot: refused, the ROM's and the stub's
   * alike. esptool refuses such writes itself "to protect the bootloader" (`write_flash`); the
   * emulator refuses them too, so that a flasher that would overwrite a secure bootloader fails
   * loudly here instead of leaving a board that no longer boots.
   */
  #protectsBootloader(offset: number, size: number): boolean {
    return (
      this.#options.silicon?.secureBoot === true && size > 0 && offset < SECURE_BOOT_PROTECTED_END
    );
  }

  #mem(name: 'MEM_BEGIN' | 'MEM_DATA' | 'MEM_END', request: RomRequest): void {
    if (name === 'MEM_BEGIN') {
      const words = decodeWords(request.data, 4);
      if (words === undefined) {
        this.#fail(request.command, ROM_ERRORS.INVALID_MESSAGE, STUB_ERRORS.BAD_DATA_LEN);
        return;
      }
      const [size = 0, , , offset = 0] = words;
      this.#memRegions.push({ start: offset, end: offset + size });
      this.#reply(request.command);
      return;
    }
    if (name === 'MEM_DATA') {
      const block = decodeDataBlock(request.data);
      if (block === undefined || block.size !== block.payload.length) {
        this.#fail(request.command, ROM_ERRORS.INVALID_MESSAGE, STUB_ERRORS.BAD_DATA_LEN);
        return;
      }
      if (romChecksum(block.payload) !== (request.checksum & 0xff)) {
        this.#fail(request.command, ROM_ERRORS.INVALID_CRC, STUB_ERRORS.BAD_DATA_CHECKSUM);
        return;
      }
      this.#memLoaded += block.payload.length;
      this.#reply(request.command);
      return;
    }
    const [noEntry = 1] = decodeWords(request.data, 2) ?? [];
    this.#reply(request.command);
    if (noEntry !== 0 || this.#stage === 'stub' || this.#memLoaded === 0) return;
    // "Bug in ESP32-S3 ROM prevents stub execution if secure boot is enabled" (esptool's
    // run_stub): the ROM answers and stays.
    if (this.#secureBootBlocksStub()) return;
    this.#startStub();
  }

  /** The uploaded code is esptool's flasher stub: it says hello and takes over the UART. */
  #startStub(): void {
    this.#stage = 'stub';
    this.#options.send(slipEncode(STUB_HELLO));
  }

  #secureBootBlocksStub(): boolean {
    return this.chip.secureBootStubHook !== undefined && this.#options.silicon?.secureBoot === true;
  }

  /**
   * esptool's way round that bug: the ROM's flash-read function pointer set to an address in
   * the uploaded code, READ_FLASH_SLOW calls it, and the stub starts instead of a reply.
   */
  #hookedStub(): boolean {
    const hook = this.chip.secureBootStubHook;
    if (hook === undefined || this.#stage !== 'rom' || this.#memLoaded === 0) return false;
    const target = this.#register(hook);
    return this.#memRegions.some((r) => target >= r.start && target < r.end);
  }

  #changeBaudRate(request: RomRequest): void {
    const [baudRate = 0] = decodeWords(request.data, 2) ?? [];
    if (baudRate <= 0) {
      this.#fail(request.command, ROM_ERRORS.INVALID_MESSAGE, STUB_ERRORS.BAD_DATA_LEN);
      return;
    }
    // The reply leaves at the old rate; the UART switches once it is sent.
    this.#reply(request.command);
    this.#options.setBaudRate?.(baudRate);
  }

  #flashBegin(request: RomRequest, compressed: boolean): void {
    const words = decodeWords(request.data, 4);
    const flash = this.#options.flash;
    if (words === undefined) {
      this.#fail(request.command, ROM_ERRORS.INVALID_MESSAGE, STUB_ERRORS.BAD_DATA_LEN);
      return;
    }
    const [size = 0, , , offset = 0] = words;
    if (
      flash === undefined ||
      offset + size > flash.size ||
      this.#protectsBootloader(offset, size)
    ) {
      this.#fail(request.command, ROM_ERRORS.FAILED_TO_ACT, STUB_ERRORS.FAILED_SPI_OP);
      return;
    }
    this.#flash?.inflater?.close();
    if (size > 0) flash.erase(offset, size);
    this.#flash = {
      compressed,
      start: offset,
      end: offset + size,
      next: offset,
      inflater: compressed ? new StreamInflater() : undefined,
    };
    this.#reply(request.command);
  }

  async #flashData(request: RomRequest, name: 'FLASH_DATA' | 'FLASH_DEFL_DATA'): Promise<void> {
    const session = this.#flash;
    const flash = this.#options.flash;
    const block = decodeDataBlock(request.data);
    if (
      session === undefined ||
      flash === undefined ||
      session.compressed !== (name === 'FLASH_DEFL_DATA')
    ) {
      this.#fail(request.command, ROM_ERRORS.FAILED_TO_ACT, STUB_ERRORS.NOT_IN_FLASH_MODE);
      return;
    }
    if (block === undefined || block.size !== block.payload.length) {
      this.#fail(request.command, ROM_ERRORS.INVALID_MESSAGE, STUB_ERRORS.BAD_DATA_LEN);
      return;
    }
    if (romChecksum(block.payload) !== (request.checksum & 0xff)) {
      this.#fail(request.command, ROM_ERRORS.INVALID_CRC, STUB_ERRORS.BAD_DATA_CHECKSUM);
      return;
    }
    const fault = this.#options.faults?.flashBlock?.({
      command: name,
      stage: this.#stage,
      seq: block.seq,
      address: session.next,
      length: block.payload.length,
    });
    if (fault === 'drop') return;
    if (fault === 'hang') {
      this.#record('HUNG');
      this.#hung = true;
      return;
    }
    if (fault === 'fail') {
      this.#fail(request.command, ROM_ERRORS.FLASH_WRITE, STUB_ERRORS.FAILED_SPI_OP);
      return;
    }
    let data: Uint8Array;
    if (session.inflater !== undefined) {
      try {
        data = await session.inflater.push(block.payload);
      } catch {
        this.#fail(request.command, ROM_ERRORS.DEFLATE, STUB_ERRORS.INFLATE_ERROR);
        return;
      }
    } else {
      data = block.payload;
    }
    // The host pads the last plain block with 0xFF; only the begun region is written.
    const limit = session.compressed ? data.length : Math.max(0, session.end - session.next);
    const write = data.subarray(0, Math.min(data.length, limit));
    if (session.next + write.length > session.end) {
      this.#fail(request.command, ROM_ERRORS.FLASH_WRITE, STUB_ERRORS.TOO_MUCH_DATA);
      return;
    }
    const at = session.next;
    if (this.#closed) return; // reset while inflating: the block never reached the flash
    if (write.length > 0) flash.write(at, write);
    session.next += write.length;
    if (fault === 'corrupt') this.#corrupt(flash, at, write);
    this.#reply(request.command);
  }

  /** Clears one set bit of what was just written (NOR flash can only clear bits). */
  #corrupt(flash: FlashStorage, at: number, written: Uint8Array): void {
    const index = written.findIndex((byte) => byte !== 0);
    if (index < 0) return;
    const byte = written[index] ?? 0;
    flash.write(at + index, Uint8Array.of(byte & (byte - 1)));
  }

  async #flashEnd(request: RomRequest): Promise<void> {
    const [flag = 1] = decodeWords(request.data, 1) ?? [];
    const session = this.#flash;
    this.#flash = undefined;
    session?.inflater?.close();
    this.#reply(request.command);
    // 0 asks to reboot; 1 stays in the stub, or for the ROM means "run user code".
    if (flag === 0) {
      this.close();
      this.#options.reboot?.('reset');
    } else if (this.#stage === 'rom') {
      this.close();
      this.#options.reboot?.('run');
    }
  }

  #md5(request: RomRequest): void {
    const [address = 0, size = 0] = decodeWords(request.data, 2) ?? [];
    const flash = this.#options.flash;
    if (flash === undefined || address + size > flash.size) {
      this.#fail(request.command, ROM_ERRORS.FLASH_READ, STUB_ERRORS.FAILED_SPI_OP);
      return;
    }
    const digest = createHash('md5').update(flash.read(address, size)).digest();
    // The ROM sends the digest as 32 lowercase hex characters, the stub as 16 raw bytes.
    const payload =
      this.#stage === 'stub'
        ? new Uint8Array(digest)
        : new TextEncoder().encode(digest.toString('hex'));
    this.#reply(request.command, { payload });
  }

  /**
   * The stub's READ_FLASH (`handle_flash_read` in esptool's legacy flasher stub,
   * `stub_commands.c`): after the reply, packets of `packetSize` bytes go out while fewer than
   * `maxInFlight` bytes are unacknowledged (the stub compares the unacknowledged byte count, not
   * packets, with the host's fourth parameter: with esptool's 0x1000-byte packets and 64, or
   * esptool-js's and 1024, one packet is in flight; esp-flasher-stub fixes the window at one
   * packet for that reason). Each ack is a 4-byte total of the bytes received; a frame that is
   * not, an ack past what was sent, or a failed flash read ends the transfer, and the MD5 of
   * what was sent (16 raw bytes) closes it either way. A packet size over the stub's 4096-byte
   * buffer gets the reply and nothing else.
   */
  #readFlash(request: RomRequest): void {
    const [address = 0, size = 0, packetSize = 0, maxInFlight = 0] =
      decodeWords(request.data, 4) ?? [];
    if (request.data.length !== 16) {
      this.#fail(request.command, ROM_ERRORS.INVALID_MESSAGE, STUB_ERRORS.BAD_DATA_LEN);
      return;
    }
    this.#reply(request.command);
    // An empty packet size would spin the stub sending empty frames; neither sends data.
    if (packetSize === 0 || packetSize > STUB_READ_BUFFER) return;
    this.#decoder.reset();
    this.#read = {
      next: address,
      size,
      packetSize,
      maxInFlight,
      sent: 0,
      acked: 0,
      md5: createHash('md5'),
    };
    this.#pumpRead();
  }

  /** One turn of the stub's loop: fill the window, or end with the MD5. */
  #pumpRead(): void {
    const read = this.#read;
    if (read === undefined) return;
    if (!(read.acked < read.size && read.acked <= read.sent)) {
      this.#endRead(read);
      return;
    }
    const flash = this.#options.flash;
    while (read.sent < read.size && read.sent - read.acked < read.maxInFlight) {
      const length = Math.min(read.packetSize, read.size - read.sent);
      if (flash === undefined || read.next + length > flash.size) {
        this.#endRead(read); // SPIRead failed: the stub stops and sends the MD5.
        return;
      }
      const chunk = flash.read(read.next, length);
      read.md5.update(chunk);
      read.next += length;
      read.sent += length;
      this.#options.send(slipEncode(chunk));
    }
  }

  #endRead(read: ReadSession): void {
    this.#read = undefined;
    this.#options.send(slipEncode(new Uint8Array(read.md5.digest())));
  }

  #onReadAck(frame: Uint8Array): void {
    const read = this.#read;
    if (read === undefined) return;
    const [acked] = frame.length === 4 ? (decodeWords(frame, 1) ?? []) : [];
    if (acked === undefined) {
      this.#endRead(read); // `if (r != 4) break;`
      return;
    }
    read.acked = acked;
    this.#pumpRead();
  }

  /**
   * The ROM's READ_FLASH_SLOW, as esptool's `read_flash_slow` (`esptool/targets/esp32.py`) uses
   * it: the request is offset and length (`<II`), at most 64 bytes; the reply's payload is
   * always a 64-byte buffer ("regardless of how many bytes were actually read from flash"), the
   * bytes past `length` being the emulator's zeros.
   */
  #readFlashSlow(request: RomRequest): void {
    const words = decodeWords(request.data, 2);
    const flash = this.#options.flash;
    if (words === undefined || request.data.length !== 8) {
      this.#fail(request.command, ROM_ERRORS.INVALID_MESSAGE, STUB_ERRORS.BAD_DATA_LEN);
      return;
    }
    const [address = 0, length = 0] = words;
    if (length > ROM_READ_BLOCK) {
      this.#fail(request.command, ROM_ERRORS.READ_LENGTH, STUB_ERRORS.BAD_DATA_LEN);
      return;
    }
    if (flash === undefined || address + length > flash.size) {
      this.#fail(request.command, ROM_ERRORS.FLASH_READ, STUB_ERRORS.FAILED_SPI_OP);
      return;
    }
    const payload = new Uint8Array(ROM_READ_BLOCK);
    payload.set(flash.read(address, length));
    this.#reply(request.command, { payload });
  }

  #erase(op: number, address: number, size: number): void {
    const flash = this.#options.flash;
    if (
      flash === undefined ||
      address + size > flash.size ||
      this.#protectsBootloader(address, size)
    ) {
      this.#fail(op, ROM_ERRORS.FAILED_TO_ACT, STUB_ERRORS.FAILED_SPI_OP);
      return;
    }
    if (size > 0) flash.erase(address, size);
    this.#reply(op);
  }
}
