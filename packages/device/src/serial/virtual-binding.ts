/**
 * A `serialport` binding whose ports are virtual boards, so the code that opens a real port
 * (`new SerialPortStream({ binding, path, baudRate })`) reaches a `VirtualBoard` unchanged.
 * Each attached board is a USB serial device (`usb-device.ts`): a CP2102 bridge (10c4:ea60)
 * with the auto-reset circuit, or the chip's own USB-Serial-JTAG (303a:1001). Out of the port
 * come the board's console lines and, in download mode, the ROM's and the stub's replies; into
 * it go the host's packets, to the ROM emulator in download mode (the app ignores UART input).
 * DTR and RTS drive the auto-reset circuit. Bytes travel as on a wire (`wire.ts`). Devices can
 * be unplugged and plugged back, under a new path.
 *
 * What real hosts and boards do that bites, on request: the binding can write the lines the way
 * one OS does (`platform`: Windows writes RTS, then DTR), refuse the first opens of a path the
 * way a port that just appeared is refused (EBUSY while ModemManager probes it, EACCES until
 * udev sets its permissions), and a native-USB device can leave the bus on every chip reset and
 * come back under a new path (`reenumerateMs`).
 */
import { EventEmitter } from 'node:events';
import { ReceiveQueue } from '@xiaozhi-mcp/serial/provider';
import type { VirtualBoard } from '../virtual-board.js';
import type {
  BindingInterface,
  BindingOpenOptions,
  BindingPortInfo,
  BindingPortInterface,
  PortStatus,
  SetOptions,
  UpdateOptions,
} from './binding-types.js';
import {
  type HostPort,
  type OpenFault,
  PortError,
  Reenumeration,
  VirtualSerialDevice,
  type VirtualSerialDeviceOptions,
} from './usb-device.js';
import { garble } from './wire.js';

/** Bytes a host has not read yet, at most (a tty's buffer); more are lost. */
const RX_BUFFER_LIMIT = 64 * 1024;

/** A host OS whose serial driver the binding writes lines like (see {@link VirtualSerialBindingOptions}). */
export type HostPlatform = 'linux' | 'darwin' | 'win32';

/** An open virtual port, as `SerialPortStream` drives it. */
export class VirtualBindingPort implements BindingPortInterface, HostPort {
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
      const reenumeration = new Reenumeration(device, device.reenumerateMs, {
        leave: () => this.unplug(device.path, { powerOff: false }),
        back: () => {
          if (!device.plugged && this.#devices.includes(device))
            this.plug(device, { powerOn: false });
        },
      });
      this.#reenumerations.set(device, reenumeration);
    }
    return device;
  }

  /** Removes a board from the bus for good. */
  detach(device: VirtualSerialDevice): void {
    const index = this.#devices.indexOf(device);
    if (index < 0) return;
    this.#reenumerations.get(device)?.dispose();
    this.#reenumerations.delete(device);
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
    this.#reenumerations.get(device)?.cancelLeave();
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
    this.#reenumerations.get(device)?.cancelReturn();
    const path = options.path ?? this.#newPath(device.usbJtag);
    const holder = this.#find(path);
    if (holder !== undefined && holder !== device) throw new PortError(`path ${path} is taken`);
    device.plug(path);
    this.#armOpenFaults(device);
    this.emit('plug', device, path);
    if (options.powerOn ?? true) device.board.powerOn();
    return path;
  }

  /**
   * A hand on the board's RESET (EN) button, with BOOT held when `boot`
   * ({@link VirtualSerialDevice.pressReset}): no line is touched. A native-USB device that
   * re-enumerates leaves the bus and comes back `reenumerateMs` later, as on any chip reset.
   */
  pressReset(device: VirtualSerialDevice, options: { boot?: boolean } = {}): void {
    if (!this.#devices.includes(device)) throw new PortError('the device is not on this bus');
    device.pressReset(options);
    this.#reenumerations.get(device)?.buttonReset();
  }

  /** A plugged device by USB serial number (how a rig finds a board again after re-enumeration). */
  bySerialNumber(serialNumber: string): VirtualSerialDevice | undefined {
    return this.#devices.find((d) => d.plugged && d.serialNumber === serialNumber);
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
