import type { ResetStrategy } from './reset/plan.js';
import { romBootLine } from './rom-boot-line.js';

/**
 * How a failed connect reads: what the ROM said (when it printed its boot line) and what to do
 * about it for the reset strategy used. On the chip's own USB-Serial-JTAG (`usbJtagSerialPort`)
 * DTR and RTS are requests to the chip's USB peripheral, with no transistors on EN and GPIO0:
 * only its USB-JTAG reset reaches it, so the classic and tight resets are never offered there.
 */
export function connectAdvice(
  printed: string,
  strategy: ResetStrategy | 'auto',
  usbJtagSerialPort: boolean,
): string {
  const boot = romBootLine(printed);
  const byHand = 'hold BOOT, tap RESET (EN), release BOOT, then run again with --reset none';
  const otherResets =
    strategy === 'none'
      ? 'with --reset none the board must already be in download mode: hold BOOT, tap RESET (EN), release BOOT, then run again'
      : usbJtagSerialPort
        ? strategy === 'usb-jtag' || strategy === 'auto'
          ? `the port is the chip's own USB-Serial-JTAG, which only its USB-JTAG reset reaches (used here); if the app turned that peripheral off or took its pins, or keeps crashing, put the board into download mode by hand: ${byHand}`
          : `the port is the chip's own USB-Serial-JTAG, which --reset ${strategy} cannot reach: use --reset usb-jtag (the default for this port), or ${byHand}`
        : strategy === 'usb-jtag'
          ? 'on a board with a USB-UART bridge (CP210x, CH340) use --reset classic or --reset tight, or hold BOOT while resetting and use --reset none'
          : `try --reset ${strategy === 'classic' ? 'tight' : 'classic'}, or hold BOOT while resetting and use --reset none; a board on the chip's native USB (USB-Serial-JTAG) needs --reset usb-jtag`;
  if (boot === undefined) {
    return `check that it is the board's port and that the board is powered; ${otherResets}`;
  }
  if (boot.download) {
    // esptool: "Download mode successfully detected, but getting no sync reply: The serial TX
    // path seems to be down."
    return `the ROM printed "${boot.line}": the board is in download mode, but its replies do not arrive (the serial TX path, board to host, seems to be down); ${usbJtagSerialPort ? 'check the USB cable and hub' : 'check the cable and the USB-UART bridge'}`;
  }
  // esptool: "Wrong boot mode detected (...)! The chip needs to be in download mode."
  return `the ROM printed "${boot.line}": the board booted ${boot.bootMode}, not the download mode, so the reset did not pull GPIO0 (BOOT) low; ${otherResets}`;
}
