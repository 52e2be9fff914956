/**
 * A virtual board as a USB serial device: a CP2102 bridge (10c4:ea60) with the auto-reset
 * circuit, or the chip's own USB-Serial-JTAG (303a:1001). Its identity (serial number, USB ids,
 * the udev by-id name), its UART (console lines out, the ROM emulator's packets in, in download
 * mode), DTR and RTS through the auto-reset circuit, and what a native-USB device does on the bus:
 * re-enumerating under a new path on a chip reset ({@link Reenumeration}). What the board prints
 * while no host holds its port open is lost, as on a real board: ESP-IDF's USB-Serial-JTAG
 * console drops output no host reads (the host's CDC-ACM driver reads the device only while its
 * tty is open, and the chip's 64-byte FIFO holds no more), so after a reset that re-enumerates a
 * native-USB board its early boot lines never arrive; a bridge board's UART output is likewise
 * lost while its port is closed. The host's open port ({@link HostPort}) and the bus around it
 * are the binding's (`virtual-binding.ts`).
 */
import type { ConsoleLine } from '../console.js';
import type { DeviceState, VirtualBoard } from '../virtual-board.js';
import { AutoResetCircuit, type AutoResetEvent } from './auto-reset.js';
import type { BindingPortInfo } from './binding-types.js';
import { efuseRegisters } from './efuse.js';
import { RomEmulator, type RomFaults } from './rom-emulator.js';
import { garble, Wire, type WireStats } from './wire.js';

/** The rate the ROM and the app's console use after any reset. */
export const CONSOLE_BAUD_RATE = 115_200;
/** Console output queued beyond this is dropped (see `#consoleSend`). */
const CONSOLE_BACKLOG_MS = 250;

/** An error as a serial driver reports it; `canceled` for an operation cut short by a close. */
export class PortError extends Error {
  constructor(
    message: string,
    readonly canceled = false,
  ) {
    super(message);
    this.name = 'PortError';
  }
}

/** How an open of a port that just appeared is refused: see `VirtualSerialBinding.failOpens`. */
export type OpenFault = 'EBUSY' | 'EACCES' | 'ENOENT';

/** How long a re-enumerating device stays off the bus by default: see {@link VirtualSerialDeviceOptions.reenumerateMs}. */
export const DEFAULT_REENUMERATE_MS = 250;

export interface VirtualSerialDeviceOptions {
  /** Default `/dev/ttyVIRT<n>` (a bridge) or `/dev/ttyACM<n>` (USB-Serial-JTAG). */
  readonly path?: string;
  /** The chip's USB-Serial-JTAG (Espressif 303a:1001) instead of a CP2102 bridge. */
  readonly usbJtag?: boolean;
  /** Default from the board's MAC. */
  readonly serialNumber?: string;
  /** Deliver bytes no faster than the baud rate; default true. */
  readonly throttle?: boolean;
  /** Faults for the ROM emulator (a block corrupted, failed or lost). */
  readonly faults?: RomFaults;
  /** Longest DTR pulse taken as a BOOT click. */
  readonly clickMaxMs?: number;
  /** EN's RC delay on the bridge board (see `AutoResetOptions.enRiseMs`). */
  readonly enRiseMs?: number;
  /**
   * Re-enumerate on every chip reset but a power-on (through the lines, a software restart, a
   * panic, the ROM's reboot after flashing): as the chip starts, the device leaves the bus (an
   * open port fails as an unplugged one does) and comes back this many milliseconds later under a
   * new path, its serial number unchanged; the board keeps running meanwhile. What a native-USB
   * board does on Linux when its port is held open (esptool documents `/dev/ttyACM0` ->
   * `/dev/ttyACM1` for its watchdog reset); real re-enumeration takes 1–3 s, and what the
   * board prints meanwhile is lost. Default: never.
   */
  readonly reenumerateMs?: number;
  /**
   * The first `count` opens of the device's path fail with `code`, again each time it
   * (re-)enumerates under a new path: a port that just appeared (see
   * `VirtualSerialBinding.failOpens`).
   */
  readonly openFaults?: { readonly count: number; readonly code?: OpenFault };
  /**
   * USB-Serial-JTAG devices: after a reset into download mode the chip's RTC and super
   * watchdogs stay armed (nothing but the USB-JTAG reset happened) and bite this many
   * milliseconds later, mid-flash, unless the host disabled them (esptool's
   * `disable_watchdogs`). Default {@link DEFAULT_USB_JTAG_WATCHDOG_MS}; `false`: never armed.
   */
  readonly watchdogMs?: number | false;
}

/** How long a native-USB board's armed watchdogs give a flasher to tame them (esptool does so right after sync). */
export const DEFAULT_USB_JTAG_WATCHDOG_MS = 3000;

/** DTR and RTS as the host left them, when it changed them (`atMs`: `performance.now()`). */
export interface LineChange {
  readonly dtr: boolean;
  readonly rts: boolean;
  readonly atMs: number;
}

/** The host's open port on a device: what the device hands bytes to, and fails when it leaves. */
export interface HostPort {
  /** Bytes off the wire from the board, sent at `baud` (undefined: over USB). */
  receive(bytes: Uint8Array, baud: number | undefined): void;
  /** The device went away: operations fail, not as cancellations. */
  lose(error: Error): void;
}

/** A virtual board on the USB bus: its identity, auto-reset circuit, UART and ROM. */
export class VirtualSerialDevice {
  readonly board: VirtualBoard;
  readonly usbJtag: boolean;
  readonly serialNumber: string;
  readonly circuit: AutoResetCircuit;
  /** See {@link VirtualSerialDeviceOptions.watchdogMs}. */
  readonly watchdogMs: number | false | undefined;
  /** See {@link VirtualSerialDeviceOptions.reenumerateMs}; undefined: never. */
  readonly reenumerateMs: number | undefined;
  /** See {@link VirtualSerialDeviceOptions.openFaults}. */
  readonly openFaults: { readonly count: number; readonly code?: OpenFault } | undefined;
  /** Mutable, so a test can inject a fault mid-session. */
  faults: RomFaults;
  readonly #throttle: boolean;
  #path: string;
  #plugged = true;
  #port: HostPort | undefined;
  #emulator: RomEmulator | undefined;
  #uartBaud = CONSOLE_BAUD_RATE;
  /** The ROM measures the host's rate from SYNC; it follows the host until CHANGE_BAUDRATE. */
  #autobaud = false;
  readonly #toHost: Wire;
  readonly #toBoard: Wire;
  readonly #lineEvents: AutoResetEvent[] = [];
  readonly #lineChanges: LineChange[] = [];
  #droppedLines = 0;
  #droppedClosedLines = 0;
  readonly #onLine = (line: ConsoleLine) => this.#consoleSend(line);
  readonly #onState = (state: DeviceState) => this.#stateChanged(state);
  readonly #onBoot = () => {
    this.#uartBaud = CONSOLE_BAUD_RATE;
  };

  constructor(board: VirtualBoard, path: string, options: VirtualSerialDeviceOptions = {}) {
    this.board = board;
    this.#path = path;
    this.usbJtag = options.usbJtag ?? false;
    this.faults = options.faults ?? {};
    if (
      options.reenumerateMs !== undefined &&
      (!Number.isFinite(options.reenumerateMs) || options.reenumerateMs < 0)
    )
      throw new PortError(`reenumerateMs must be >= 0, got ${options.reenumerateMs}`);
    this.reenumerateMs = options.reenumerateMs;
    this.openFaults = options.openFaults;
    this.watchdogMs = options.watchdogMs;
    this.#throttle = options.throttle ?? true;
    // What the preset says its package holds must be something the chip's eFuse can record:
    // refused here, loudly, rather than when download mode starts.
    efuseRegisters(board.preset.chip, {
      ...board.silicon,
      ...(board.preset.inPackage === undefined ? {} : { inPackage: board.preset.inPackage }),
    });
    const hex = board.mac.replace(/:/g, '').toUpperCase();
    // Espressif's USB-Serial-JTAG reports the MAC as its serial number.
    this.serialNumber = options.serialNumber ?? (this.usbJtag ? board.mac.toUpperCase() : hex);
    this.circuit = new AutoResetCircuit(
      {
        get state() {
          return board.state;
        },
        reset: (reason, resetOptions) => {
          this.#resetUart();
          board.reset(reason, resetOptions);
        },
        powerOff: () => {
          this.#resetUart();
          board.powerOff();
        },
        click: () => board.click(),
      },
      {
        usbJtag: this.usbJtag,
        onEvent: (event) => this.#recordLine(event),
        ...(options.clickMaxMs === undefined ? {} : { clickMaxMs: options.clickMaxMs }),
        ...(options.enRiseMs === undefined ? {} : { enRiseMs: options.enRiseMs }),
      },
    );
    this.#toHost = new Wire((bytes, baud) => this.#port?.receive(bytes, baud), this.#throttle);
    this.#toBoard = new Wire((bytes, baud) => this.#boardReceive(bytes, baud), this.#throttle);
    board.console.on('line', this.#onLine);
    board.on('state', this.#onState);
    board.on('boot', this.#onBoot);
    if (board.state === 'download') this.#stateChanged('download');
  }

  get path(): string {
    return this.#path;
  }

  get plugged(): boolean {
    return this.#plugged;
  }

  get isOpen(): boolean {
    return this.#port !== undefined;
  }

  /** The board side's UART rate now. */
  get uartBaudRate(): number {
    return this.#uartBaud;
  }

  /** The ROM/stub session while the board is in download mode. */
  get emulator(): RomEmulator | undefined {
    return this.#emulator;
  }

  /** Line changes and what they did, oldest first (bounded). */
  get lineEvents(): readonly AutoResetEvent[] {
    return this.#lineEvents;
  }

  /**
   * Every change of DTR and RTS the host made (a `set()` that changed a line, a close that
   * dropped them), oldest first (bounded): which reset a flasher or a rig played, or that it
   * touched no line at all.
   */
  get lineChanges(): readonly LineChange[] {
    return this.#lineChanges;
  }

  get stats(): {
    readonly toBoard: WireStats;
    readonly toHost: WireStats;
    /** Console lines dropped because the wire was behind. */
    readonly droppedLines: number;
    /** Console lines lost because no host held the port open (closed, or the device away). */
    readonly droppedClosedLines: number;
  } {
    return {
      toBoard: { bytes: this.#toBoard.bytes, wireMs: this.#toBoard.wireMs },
      toHost: { bytes: this.#toHost.bytes, wireMs: this.#toHost.wireMs },
      droppedLines: this.#droppedLines,
      droppedClosedLines: this.#droppedClosedLines,
    };
  }

  get info(): BindingPortInfo {
    const jtag = this.usbJtag;
    return {
      path: this.#path,
      manufacturer: jtag ? 'Espressif' : 'Silicon Labs',
      serialNumber: this.serialNumber,
      pnpId: jtag
        ? `usb-Espressif_USB_JTAG_serial_debug_unit_${this.serialNumber}-if00`
        : `usb-Silicon_Labs_CP2102_USB_to_UART_Bridge_Controller_${this.serialNumber}-if00-port0`,
      locationId: undefined,
      vendorId: jtag ? '303a' : '10c4',
      productId: jtag ? '1001' : 'ea60',
    };
  }

  /** Stops listening to the board. */
  dispose(): void {
    this.board.console.off('line', this.#onLine);
    this.board.off('state', this.#onState);
    this.board.off('boot', this.#onBoot);
    this.circuit.dispose();
    this.#closeEmulator();
    this.#toHost.clear();
    this.#toBoard.clear();
  }

  // --- used by the binding and its ports ---

  /** @internal */
  attachPort(port: HostPort): void {
    this.#port = port;
  }

  /** @internal The port closed; `hupcl` drops both lines, as the OS does. */
  detachPort(port: HostPort, hupcl: boolean): void {
    if (this.#port !== port) return;
    this.#port = undefined;
    this.#toHost.clear();
    this.#toBoard.clear();
    if (hupcl) this.setLines(false, false);
  }

  /** @internal */
  setLines(dtr: boolean, rts: boolean): void {
    const now = this.circuit.lines;
    if (now.dtr !== dtr || now.rts !== rts) {
      this.#lineChanges.push({ dtr, rts, atMs: performance.now() });
      if (this.#lineChanges.length > 1000) this.#lineChanges.shift();
    }
    this.circuit.setLines({ dtr, rts });
  }

  /**
   * The board's RESET (EN) button, with BOOT held when `boot`: the chip starts afresh
   * (`rst:0x1 (POWERON)`: EN is the chip's power-up pin) and samples GPIO0, into the serial
   * bootloader with BOOT held, else its app. No line is involved: what a person does for a
   * board whose lines reset nothing (`reset: none`). On the bus a native-USB device
   * re-enumerates, as on any chip reset (`VirtualSerialBinding.pressReset`).
   */
  pressReset(options: { boot?: boolean } = {}): void {
    this.#resetUart();
    this.board.reset('POWERON', { download: options.boot === true });
  }

  /** @internal */
  hostSend(bytes: Uint8Array, baud: number): Promise<void> {
    return this.#toBoard.send(bytes, this.usbJtag ? undefined : baud);
  }

  /** @internal */
  hostFlush(): void {
    this.#toBoard.clear();
  }

  /** @internal */
  hostDrain(): Promise<void> {
    return this.#toBoard.idle();
  }

  /** @internal Unplug: the port fails, bytes in flight are lost. */
  unplug(): void {
    this.#plugged = false;
    const port = this.#port;
    this.#port = undefined;
    const error = new PortError('EIO: i/o error, the device was disconnected');
    this.#toBoard.clear(error);
    this.#toHost.clear();
    port?.lose(error);
  }

  /** @internal Plugged back, possibly under another path. */
  plug(path: string): void {
    this.#path = path;
    this.#plugged = true;
  }

  #recordLine(event: AutoResetEvent): void {
    this.#lineEvents.push(event);
    if (this.#lineEvents.length > 1000) this.#lineEvents.shift();
  }

  #boardSend(bytes: Uint8Array): void {
    if (this.#port === undefined) return;
    void this.#toHost.send(bytes, this.usbJtag ? undefined : this.#uartBaud);
  }

  /**
   * A real firmware blocks on a full UART, so its output never runs ahead of the wire; the
   * virtual board prints at once, so lines beyond a short backlog are dropped instead.
   */
  #consoleSend(line: ConsoleLine): void {
    // No host holds the port: nobody reads the device, and what the board prints is lost.
    if (this.#port === undefined) {
      this.#droppedClosedLines++;
      return;
    }
    if (this.#toHost.backlogMs > CONSOLE_BACKLOG_MS) {
      this.#droppedLines++;
      return;
    }
    this.#boardSend(new TextEncoder().encode(`${line.text}\r\n`));
  }

  /** A reset: the UART is back at the ROM rate and its FIFO is lost. */
  #resetUart(): void {
    this.#uartBaud = CONSOLE_BAUD_RATE;
    this.#toHost.clear();
  }

  #boardReceive(bytes: Uint8Array, baud: number | undefined): void {
    const emulator = this.#emulator;
    if (emulator === undefined) return; // The app does not read its UART.
    if (baud !== undefined && this.#autobaud && emulator.stage === 'rom') this.#uartBaud = baud;
    emulator.receive(baud === undefined || baud === this.#uartBaud ? bytes : garble(bytes));
  }

  #stateChanged(state: DeviceState): void {
    if (state !== 'download') {
      this.#closeEmulator();
      if (state === 'off') this.#uartBaud = CONSOLE_BAUD_RATE;
      return;
    }
    this.#closeEmulator();
    const board = this.board;
    this.#autobaud = true;
    const watchdogMs = this.usbJtag ? (this.watchdogMs ?? DEFAULT_USB_JTAG_WATCHDOG_MS) : false;
    const inPackage = board.preset.inPackage;
    const emulator = new RomEmulator({
      chip: board.preset.chip,
      mac: board.mac,
      flash: board.flash,
      silicon: { ...board.silicon, ...(inPackage === undefined ? {} : { inPackage }) },
      ...(this.usbJtag ? { console: 'usb-jtag-serial' as const } : {}),
      ...(watchdogMs === false ? {} : { watchdogs: { timeoutMs: watchdogMs } }),
      send: (bytes) => this.#boardSend(bytes),
      baudRate: () => this.#uartBaud,
      setBaudRate: (baudRate) => {
        this.#autobaud = false;
        this.#uartBaud = baudRate;
      },
      reboot: (how) => this.#reboot(emulator, how),
      faults: {
        flashBlock: (block) => this.faults.flashBlock?.(block),
      },
    });
    this.#emulator = emulator;
  }

  /**
   * The ROM or the stub leaves download mode. A watchdog bites at once: what is in the UART's
   * FIFO is lost. A reboot or a jump the loader asked for comes after its reply is out: the
   * stub flushes it first (`stub_tx_flush()` before `software_reset()` after FLASH_END, and
   * before jumping to MEM_END's entry point, in esptool's flasher stub `stub_flasher.c`).
   *
   * The stub's reboot is a system software reset: the ROM prints `RTC_SW_SYS_RST`, and the boot
   * mode stays what the strapping pins latched at the last chip reset (they are sampled only at
   * power-on, RTC watchdog, brown-out, analog super watchdog and crystal clock glitch resets, as
   * Espressif's datasheets state), so a chip rebooted from download mode is back in its serial
   * bootloader, with the ROM, not the stub, answering. "Run user code" boots from flash.
   */
  #reboot(emulator: RomEmulator, how: 'reset' | 'run' | 'watchdog'): void {
    const board = this.board;
    if (how === 'watchdog') {
      this.#resetUart();
      board.reset('RTC_SW_CPU_RST', { download: false });
      return;
    }
    void this.#toHost.idle().then(() => {
      // Something else reset the chip meanwhile (the lines, a power cycle, a detach).
      if (this.#emulator !== emulator || board.state !== 'download') return;
      this.#resetUart();
      if (how === 'reset') board.reset('RTC_SW_SYS_RST', { download: true });
      else board.reset('RTC_SW_CPU_RST', { download: false });
    });
  }

  #closeEmulator(): void {
    this.#emulator?.close();
    this.#emulator = undefined;
    this.#autobaud = false;
  }
}

/**
 * A native-USB device leaving the bus and coming back on a chip reset (see
 * {@link VirtualSerialDeviceOptions.reenumerateMs}). The bus says how the device leaves and comes
 * back (`leave`, `back`); this says when.
 */
export class Reenumeration {
  readonly #device: VirtualSerialDevice;
  readonly #awayMs: number;
  readonly #bus: { readonly leave: () => void; readonly back: () => void };
  /** Leaving: the chip just started; the device leaves once the current host call returns. */
  #leave: NodeJS.Timeout | undefined;
  /** Away: it comes back when this fires. */
  #back: NodeJS.Timeout | undefined;
  readonly #onBoot = (reason: string, _count: number, download: boolean): void => {
    // Power-on is how the device appears in the first place, not a re-enumeration. A reset into
    // the serial bootloader keeps the USB device: esptool (USBJTAGSerialReset) and esptool-js
    // sync on the same port right after it, without reopening anything. The app starting anew
    // is what re-enumerates.
    if (reason !== 'POWERON' && !download) this.#chipReset();
  };

  /** `bus.leave`: take the device off the bus; `bus.back`: put it back, if it is still attached. */
  constructor(
    device: VirtualSerialDevice,
    awayMs: number,
    bus: { readonly leave: () => void; readonly back: () => void },
  ) {
    this.#device = device;
    this.#awayMs = awayMs;
    this.#bus = bus;
    device.board.on('boot', this.#onBoot);
  }

  /** The device left the bus (by itself or unplugged by hand): it is no longer about to leave. */
  cancelLeave(): void {
    clearTimeout(this.#leave);
    this.#leave = undefined;
  }

  /** The device is back on the bus (by itself or plugged by hand): it is no longer away. */
  cancelReturn(): void {
    clearTimeout(this.#back);
    this.#back = undefined;
  }

  /** The device is detached for good. */
  dispose(): void {
    this.cancelLeave();
    this.cancelReturn();
    this.#device.board.off('boot', this.#onBoot);
  }

  /**
   * The chip was reset by its RESET (EN) button: the USB peripheral restarts with it, though the
   * boot reason is a power-up, which the board's `boot` event alone does not count.
   */
  buttonReset(): void {
    this.#chipReset();
  }

  /**
   * The chip started after a reset: the device leaves the bus once the host call that caused it
   * has returned (a reset sequence's last line change still reaches the port), and comes back
   * `awayMs` after the latest such reset.
   */
  #chipReset(): void {
    const device = this.#device;
    if (!device.plugged) {
      // Away already (or unplugged by hand): a reset while away delays the return.
      if (this.#back !== undefined) {
        clearTimeout(this.#back);
        this.#back = setTimeout(() => this.#return(), this.#awayMs);
      }
      return;
    }
    if (this.#leave !== undefined) return;
    this.#leave = setTimeout(() => {
      this.#leave = undefined;
      if (!device.plugged) return;
      this.#bus.leave();
      // A new USB session starts with the CDC lines released.
      device.circuit.release();
      this.#back = setTimeout(() => this.#return(), this.#awayMs);
    }, 0);
  }

  #return(): void {
    this.#back = undefined;
    this.#bus.back();
  }
}
