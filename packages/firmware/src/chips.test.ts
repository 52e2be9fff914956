import { describe, expect, it } from 'vitest';
import {
  CHIP_DETECT_MAGIC_REG,
  CHIP_NAMES,
  CHIPS,
  type ChipName,
  chipById,
  chipByName,
  chipRevisionNumber,
  chipRevisionRegisters,
  chipSecurityRegisters,
  decodeChipRevision,
  decodeChipSecurity,
  isChipName,
  uartDevBufNoFor,
} from './chips.js';
import { FirmwareError } from './errors.js';
import { bootloaderOffset } from './merged-image.js';

// The facts below are the sources' own, written out here so that a wrong value in the table
// cannot pass its own test.

/** ESP-IDF `esp_chip_model_t` (esp_chip_info.h). */
const ESP_CHIP_MODEL: Record<ChipName, number> = {
  esp32: 1,
  esp32s2: 2,
  esp32s3: 9,
  esp32c3: 5,
  esp32c2: 12,
  esp32c6: 13,
  esp32h2: 16,
  esp32p4: 18,
  esp32c61: 20,
  esp32c5: 23,
  esp32h21: 25,
  esp32h4: 28,
};

/** docs/protocol.md §9a: the chips xiaozhi builds for and where their bootloader sits. */
const XIAOZHI_BOOTLOADER: Partial<Record<ChipName, number>> = {
  esp32: 0x1000,
  esp32s3: 0x0,
  esp32c3: 0x0,
  esp32c5: 0x0,
  esp32c6: 0x0,
  esp32p4: 0x2000,
};

describe('the chip table', () => {
  it('has one entry per name, image chip id and chip model', () => {
    expect(new Set(CHIPS.map((c) => c.name)).size).toBe(CHIPS.length);
    expect(new Set(CHIPS.map((c) => c.id)).size).toBe(CHIPS.length);
    expect(new Set(CHIPS.map((c) => c.model)).size).toBe(CHIPS.length);
    expect(CHIP_NAMES).toEqual(CHIPS.map((c) => c.name));
    expect(Object.isFrozen(CHIP_NAMES)).toBe(true);
  });

  it("gives chip_info.model as ESP-IDF's esp_chip_model_t numbers it", () => {
    expect(Object.fromEntries(CHIPS.map((c) => [c.name, c.model]))).toEqual(ESP_CHIP_MODEL);
    // The model equals the image chip id on every chip but the ESP32 (0 in images, 1 as a model).
    expect(CHIPS.filter((c) => c.model !== c.id).map((c) => c.name)).toEqual(['esp32']);
  });

  it('holds every chip xiaozhi builds for, with its bootloader where docs/protocol.md §9a puts it', () => {
    expect(
      CHIPS.filter((c) => c.xiaozhi)
        .map((c) => c.name)
        .sort(),
    ).toEqual(Object.keys(XIAOZHI_BOOTLOADER).sort());
    for (const [name, offset] of Object.entries(XIAOZHI_BOOTLOADER)) {
      expect(isChipName(name)).toBe(true);
      expect([name, chipByName(name).bootloaderOffset]).toEqual([name, offset]);
    }
  });

  it('is what bootloaderOffset answers, for every chip', () => {
    for (const chip of CHIPS) expect(bootloaderOffset(chip.name)).toBe(chip.bootloaderOffset);
    expect(() => bootloaderOffset('esp8266')).toThrow(FirmwareError);
  });

  it('counts the CPU cores ESP-IDF reports in chip_info.cores', () => {
    const dual = CHIPS.filter((c) => c.cores === 2).map((c) => c.name);
    expect(dual.sort()).toEqual(['esp32', 'esp32h4', 'esp32p4', 'esp32s3']);
    expect(CHIPS.every((c) => c.cores === 1 || c.cores === 2)).toBe(true);
  });

  it('names each chip as esptool does', () => {
    expect(chipByName('esp32s3').description).toBe('ESP32-S3');
    expect(chipByName('esp32c61').description).toBe('ESP32-C61');
    for (const chip of CHIPS) {
      expect(chip.description.toLowerCase().replaceAll('-', '')).toBe(chip.name);
    }
  });
});

describe('the ROM facts', () => {
  it('reads the detect magic at the one register esptool uses', () => {
    expect(CHIP_DETECT_MAGIC_REG).toBe(0x4000_1000);
    const magics = CHIPS.map((c) => c.rom.detectMagic).filter((m) => m !== undefined);
    expect(new Set(magics).size).toBe(magics.length);
    expect(chipByName('esp32').rom.detectMagic).toBe(0x00f0_1d83);
    expect(chipByName('esp32s3').rom.detectMagic).toBe(0x9);
  });

  it('has GET_SECURITY_INFO on every ROM after the ESP32, with a chip id after the ESP32-S2', () => {
    const kinds = Object.fromEntries(CHIPS.map((c) => [c.name, c.rom.securityInfo]));
    expect(kinds.esp32).toBe('none');
    expect(kinds.esp32s2).toBe('without-chip-id');
    const withId = CHIPS.filter((c) => c.rom.securityInfo === 'with-chip-id');
    expect(withId).toHaveLength(CHIPS.length - 2);
  });

  it('keeps the ESP32 SPI register layout apart from the later chips', () => {
    expect(chipByName('esp32').rom.spi).toEqual({
      base: 0x3ff4_2000,
      usr: 0x1c,
      usr1: 0x20,
      usr2: 0x24,
      mosiDlen: 0x28,
      misoDlen: 0x2c,
      w0: 0x80,
    });
    for (const chip of CHIPS.filter((c) => c.name !== 'esp32')) {
      expect(chip.rom.spi).toMatchObject({
        usr: 0x18,
        usr1: 0x1c,
        usr2: 0x20,
        mosiDlen: 0x24,
        misoDlen: 0x28,
        w0: 0x58,
      });
    }
    expect(chipByName('esp32s3').rom.macEfuse).toBe(0x6000_7044);
  });
});

describe('chip look-ups', () => {
  it('finds chips by image chip id and by name', () => {
    expect(chipById(23)?.name).toBe('esp32c5');
    expect(chipById(1)).toBeUndefined();
    expect(chipByName('esp32p4').id).toBe(18);
    expect(isChipName('esp32s3')).toBe(true);
    expect(isChipName('esp8266')).toBe(false);
  });

  it('throws CHIP_UNKNOWN for a name the table does not have, listing the known ones', () => {
    let error: unknown;
    try {
      chipByName('esp32s31');
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(FirmwareError);
    expect((error as FirmwareError).code).toBe('CHIP_UNKNOWN');
    expect((error as FirmwareError).message).toContain('esp32, esp32s2, esp32c3');
  });
});

/** A register field as esptool reads it: `(read_reg(address) >> shift) & (2 ** width - 1)`. */
const f = (address: number, shift: number, width: number) => ({ address, shift, width });

/**
 * esptool v4.12's revision fields, written out from `esptool/targets/<chip>.py`: the address is
 * EFUSE_BLOCK1_ADDR (or the ESP32's EFUSE_RD_REG_BASE) + 4 * num_word, as each function reads it.
 */
const ESPTOOL_EFUSE: Record<ChipName, unknown> = {
  // esp32.py:35 EFUSE_RD_REG_BASE = 0x3FF5A000; :205 read_efuse(5) >> 24 & 0x3;
  // :208 read_efuse(3) >> 15 & 0x1; :209 read_efuse(5) >> 20 & 0x1; :56 APB_CTL_DATE_ADDR =
  // 0x3FF66000 + 0x7C, :58 APB_CTL_DATE_S = 31; :214-219 {0: 0, 1: 1, 3: 2, 7: 3}.get(.., 0)
  esp32: {
    minor: [f(0x3ff5a014, 24, 2)],
    major: [f(0x3ff5a00c, 15, 1), f(0x3ff5a014, 20, 1), f(0x3ff6607c, 31, 1)],
    majorCodes: { 0: 0, 1: 1, 3: 2, 7: 3 },
    // esp32.py:46 EFUSE_RD_ABS_DONE_REG = 0x3FF5A000 + 0x018, :47 1 << 4, :48 1 << 5 (:192 rev >= 300);
    // :43 EFUSE_SPI_BOOT_CRYPT_CNT_REG = EFUSE_RD_REG_BASE, :44 0x7F << 20; :40 + 0x18, :41 1 << 7
    secureBoot: [
      { address: 0x3ff5a018, mask: 0x10 },
      { address: 0x3ff5a018, mask: 0x20, fromRevision: 300 },
    ],
    flashCryptCnt: { address: 0x3ff5a000, mask: 0x7f00000 },
    disDownloadManualEncrypt: { address: 0x3ff5a018, mask: 0x80 },
  },
  // esp32s2.py:47 EFUSE_BLOCK1_ADDR = 0x3F41A000 + 0x044; :140 word 3 >> 20 & 0x01 (hi);
  // :142 word 4 >> 4 & 0x07 (low); :147 word 3 >> 18 & 0x03
  esp32s2: {
    minor: [f(0x3f41a054, 4, 3), f(0x3f41a050, 20, 1)],
    major: [f(0x3f41a050, 18, 2)],
    // esp32s2.py:69-70 0x3F41A000 + 0x038, 1 << 20; :66-67 + 0x034, 0x7 << 18; :63-64 + 0x030, 1 << 19
    secureBoot: [{ address: 0x3f41a038, mask: 0x100000 }],
    flashCryptCnt: { address: 0x3f41a034, mask: 0x1c0000 },
    disDownloadManualEncrypt: { address: 0x3f41a030, mask: 0x80000 },
  },
  // esp32c3.py:43 EFUSE_BLOCK1_ADDR = 0x60008800 + 0x044; :135 word 5 >> 23 & 0x01 (hi);
  // :137 word 3 >> 18 & 0x07 (low); :142 word 5 >> 24 & 0x03
  esp32c3: {
    minor: [f(0x60008850, 18, 3), f(0x60008858, 23, 1)],
    major: [f(0x60008858, 24, 2)],
    // esp32c3.py:67-68 0x60008800 + 0x038, 1 << 20; :64-65 + 0x034, 0x7 << 18; :61-62 + 0x030, 1 << 20
    secureBoot: [{ address: 0x60008838, mask: 0x100000 }],
    flashCryptCnt: { address: 0x60008834, mask: 0x1c0000 },
    disDownloadManualEncrypt: { address: 0x60008830, mask: 0x100000 },
  },
  // esp32s3.py:47 EFUSE_BLOCK1_ADDR = 0x60007000 + 0x44, :48 EFUSE_BLOCK2_ADDR = + 0x5C;
  // :167 word 5 >> 23 & 0x01; :169 word 3 >> 18 & 0x07; :188 word 5 >> 24 & 0x03;
  // :174 BLOCK2 word 4 >> 0 & 0x03; :178 word 3 >> 24 & 0x07; :154-156 is_eco0
  esp32s3: {
    minor: [f(0x60007050, 18, 3), f(0x60007058, 23, 1)],
    major: [f(0x60007058, 24, 2)],
    eco0: { blockMajor: f(0x6000706c, 0, 2), blockMinor: f(0x60007050, 24, 3) },
    // esp32s3.py:72-73 0x60007000 + 0x038, 1 << 20; :69-70 + 0x034, 0x7 << 18; :66-67 + 0x030, 1 << 20
    secureBoot: [{ address: 0x60007038, mask: 0x100000 }],
    flashCryptCnt: { address: 0x60007034, mask: 0x1c0000 },
    disDownloadManualEncrypt: { address: 0x60007030, mask: 0x100000 },
  },
  // esp32c2.py:25 EFUSE_BLOCK2_ADDR = 0x60008800 + 0x040; :88 word 1 >> 16 & 0xF;
  // :92 word 1 >> 20 & 0x3
  esp32c2: {
    minor: [f(0x60008844, 16, 4)],
    major: [f(0x60008844, 20, 2)],
    // esp32c2.py:28-29 0x60008800 + 0x30, 1 << 21; :31-32 + 0x30, 0x7 << 7; :34-35 + 0x30, 1 << 6
    secureBoot: [{ address: 0x60008830, mask: 0x200000 }],
    flashCryptCnt: { address: 0x60008830, mask: 0x380 },
    disDownloadManualEncrypt: { address: 0x60008830, mask: 0x40 },
  },
  // esp32c6.py:35 EFUSE_BLOCK1_ADDR = 0x600B0800 + 0x044; :109 word 3 >> 18 & 0x0F;
  // :113 word 3 >> 22 & 0x03
  esp32c6: {
    minor: [f(0x600b0850, 18, 4)],
    major: [f(0x600b0850, 22, 2)],
    // esp32c6.py:59-60 0x600B0800 + 0x038, 1 << 20; :56-57 + 0x034, 0x7 << 18; :53-54 + 0x030, 1 << 20
    secureBoot: [{ address: 0x600b0838, mask: 0x100000 }],
    flashCryptCnt: { address: 0x600b0834, mask: 0x1c0000 },
    disDownloadManualEncrypt: { address: 0x600b0830, mask: 0x100000 },
  },
  // esp32h2.py (EFUSE_BLOCK1_ADDR of esp32c6.py:35); :61 word 3 >> 18 & 0x07; :65 word 3 >> 21 & 0x03
  esp32h2: {
    minor: [f(0x600b0850, 18, 3)],
    major: [f(0x600b0850, 21, 2)],
    // esp32c6.py:53-60 (inherited)
    secureBoot: [{ address: 0x600b0838, mask: 0x100000 }],
    flashCryptCnt: { address: 0x600b0834, mask: 0x1c0000 },
    disDownloadManualEncrypt: { address: 0x600b0830, mask: 0x100000 },
  },
  // esp32p4.py:29 EFUSE_BLOCK1_ADDR = 0x5012D000 + 0x044; :163 word 2 >> 0 & 0x0F;
  // :168 ((word >> 23) & 1) << 2 | (word >> 4) & 0x03
  esp32p4: {
    minor: [f(0x5012d04c, 0, 4)],
    major: [f(0x5012d04c, 4, 2), f(0x5012d04c, 23, 1)],
    // esp32p4.py:67-68 0x5012D000 + 0x038, 1 << 20; :62-64 + 0x034, 0x7 << 18; :59-60 + 0x030, 1 << 20
    secureBoot: [{ address: 0x5012d038, mask: 0x100000 }],
    flashCryptCnt: { address: 0x5012d034, mask: 0x1c0000 },
    disDownloadManualEncrypt: { address: 0x5012d030, mask: 0x100000 },
  },
  // esp32c61.py:19 EFUSE_BLOCK1_ADDR = 0x600B4800 + 0x044; :103 word 2 >> 0 & 0x0F; :107 >> 4 & 0x03
  esp32c61: {
    minor: [f(0x600b484c, 0, 4)],
    major: [f(0x600b484c, 4, 2)],
    // esp32c61.py:43-44 0x600B4800 + 0x034, 1 << 26; :40-41 + 0x030, 0x7 << 23; :37-38 + 0x030, 1 << 14
    secureBoot: [{ address: 0x600b4834, mask: 0x4000000 }],
    flashCryptCnt: { address: 0x600b4830, mask: 0x3800000 },
    disDownloadManualEncrypt: { address: 0x600b4830, mask: 0x4000 },
  },
  // esp32c5.py:22 EFUSE_BLOCK1_ADDR = 0x600B4800 + 0x044; :107 word 2 >> 0 & 0x0F; :111 >> 4 & 0x03
  esp32c5: {
    minor: [f(0x600b484c, 0, 4)],
    major: [f(0x600b484c, 4, 2)],
    // esp32c5.py:46-47 0x600B4800 + 0x038, 1 << 25; :43-44 + 0x034, 0x7 << 18; :40-41 + 0x030, 1 << 20
    secureBoot: [{ address: 0x600b4838, mask: 0x2000000 }],
    flashCryptCnt: { address: 0x600b4834, mask: 0x1c0000 },
    disDownloadManualEncrypt: { address: 0x600b4830, mask: 0x100000 },
  },
  // esp32h21.py:58 return 0; :61 return 0
  esp32h21: {
    minor: [],
    major: [],
    // esp32h21.py:51-52 0x600B4000 + 0x038, 1 << 20; :48-49 + 0x034, 0x7 << 18; :45-46 + 0x030, 1 << 20
    secureBoot: [{ address: 0x600b4038, mask: 0x100000 }],
    flashCryptCnt: { address: 0x600b4034, mask: 0x1c0000 },
    disDownloadManualEncrypt: { address: 0x600b4030, mask: 0x100000 },
  },
  // esp32h4.py:115 return 0; :118 return 0
  esp32h4: {
    minor: [],
    major: [],
    // esp32h4.py:59-60 0x600B1800 + 0x038, 1 << 5; :56-57 + 0x030, 0x7 << 23; :53-54 + 0x030, 1 << 14
    secureBoot: [{ address: 0x600b1838, mask: 0x20 }],
    flashCryptCnt: { address: 0x600b1830, mask: 0x3800000 },
    disDownloadManualEncrypt: { address: 0x600b1830, mask: 0x4000 },
  },
};

/** LP watchdog registers at `base` + 0x0, 0x18, 0x1C, 0x20 (the ESP32-C6 family's offsets). */
const lpWdt = (base: number) => ({
  rtcWdtConfig0: base,
  rtcWdtWprotect: base + 0x18,
  swdConf: base + 0x1c,
  swdWprotect: base + 0x20,
});

/** esptool v4.12's USB-Serial-JTAG and watchdog facts, written out from its target files. */
const ESPTOOL_USB_JTAG_SERIAL: Partial<Record<ChipName, unknown>> = {
  esp32c3: {
    // esptool v4.12 targets/esp32c3.py:82-84 BSS_UART_DEV_ADDR (0x3FCDF064 if
    // get_chip_revision() < 101 else 0x3FCDF060) + BUF_UART_NO_OFFSET 24; :86 = 3
    consoles: [
      { fromRevision: 0, uartDevBufNo: 0x3fcdf07c, usbJtagSerial: 3 },
      { fromRevision: 101, uartDevBufNo: 0x3fcdf078, usbJtagSerial: 3 },
    ],
    rtcWdtConfig0: 0x60008090, // esp32c3.py:88 RTCCNTL_BASE_REG = 0x60008000, :94 + 0x0090
    rtcWdtWprotect: 0x600080a8, // esp32c3.py:96 + 0x00A8
    rtcWdtKey: 0x50d83aa1, // esp32c3.py:97 RTC_CNTL_WDT_WKEY = 0x50D83AA1
    swdConf: 0x600080ac, // esp32c3.py:89 + 0x00AC
    swdAutoFeedEn: 0x80000000, // esp32c3.py:90 1 << 31
    swdWprotect: 0x600080b0, // esp32c3.py:91 + 0x00B0
    swdKey: 0x8f1d312a, // esp32c3.py:92 RTC_CNTL_SWD_WKEY = 0x8F1D312A
    hardResetUsesUsb: false, // no hard_reset of its own: loader.py:1713 uses_usb=False
  },
  esp32s3: {
    consoles: [{ fromRevision: 0, uartDevBufNo: 0x3fcef14c, usbJtagSerial: 4 }], // esp32s3.py:82, :84
    rtcWdtConfig0: 0x60008098, // esp32s3.py:86 RTCCNTL_BASE_REG = 0x60008000, :92 + 0x0098
    rtcWdtWprotect: 0x600080b0, // esp32s3.py:94 + 0x00B0
    rtcWdtKey: 0x50d83aa1, // esp32s3.py:95
    swdConf: 0x600080b4, // esp32s3.py:87 + 0x00B4
    swdAutoFeedEn: 0x80000000, // esp32s3.py:88 1 << 31
    swdWprotect: 0x600080b8, // esp32s3.py:89 + 0x00B8
    swdKey: 0x8f1d312a, // esp32s3.py:90
    hardResetUsesUsb: false, // esp32s3.py:387 ESPLoader.hard_reset(self, uses_usb_otg)
  },
  esp32c6: {
    consoles: [{ fromRevision: 0, uartDevBufNo: 0x4087f580, usbJtagSerial: 3 }], // esp32c6.py:68, :69
    ...lpWdt(0x600b1c00), // esp32c6.py:71 DR_REG_LP_WDT_BASE = 0x600B1C00; :72, :74, :76, :78
    rtcWdtKey: 0x50d83aa1, // esp32c3.py:97 (inherited)
    swdAutoFeedEn: 0x40000, // esp32c6.py:77 1 << 18
    swdKey: 0x50d83aa1, // esp32c6.py:79
    hardResetUsesUsb: false,
  },
  esp32h2: {
    consoles: [{ fromRevision: 0, uartDevBufNo: 0x4084fefc, usbJtagSerial: 3 }], // esp32h2.py:27, :28
    rtcWdtConfig0: 0x600b1c00, // esp32h2.py:17 DR_REG_LP_WDT_BASE = 0x600B1C00, :18 + 0x0
    rtcWdtWprotect: 0x600b1c1c, // esp32h2.py:20 + 0x001C
    rtcWdtKey: 0x50d83aa1, // esp32c3.py:97 (inherited)
    swdConf: 0x600b1c20, // esp32h2.py:22 + 0x0020
    swdAutoFeedEn: 0x40000, // esp32h2.py:23 1 << 18
    swdWprotect: 0x600b1c24, // esp32h2.py:24 + 0x0024
    swdKey: 0x50d83aa1, // esp32h2.py:25
    hardResetUsesUsb: false,
  },
  esp32p4: {
    // esp32p4.py:102-105 BSS_UART_DEV_ADDR (0x4FF3FEB0 if get_chip_revision() < 300 else
    // 0x4FFBFEB0) + BUF_UART_NO_OFFSET 24; :111 UARTDEV_BUF_NO_USB_JTAG_SERIAL = 6
    consoles: [
      { fromRevision: 0, uartDevBufNo: 0x4ff3fec8, usbJtagSerial: 6 },
      { fromRevision: 300, uartDevBufNo: 0x4ffbfec8, usbJtagSerial: 6 },
    ],
    ...lpWdt(0x50116000), // esp32p4.py:146 DR_REG_LP_WDT_BASE = 0x50116000; :147, :149, :152, :154
    rtcWdtKey: 0x50d83aa1, // esp32p4.py:150 (its disable_watchdogs, :272, writes :155's equal key)
    swdAutoFeedEn: 0x40000, // esp32p4.py:153 1 << 18
    swdKey: 0x50d83aa1, // esp32p4.py:155
    hardResetUsesUsb: false, // esp32p4.py:308 ESPLoader.hard_reset(self)
  },
  esp32c61: {
    // esp32c61.py:52 0x4084F5EC if get_chip_revision() <= 2 else 0x4084F5E4; :57 3 if <= 2 else 4
    consoles: [
      { fromRevision: 0, uartDevBufNo: 0x4084f5ec, usbJtagSerial: 3 },
      { fromRevision: 3, uartDevBufNo: 0x4084f5e4, usbJtagSerial: 4 },
    ],
    ...lpWdt(0x600b1c00), // esp32c6.py:71-78 (inherited)
    rtcWdtKey: 0x50d83aa1,
    swdAutoFeedEn: 0x40000,
    swdKey: 0x50d83aa1,
    hardResetUsesUsb: false,
  },
  esp32c5: {
    // esptool v4.12 targets/esp32c5.py:58 UARTDEV_BUF_NO = 0x4085F514; esp32c6.py:69 = 3
    consoles: [{ fromRevision: 0, uartDevBufNo: 0x4085f514, usbJtagSerial: 3 }],
    ...lpWdt(0x600b1c00), // esp32c6.py:71-78 (ESP32C5ROM(ESP32C6ROM), esp32c5.py:15)
    rtcWdtKey: 0x50d83aa1,
    swdAutoFeedEn: 0x40000,
    swdKey: 0x50d83aa1,
    hardResetUsesUsb: true, // esp32c5.py:141 ESPLoader.hard_reset(self, self.uses_usb_jtag_serial())
  },
  esp32h21: {
    consoles: [{ fromRevision: 0, uartDevBufNo: 0x4084fefc, usbJtagSerial: 3 }], // esp32h2.py:27, :28
    rtcWdtConfig0: 0x600b1c00, // esp32h21.py:17 DR_REG_LP_WDT_BASE = 0x600B1C00, :18 + 0x0
    rtcWdtWprotect: 0x600b1c1c, // esp32h21.py:19 + 0x001C
    rtcWdtKey: 0x50d83aa1,
    swdConf: 0x600b1c20, // esp32h21.py:21 + 0x0020
    swdAutoFeedEn: 0x40000, // esp32h21.py:22
    swdWprotect: 0x600b1c24, // esp32h21.py:23 + 0x0024
    swdKey: 0x50d83aa1, // esp32h21.py:24
    hardResetUsesUsb: false,
  },
  esp32h4: {
    consoles: [{ fromRevision: 0, uartDevBufNo: 0x4087f580, usbJtagSerial: 3 }], // esp32h4.py:71, :72
    ...lpWdt(0x600b5400), // esp32h4.py:74 DR_REG_LP_WDT_BASE = 0x600B5400; :75, :76, :78, :80
    rtcWdtKey: 0x50d83aa1, // esp32c3.py:97 (inherited)
    swdAutoFeedEn: 0x40000, // esp32h4.py:79
    swdKey: 0x50d83aa1, // esp32h4.py:81
    hardResetUsesUsb: false,
  },
};

describe("the chip facts the serial path uses, pinned to esptool v4.12's literals", () => {
  it('reads the revision and the security eFuses where esptool reads them, on every chip', () => {
    for (const chip of CHIPS) {
      expect([chip.name, chip.rom.efuse]).toEqual([chip.name, ESPTOOL_EFUSE[chip.name]]);
    }
  });

  it("decodes the security eFuses as esptool's write_flash checks do", () => {
    const words = (entries: [number, number][]) => new Map(entries);
    const s3 = chipByName('esp32s3').rom.efuse;
    const v02 = { major: 0, minor: 2 };
    expect(chipSecurityRegisters(s3)).toEqual([0x60007038, 0x60007034, 0x60007030]);
    expect(decodeChipSecurity(s3, words([]), v02)).toEqual({
      secureBoot: false,
      flashEncryption: false,
      encryptedDownloadDisabled: false,
    });
    // An odd number of SPI_BOOT_CRYPT_CNT bits is on, an even number off again (esp32.py:186).
    const odd = words([[0x60007034, 0b001 << 18]]);
    const even = words([[0x60007034, 0b011 << 18]]);
    const three = words([[0x60007034, 0b111 << 18]]);
    expect(decodeChipSecurity(s3, odd, v02).flashEncryption).toBe(true);
    expect(decodeChipSecurity(s3, even, v02).flashEncryption).toBe(false);
    expect(decodeChipSecurity(s3, three, v02).flashEncryption).toBe(true);
    const secured = words([
      [0x60007038, 1 << 20],
      [0x60007030, 1 << 20],
    ]);
    expect(decodeChipSecurity(s3, secured, v02)).toMatchObject({
      secureBoot: true,
      encryptedDownloadDisabled: true,
    });
    // The ESP32's ABS_DONE_1 (Secure Boot v2) counts from v3.0 only (esp32.py:191-193).
    const esp32 = chipByName('esp32').rom.efuse;
    const v2 = words([[0x3ff5a018, 1 << 5]]);
    expect(decodeChipSecurity(esp32, v2, { major: 3, minor: 0 }).secureBoot).toBe(true);
    expect(decodeChipSecurity(esp32, v2, { major: 1, minor: 0 }).secureBoot).toBe(false);
    expect(
      decodeChipSecurity(esp32, words([[0x3ff5a018, 1 << 4]]), { major: 1, minor: 0 }),
    ).toMatchObject({
      secureBoot: true,
    });
  });

  it('has the USB-Serial-JTAG console byte and the watchdogs of every chip esptool tames', () => {
    for (const chip of CHIPS) {
      const usb = (chip.rom as { usbJtagSerial?: unknown }).usbJtagSerial;
      expect([chip.name, usb]).toEqual([chip.name, ESPTOOL_USB_JTAG_SERIAL[chip.name]]);
    }
    // esptool's ESP32, ESP32-S2 and ESP32-C2 targets have no disable_watchdogs to run
    // (esp32c2.py:136 _post_connect overrides the ESP32-C3's).
    expect(CHIPS.filter((c) => !('usbJtagSerial' in c.rom)).map((c) => c.name)).toEqual([
      'esp32',
      'esp32s2',
      'esp32c2',
    ]);
  });

  it("hooks the ESP32-S3's stub start under Secure Boot where esptool does", () => {
    // esptool v4.12 loader.py:1246 rom_spiflash_legacy_funcs_read_ptr = 0x3FCEF688 (:1222-1223:
    // only on the ESP32-S3 with Secure Boot)
    const hooks = CHIPS.flatMap((c) =>
      'secureBootStubHook' in c.rom ? [[c.name, c.rom.secureBootStubHook]] : [],
    );
    expect(hooks).toEqual([['esp32s3', 0x3fcef688]]);
  });

  it('picks the console byte by revision, as esptool does (the ESP32-C3 from v1.1)', () => {
    const c3 = chipByName('esp32c3').rom.usbJtagSerial;
    if (c3 === undefined) throw new Error('no ESP32-C3 facts');
    // esptool v4.12 targets/esp32c3.py:83 0x3FCDF064 if get_chip_revision() < 101 else 0x3FCDF060
    expect(uartDevBufNoFor(c3, 4).uartDevBufNo).toBe(0x3fcdf064 + 24);
    expect(uartDevBufNoFor(c3, 100).uartDevBufNo).toBe(0x3fcdf064 + 24);
    expect(uartDevBufNoFor(c3, 101).uartDevBufNo).toBe(0x3fcdf060 + 24);
    const c61 = chipByName('esp32c61').rom.usbJtagSerial;
    if (c61 === undefined) throw new Error('no ESP32-C61 facts');
    // esp32c61.py:52, :57: `<= 2` is v0.2 and below
    expect(uartDevBufNoFor(c61, 2)).toMatchObject({ uartDevBufNo: 0x4084f5ec, usbJtagSerial: 3 });
    expect(uartDevBufNoFor(c61, 100)).toMatchObject({ uartDevBufNo: 0x4084f5e4, usbJtagSerial: 4 });
  });

  it("decodes a revision from eFuse words as esptool's get_chip_revision does", () => {
    const words = (entries: [number, number][]) => new Map(entries);
    const esp32 = chipByName('esp32').rom.efuse;
    expect(chipRevisionRegisters(esp32)).toEqual([0x3ff5a014, 0x3ff5a00c, 0x3ff6607c]);
    // rev_bit0, rev_bit1, rev_bit2 all set: code 7, v3; minor 1 in word 5 bits 24..25.
    const v31 = words([
      [0x3ff5a00c, 1 << 15],
      [0x3ff5a014, (1 << 20) | (1 << 24)],
      [0x3ff6607c, 0x8000_0000],
    ]);
    expect(decodeChipRevision(esp32, v31)).toEqual({ major: 3, minor: 1 });
    // Code 2 (rev_bit1 alone) is none of esptool's: major 0.
    expect(decodeChipRevision(esp32, words([[0x3ff5a014, 1 << 20]]))).toEqual({
      major: 0,
      minor: 0,
    });
    const c3 = chipByName('esp32c3').rom.efuse;
    // Minor 9: low bits 0b001 in word 3, the high bit in word 5 bit 23; major 1 in word 5.
    const c3v19 = words([
      [0x60008850, 1 << 18],
      [0x60008858, (1 << 23) | (1 << 24)],
    ]);
    expect(decodeChipRevision(c3, c3v19)).toEqual({ major: 1, minor: 9 });
    expect(chipRevisionNumber({ major: 1, minor: 9 })).toBe(109);
    // The ESP32-S3's eco0: a raw minor with low bits 0 and BLK_VERSION 1.1 reads as v0.0.
    const s3 = chipByName('esp32s3').rom.efuse;
    const eco0 = words([
      [0x60007058, (1 << 23) | (1 << 24)],
      [0x6000706c, 1],
      [0x60007050, 1 << 24],
    ]);
    expect(decodeChipRevision(s3, eco0)).toEqual({ major: 0, minor: 0 });
    expect(decodeChipRevision(s3, words([[0x60007058, (1 << 23) | (1 << 24)]]))).toEqual({
      major: 1,
      minor: 8,
    });
    expect(decodeChipRevision(chipByName('esp32h21').rom.efuse, words([]))).toEqual({
      major: 0,
      minor: 0,
    });
  });
});
