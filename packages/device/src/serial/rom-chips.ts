/**
 * What each chip's ROM shows a host on the serial port, as the ROM emulator plays it: the virtual
 * board's own copy of esptool v4.12's target facts (`esptool/targets/<chip>.py`), written out
 * here and not read from the firmware package's chip table, which the flasher reads: a wrong
 * fact there then fails a flash against this emulator instead of passing with it.
 * `rom-chips.test.ts` checks the two copies agree, value by value.
 */
import type { ChipName } from '@xiaozhi-mcp/firmware';

/** Where esptool reads the chip-detect magic word on every chip (`CHIP_DETECT_MAGIC_REG_ADDR`). */
export const CHIP_DETECT_MAGIC_REG = 0x4000_1000;

/**
 * `UARTDEV_BUF_NO` (the ROM's .bss byte naming the console download mode talks on) and its value
 * on the USB-Serial-JTAG (`UARTDEV_BUF_NO_USB_JTAG_SERIAL`), from one chip revision on
 * (major * 100 + minor).
 */
export interface RomConsoleVariable {
  readonly fromRevision: number;
  readonly uartDevBufNo: number;
  readonly usbJtagSerial: number;
}

/** The USB-Serial-JTAG's console variable and the watchdogs esptool's `disable_watchdogs` tames. */
export interface RomUsbJtagSerial {
  /** Oldest revision first; the last one a chip's revision reaches holds. */
  readonly consoles: readonly RomConsoleVariable[];
  readonly rtcWdtConfig0: number;
  readonly rtcWdtWprotect: number;
  readonly rtcWdtKey: number;
  readonly swdConf: number;
  readonly swdAutoFeedEn: number;
  readonly swdWprotect: number;
  readonly swdKey: number;
}

/** A chip's ROM as the emulator plays it. */
export interface RomChipProfile {
  /** esptool's CHIP_NAME. */
  readonly name: string;
  /** The image header chip id, which GET_SECURITY_INFO also reports. */
  readonly imageChipId: number;
  /** The word at {@link CHIP_DETECT_MAGIC_REG}; undefined: the register reads 0. */
  readonly detectMagic: number | undefined;
  /**
   * GET_SECURITY_INFO: `none` (the ESP32 ROM has no such command), `without-chip-id` (the
   * ESP32-S2: 12 bytes), `with-chip-id` (20 bytes, chip id and API version last).
   */
  readonly securityInfo: 'none' | 'without-chip-id' | 'with-chip-id';
  /** `MAC_EFUSE_REG`: the MAC's low four bytes; the next word holds its top two. */
  readonly macEfuse: number;
  readonly uartClkdivReg: number;
  /** `SPI_REG_BASE` and the `SPI_*_OFFS` of the user command registers. */
  readonly spi: {
    readonly base: number;
    readonly usr: number;
    readonly usr1: number;
    readonly usr2: number;
    readonly mosiDlen: number;
    readonly misoDlen: number;
    readonly w0: number;
  };
  readonly usbJtagSerial?: RomUsbJtagSerial;
  /**
   * The ESP32-S3's `rom_spiflash_legacy_funcs.read` pointer: with Secure Boot on, its ROM does
   * not run an uploaded stub from MEM_END, and esptool starts the stub by pointing this at the
   * stub's entry and sending READ_FLASH_SLOW (`loader.py` `run_stub`).
   */
  readonly secureBootStubHook?: number;
  /** Status bytes after every ROM reply: `STATUS_BYTES_LENGTH = 4` (esptool's ESP32ROM). */
  readonly romStatusBytes: 4;
  /**
   * The crystal the emulated board has (a board's part, not the chip's), for the UART divider:
   * where esptool fixes one, that one; where it measures it, the emulator's pick (ESP32 and
   * ESP32-C2: 40 of 26/40 MHz; ESP32-C5: 48 of 40/48 MHz).
   */
  readonly xtalMhz: number;
}

const SPI_ESP32 = { usr: 0x1c, usr1: 0x20, usr2: 0x24, mosiDlen: 0x28, misoDlen: 0x2c, w0: 0x80 };
const SPI_LATER = { usr: 0x18, usr1: 0x1c, usr2: 0x20, mosiDlen: 0x24, misoDlen: 0x28, w0: 0x58 };

/** The LP watchdog of the ESP32-C6 family: `DR_REG_LP_WDT_BASE` + 0x0, 0x18, 0x1C, 0x20. */
function lpWatchdog(base: number, consoles: readonly RomConsoleVariable[]): RomUsbJtagSerial {
  return {
    consoles,
    rtcWdtConfig0: base,
    rtcWdtWprotect: base + 0x18,
    rtcWdtKey: 0x50d8_3aa1,
    swdConf: base + 0x1c,
    swdAutoFeedEn: 1 << 18,
    swdWprotect: base + 0x20,
    swdKey: 0x50d8_3aa1,
  };
}

/** The ESP32-H2's: `DR_REG_LP_WDT_BASE` 0x600B1C00 + 0x0, 0x1C, 0x20, 0x24. */
const H2_WATCHDOG: RomUsbJtagSerial = {
  consoles: [{ fromRevision: 0, uartDevBufNo: 0x4084_fefc, usbJtagSerial: 3 }],
  rtcWdtConfig0: 0x600b_1c00,
  rtcWdtWprotect: 0x600b_1c1c,
  rtcWdtKey: 0x50d8_3aa1,
  swdConf: 0x600b_1c20,
  swdAutoFeedEn: 1 << 18,
  swdWprotect: 0x600b_1c24,
  swdKey: 0x50d8_3aa1,
};

const profiles: Record<ChipName, Omit<RomChipProfile, 'romStatusBytes'>> = {
  esp32: {
    name: 'ESP32',
    imageChipId: 0,
    detectMagic: 0x00f0_1d83,
    securityInfo: 'none',
    macEfuse: 0x3ff5_a004,
    uartClkdivReg: 0x3ff4_0014,
    spi: { base: 0x3ff4_2000, ...SPI_ESP32 },
    xtalMhz: 40,
  },
  esp32s2: {
    name: 'ESP32-S2',
    imageChipId: 2,
    detectMagic: 0x0000_07c6,
    securityInfo: 'without-chip-id',
    macEfuse: 0x3f41_a044,
    uartClkdivReg: 0x3f40_0014,
    spi: { base: 0x3f40_2000, ...SPI_LATER },
    xtalMhz: 40,
  },
  esp32c3: {
    name: 'ESP32-C3',
    imageChipId: 5,
    detectMagic: 0x1b31_506f,
    securityInfo: 'with-chip-id',
    macEfuse: 0x6000_8844,
    uartClkdivReg: 0x6000_0014,
    spi: { base: 0x6000_2000, ...SPI_LATER },
    // BSS_UART_DEV_ADDR (0x3FCDF064, from v1.1 0x3FCDF060) + BUF_UART_NO_OFFSET 24; the RTC
    // controller at 0x60008000.
    usbJtagSerial: {
      consoles: [
        { fromRevision: 0, uartDevBufNo: 0x3fcd_f07c, usbJtagSerial: 3 },
        { fromRevision: 101, uartDevBufNo: 0x3fcd_f078, usbJtagSerial: 3 },
      ],
      rtcWdtConfig0: 0x6000_8090,
      rtcWdtWprotect: 0x6000_80a8,
      rtcWdtKey: 0x50d8_3aa1,
      swdConf: 0x6000_80ac,
      swdAutoFeedEn: 0x8000_0000,
      swdWprotect: 0x6000_80b0,
      swdKey: 0x8f1d_312a,
    },
    xtalMhz: 40,
  },
  esp32s3: {
    name: 'ESP32-S3',
    imageChipId: 9,
    detectMagic: 0x0000_0009,
    securityInfo: 'with-chip-id',
    macEfuse: 0x6000_7044,
    uartClkdivReg: 0x6000_0014,
    spi: { base: 0x6000_2000, ...SPI_LATER },
    secureBootStubHook: 0x3fce_f688,
    usbJtagSerial: {
      consoles: [{ fromRevision: 0, uartDevBufNo: 0x3fce_f14c, usbJtagSerial: 4 }],
      rtcWdtConfig0: 0x6000_8098,
      rtcWdtWprotect: 0x6000_80b0,
      rtcWdtKey: 0x50d8_3aa1,
      swdConf: 0x6000_80b4,
      swdAutoFeedEn: 0x8000_0000,
      swdWprotect: 0x6000_80b8,
      swdKey: 0x8f1d_312a,
    },
    xtalMhz: 40,
  },
  esp32c2: {
    name: 'ESP32-C2',
    imageChipId: 12,
    detectMagic: 0x6f51_306f,
    securityInfo: 'with-chip-id',
    macEfuse: 0x6000_8840,
    uartClkdivReg: 0x6000_0014,
    spi: { base: 0x6000_2000, ...SPI_LATER },
    xtalMhz: 40,
  },
  esp32c6: {
    name: 'ESP32-C6',
    imageChipId: 13,
    detectMagic: 0x2ce0_806f,
    securityInfo: 'with-chip-id',
    macEfuse: 0x600b_0844,
    uartClkdivReg: 0x6000_0014,
    spi: { base: 0x6000_3000, ...SPI_LATER },
    usbJtagSerial: lpWatchdog(0x600b_1c00, [
      { fromRevision: 0, uartDevBufNo: 0x4087_f580, usbJtagSerial: 3 },
    ]),
    xtalMhz: 40,
  },
  esp32h2: {
    name: 'ESP32-H2',
    imageChipId: 16,
    detectMagic: 0xd7b7_3e80,
    securityInfo: 'with-chip-id',
    macEfuse: 0x600b_0844,
    uartClkdivReg: 0x6000_0014,
    spi: { base: 0x6000_3000, ...SPI_LATER },
    usbJtagSerial: H2_WATCHDOG,
    xtalMhz: 32,
  },
  esp32p4: {
    name: 'ESP32-P4',
    imageChipId: 18,
    detectMagic: 0x0add_bad0,
    securityInfo: 'with-chip-id',
    macEfuse: 0x5012_d044,
    uartClkdivReg: 0x500c_a014,
    spi: { base: 0x5008_d000, ...SPI_LATER },
    // BSS_UART_DEV_ADDR (0x4FF3FEB0, from v3.0 0x4FFBFEB0) + 24.
    usbJtagSerial: lpWatchdog(0x5011_6000, [
      { fromRevision: 0, uartDevBufNo: 0x4ff3_fec8, usbJtagSerial: 6 },
      { fromRevision: 300, uartDevBufNo: 0x4ffb_fec8, usbJtagSerial: 6 },
    ]),
    xtalMhz: 40,
  },
  esp32c61: {
    name: 'ESP32-C61',
    imageChipId: 20,
    detectMagic: 0x33f0_206f,
    securityInfo: 'with-chip-id',
    macEfuse: 0x600b_4844,
    uartClkdivReg: 0x6000_0014,
    spi: { base: 0x6000_3000, ...SPI_LATER },
    usbJtagSerial: lpWatchdog(0x600b_1c00, [
      { fromRevision: 0, uartDevBufNo: 0x4084_f5ec, usbJtagSerial: 3 },
      { fromRevision: 3, uartDevBufNo: 0x4084_f5e4, usbJtagSerial: 4 },
    ]),
    xtalMhz: 40,
  },
  esp32c5: {
    name: 'ESP32-C5',
    imageChipId: 23,
    detectMagic: 0x1101_406f,
    securityInfo: 'with-chip-id',
    macEfuse: 0x600b_4844,
    uartClkdivReg: 0x6000_0014,
    spi: { base: 0x6000_3000, ...SPI_LATER },
    usbJtagSerial: lpWatchdog(0x600b_1c00, [
      { fromRevision: 0, uartDevBufNo: 0x4085_f514, usbJtagSerial: 3 },
    ]),
    xtalMhz: 48,
  },
  esp32h21: {
    name: 'ESP32-H21',
    imageChipId: 25,
    detectMagic: undefined,
    securityInfo: 'with-chip-id',
    macEfuse: 0x600b_4044,
    uartClkdivReg: 0x6000_0014,
    spi: { base: 0x6000_3000, ...SPI_LATER },
    usbJtagSerial: H2_WATCHDOG,
    xtalMhz: 32,
  },
  esp32h4: {
    name: 'ESP32-H4',
    imageChipId: 28,
    detectMagic: undefined,
    securityInfo: 'with-chip-id',
    macEfuse: 0x600b_1844,
    uartClkdivReg: 0x6000_0014,
    spi: { base: 0x6009_9000, ...SPI_LATER },
    usbJtagSerial: lpWatchdog(0x600b_5400, [
      { fromRevision: 0, uartDevBufNo: 0x4087_f580, usbJtagSerial: 3 },
    ]),
    xtalMhz: 32,
  },
};

/** The ROM profile of every chip the virtual board can be. */
export const ROM_CHIPS: Readonly<Record<ChipName, RomChipProfile>> = Object.freeze(
  Object.fromEntries(
    Object.entries(profiles).map(([name, profile]) => [
      name,
      Object.freeze({ ...profile, romStatusBytes: 4 }),
    ]),
  ) as Record<ChipName, RomChipProfile>,
);

/** The console variable of a chip of this revision (major * 100 + minor). */
export function romConsoleVariable(usb: RomUsbJtagSerial, revision: number): RomConsoleVariable {
  let found = usb.consoles[0];
  for (const console of usb.consoles) if (revision >= console.fromRevision) found = console;
  if (found === undefined) throw new Error('a USB-Serial-JTAG profile without a console variable');
  return found;
}
