/**
 * A `serialport` binding whose ports are virtual boards, so the code that opens a real port
 * (`new SerialPortStream({ binding, path, baudRate })`) reaches a `VirtualBoard` unchanged.
 * Each attached board is a USB serial device: a CP2102 bridge (10c4:ea60) with the auto-reset
 * circuit, or the chip's own USB-Serial-JTAG (303a:1001). Out of the port come the board's
 * console lines and, in download mode, the ROM's and the stub's replies; into it go the
 * host's packets, to the ROM emulator in download mode (the app ignores UART input). DTR and
 * RTS drive the auto-reset circuit. Bytes travel no faster than the baud rate (10 bits a
 * byte), delivered in time slices, and a byte sent at one rate and received at another
 * arrives garbled, as on a wire. Devices can be unplugged and plugged back, under a new path.
 *
 * What real hosts and boards do that bites, on request: the binding can write the lines the way
 * one OS does (`platform`: Windows writes RTS, then DTR), refuse the first opens of a path the
 * way a port that just appeared is refused (EBUSY while ModemManager probes it, EACCES until
 * udev sets its permissions), and a native-USB device can leave the bus on every chip reset and
 * come back under a new path (`reenumerateMs`).
 */
import { EventEmitter } from 'node:events';
import type { SerialPortStream } from '@serialport/stream';
import { ReceiveQueue } from '@xiaozhi-mcp/serial/provider';
import type { ConsoleLine } from '../console.js';
import type { DeviceState, VirtualBoard } from '../virtual-board.js';
import { AutoResetCircuit, type AutoResetEvent } from './auto-reset.js';
import { efuseRegisters } from './efuse.js';
import { RomEmulator, type RomFaults } from './rom-emulator.js';

// `@serialport/bindings-interface` types cannot be imported from ESM (its exports map has no
// types); they are taken from `SerialPortStream`, whose options carry the binding.
type BindingInterface = ConstructorParameters<typeof SerialPortStream>[0]['binding'];
type BindingPortInterface = Awaited<ReturnType<BindingInterface['open']>>;
export type BindingOpenOptions = Parameters<BindingInterface['open']>[0];
export type BindingPortInfo = Awaited<ReturnType<BindingInterface['list']>>[number];
type PortStatus = Awaited<ReturnType<BindingPortInterface['get']>>;
type SetOptions = Parameters<BindingPortInterface['set']>[0];
type UpdateOptions = Parameters<BindingPortInterface['update']>[0];

/** The rate the ROM and the app's console use after any reset. */
export const CONSOLE_BAUD_RATE = 115_200;
/** Bits on the wire per byte: start, 8 data, stop. */
const BITS_PER_BYTE = 10;
/**
 * USB-Serial-JTAG has no UART: bytes move in USB full-speed bulk packets whatever baud rate
 * the host sets. Modelled as about 1 MB/s, expressed as an equivalent baud rate.
 */
const USB_LINK_BAUD = 10_000_000;
/** Console output queued beyond this is dropped (see `#consoleSend`). */
const CONSOLE_BACKLOG_MS = 250;
/** Bytes a host has not read yet, at most (a tty's buffer); more are lost. */
const RX_BUFFER_LIMIT = 64 * 1024;

interface WireSegment {
  readonly bytes: Uint8Array;
  /** The sender's UART rate; undefined over USB, where there is none to disagree on. */
  readonly baud: number | undefined;
  readonly start: number;
  readonly byteMs: number;
  delivered: number;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
}

/**
 * One direction of the UART. Bytes leave back to back at `baud`; the receiver gets every
 * byte whose time has come, in slices (one timer per slice, never one per byte).
 */
class Wire {
  readonly #deliver: (bytes: Uint8Array, baud: number | undefined) => void;
  readonly #throttle: boolean;
  readonly #sliceMs: number;
  #segments: WireSegment[] = [];
  #freeAt = 0;
  #timer: NodeJS.Timeout | undefined;
  #idleWaiters: (() => void)[] = [];
  bytes = 0;
  wireMs = 0;

  constructor(
    deliver: (bytes: Uint8Array, baud: number | undefined) => void,
    throttle: boolean,
    sliceMs = 2,
  ) {
    this.#deliver = deliver;
    this.#throttle = throttle;
    this.#sliceMs = sliceMs;
  }

  /** Resolves when the last byte has reached the other end. `baud` undefined: over USB. */
  send(bytes: Uint8Array, baud: number | undefined): Promise<void> {
    const linkMs = (bytes.length * BITS_PER_BYTE * 1000) / (baud ?? USB_LINK_BAUD);
    const byteMs = this.#throttle ? linkMs / bytes.length : 0;
    const start = Math.max(performance.now(), this.#freeAt);
    this.#freeAt = start + bytes.length * byteMs;
    this.bytes += bytes.length;
    this.wireMs += linkMs;
    return new Promise((resolve, reject) => {
      this.#segments.push({ bytes, baud, start, byteMs, delivered: 0, resolve, reject });
      this.#schedule();
    });
  }

  /** Resolves when nothing is in flight. */
  idle(): Promise<void> {
    if (this.#segments.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** How long until the last queued byte is out. */
  get backlogMs(): number {
    return this.#segments.length === 0 ? 0 : Math.max(0, this.#freeAt - performance.now());
  }

  /** Drops everything in flight; pending senders get `error`, or simply resolve. */
  clear(error?: Error): void {
    const segments = this.#segments;
    this.#segments = [];
    this.#freeAt = 0;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const segment of segments) {
      if (error === undefined) segment.resolve();
      else segment.reject(error);
    }
    this.#wakeIdle();
  }

  #wakeIdle(): void {
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const wake of waiters) wake();
  }

  #schedule(): void {
    if (this.#timer !== undefined) return;
    const head = this.#segments[0];
    if (head === undefined) return;
    const now = performance.now();
    const end = head.start + head.bytes.length * head.byteMs;
    const nextByte = head.start + (head.delivered + 1) * head.byteMs;
    // A short packet arrives whole at its end; a long transfer in slices of sliceMs.
    const at = Math.min(end, Math.max(nextByte, now + this.#sliceMs));
    this.#timer = setTimeout(() => this.#pump(), Math.max(0, at - now));
  }

  #pump(): void {
    this.#timer = undefined;
    const now = performance.now();
    for (;;) {
      const head = this.#segments[0];
      if (head === undefined) break;
      const due =
        head.byteMs === 0
          ? head.bytes.length
          : Math.min(head.bytes.length, Math.floor((now - head.start) / head.byteMs + 1e-6));
      if (due > head.delivered) {
        const slice = head.bytes.subarray(head.delivered, due);
        head.delivered = due;
        this.#deliver(slice, head.baud);
      }
      if (head.delivered < head.bytes.length) break;
      this.#segments.shift();
      head.resolve();
    }
    if (this.#segments.length === 0) this.#wakeIdle();
    this.#schedule();
  }
}

/** What a byte looks like when sender and receiver disagree on the rate: framing errors. */
function garble(bytes: Uint8Array): Uint8Array {
  return new Uint8Array(bytes.length);
}

class PortError extends Error {
  constructor(
    message: string,
    readonly canceled = false,
  ) {
    super(message);
    this.name = 'PortError';
  }
}

/** How an open of a port that just appeared is refused: see {@link VirtualSerialBinding.failOpens}. */
export type OpenFault = 'EBUSY' | 'EACCES' | 'ENOENT';

/** A host OS whose serial driver the binding writes lines like (see {@link VirtualSerialBindingOptions}). */
export type HostPlatform = 'linux' | 'darwin' | 'win32';

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
   * `/dev/ttyACM1` for its watchdog reset); real re-enumeration takes 1–3 s. Default: never.
   */
  readonly reenumerateMs?: number;
  /**
   * The first `count` opens of the device's path fail with `code`, again each time it
   * (re-)enumerates under a new path: a port that just appeared (see
   * {@link VirtualSerialBinding.failOpens}).
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

export interface WireStats {
  readonly bytes: number;
  /** Time those bytes take at the rates they were sent at. */
  readonly wireMs: number;
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
  #port: VirtualBindingPort | undefined;
  #emulator: RomEmulator | undefined;
  #uartBaud = CONSOLE_BAUD_RATE;
  /** The ROM measures the host's rate from SYNC; it follows the host until CHANGE_BAUDRATE. */
  #autobaud = false;
  readonly #toHost: Wire;
  readonly #toBoard: Wire;
  readonly #lineEvents: AutoResetEvent[] = [];
  #droppedLines = 0;
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

  get stats(): {
    readonly toBoard: WireStats;
    readonly toHost: WireStats;
    /** Console lines dropped because the wire was behind. */
    readonly droppedLines: number;
  } {
    return {
      toBoard: { bytes: this.#toBoard.bytes, wireMs: this.#toBoard.wireMs },
      toHost: { bytes: this.#toHost.bytes, wireMs: this.#toHost.wireMs },
      droppedLines: this.#droppedLines,
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
  attachPort(port: VirtualBindingPort): void {
    this.#port = port;
  }

  /** @internal The port closed; `hupcl` drops both lines, as the OS does. */
  detachPort(port: VirtualBindingPort, hupcl: boolean): void {
    if (this.#port !== port) return;
    this.#port = undefined;
    this.#toHost.clear();
    this.#toBoard.clear();
    if (hupcl) this.circuit.release();
  }

  /** @internal */
  setLines(dtr: boolean, rts: boolean): void {
    this.circuit.setLines({ dtr, rts });
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
    if (this.#port === undefined) return;
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
      ...(inPackage === undefined ? {} : { silicon: { inPackage } }),
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

/** An open virtual port, as `SerialPortStream` drives it. */
export class VirtualBindingPort implements BindingPortInterface {
  readonly openOptions: Required<BindingOpenOptions>;
  isOpen = true;
  readonly #device: VirtualSerialDevice;
  readonly #platform: HostPlatform | undefined;
  #baudRate: number;
  readonly #rx = new ReceiveQueue(RX_BUFFER_LIMIT);
  #lost: Error | undefined;

  constructor(
    device: VirtualSerialDevice,
    openOptions: Required<BindingOpenOptions>,
    platform?: HostPlatform,
  ) {
    this.#device = device;
    this.openOptions = openOptions;
    this.#baudRate = openOptions.baudRate;
    this.#platform = platform;
  }

  /** Bytes dropped because the host did not read them in time. */
  get overruns(): number {
    return this.#rx.overruns;
  }

  async read(
    buffer: Buffer,
    offset: number,
    length: number,
  ): Promise<{ buffer: Buffer; bytesRead: number }> {
    this.#check();
    const bytesRead = await this.#rx.read(
      buffer,
      offset,
      length,
      () => new PortError('a read is already pending'),
    );
    return { buffer, bytesRead };
  }

  async write(buffer: Buffer): Promise<void> {
    this.#check();
    await this.#device.hostSend(new Uint8Array(buffer), this.#baudRate);
  }

  async update(options: UpdateOptions): Promise<void> {
    this.#check();
    if (!Number.isInteger(options.baudRate) || options.baudRate <= 0)
      throw new PortError(`invalid baud rate ${options.baudRate}`);
    this.#baudRate = options.baudRate;
  }

  async set(options: SetOptions): Promise<void> {
    this.#check();
    // Every call sets every line; serialport's defaults assert DTR and RTS.
    const dtr = options.dtr ?? true;
    const rts = options.rts ?? true;
    // bindings-cpp on Windows: EscapeCommFunction(SETRTS/CLRRTS), then (SETDTR/CLRDTR)
    // (src/serialport_win.cpp, SetBaton::Execute): the board sees the new RTS with the old DTR
    // first. On Unix one ioctl(TIOCMSET) changes both (src/serialport_unix.cpp).
    if (this.#platform === 'win32') this.#device.setLines(this.#device.circuit.lines.dtr, rts);
    this.#device.setLines(dtr, rts);
  }

  async get(): Promise<PortStatus> {
    this.#check();
    return { cts: false, dsr: false, dcd: false };
  }

  async getBaudRate(): Promise<{ baudRate: number }> {
    this.#check();
    return { baudRate: this.#baudRate };
  }

  async flush(): Promise<void> {
    this.#check();
    this.#rx.clear();
    this.#device.hostFlush();
  }

  async drain(): Promise<void> {
    this.#check();
    await this.#device.hostDrain();
  }

  async close(): Promise<void> {
    if (!this.isOpen) return;
    this.isOpen = false;
    this.#rx.fail(new PortError('port is closed', true));
    this.#device.detachPort(this, this.openOptions.hupcl);
  }

  /** @internal Bytes off the wire from the board, sent at `baud` (undefined: over USB). */
  receive(bytes: Uint8Array, baud: number | undefined): void {
    if (!this.isOpen) return;
    const data = baud === undefined || baud === this.#baudRate ? bytes : garble(bytes);
    // A copy: the board reuses its buffers.
    this.#rx.push(new Uint8Array(data));
  }

  /** @internal The device went away: operations fail, not as cancellations. */
  lose(error: Error): void {
    this.#lost = error;
    this.#rx.fail(error);
  }

  #check(): void {
    if (this.#lost !== undefined) throw this.#lost;
    if (!this.isOpen) throw new PortError('Port is not open');
  }
}

export interface VirtualSerialBindingOptions {
  /**
   * Write the lines and open ports as `@serialport/bindings-cpp` does on this OS. `win32`: a
   * `set()` changes RTS, then DTR, two changes the board sees one after the other; an open
   * asserts DTR with `hupcl` (DTR_CONTROL_ENABLE) and releases RTS (RTS_CONTROL_DISABLE)
   * (src/serialport_win.cpp). `linux`, `darwin`: a `set()` changes both lines at once
   * (ioctl TIOCMSET), and an open asserts both (the tty layer raises DTR and RTS on open,
   * `tty_port_raise_dtr_rts`). Default: the ideal host, every `set()` at once and an open that
   * changes no line.
   */
  readonly platform?: HostPlatform;
}

/** What a binding reports as devices come and go. */
export interface VirtualSerialBindingEvents {
  /** A device appeared on the bus (plugged back, or re-enumerated) under `path`. */
  plug: [device: VirtualSerialDevice, path: string];
  /** A device left the bus (unplugged, or re-enumerating) from `path`. */
  unplug: [device: VirtualSerialDevice, path: string];
  /** A host opened the device's port at `path`. */
  open: [device: VirtualSerialDevice, path: string];
}

/** What a re-enumerating device is doing. */
interface Reenumeration {
  readonly onBoot: (reason: string, count: number, download: boolean) => void;
  /** Leaving: the chip just started; the device leaves once the current host call returns. */
  leave: NodeJS.Timeout | undefined;
  /** Away: it comes back when this fires. */
  back: NodeJS.Timeout | undefined;
}

function openFaultError(code: OpenFault, path: string, platform: HostPlatform | undefined): Error {
  // As bindings-cpp words them: `Error: <strerror>, cannot open <path>` on Unix
  // (src/serialport_unix.cpp), `Opening <path>: <reason>` on Windows (ErrorCodeToString), where
  // a busy port is "Access denied" too.
  if (platform === 'win32') {
    return new PortError(
      `Opening ${path}: ${code === 'ENOENT' ? 'File not found' : 'Access denied'}`,
    );
  }
  const reason = {
    EBUSY: 'Device or resource busy',
    EACCES: 'Permission denied',
    ENOENT: 'No such file or directory',
  }[code];
  return new PortError(`Error: ${reason}, cannot open ${path}`);
}

/**
 * The binding: a registry of virtual boards by path. Pass it as `binding` wherever a
 * `serialport` binding goes.
 */
export class VirtualSerialBinding
  extends EventEmitter<VirtualSerialBindingEvents>
  implements BindingInterface
{
  /** The host whose driver this binding behaves like; undefined: the ideal one. */
  readonly platform: HostPlatform | undefined;
  readonly #devices: VirtualSerialDevice[] = [];
  readonly #reenumerations = new Map<VirtualSerialDevice, Reenumeration>();
  /** Opens of a path still to refuse, oldest first. */
  readonly #openFaults = new Map<string, OpenFault[]>();
  #nextIndex = 0;
  #nextAcm = 0;

  constructor(options: VirtualSerialBindingOptions = {}) {
    super();
    this.platform = options.platform;
  }

  /** Connects a board to the bus; returns its device (path, info, circuit, ROM). */
  attach(board: VirtualBoard, options: VirtualSerialDeviceOptions = {}): VirtualSerialDevice {
    const path = options.path ?? this.#newPath(options.usbJtag === true);
    if (this.#find(path) !== undefined) throw new PortError(`path ${path} is taken`);
    const device = new VirtualSerialDevice(board, path, options);
    this.#devices.push(device);
    this.#armOpenFaults(device);
    if (device.reenumerateMs !== undefined) {
      const reenumeration: Reenumeration = {
        leave: undefined,
        back: undefined,
        onBoot: (reason, _count, download) => {
          // Power-on is how the device appears in the first place, not a re-enumeration. A
          // reset into the serial bootloader keeps the USB device: esptool (USBJTAGSerialReset)
          // and esptool-js sync on the same port right after it, without reopening anything.
          // The app starting anew is what re-enumerates.
          if (reason !== 'POWERON' && !download) this.#chipReset(device);
        },
      };
      this.#reenumerations.set(device, reenumeration);
      board.on('boot', reenumeration.onBoot);
    }
    return device;
  }

  /** Removes a board from the bus for good. */
  detach(device: VirtualSerialDevice): void {
    const index = this.#devices.indexOf(device);
    if (index < 0) return;
    const reenumeration = this.#reenumerations.get(device);
    if (reenumeration !== undefined) {
      clearTimeout(reenumeration.leave);
      clearTimeout(reenumeration.back);
      device.board.off('boot', reenumeration.onBoot);
      this.#reenumerations.delete(device);
    }
    device.unplug();
    device.dispose();
    this.#devices.splice(index, 1);
  }

  /** The plugged device at `path`. */
  device(path: string): VirtualSerialDevice | undefined {
    return this.#find(path);
  }

  get devices(): readonly VirtualSerialDevice[] {
    return this.#devices;
  }

  async list(): Promise<BindingPortInfo[]> {
    return this.#devices.filter((d) => d.plugged).map((d) => d.info);
  }

  async open(options: BindingOpenOptions): Promise<VirtualBindingPort> {
    if (typeof options.path !== 'string' || options.path === '')
      throw new TypeError('"path" is not a valid port');
    if (!Number.isInteger(options.baudRate) || options.baudRate <= 0)
      throw new TypeError('"baudRate" is not a valid baudRate');
    const device = this.#find(options.path);
    if (device === undefined)
      throw new PortError(`Error: No such file or directory, cannot open ${options.path}`);
    const faults = this.#openFaults.get(options.path);
    const fault = faults?.shift();
    if (faults !== undefined && faults.length === 0) this.#openFaults.delete(options.path);
    if (fault !== undefined) throw openFaultError(fault, options.path, this.platform);
    if (device.isOpen)
      throw new PortError('Error Resource temporarily unavailable Cannot lock port');
    const port = new VirtualBindingPort(
      device,
      {
        dataBits: 8,
        lock: true,
        stopBits: 1,
        parity: 'none',
        rtscts: false,
        xon: false,
        xoff: false,
        xany: false,
        hupcl: true,
        ...options,
      } as Required<BindingOpenOptions>,
      this.platform,
    );
    device.attachPort(port);
    if (this.platform === 'win32') {
      // DCB: fDtrControl ENABLE with hupcl, else DISABLE; fRtsControl DISABLE without rtscts.
      device.setLines(port.openOptions.hupcl, false);
    } else if (this.platform !== undefined) {
      device.setLines(true, true);
    }
    // On the ideal host opening changes no line: the board keeps running as it was.
    this.emit('open', device, options.path);
    return port;
  }

  /**
   * The next `count` opens of `path` fail with `code`, worded as the platform's driver words it:
   * `EBUSY` (another program opened it exclusively, as ModemManager does while it probes a port
   * that just appeared), `EACCES` (udev has not applied the node's group and mode yet), `ENOENT`
   * (the device is listed but its node is not there yet). Adds to any still pending.
   */
  failOpens(path: string, count: number, code: OpenFault = 'EBUSY'): void {
    if (!Number.isInteger(count) || count < 0)
      throw new PortError(`failOpens count must be a whole number >= 0, got ${count}`);
    const pending = this.#openFaults.get(path) ?? [];
    for (let i = 0; i < count; i++) pending.push(code);
    if (pending.length > 0) this.#openFaults.set(path, pending);
  }

  /**
   * Pulls the cable: an open port fails (reads and writes error), the device leaves `list()`.
   * By default the board loses power too; `powerOff: false` models a USB link drop only.
   */
  unplug(path: string, options: { powerOff?: boolean } = {}): VirtualSerialDevice {
    const device = this.#find(path);
    if (device === undefined) throw new PortError(`no virtual device at ${path}`);
    const reenumeration = this.#reenumerations.get(device);
    clearTimeout(reenumeration?.leave);
    if (reenumeration !== undefined) reenumeration.leave = undefined;
    device.unplug();
    this.emit('unplug', device, path);
    if (options.powerOff ?? true) device.board.powerOff();
    return device;
  }

  /**
   * Plugs a device back. It enumerates under a new path unless `path` is given (USB does not
   * promise the same one); by default the board powers on. Returns the path.
   */
  plug(device: VirtualSerialDevice, options: { path?: string; powerOn?: boolean } = {}): string {
    if (device.plugged) return device.path;
    const reenumeration = this.#reenumerations.get(device);
    clearTimeout(reenumeration?.back);
    if (reenumeration !== undefined) reenumeration.back = undefined;
    const path = options.path ?? this.#newPath(device.usbJtag);
    const holder = this.#find(path);
    if (holder !== undefined && holder !== device) throw new PortError(`path ${path} is taken`);
    device.plug(path);
    this.#armOpenFaults(device);
    this.emit('plug', device, path);
    if (options.powerOn ?? true) device.board.powerOn();
    return path;
  }

  /** A plugged device by USB serial number (how a rig finds a board again after re-enumeration). */
  bySerialNumber(serialNumber: string): VirtualSerialDevice | undefined {
    return this.#devices.find((d) => d.plugged && d.serialNumber === serialNumber);
  }

  /**
   * The chip of a re-enumerating device started after a reset: it leaves the bus once the host
   * call that caused it has returned (a reset sequence's last line change still reaches the
   * port), and comes back `reenumerateMs` after the latest such reset.
   */
  #chipReset(device: VirtualSerialDevice): void {
    const reenumeration = this.#reenumerations.get(device);
    const awayMs = device.reenumerateMs;
    if (reenumeration === undefined || awayMs === undefined) return;
    if (!device.plugged) {
      // Away already (or unplugged by hand): a reset while away delays the return.
      if (reenumeration.back !== undefined) {
        clearTimeout(reenumeration.back);
        reenumeration.back = setTimeout(() => this.#return(device), awayMs);
      }
      return;
    }
    if (reenumeration.leave !== undefined) return;
    reenumeration.leave = setTimeout(() => {
      reenumeration.leave = undefined;
      if (!device.plugged) return;
      this.unplug(device.path, { powerOff: false });
      // A new USB session starts with the CDC lines released.
      device.circuit.release();
      reenumeration.back = setTimeout(() => this.#return(device), awayMs);
    }, 0);
  }

  #return(device: VirtualSerialDevice): void {
    const reenumeration = this.#reenumerations.get(device);
    if (reenumeration !== undefined) reenumeration.back = undefined;
    if (!device.plugged && this.#devices.includes(device)) this.plug(device, { powerOn: false });
  }

  #armOpenFaults(device: VirtualSerialDevice): void {
    const faults = device.openFaults;
    if (faults !== undefined) this.failOpens(device.path, faults.count, faults.code ?? 'EBUSY');
  }

  #find(path: string): VirtualSerialDevice | undefined {
    return this.#devices.find((d) => d.plugged && d.path === path);
  }

  /** A bridge enumerates as `/dev/ttyVIRT<n>`, the chip's USB-Serial-JTAG as a CDC-ACM `/dev/ttyACM<n>`. */
  #newPath(usbJtag: boolean): string {
    return usbJtag ? `/dev/ttyACM${this.#nextAcm++}` : `/dev/ttyVIRT${this.#nextIndex++}`;
  }
}
