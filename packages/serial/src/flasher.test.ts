/**
 * The flasher's decisions as data: which resets a connect attempt plays, the baud ladder,
 * esptool's size-scaled timeouts and how a failed connect is explained. Flashing itself runs
 * against virtual boards in the device package (`packages/device/src/serial/flash.test.ts`).
 */
import { describe, expect, it } from 'vitest';
import {
  connectAdvice,
  ERASE_WRITE_TIMEOUT_PER_MB_MS,
  FLASH_BAUD_LADDER,
  flashBaudLadder,
  isUsbJtagSerialPort,
  MD5_TIMEOUT_PER_MB_MS,
  resetPlan,
  resetSteps,
  romBootLine,
  timeoutPerMb,
} from './flasher.js';
import { RESET_SEQUENCES } from './lines.js';

const CP2102 = { usbVendorId: 0x10c4, usbProductId: 0xea60 };
const USB_JTAG = { usbVendorId: 0x303a, usbProductId: 0x1001 };

describe('resetPlan: the resets of successive connect attempts', () => {
  it("is esptool's default when left to the port: USB-JTAG on 303a:1001, else tight then classic on Unix, classic on Windows, 50 then 550 ms", () => {
    expect(resetPlan('auto', USB_JTAG, 'linux')).toEqual([{ sequence: 'usbJtag' }]);
    expect(resetPlan('auto', USB_JTAG, 'win32')).toEqual([{ sequence: 'usbJtag' }]);
    expect(resetPlan('auto', CP2102, 'linux')).toEqual([
      { sequence: 'tight', delayMs: 50 },
      { sequence: 'tight', delayMs: 550 },
      { sequence: 'classic', delayMs: 50 },
      { sequence: 'classic', delayMs: 550 },
    ]);
    expect(resetPlan('auto', CP2102, 'darwin')).toEqual(resetPlan('auto', CP2102, 'linux'));
    expect(resetPlan('auto', CP2102, 'win32')).toEqual([
      { sequence: 'classic', delayMs: 50 },
      { sequence: 'classic', delayMs: 550 },
    ]);
    // A bare path has no USB ids: the bridge's resets, as esptool falls back to.
    expect(resetPlan('auto', {}, 'linux')[0]).toEqual({ sequence: 'tight', delayMs: 50 });
  });

  it('goes by the kind of a port without USB ids (an rfc2217:// port, as its server says)', () => {
    expect(resetPlan('auto', { kind: 'usb-serial-jtag' }, 'win32')).toEqual([
      { sequence: 'usbJtag' },
    ]);
    expect(resetPlan('auto', { kind: 'usb-uart' }, 'win32')).toEqual([
      { sequence: 'classic', delayMs: 50 },
      { sequence: 'classic', delayMs: 550 },
    ]);
    expect(resetPlan('auto', { kind: 'unknown' }, 'win32')[0]).toEqual({
      sequence: 'classic',
      delayMs: 50,
    });
    // An explicit strategy still wins.
    expect(resetPlan('classic', { kind: 'usb-serial-jtag' }, 'win32')[0]?.sequence).toBe('classic');
  });

  it('follows an explicit strategy whatever the port, keeping the delay alternation', () => {
    expect(resetPlan('usb-jtag', {}, 'linux')).toEqual([{ sequence: 'usbJtag' }]);
    expect(resetPlan('classic', USB_JTAG, 'linux')).toEqual([
      { sequence: 'classic', delayMs: 50 },
      { sequence: 'classic', delayMs: 550 },
    ]);
    expect(resetPlan('tight', CP2102, 'win32').map((s) => s.sequence)).toEqual(['tight', 'tight']);
    expect(resetPlan('none', USB_JTAG, 'linux')).toEqual([]);
  });

  it('tells a USB-Serial-JTAG by its ids only', () => {
    expect(isUsbJtagSerialPort(USB_JTAG)).toBe(true);
    expect(isUsbJtagSerialPort(CP2102)).toBe(false);
    expect(isUsbJtagSerialPort({ usbVendorId: 0x303a, usbProductId: 0x1002 })).toBe(false);
    expect(isUsbJtagSerialPort({})).toBe(false);
  });
});

describe('resetSteps: a sequence with its reset delay', () => {
  it('sets the wait after EN is released with GPIO0 low, and nothing else', () => {
    const waits = (delayMs?: number) =>
      resetSteps({ sequence: 'classic', ...(delayMs === undefined ? {} : { delayMs }) }).flatMap(
        (s) => ('waitMs' in s ? [s.waitMs] : []),
      );
    expect(waits()).toEqual([100, 50]);
    expect(waits(550)).toEqual([100, 550]);
    const tight = resetSteps({ sequence: 'tight', delayMs: 550 });
    expect(tight.filter((s) => 'set' in s)).toEqual(
      RESET_SEQUENCES.tight.filter((s) => 'set' in s),
    );
    expect(tight.flatMap((s) => ('waitMs' in s ? [s.waitMs] : []))).toEqual([100, 550]);
    expect(resetSteps({ sequence: 'usbJtag' })).toBe(RESET_SEQUENCES.usbJtag);
  });
});

describe('flashBaudLadder', () => {
  it('steps down from the first rung through the default ladder', () => {
    expect(FLASH_BAUD_LADDER).toEqual([921_600, 460_800, 115_200]);
    expect(flashBaudLadder()).toEqual([921_600, 460_800, 115_200]);
    expect(flashBaudLadder(921_600)).toEqual([921_600, 460_800, 115_200]);
    expect(flashBaudLadder(460_800)).toEqual([460_800, 115_200]);
    expect(flashBaudLadder(1_500_000)).toEqual([1_500_000, 921_600, 460_800, 115_200]);
    expect(flashBaudLadder(230_400)).toEqual([230_400, 115_200]);
    expect(flashBaudLadder(115_200)).toEqual([115_200]);
  });

  it("takes a board's own ladder, with a first rung in front of it", () => {
    expect(flashBaudLadder(undefined, [460_800, 230_400])).toEqual([460_800, 230_400]);
    expect(flashBaudLadder(921_600, [460_800, 115_200])).toEqual([921_600, 460_800, 115_200]);
    expect(flashBaudLadder(460_800, [460_800, 115_200])).toEqual([460_800, 115_200]);
    expect(flashBaudLadder(undefined, [])).toEqual(flashBaudLadder());
  });
});

describe("timeoutPerMb: esptool's size-scaled timeouts", () => {
  it('is the per-MB time (MB = 10^6 bytes), never below DEFAULT_TIMEOUT', () => {
    expect(timeoutPerMb(ERASE_WRITE_TIMEOUT_PER_MB_MS, 16_384)).toBe(3000);
    expect(timeoutPerMb(ERASE_WRITE_TIMEOUT_PER_MB_MS, 3_000_000)).toBe(120_000);
    expect(timeoutPerMb(MD5_TIMEOUT_PER_MB_MS, 4 * 1024 * 1024)).toBeCloseTo(33_554.432);
    expect(timeoutPerMb(ERASE_WRITE_TIMEOUT_PER_MB_MS, 16_384, 200)).toBeCloseTo(655.36);
  });
});

describe('what a failed connect says', () => {
  const appBoot =
    'ESP-ROM:esp32s3-20210327\r\nBuild:Mar 27 2021\r\nrst:0x1 (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)\r\nSPIWP:0xee\r\n';
  const downloadBoot =
    'rst:0x15 (USB_UART_HPSYS),boot:0x0 (DOWNLOAD(USB/UART0))\r\nwaiting for download\r\n';

  it("finds the ROM's last boot line and its mode", () => {
    expect(romBootLine(appBoot)).toEqual({
      line: 'rst:0x1 (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)',
      bootMode: '0x8 (SPI_FAST_FLASH_BOOT)',
      download: false,
    });
    expect(romBootLine(`${appBoot}${downloadBoot}`)?.download).toBe(true);
    expect(
      romBootLine(
        'ets Jun  8 2016 00:22:57\r\nrst:0x1 (POWERON_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)',
      )?.bootMode,
    ).toBe('0x13 (SPI_FAST_FLASH_BOOT)');
    expect(romBootLine('I (123) app: hello')).toBeUndefined();
  });

  it('names a board that booted its app, and what to try for the reset used', () => {
    expect(connectAdvice(appBoot, 'auto', false)).toBe(
      'the ROM printed "rst:0x1 (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)": the board booted 0x8 (SPI_FAST_FLASH_BOOT), not the download mode, so the reset did not pull GPIO0 (BOOT) low; try --reset classic, or hold BOOT while resetting and use --reset none; a board on the chip\'s native USB (USB-Serial-JTAG) needs --reset usb-jtag',
    );
    expect(connectAdvice(appBoot, 'classic', false)).toMatch(/try --reset tight/);
    expect(connectAdvice(appBoot, 'tight', true)).not.toMatch(/needs --reset usb-jtag/);
    expect(connectAdvice(appBoot, 'usb-jtag', true)).toMatch(
      /USB-UART bridge \(CP210x, CH340\) use --reset classic or --reset tight/,
    );
    expect(connectAdvice(appBoot, 'none', false)).toMatch(
      /with --reset none the board must already be in download mode: hold BOOT, tap RESET/,
    );
  });

  it('names a board in download mode whose replies do not arrive, and a silent one', () => {
    expect(connectAdvice(downloadBoot, 'auto', false)).toMatch(
      /the board is in download mode, but its replies do not arrive/,
    );
    expect(connectAdvice('', 'auto', false)).toMatch(
      /^check that it is the board's port and that the board is powered; try --reset classic/,
    );
  });
});
