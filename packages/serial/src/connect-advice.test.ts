/** How a failed connect is explained: what the ROM printed, and what to try for the reset used. */
import { describe, expect, it } from 'vitest';
import { connectAdvice } from './connect-advice.js';
import { romBootLine } from './rom-boot-line.js';

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

  it('quotes the last whole boot line when the port stopped reading in the middle of the next', () => {
    // A board in a boot loop prints on while the flasher gives up: the text ends mid-line.
    const cut = `${appBoot}rst:0x10 (RTC_WDT_RTC_RST),boot:0x8`;
    expect(romBootLine(cut)).toEqual({
      line: 'rst:0x1 (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)',
      bootMode: '0x8 (SPI_FAST_FLASH_BOOT)',
      download: false,
    });
    // Only a cut line: it is what there is.
    expect(romBootLine('rst:0x10 (RTC_WDT_RTC_RST),boot:0x8')?.bootMode).toBe('0x8');
  });

  it('names a board that booted its app, and what to try for the reset used', () => {
    expect(connectAdvice(appBoot, 'auto', false)).toBe(
      'the ROM printed "rst:0x1 (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)": the board booted 0x8 (SPI_FAST_FLASH_BOOT), not the download mode, so the reset did not pull GPIO0 (BOOT) low; try --reset classic, or hold BOOT while resetting and use --reset none; a board on the chip\'s native USB (USB-Serial-JTAG) needs --reset usb-jtag',
    );
    expect(connectAdvice(appBoot, 'classic', false)).toMatch(/try --reset tight/);
    expect(connectAdvice(appBoot, 'usb-jtag', false)).toMatch(
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

  it('never offers a classic or tight reset for a USB-Serial-JTAG port, whatever was tried', () => {
    for (const printed of ['', appBoot, downloadBoot])
      for (const strategy of ['auto', 'usb-jtag', 'classic', 'tight'] as const) {
        const advice = connectAdvice(printed, strategy, true);
        expect(advice).not.toMatch(/try --reset (classic|tight)|use --reset (classic|tight)/);
        expect(advice).not.toMatch(/USB-UART bridge/);
      }
    expect(connectAdvice('', 'auto', true)).toMatch(
      /the port is the chip's own USB-Serial-JTAG, which only its USB-JTAG reset reaches \(used here\); .*hold BOOT, tap RESET \(EN\), release BOOT, then run again with --reset none$/,
    );
    expect(connectAdvice(appBoot, 'classic', true)).toMatch(
      /--reset classic cannot reach: use --reset usb-jtag \(the default for this port\)/,
    );
  });
});
