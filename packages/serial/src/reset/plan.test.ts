/**
 * The flasher's resets as data: which resets a connect attempt plays and with what delay. They
 * run against virtual boards in the device package (`packages/device/src/serial/flash.test.ts`).
 */
import { describe, expect, it } from 'vitest';
import { resetPlan, resetSteps } from './plan.js';
import { RESET_SEQUENCES } from './sequences.js';
import { isUsbJtagSerialPort } from './usb.js';

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
