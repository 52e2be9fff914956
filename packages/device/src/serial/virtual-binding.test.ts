import { once } from 'node:events';
import { SerialPortStream } from '@serialport/stream';
import {
  ROM_COMMANDS as C,
  encodeDataBlock,
  encodeRomRequest,
  encodeWords,
  slipEncode,
} from '@xiaozhi-mcp/firmware';
import {
  BOOT_CLICK,
  type LineStep,
  lineSetterFor,
  openSafely,
  RESET_SEQUENCES,
  reopenPort,
  runLineSteps,
  SerialError,
} from '@xiaozhi-mcp/serial';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { FlashStorage } from '../flash-storage.js';
import { FAST_TIMING } from '../testing/timing.js';
import { type BoardTiming, VirtualBoard } from '../virtual-board.js';
import type { VirtualSerialDeviceOptions } from './usb-device.js';
import { VirtualSerialBinding, type VirtualSerialBindingOptions } from './virtual-binding.js';
import { virtualPort } from './virtual-bus.js';

const TIMING: Partial<BoardTiming> = { ...FAST_TIMING, panicRebootMs: 500 };
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A board without modelled flash: it boots straight to Wi-Fi configuration (no SSID). */
function setup(
  options: VirtualSerialDeviceOptions = {},
  flash?: FlashStorage,
  host: VirtualSerialBindingOptions = {},
) {
  const board = new VirtualBoard({
    mac: 'f4:12:fa:00:be:ef',
    timing: TIMING,
    ...(flash === undefined ? {} : { flash }),
  });
  const binding = new VirtualSerialBinding(host);
  const device = binding.attach(board, options);
  cleanups.push(() => {
    board.powerOff();
    binding.detach(device);
  });
  return { board, binding, device };
}

async function open(
  binding: VirtualSerialBinding,
  path: string,
  baudRate = 115200,
  extra: { hupcl?: boolean } = {},
) {
  const port = new SerialPortStream({ binding, path, baudRate, autoOpen: false, ...extra });
  await new Promise<void>((resolve, reject) => port.open((e) => (e ? reject(e) : resolve())));
  cleanups.push(
    () => new Promise<void>((resolve) => (port.isOpen ? port.close(() => resolve()) : resolve())),
  );
  return port;
}

const set = (port: SerialPortStream, dtr: boolean, rts: boolean) =>
  new Promise<void>((resolve, reject) =>
    port.set({ dtr, rts }, (e) => (e ? reject(e) : resolve())),
  );

function collect(port: SerialPortStream) {
  const chunks: Buffer[] = [];
  port.on('data', (chunk: Buffer) => chunks.push(chunk));
  return {
    text: () => Buffer.concat(chunks).toString('latin1'),
    bytes: () => Buffer.concat(chunks),
    until: (pattern: RegExp) =>
      until(() => pattern.test(Buffer.concat(chunks).toString('latin1')), {
        what: `${pattern} from the port`,
        seen: () => Buffer.concat(chunks).toString('latin1').slice(-200),
      }),
  };
}

describe('virtual serial binding', () => {
  it('lists a CP2102 with a serial number from the MAC, and the USB-Serial-JTAG variant', async () => {
    const { binding } = setup();
    expect(await binding.list()).toEqual([
      {
        path: '/dev/ttyVIRT0',
        manufacturer: 'Silicon Labs',
        serialNumber: 'F412FA00BEEF',
        pnpId: 'usb-Silicon_Labs_CP2102_USB_to_UART_Bridge_Controller_F412FA00BEEF-if00-port0',
        locationId: undefined,
        vendorId: '10c4',
        productId: 'ea60',
      },
    ]);
    const { binding: jtag } = setup({ usbJtag: true, path: '/dev/ttyACM7' });
    expect(await jtag.list()).toEqual([
      expect.objectContaining({
        path: '/dev/ttyACM7',
        manufacturer: 'Espressif',
        serialNumber: 'F4:12:FA:00:BE:EF',
        vendorId: '303a',
        productId: '1001',
      }),
    ]);
  });

  it('opens without touching the board, and sends its console lines', async () => {
    const { board, binding, device } = setup();
    board.powerOn();
    await board.waitForState('wifi_configuring', 20_000);
    const bootsBefore = board.bootCount;
    const port = await open(binding, device.path);
    const rx = collect(port);
    expect(board.bootCount).toBe(bootsBefore);
    expect(device.lineEvents).toEqual([]);
    board.console.log('I', 'Test', 'hello over the wire');
    await rx.until(/I \(\d+\) Test: hello over the wire\r\n/);
  });

  it('refuses a second open and an unknown path like a real OS', async () => {
    const { binding, device } = setup();
    await open(binding, device.path);
    await expect(open(binding, device.path)).rejects.toThrow(/Cannot lock port/);
    await expect(open(binding, '/dev/ttyNOPE')).rejects.toThrow(/No such file or directory/);
  });

  it('enters download mode on the classic DTR/RTS sequence; the ROM banner comes out', async () => {
    const { board, binding, device } = setup();
    board.powerOn();
    const port = await open(binding, device.path);
    const rx = collect(port);
    await set(port, false, true);
    // The host's own time in reset (esptool sleeps 100 ms here): part of what is played, and
    // only ever longer on a busy machine, which the chip does not mind.
    await new Promise((r) => setTimeout(r, 20));
    await set(port, true, false);
    await board.waitForState('download', 20_000); // EN rises through its RC delay
    await set(port, false, false);
    await rx.until(
      /rst:0x1 \(POWERON\),boot:0x0 \(DOWNLOAD\(USB\/UART0\)\)\r\nwaiting for download\r\n/,
    );
    expect(device.emulator?.stage).toBe('rom');
  });

  it('clicks BOOT on a DTR pulse while the firmware runs', async () => {
    const { board, binding, device } = setup();
    board.powerOn();
    await board.waitForState('wifi_configuring', 20_000);
    const click = vi.spyOn(board, 'click');
    const port = await open(binding, device.path);
    await set(port, true, false);
    // The press itself: GPIO0 held low for 30 ms, over the 10 ms debounce; a busy machine only
    // makes it longer, and a click lasts up to 2 s.
    await new Promise((r) => setTimeout(r, 30));
    await set(port, false, false);
    expect(click).toHaveBeenCalledTimes(1);
    expect(device.lineEvents.at(-1)).toMatchObject({ kind: 'click' });
  });

  it('lets the chip run when the port closes with RTS asserted (hupcl)', async () => {
    const { board, binding, device } = setup();
    board.powerOn();
    const port = await open(binding, device.path);
    await set(port, false, true);
    expect(board.state).toBe('off');
    const boots = board.bootCount;
    await new Promise<void>((resolve) => port.close(() => resolve()));
    await board.waitForState('wifi_configuring', 20_000);
    expect(board.bootCount).toBe(boots + 1);
  });

  it('delivers bytes no faster than the baud rate, and garbles them at the wrong rate', async () => {
    const { board, binding, device } = setup();
    board.powerOn();
    const port = await open(binding, device.path, 115200);
    const rx = collect(port);
    const payload = Buffer.alloc(2304, 0x55); // 200 ms at 115200 baud
    const started = performance.now();
    await new Promise<void>((resolve, reject) =>
      port.write(payload, (e) => (e ? reject(e) : port.drain((d) => (d ? reject(d) : resolve())))),
    );
    // Never faster than the wire (a busy machine only makes it slower: no upper bound here).
    expect(performance.now() - started).toBeGreaterThanOrEqual(190);
    expect(device.stats.toBoard).toEqual({ bytes: 2304, wireMs: 200 });

    // Nothing of the boot still on its way, which would arrive at the rate it was sent at.
    await board.waitForState('wifi_configuring', 20_000);
    await until(() => rx.bytes().length === device.stats.toHost.bytes, {
      what: 'the boot output to reach the host',
      seen: () => ({ received: rx.bytes().length, sent: device.stats.toHost.bytes }),
    });
    await new Promise<void>((resolve) => port.update({ baudRate: 460800 }, () => resolve()));
    const start = rx.bytes().length;
    board.console.log('I', 'Test', 'sent at 115200');
    // Everything the board sends at 115200 from now on arrives garbled at 460800.
    await until(() => rx.bytes().length - start > 25, {
      what: 'the line sent at 115200 to arrive',
      seen: () => rx.bytes().length - start,
    });
    const after = rx.bytes().subarray(start);
    expect([...after].every((b) => b === 0)).toBe(true);
  });

  it('fails an open port on unplug, and re-enumerates under a new path on plug', async () => {
    const { board, binding, device } = setup();
    board.powerOn();
    const port = await open(binding, device.path);
    collect(port); // a reading port notices the unplug (a port nobody reads may not)
    const closed = new Promise<Error | null>((resolve) => port.on('close', resolve));
    binding.unplug(device.path);
    const error = await closed;
    expect(error).toMatchObject({ disconnected: true });
    expect(await binding.list()).toEqual([]);
    expect(board.state).toBe('off');
    const path = binding.plug(device);
    expect(path).toBe('/dev/ttyVIRT1');
    expect(binding.bySerialNumber('F412FA00BEEF')?.path).toBe(path);
    expect((await binding.list()).map((p) => p.path)).toEqual([path]);
    await board.waitForState('wifi_configuring', 20_000);
    await open(binding, path);
  });

  it("plays the rig's own line sequences (RESET_SEQUENCES, BOOT_CLICK) with the expected effect on the board", async () => {
    const { board, binding, device } = setup();
    board.powerOn();
    await board.waitForState('wifi_configuring', 20_000);
    const stream = await openSafely(device.path, { baudRate: 115200, binding });
    cleanups.push(() => new Promise<void>((resolve) => stream.close(() => resolve())));
    const lines = lineSetterFor(stream);
    const click = vi.spyOn(board, 'click');
    await runLineSteps(lines, BOOT_CLICK);
    expect(click).toHaveBeenCalledTimes(1);
    // esptool.py's classic reset passes through both-asserted before GPIO0 goes low.
    await runLineSteps(lines, RESET_SEQUENCES.classic);
    expect(board.state).toBe('download');
    await runLineSteps(lines, RESET_SEQUENCES.hard);
    await board.waitForState('wifi_configuring', 20_000);
    await runLineSteps(lines, RESET_SEQUENCES.tight);
    expect(board.state).toBe('download');
    expect(click).toHaveBeenCalledTimes(1);
  });

  it("delivers the stub's FLASH_END reply before its reboot, which keeps the chip in download mode", async () => {
    const { board, binding, device } = setup({}, new FlashStorage({ size: 4 * 1024 * 1024 }));
    board.powerOn();
    board.reset('EXT_SYS_RST', { download: true });
    await board.waitForState('download', 20_000);
    const port = await open(binding, device.path);
    const rx = collect(port);
    const send = (op: number, data: Uint8Array, checksum = 0) =>
      port.write(Buffer.from(slipEncode(encodeRomRequest(op, data, checksum))));
    // The stub's upload: MEM_BEGIN, a block, MEM_END with an entry point; it says OHAI.
    send(C.MEM_BEGIN, encodeWords(64, 1, 0x1800, 0x40380000));
    const block = encodeDataBlock(0, new Uint8Array(64).fill(0x13));
    send(C.MEM_DATA, block.data, block.checksum);
    send(C.MEM_END, encodeWords(0, 0x40380004));
    await rx.until(/OHAI/);
    const before = rx.bytes().length;
    // esptool's soft reset from the stub (`flash_begin(0, 0)`, `flash_finish(True)`): reboot.
    send(C.FLASH_END, encodeWords(0));
    await rx.until(
      /rst:0x3 \(RTC_SW_SYS_RST\),boot:0x0 \(DOWNLOAD\(USB\/UART0\)\)\r\nwaiting for download\r\n/,
    );
    const after = rx.bytes().subarray(before);
    // The stub's reply: 01 04, 2 data bytes, value 0, status 00 00.
    const reply = after.indexOf(Buffer.from('c001040200000000000000c0', 'hex'));
    expect(reply).toBeGreaterThanOrEqual(0);
    expect(reply).toBeLessThan(after.indexOf('ESP-ROM:'));
    // The ROM, not the stub, answers now: SYNC's value 0x20120707, 4 status bytes.
    expect(device.emulator?.stage).toBe('rom');
    send(C.SYNC, Uint8Array.of(0x07, 0x07, 0x12, 0x20, ...new Array<number>(32).fill(0x55)));
    await until(() => rx.bytes().toString('hex').includes('010804000707122000000000'), {
      what: "the ROM's SYNC reply",
    });
  });

  it('resets a USB-Serial-JTAG board into download mode with the usbJtag sequence', async () => {
    const { board, binding, device } = setup({ usbJtag: true });
    board.powerOn();
    await board.waitForState('wifi_configuring', 20_000);
    const stream = await openSafely(device.path, { baudRate: 115200, binding });
    cleanups.push(() => new Promise<void>((resolve) => stream.close(() => resolve())));
    const click = vi.spyOn(board, 'click');
    await runLineSteps(lineSetterFor(stream), BOOT_CLICK);
    expect(click).not.toHaveBeenCalled();
    await runLineSteps(lineSetterFor(stream), RESET_SEQUENCES.usbJtag);
    expect(board.state).toBe('download');
  });
});

const step = (dtr: boolean, rts: boolean): LineStep => ({ set: { dtr, rts } });

/** A running board's port, opened safely (both lines released, what each sequence starts from). */
async function running(options: VirtualSerialDeviceOptions, host: VirtualSerialBindingOptions) {
  const { board, binding, device } = setup(options, undefined, host);
  board.powerOn();
  await board.waitForState('wifi_configuring', 20_000);
  const stream = await openSafely(device.path, { baudRate: 115200, binding });
  cleanups.push(() => new Promise<void>((resolve) => stream.close(() => resolve())));
  return { board, binding, device, stream };
}

describe('a host that writes RTS before DTR (Windows)', () => {
  it('puts a USB-Serial-JTAG chip into download mode with the tight reset only when two-line steps are split', async () => {
    const { board, device, stream } = await running({ usbJtag: true }, { platform: 'win32' });
    // One set() per step, as the Windows driver plays it: (0,0)->(1,1) passes (0,1), a reset,
    // and (0,1)->(1,0) passes (0,0), releasing the chip with the strap withdrawn: the app boots.
    await runLineSteps(lineSetterFor(stream, { platform: 'linux' }), RESET_SEQUENCES.tight);
    expect(board.state).not.toBe('download');
    expect(device.lineEvents.filter((e) => e.kind === 'reset')).toEqual([
      { kind: 'reset', download: false },
      { kind: 'reset', download: false },
    ]);
    await board.waitForState('wifi_configuring', 20_000);
    // Planned for Windows: one line per set(), through (1,0) and (1,1).
    await runLineSteps(lineSetterFor(stream, { platform: 'win32' }), RESET_SEQUENCES.tight);
    expect(board.state).toBe('download');
    expect(device.lineEvents.at(-1)).toEqual({ kind: 'reset', download: true });
  });

  it('does not pulse EN on a running app between released and both asserted', async () => {
    const { board, device, stream } = await running({}, { platform: 'win32' });
    const boots = board.bootCount;
    const click = vi.spyOn(board, 'click');
    await runLineSteps(lineSetterFor(stream, { platform: 'win32' }), [
      step(true, true),
      step(false, false),
    ]);
    expect(device.lineEvents.map((e) => e.kind)).toEqual(['ignored', 'ignored']);
    expect(click).not.toHaveBeenCalled();
    expect(board.state).toBe('wifi_configuring');
    // The same step unplanned holds EN low for a moment: the app stops and restarts.
    await runLineSteps(lineSetterFor(stream, { platform: 'linux' }), [step(true, true)]);
    expect(device.lineEvents.at(-1)).toEqual({ kind: 'hold' });
    await board.waitForState('wifi_configuring', 20_000);
    expect(board.bootCount).toBe(boots + 1);
  });

  it('still enters download mode with the classic and usbJtag sequences, one line per step', async () => {
    const bridge = await running({}, { platform: 'win32' });
    await runLineSteps(lineSetterFor(bridge.stream), RESET_SEQUENCES.classic);
    await bridge.board.waitForState('download', 20_000);
    const jtag = await running({ usbJtag: true, path: '/dev/ttyACM9' }, { platform: 'win32' });
    await runLineSteps(lineSetterFor(jtag.stream), RESET_SEQUENCES.usbJtag);
    expect(jtag.board.state).toBe('download');
  });

  it('opens as each host does: Windows asserts DTR alone with hupcl, Unix raises both lines', async () => {
    const windows = setup({}, undefined, { platform: 'win32' });
    windows.board.powerOn();
    const withHupcl = await open(windows.binding, windows.device.path, 115200, { hupcl: true });
    // DTR_CONTROL_ENABLE, RTS_CONTROL_DISABLE: GPIO0 low on a running board, a BOOT press.
    expect(windows.device.circuit.lines).toEqual({ dtr: true, rts: false });
    expect(windows.device.circuit.pins).toEqual({ enLow: false, gpio0Low: true });
    await new Promise<void>((resolve) => withHupcl.close(() => resolve()));
    await open(windows.binding, windows.device.path, 115200, { hupcl: false });
    expect(windows.device.circuit.lines).toEqual({ dtr: false, rts: false });

    const linux = setup({}, undefined, { platform: 'linux' });
    linux.board.powerOn();
    await open(linux.binding, linux.device.path);
    expect(linux.device.circuit.lines).toEqual({ dtr: true, rts: true });
    expect(linux.device.circuit.pins).toEqual({ enLow: false, gpio0Low: false });
  });
});

describe('a port that just appeared refuses opens', () => {
  it('fails the next opens of a path as the driver words them, then opens', async () => {
    const { binding, device } = setup();
    binding.failOpens(device.path, 1, 'EBUSY');
    binding.failOpens(device.path, 1, 'EACCES');
    binding.failOpens(device.path, 1, 'ENOENT');
    await expect(open(binding, device.path)).rejects.toThrow(
      'Error: Device or resource busy, cannot open /dev/ttyVIRT0',
    );
    await expect(open(binding, device.path)).rejects.toThrow(
      'Error: Permission denied, cannot open /dev/ttyVIRT0',
    );
    await expect(open(binding, device.path)).rejects.toThrow(
      'Error: No such file or directory, cannot open /dev/ttyVIRT0',
    );
    await open(binding, device.path);

    const windows = setup({ path: 'COM7' }, undefined, { platform: 'win32' });
    windows.binding.failOpens('COM7', 1, 'EBUSY');
    await expect(open(windows.binding, 'COM7')).rejects.toThrow('Opening COM7: Access denied');
  });

  it('openSafely retries through EBUSY and EACCES, and names them when they persist', async () => {
    const { binding, device } = setup();
    binding.failOpens(device.path, 2, 'EBUSY');
    binding.failOpens(device.path, 1, 'EACCES');
    const stream = await openSafely(device.path, { baudRate: 115200, binding });
    cleanups.push(() => new Promise<void>((resolve) => stream.close(() => resolve())));
    expect(stream.isOpen).toBe(true);

    const other = setup({ path: '/dev/ttyVIRT5' });
    other.binding.failOpens('/dev/ttyVIRT5', 1000, 'EBUSY');
    const error = await openSafely('/dev/ttyVIRT5', {
      baudRate: 115200,
      binding: other.binding,
      retryMs: 200,
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SerialError);
    expect(error).toMatchObject({ code: 'PORT_BUSY' });
    expect((error as Error).message).toMatch(/busy \(still, after retrying for 0\.2 s\)/);
  });

  it('re-arms the openFaults of a device each time it enumerates under a new path', async () => {
    const { board, binding, device } = setup({ openFaults: { count: 1, code: 'EACCES' } });
    board.powerOn();
    await expect(open(binding, device.path)).rejects.toThrow(/Permission denied/);
    const port = await open(binding, device.path);
    collect(port);
    const closed = once(port, 'close');
    binding.unplug(device.path, { powerOff: false });
    await closed;
    const plugged = once(binding, 'plug');
    const path = binding.plug(device, { powerOn: false });
    expect(await plugged).toEqual([device, path]);
    await expect(open(binding, path)).rejects.toThrow(/Permission denied/);
    await open(binding, path);
  });
});

describe('a native-USB board across resets: what it prints with no host, its RESET button, finding it again', () => {
  it('loses what it prints while no host holds its port (ESP-IDF drops USB-Serial-JTAG output nobody reads)', async () => {
    const { board, binding, device } = setup({ usbJtag: true, reenumerateMs: 300 });
    board.powerOn();
    const port = await open(binding, device.path);
    const seen = collect(port);
    board.console.log('I', 'Test', 'while the port is open');
    await seen.until(/while the port is open/);
    // Closed: printed, and lost.
    await new Promise<void>((resolve) => port.close(() => resolve()));
    board.console.log('I', 'Test', 'while the port is closed');
    // Reset: the device leaves the bus and comes back elsewhere; the boot lines go nowhere.
    const back = once(binding, 'plug');
    binding.pressReset(device);
    const [, path] = (await back) as [unknown, string];
    expect(path).not.toBe('/dev/ttyACM0');
    const again = collect(await open(binding, path));
    board.console.log('I', 'Test', 'after the port opened again');
    await again.until(/after the port opened again/);
    expect(again.text()).not.toMatch(/while the port is closed|app_init|rst:0x1/);
    expect(device.stats.droppedClosedLines).toBeGreaterThan(1);
  });

  it('presses RESET without touching a line: with BOOT held into the ROM, else the app', async () => {
    const { board, binding, device } = setup();
    board.powerOn();
    binding.pressReset(device, { boot: true });
    expect(board.state).toBe('download');
    expect(device.emulator?.stage).toBe('rom');
    const booted = board.waitForLine(/app_init: App version/, 20_000);
    binding.pressReset(device);
    await booted;
    expect(device.lineChanges).toEqual([]);
    // The host's changes are what it records, a set() that changes nothing is not one.
    const port = await open(binding, device.path);
    await set(port, false, false);
    await set(port, false, true);
    await set(port, false, false);
    expect(device.lineChanges.map(({ dtr, rts }) => ({ dtr, rts }))).toEqual([
      { dtr: false, rts: true },
      { dtr: false, rts: false },
    ]);
  });

  it("is opened again by serial's reopenPort once back, through a missing node, a busy port and a second re-enumeration", async () => {
    const { board, binding, device } = setup({ usbJtag: true, reenumerateMs: 300 });
    board.powerOn();
    const port = virtualPort(binding, device, 'virtual:desk', () => {});
    let plugs = 0;
    binding.on('plug', (_device, path) => {
      plugs++;
      if (plugs === 1) {
        // Gone again before anything opened it: the chip reset twice.
        setImmediate(() => binding.pressReset(device));
        return;
      }
      binding.failOpens(path, 2, 'ENOENT');
      binding.failOpens(path, 2, 'EBUSY');
    });
    const left = once(binding, 'unplug');
    binding.pressReset(device);
    await left;
    const found: string[] = [];
    const opened = await reopenPort(port, {
      baudRate: 115200,
      withinMs: 10_000,
      path: '/dev/ttyACM0',
      onFound: (path) => found.push(path),
    });
    cleanups.push(() => new Promise<void>((resolve) => opened.stream.close(() => resolve())));
    expect(opened.path).toBe('/dev/ttyACM2');
    expect(opened.refinds).toBeGreaterThanOrEqual(1);
    expect(found.at(-1)).toBe('/dev/ttyACM2');
    expect(opened.stream.isOpen).toBe(true);

    // A device that never comes back: PORT_NOT_FOUND, within the budget.
    binding.unplug(opened.path, { powerOff: false });
    const error = await reopenPort(port, { baudRate: 115200, withinMs: 300 }).catch(
      (e: unknown) => e,
    );
    expect(error).toMatchObject({ code: 'PORT_NOT_FOUND' });
  });
});
