import { SerialPortStream } from '@serialport/stream';
import {
  BOOT_CLICK,
  lineSetterFor,
  openSafely,
  RESET_SEQUENCES,
  runLineSteps,
} from '@xiaozhi-mcp/serial';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { FlashStorage } from '../flash-storage.js';
import { type BoardTiming, VirtualBoard } from '../virtual-board.js';
import { VirtualSerialBinding, type VirtualSerialDeviceOptions } from './virtual-binding.js';

const TIMING: Partial<BoardTiming> = { bootMs: 5, wifiConnectMs: 5, panicRebootMs: 500 };
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A board without modelled flash: it boots straight to Wi-Fi configuration (no SSID). */
function setup(options: VirtualSerialDeviceOptions = {}, flash?: FlashStorage) {
  const board = new VirtualBoard({
    mac: 'f4:12:fa:00:be:ef',
    timing: TIMING,
    ...(flash === undefined ? {} : { flash }),
  });
  const binding = new VirtualSerialBinding();
  const device = binding.attach(board, options);
  cleanups.push(() => {
    board.powerOff();
    binding.detach(device);
  });
  return { board, binding, device };
}

async function open(binding: VirtualSerialBinding, path: string, baudRate = 115200) {
  const port = new SerialPortStream({ binding, path, baudRate, autoOpen: false });
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
    until: async (pattern: RegExp, ms = 5000) => {
      const end = performance.now() + ms;
      while (!pattern.test(Buffer.concat(chunks).toString('latin1'))) {
        if (performance.now() > end) throw new Error(`no ${pattern} within ${ms} ms`);
        await new Promise((r) => setTimeout(r, 5));
      }
    },
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
    await board.waitForState('wifi_configuring', 5000);
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
    await new Promise((r) => setTimeout(r, 20));
    await set(port, true, false);
    await board.waitForState('download', 1000); // EN rises through its RC delay
    await set(port, false, false);
    await rx.until(
      /rst:0x1 \(POWERON\),boot:0x0 \(DOWNLOAD\(USB\/UART0\)\)\r\nwaiting for download\r\n/,
    );
    expect(device.emulator?.stage).toBe('rom');
  });

  it('clicks BOOT on a DTR pulse while the firmware runs', async () => {
    const { board, binding, device } = setup();
    board.powerOn();
    await board.waitForState('wifi_configuring', 5000);
    const click = vi.spyOn(board, 'click');
    const port = await open(binding, device.path);
    await set(port, true, false);
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
    await board.waitForState('wifi_configuring', 5000);
    expect(board.bootCount).toBe(boots + 1);
  });

  it('delivers bytes no faster than the baud rate, and garbles them at the wrong rate', async () => {
    const { board, binding, device } = setup();
    board.powerOn();
    const port = await open(binding, device.path, 115200);
    const payload = Buffer.alloc(2304, 0x55); // 200 ms at 115200 baud
    const started = performance.now();
    await new Promise<void>((resolve, reject) =>
      port.write(payload, (e) => (e ? reject(e) : port.drain((d) => (d ? reject(d) : resolve())))),
    );
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(190);
    expect(elapsed).toBeLessThan(600);
    expect(device.stats.toBoard).toEqual({ bytes: 2304, wireMs: 200 });

    const rx = collect(port);
    await new Promise((r) => setTimeout(r, 50));
    await new Promise<void>((resolve) => port.update({ baudRate: 460800 }, () => resolve()));
    const start = rx.bytes().length;
    board.console.log('I', 'Test', 'sent at 115200');
    await new Promise((r) => setTimeout(r, 50));
    const after = rx.bytes().subarray(start);
    expect(after.length).toBeGreaterThan(25);
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
    await board.waitForState('wifi_configuring', 5000);
    await open(binding, path);
  });

  it("plays the rig's own line sequences (lines.ts) with the expected effect on the board", async () => {
    const { board, binding, device } = setup();
    board.powerOn();
    await board.waitForState('wifi_configuring', 5000);
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
    await board.waitForState('wifi_configuring', 5000);
    await runLineSteps(lines, RESET_SEQUENCES.tight);
    expect(board.state).toBe('download');
    expect(click).toHaveBeenCalledTimes(1);
  });

  it('resets a USB-Serial-JTAG board into download mode with the usbJtag sequence', async () => {
    const { board, binding, device } = setup({ usbJtag: true });
    board.powerOn();
    await board.waitForState('wifi_configuring', 5000);
    const stream = await openSafely(device.path, { baudRate: 115200, binding });
    cleanups.push(() => new Promise<void>((resolve) => stream.close(() => resolve())));
    const click = vi.spyOn(board, 'click');
    await runLineSteps(lineSetterFor(stream), BOOT_CLICK);
    expect(click).not.toHaveBeenCalled();
    await runLineSteps(lineSetterFor(stream), RESET_SEQUENCES.usbJtag);
    expect(board.state).toBe('download');
  });
});
