import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { buildVirtualFirmware, chipByName } from '@xiaozhi-mcp/firmware';
import {
  BOOT_CLICK,
  findPort,
  lineSetterFor,
  NodeWebSerialPort,
  openSafely,
  portInfoFromBinding,
  RESET_SEQUENCES,
  runLineSteps,
} from '@xiaozhi-mcp/serial';
import { until } from '@xiaozhi-mcp/test-kit';
import { ESPLoader, Transport } from 'esptool-js';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { replicaFromTools } from '../replica/replica-from-tools.js';
import { replicaBoardOptions } from '../replica/replica-preset.js';
import { FAST_TIMING } from '../testing/timing.js';
import type { BoardTiming } from '../virtual-board.js';
import { DEFAULT_REENUMERATE_MS } from './usb-device.js';
import { VirtualBus, type VirtualBusBoard } from './virtual-bus.js';

// A long panic pause: an erased board fails its first boot and then waits, rather than
// boot-looping (and re-enumerating) through a test.
const TIMING: Partial<BoardTiming> = { ...FAST_TIMING, panicRebootMs: 60_000 };
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const md5 = (data: Uint8Array) => createHash('md5').update(data).digest('hex');

function newBus(): VirtualBus {
  const bus = new VirtualBus(TIMING);
  cleanups.push(() => bus.close());
  return bus;
}

/** A board on native USB; with `firmware`, its flash holds an app and it runs it. */
function nativeBoard(
  bus: VirtualBus,
  options: { firmware?: string } & Partial<VirtualBusBoard> = {},
) {
  const { firmware, ...spec } = options;
  const port = bus.plug(
    { preset: 'bread-compact-wifi', flashSizeMb: 4, usb: 'native', ...spec },
    'virtual:native',
  );
  if (firmware !== undefined) {
    const image = buildVirtualFirmware({
      chip: 'esp32s3',
      version: firmware,
      board: 'bread-compact-wifi',
      flashSizeMb: 4,
    });
    port.board.flash?.program(0, image.merged);
    // As if it had been plugged in with that flash: a power cycle, not a reset.
    port.board.powerOff();
    port.board.powerOn();
  }
  return port;
}

async function openPort(binding: VirtualBus['binding'], path: string) {
  const stream = await openSafely(path, { baudRate: 115200, binding });
  const text: string[] = [];
  stream.on('data', (chunk: Buffer) => text.push(chunk.toString('latin1')));
  const closed = once(stream, 'close') as Promise<[Error | null]>;
  cleanups.push(
    () =>
      new Promise<void>((resolve) => (stream.isOpen ? stream.close(() => resolve()) : resolve())),
  );
  return { stream, closed, text: () => text.join('') };
}

/**
 * esptool-js 0.7 as esptool's `_post_connect` would have it on an ESP32-S3: right after the
 * chip is detected, `disable_watchdogs`. esptool-js leaves them running, and a reset through
 * the USB-Serial-JTAG leaves them armed: without this a flash longer than their 3 s (any flash
 * on a busy machine) is cut short by a watchdog reset. Our Flasher does the same.
 */
class TamingLoader extends ESPLoader {
  override async detectChip(...args: Parameters<ESPLoader['detectChip']>): Promise<void> {
    await super.detectChip(...args);
    const usb = chipByName('esp32s3').rom.usbJtagSerial;
    if (usb === undefined) throw new Error('the ESP32-S3 has a USB-Serial-JTAG');
    await this.writeReg(usb.rtcWdtWprotect, usb.rtcWdtKey);
    await this.writeReg(usb.rtcWdtConfig0, 0);
    await this.writeReg(usb.rtcWdtWprotect, 0);
    await this.writeReg(usb.swdWprotect, usb.swdKey);
    const swd = await this.readReg(usb.swdConf);
    await this.writeReg(usb.swdConf, (swd | usb.swdAutoFeedEn) >>> 0);
    await this.writeReg(usb.swdWprotect, 0);
  }
}

const lister = (bus: VirtualBus) => ({
  list: async () => (await bus.binding.list()).map((p) => portInfoFromBinding(p)),
});

describe('a virtual board on native USB (USB-Serial-JTAG)', () => {
  it('is listed as the chip’s USB-Serial-JTAG, 303a:1001 at /dev/ttyACM<n>, its serial number the MAC', async () => {
    const bus = newBus();
    const uart = bus.plug({ preset: 'bread-compact-wifi' }, 'virtual:uart');
    const native = nativeBoard(bus);
    expect(uart.path).toBe('/dev/ttyVIRT0');
    expect(uart.info).toMatchObject({ kind: 'usb-uart', vendorId: '10c4', productId: 'ea60' });
    expect(native.path).toBe('/dev/ttyACM0');
    expect(native.info).toMatchObject({
      kind: 'usb-serial-jtag',
      vendorId: '303a',
      productId: '1001',
      serialNumber: 'F4:12:FA:7E:00:02',
    });
    expect(native.board.mac).toBe('f4:12:fa:7e:00:02');
    expect(native.device.usbJtag).toBe(true);
    expect(native.device.reenumerateMs).toBe(DEFAULT_REENUMERATE_MS);
    expect(uart.device.reenumerateMs).toBeUndefined();
  });

  it('enters download mode on the usbJtag sequence on the same port; the app starting re-enumerates it', async () => {
    const bus = newBus();
    const port = nativeBoard(bus);
    const first = await openPort(bus.binding, port.path);
    const unplugs: string[] = [];
    bus.binding.on('unplug', (_device, path) => unplugs.push(path));
    // The whole sequence reaches the port: the chip starts only as it ends.
    await runLineSteps(lineSetterFor(first.stream), RESET_SEQUENCES.usbJtag);
    expect(port.board.state).toBe('download');
    expect(port.device.lineEvents.at(-1)).toEqual({ kind: 'reset', download: true });
    // The ROM keeps the USB device: esptool syncs on the same port right after this reset (and
    // the one unplug below is the reset into the app's).
    expect(await port.present('/dev/ttyACM0')).toBe(true);
    expect(port.device.emulator?.stage).toBe('rom');

    // A reset into the app: the open port closes as a CDC-ACM port does when its device leaves.
    const left = once(bus.binding, 'unplug');
    const back = once(bus.binding, 'plug');
    await runLineSteps(lineSetterFor(first.stream), RESET_SEQUENCES.hard);
    expect(await left).toEqual([port.device, '/dev/ttyACM0']);
    const [closeError] = await first.closed;
    expect(closeError).toMatchObject({ disconnected: true });
    expect(unplugs).toEqual(['/dev/ttyACM0']);
    expect(await port.present('/dev/ttyACM0')).toBe(false);
    expect(await bus.binding.list()).toEqual([]);

    const [, path] = await back;
    expect(path).toBe('/dev/ttyACM1');
    const found = await port.refind(20_000);
    expect(found.path).toBe('/dev/ttyACM1');
    expect(found.info).toMatchObject({
      kind: 'usb-serial-jtag',
      serialNumber: 'F4:12:FA:7E:00:01',
    });
    const bySerial = await findPort(
      { serialNumber: port.board.mac },
      { lister: lister(bus), timeoutMs: 0 },
    );
    expect(bySerial.path).toBe('/dev/ttyACM1');
    await openPort(bus.binding, found.path);
  });

  it('ignores a BOOT click (DTR pulse); a plain RTS pulse resets it into the app, at a new path', async () => {
    const bus = newBus();
    const port = nativeBoard(bus, { firmware: '2.8.0' });
    await port.board.waitForState('wifi_configuring', 20_000);
    const { stream } = await openPort(bus.binding, port.path);
    const click = vi.spyOn(port.board, 'click');
    const boots = port.board.bootCount;
    await runLineSteps(lineSetterFor(stream), BOOT_CLICK);
    expect(click).not.toHaveBeenCalled();
    expect(port.device.lineEvents).toEqual([]);
    expect(port.board.state).toBe('wifi_configuring');
    expect(port.device.plugged).toBe(true);

    const back = once(bus.binding, 'plug');
    const booted = port.board.waitForLine(/app_init: App version:\s+2\.8\.0$/, 20_000);
    await runLineSteps(lineSetterFor(stream), RESET_SEQUENCES.hard);
    expect(port.device.lineEvents).toEqual([{ kind: 'hold' }, { kind: 'reset', download: false }]);
    expect(port.board.bootCount).toBe(boots + 1);
    await booted;
    const [, path] = await back;
    expect(path).toBe('/dev/ttyACM1');
    await port.board.waitForState('wifi_configuring', 20_000);
    // The app's console reaches the new port.
    const again = await openPort(bus.binding, (await port.refind(20_000)).path);
    port.board.console.log('I', 'Test', 'on the new port');
    await until(() => {
      expect(again.text()).toContain('Test: on the new port');
      return true;
    });
  });

  it('re-enumerates on every reset but power-on, away for reenumerateMs after the latest', async () => {
    const bus = newBus();
    const port = nativeBoard(bus, { reenumerateMs: 400 });
    vi.useFakeTimers();
    const seen: string[] = [];
    bus.binding.on('unplug', (_device, path) => seen.push(`- ${path}`));
    bus.binding.on('plug', (_device, path) => seen.push(`+ ${path}`));

    port.board.reset('RTC_SW_CPU_RST'); // esp_restart, a panic, the ROM's reboot after flashing
    expect(port.device.plugged).toBe(true); // it leaves once the current host call returns
    vi.advanceTimersByTime(0);
    expect(port.device.plugged).toBe(false);
    vi.advanceTimersByTime(300);
    port.board.reset('RTC_WDT_RTC_RST'); // another reset while away: back 400 ms after it
    vi.advanceTimersByTime(399);
    expect(port.device.plugged).toBe(false);
    vi.advanceTimersByTime(1);
    expect(seen).toEqual(['- /dev/ttyACM0', '+ /dev/ttyACM1']);

    port.board.powerOff();
    port.board.powerOn(); // power-on is the first enumeration, not a re-enumeration
    vi.advanceTimersByTime(1000);
    expect(seen).toEqual(['- /dev/ttyACM0', '+ /dev/ttyACM1']);
    expect(port.device.path).toBe('/dev/ttyACM1');

    // Unplugged by hand, it stays away until plugged.
    bus.binding.unplug(port.device.path, { powerOff: false });
    port.board.reset('EXT_SYS_RST');
    vi.advanceTimersByTime(1000);
    expect(port.device.plugged).toBe(false);
    expect(bus.binding.plug(port.device, { powerOn: false })).toBe('/dev/ttyACM2');
  });

  it('can be flashed by esptool-js through NodeWebSerialPort on the same port after the usbJtag reset', {
    timeout: 60_000,
  }, async () => {
    const bus = newBus();
    const port = nativeBoard(bus);
    const fw = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '2.9.0',
      board: 'bread-compact-wifi',
      flashSizeMb: 4,
    });
    // Our reset into download mode; the ROM keeps the USB device, so esptool-js syncs on it.
    const { stream } = await openPort(bus.binding, port.path);
    await runLineSteps(lineSetterFor(stream), RESET_SEQUENCES.usbJtag);
    await new Promise<void>((resolve) => stream.close(() => resolve()));
    const found = { path: port.path };
    const info = (await bus.binding.list()).find((p) => p.path === found.path);
    if (info === undefined) throw new Error('the board is not listed');
    const web = NodeWebSerialPort.fromPortInfo(bus.binding, info);
    const transport = new (class extends Transport {
      override trace(): void {}
    })(web, false);
    const quiet = { clean() {}, writeLine() {}, write() {} };
    const loader = new TamingLoader({
      transport,
      baudrate: 115200,
      debugLogging: false,
      terminal: quiet,
    });
    try {
      await loader.main('no_reset');
      expect(loader.chip.CHIP_NAME).toBe('ESP32-S3');
      expect(port.device.emulator?.watchdogs).toMatchObject({
        rtcWdtEnabled: false,
        swdAutoFeed: true,
      });
      await loader.writeFlash({
        fileArray: [{ data: fw.merged, address: 0 }],
        flashMode: 'keep',
        flashFreq: 'keep',
        flashSize: 'keep',
        eraseAll: false,
        compress: true,
        calculateMD5Hash: md5,
      });
    } finally {
      await transport.disconnect();
    }
    expect(port.board.flash?.md5(0, fw.merged.length)).toBe(md5(fw.merged));

    // An RTS pulse boots the new app, which re-enumerates once more.
    const { stream: again } = await openPort(bus.binding, found.path);
    const booted = port.board.waitForLine(/app_init: App version:\s+2\.9\.0$/, 20_000);
    const returned = once(bus.binding, 'plug');
    await runLineSteps(lineSetterFor(again), RESET_SEQUENCES.hard);
    await booted;
    const [, path] = await returned;
    expect(path).toBe('/dev/ttyACM1');
  });
});

describe('what a plugged board holds', () => {
  it('comes erased, or with the image it is plugged in with, and boots that image’s app', async () => {
    const bus = newBus();
    const erased = bus.plug({ preset: 'bread-compact-wifi', flashSizeMb: 4 }, 'virtual:erased');
    // Nothing at the partition table's offset: an app image alone has nowhere to go.
    expect(erased.board.flash?.read(0x8000, 2)).toEqual(new Uint8Array([0xff, 0xff]));

    const factory = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '2.3.1',
      board: 'bread-compact-wifi',
      flashSizeMb: 4,
    });
    const port = bus.plug(
      { preset: 'bread-compact-wifi', flashSizeMb: 4, flashImage: factory.merged },
      'virtual:factory',
    );
    const booted = port.board.waitForLine(/app_init: App version:\s+2\.3\.1$/, 20_000);
    expect(port.board.flash?.md5(0, factory.merged.length)).toBe(md5(factory.merged));
    // The partition table's magic, 0x50AA little-endian.
    expect(port.board.flash?.read(0x8000, 2)).toEqual(new Uint8Array([0xaa, 0x50]));
    await booted;
    expect(port.board.bootCount).toBe(1);
  });
});

describe('a board plugged as a preset of its own (a replica)', () => {
  it("runs the given preset with its MAC and app version, sized by the preset's flash, with the eFuses asked for", async () => {
    const replica = replicaFromTools(
      JSON.stringify({
        board: {
          variant: 'desk-lamp',
          firmwareVersion: '2.0.7',
          flashSizeMb: 8,
          mac: 'f4:12:fa:55:00:07',
        },
        tools: [
          {
            name: 'self.lamp.set',
            description: 'Turns the lamp on or off',
            properties: [{ name: 'on', type: 'boolean' }],
          },
        ],
      }),
    );
    const bus = newBus();
    const port = bus.plug(
      { ...replicaBoardOptions(replica), secureBoot: true, chipRevision: 'v0.2' },
      'virtual:lamp',
    );
    expect(port.board.preset.name).toBe('desk-lamp');
    expect(port.board.mac).toBe('f4:12:fa:55:00:07');
    expect(port.board.app.version).toBe('2.0.7');
    expect(port.board.flash?.size).toBe(8 * 1024 * 1024);
    expect(port.board.silicon).toEqual({ secureBoot: true, revision: { major: 0, minor: 2 } });
    expect(port.path).toBe('/dev/ttyVIRT0');
    // A preset named as before still gets its MAC numbered in plug order.
    const named = bus.plug({ preset: 'bread-compact-wifi', flashSizeMb: 4 }, 'virtual:named');
    expect(named.board.mac).toBe('f4:12:fa:7e:00:02');
  });
});
