/**
 * The eFuse words a chip's ROM lets a host read (READ_REG), as esptool decodes them: the chip
 * revision, the package, and the flash and PSRAM inside the package (`get_chip_description`,
 * `get_chip_features`). The MAC words are the ROM emulator's; this module only adds bits beside
 * them. Each layout below is esptool's target file for the chip (`esptool/targets/<chip>.py`,
 * the field's `num_word`, shift and mask); where esptool versions moved a field, the layout used
 * is the one every version decodes alike for the revision chosen here.
 *
 * Which revision a virtual chip has is the emulator's choice ({@link DEFAULT_CHIP_REVISIONS}):
 * one that real silicon of that chip has, and that esptool's flasher stub supports.
 */
import type { ChipName } from '@xiaozhi-mcp/firmware';
import type { InPackageMemory } from '../board-api.js';
import { DeviceError } from '../errors.js';

export interface ChipRevision {
  readonly major: number;
  readonly minor: number;
}

/**
 * The revision each emulated chip reports. ESP32 v3.0 (ESP32-D0WD-V3), ESP32-S3 v0.2,
 * ESP32-C3 v0.4 are the silicon most boards carry; ESP32-C2 v1.0 because esptool disables its
 * stub on v0.0 (`ESP32C2ROM._post_connect`: "ESP32C2 ECO0 is no longer supported by the flasher
 * stub"); ESP32-P4 v1.0 is the silicon esptool-js's `esp32p4-rev1` stub is for (below v3.0).
 * The ESP32-H21's and ESP32-H4's eFuse fields were not allocated when esptool first knew them
 * (`get_major_chip_version` returns 0): v0.0.
 */
export const DEFAULT_CHIP_REVISIONS: Readonly<Record<ChipName, ChipRevision>> = Object.freeze({
  esp32: { major: 3, minor: 0 },
  esp32s2: { major: 1, minor: 0 },
  esp32c3: { major: 0, minor: 4 },
  esp32s3: { major: 0, minor: 2 },
  esp32c2: { major: 1, minor: 0 },
  esp32c6: { major: 0, minor: 1 },
  esp32h2: { major: 0, minor: 1 },
  esp32p4: { major: 1, minor: 0 },
  esp32c61: { major: 1, minor: 0 },
  esp32c5: { major: 1, minor: 0 },
  esp32h21: { major: 0, minor: 0 },
  esp32h4: { major: 0, minor: 0 },
});

/**
 * A revision as esptool prints it, `v0.2`, as major and minor; anything else throws
 * `BOARD_OPTIONS_INVALID`. Whether the chip can record it is {@link efuseRegisters}'s to say.
 */
export function parseChipRevision(text: string): ChipRevision {
  const match = /^v(\d{1,2})\.(\d{1,2})$/.exec(text.trim());
  if (match === null)
    throw new DeviceError(
      'BOARD_OPTIONS_INVALID',
      `chip revision ${JSON.stringify(text)}: expected v<major>.<minor>, e.g. v0.2`,
    );
  return { major: Number(match[1]), minor: Number(match[2]) };
}

/** What a virtual board's chip says in eFuse beyond its preset (`VirtualBoardOptions.silicon`). */
export interface BoardSilicon {
  /** Default {@link DEFAULT_CHIP_REVISIONS}. */
  readonly revision?: ChipRevision;
  /**
   * Secure Boot burnt in (`SECURE_BOOT_EN`; the ESP32's ABS_DONE_1 from v3.0, ABS_DONE_0
   * before): the ROM refuses flash writes below 0x8000 (`rom-emulator.ts`).
   */
  readonly secureBoot?: boolean;
  /**
   * Flash encryption in release mode: one bit of `SPI_BOOT_CRYPT_CNT` (an odd count: on) and
   * `DIS_DOWNLOAD_MANUAL_ENCRYPT`, so download mode writes plaintext only.
   */
  readonly flashEncryption?: boolean;
}

export interface ChipSilicon extends BoardSilicon {
  /** What the package holds; default nothing. */
  readonly inPackage?: InPackageMemory;
  /** The board's crystal, for the chips whose ROM records the one it expects (ESP32-C5). */
  readonly xtalMhz?: number;
}

/** A bit field of one 32-bit register. */
interface Field {
  readonly address: number;
  readonly shift: number;
  readonly width: number;
}

const field = (address: number, shift: number, width: number): Field => ({
  address,
  shift,
  width,
});

function invalid(chip: ChipName, message: string): DeviceError {
  return new DeviceError('BOARD_OPTIONS_INVALID', `${chip}: ${message}`);
}

/** Register values, each field OR'ed in; a value that does not fit its field throws. */
class Registers {
  readonly words = new Map<number, number>();
  constructor(readonly chip: ChipName) {}

  /** `value` split over `fields`, lowest bits first. */
  put(value: number, what: string, ...fields: readonly Field[]): void {
    let rest = value;
    for (const f of fields) {
      const part = rest % 2 ** f.width;
      rest = Math.floor(rest / 2 ** f.width);
      const word = this.words.get(f.address) ?? 0;
      this.words.set(f.address, (word | (part << f.shift)) >>> 0);
    }
    if (rest !== 0 || value < 0 || !Number.isInteger(value))
      throw invalid(this.chip, `${what} ${value} does not fit its eFuse field`);
  }
}

/** `value` as the code a table gives it, or a clear error naming what the chip can record. */
function code<K extends string | number>(
  chip: ChipName,
  what: string,
  table: Readonly<Record<K, number>>,
  value: K,
): number {
  const found = Object.hasOwn(table, value) ? table[value] : undefined;
  if (found === undefined)
    throw invalid(
      chip,
      `no eFuse code for ${what} ${value}; it can record ${Object.keys(table).join(', ')}`,
    );
  return found;
}

function noMemory(chip: ChipName, silicon: ChipSilicon): void {
  const memory = silicon.inPackage;
  if (memory?.flash !== undefined || memory?.psram !== undefined)
    throw invalid(chip, 'in-package flash or PSRAM is modelled only for the ESP32-S3');
}

/** The ESP32-C3's layout (`esp32c3.py`): BLOCK1 words 3 and 5. */
function c3Layout(r: Registers, block1: number, rev: ChipRevision): void {
  // get_minor_chip_version: word 3 bits 18..20, then word 5 bit 23; major: word 5 bits 24..25.
  r.put(rev.minor, 'minor revision', field(block1 + 12, 18, 3), field(block1 + 20, 23, 1));
  r.put(rev.major, 'major revision', field(block1 + 20, 24, 2));
  // get_pkg_version: word 3 bits 21..23; 0 is the chip's only package in esptool's table.
}

/** ESP32-C5 and ESP32-C61 (`esp32c5.py`, `esp32c61.py`): BLOCK1 word 2. */
function c5Layout(r: Registers, block1: number, rev: ChipRevision): void {
  r.put(rev.minor, 'minor revision', field(block1 + 8, 0, 4));
  r.put(rev.major, 'major revision', field(block1 + 8, 4, 2));
}

type Encoder = (r: Registers, rev: ChipRevision, silicon: ChipSilicon) => void;

const ENCODERS: Readonly<Record<ChipName, Encoder>> = {
  // esptool/targets/esp32.py: read_efuse(n) is EFUSE_RD_REG_BASE 0x3FF5A000 + 4n.
  esp32: (r, rev, silicon) => {
    noMemory('esp32', silicon);
    const word = (n: number) => 0x3ff5_a000 + 4 * n;
    // get_major_chip_version: rev_bit0 word 3 bit 15, rev_bit1 word 5 bit 20, rev_bit2 bit 31 of
    // APB_CTL_DATE (DR_REG_SYSCON_BASE 0x3FF66000 + 0x7C); {0: 0, 1: 1, 3: 2, 7: 3}.
    const bits = code(
      'esp32',
      'major revision',
      { 0: 0b000, 1: 0b001, 2: 0b011, 3: 0b111 },
      rev.major,
    );
    r.put(bits & 1, 'revision bit 0', field(word(3), 15, 1));
    r.put((bits >> 1) & 1, 'revision bit 1', field(word(5), 20, 1));
    r.put(bits >> 2, 'revision bit 2', field(0x3ff6_607c, 31, 1));
    r.put(rev.minor, 'minor revision', field(word(5), 24, 2));
    // get_pkg_version: word 3 bits 9..11 (and bit 2 as bit 3): 1 is ESP32-D0WD, "-V3" on v3.
    r.put(1, 'package', field(word(3), 9, 3));
    // get_chip_features: CHIP_CPU_FREQ_RATED (word 3 bit 13) without CHIP_CPU_FREQ_LOW: 240MHz;
    // dual core and BT are the bits left clear; ADC_VREF (word 4 bits 8..12) non-zero: "VRef
    // calibration in efuse"; coding scheme (word 6 bits 0..1) 0: None.
    r.put(1, 'CPU frequency rated', field(word(3), 13, 1));
    r.put(0b01100, 'ADC VRef', field(word(4), 8, 5));
    // change_baud (ROM) derives the ROM's idea of the crystal from CK8M_FREQ (word 4 bits 0..7)
    // and RTCCALICFG1 (0x3FF5F06C bits 7..31): cali * 15625 * ck8m / 40, here 40 MHz.
    r.put(50, 'CK8M frequency', field(word(4), 0, 8));
    r.put(2048, 'RTC calibration', field(0x3ff5_f06c, 7, 25));
  },
  // esptool/targets/esp32s2.py: EFUSE_BLOCK1_ADDR 0x3F41A044.
  esp32s2: (r, rev, silicon) => {
    noMemory('esp32s2', silicon);
    const block1 = 0x3f41_a044;
    // get_minor_chip_version: word 4 bits 4..6, then word 3 bit 20; major: word 3 bits 18..19.
    r.put(rev.minor, 'minor revision', field(block1 + 16, 4, 3), field(block1 + 12, 20, 1));
    r.put(rev.major, 'major revision', field(block1 + 12, 18, 2));
  },
  // esptool/targets/esp32c3.py: EFUSE_BLOCK1_ADDR 0x60008844.
  esp32c3: (r, rev, silicon) => {
    noMemory('esp32c3', silicon);
    c3Layout(r, 0x6000_8844, rev);
  },
  // esptool/targets/esp32s3.py: EFUSE_BLOCK1_ADDR 0x60007044.
  esp32s3: (r, rev, silicon) => {
    const block1 = 0x6000_7044;
    // get_raw_minor_chip_version: word 3 bits 18..20, then word 5 bit 23; major: word 5 bits
    // 24..25. A minor of 0 with BLK_VERSION 1.1 would read as the v0.0 workaround (is_eco0);
    // the block version is left 0.
    r.put(rev.minor, 'minor revision', field(block1 + 12, 18, 3), field(block1 + 20, 23, 1));
    r.put(rev.major, 'major revision', field(block1 + 20, 24, 2));
    // get_pkg_version: word 3 bits 21..23; 0 is "ESP32-S3 (QFN56)".
    const flash = silicon.inPackage?.flash;
    if (flash !== undefined) {
      // get_flash_cap: word 3 bits 27..29 {1: 8MB, 2: 4MB}; get_flash_vendor: word 4 bits 0..2.
      r.put(
        code('esp32s3', 'in-package flash MB', { 8: 1, 4: 2 }, flash.sizeMb),
        'flash cap',
        field(block1 + 12, 27, 3),
      );
      const vendors = { XMC: 1, GD: 2, FM: 3, TT: 4, BY: 5 };
      r.put(
        code('esp32s3', 'flash vendor', vendors, flash.vendor as keyof typeof vendors),
        'flash vendor',
        field(block1 + 16, 0, 3),
      );
    }
    const psram = silicon.inPackage?.psram;
    if (psram !== undefined) {
      // get_psram_cap: word 4 bits 3..4, then word 5 bit 19 {1: 8MB, 2: 2MB, 3: 16MB, 4: 4MB};
      // get_psram_vendor: word 4 bits 7..8 {1: AP_3v3, 2: AP_1v8}.
      const cap = code('esp32s3', 'in-package PSRAM MB', { 8: 1, 2: 2, 16: 3, 4: 4 }, psram.sizeMb);
      r.put(cap, 'PSRAM cap', field(block1 + 16, 3, 2), field(block1 + 20, 19, 1));
      const vendors = { AP_3v3: 1, AP_1v8: 2 };
      r.put(
        code('esp32s3', 'PSRAM vendor', vendors, psram.vendor as keyof typeof vendors),
        'PSRAM vendor',
        field(block1 + 16, 7, 2),
      );
    }
  },
  // esptool/targets/esp32c2.py: EFUSE_BLOCK2_ADDR 0x60008840 (the MAC block); word 1 holds the
  // MAC's top bytes in bits 0..15, then minor bits 16..19, major bits 20..21, package 22..24.
  esp32c2: (r, rev, silicon) => {
    noMemory('esp32c2', silicon);
    r.put(rev.minor, 'minor revision', field(0x6000_8844, 16, 4));
    r.put(rev.major, 'major revision', field(0x6000_8844, 20, 2));
  },
  // esptool/targets/esp32c6.py: EFUSE_BLOCK1_ADDR 0x600B0844, word 3: minor bits 18..21, major
  // bits 22..23 (older esptool read the ESP32-C3's fields; a v0.x minor below 8 reads alike).
  esp32c6: (r, rev, silicon) => {
    noMemory('esp32c6', silicon);
    r.put(rev.minor, 'minor revision', field(0x600b_0850, 18, 4));
    r.put(rev.major, 'major revision', field(0x600b_0850, 22, 2));
  },
  // esptool/targets/esp32h2.py (EFUSE_BLOCK1_ADDR 0x600B0844, inherited): minor word 3 bits
  // 18..20, major word 3 bits 21..22 (older esptool read the ESP32-C6's fields; a v0.x minor
  // below 8 reads alike in both).
  esp32h2: (r, rev, silicon) => {
    noMemory('esp32h2', silicon);
    r.put(rev.minor, 'minor revision', field(0x600b_0850, 18, 3));
    r.put(rev.major, 'major revision', field(0x600b_0850, 21, 2));
  },
  // esptool/targets/esp32p4.py: EFUSE_BLOCK1_ADDR 0x5012D044, word 2: minor bits 0..3, major
  // bits 4..5 (esptool-js adds bit 23 as the major's bit 2, for v3.x), package bits 20..22.
  esp32p4: (r, rev, silicon) => {
    noMemory('esp32p4', silicon);
    r.put(rev.minor, 'minor revision', field(0x5012_d04c, 0, 4));
    r.put(rev.major, 'major revision', field(0x5012_d04c, 4, 2), field(0x5012_d04c, 23, 1));
  },
  // esptool/targets/esp32c61.py: EFUSE_BLOCK1_ADDR 0x600B4844.
  esp32c61: (r, rev, silicon) => {
    noMemory('esp32c61', silicon);
    c5Layout(r, 0x600b_4844, rev);
  },
  // esptool/targets/esp32c5.py: EFUSE_BLOCK1_ADDR 0x600B4844. Its ROM's change_baud reads the
  // crystal the ROM expects from PCR_SYSCLK_CONF_REG 0x60096110 bits 24..30.
  esp32c5: (r, rev, silicon) => {
    noMemory('esp32c5', silicon);
    c5Layout(r, 0x600b_4844, rev);
    if (silicon.xtalMhz !== undefined)
      r.put(silicon.xtalMhz, 'ROM crystal', field(0x6009_6110, 24, 7));
  },
  // esptool/targets/esp32h21.py: get_minor/major_chip_version and get_pkg_version return 0.
  esp32h21: (_r, rev, silicon) => {
    noMemory('esp32h21', silicon);
    if (rev.major !== 0 || rev.minor !== 0)
      throw invalid('esp32h21', 'esptool reads no revision from its eFuse: only v0.0 exists');
  },
  // esptool/targets/esp32h4.py: EFUSE_BLOCK1_ADDR 0x600B1844; newer esptool reads minor word 3
  // bits 18..21, major bits 22..23, and names the chip by its temperature grade (word 4 bits
  // 10..11, 1: "H"; any other reads "Unknown ESP32-H4?"). Older esptool returned v0.0.
  esp32h4: (r, rev, silicon) => {
    noMemory('esp32h4', silicon);
    r.put(rev.minor, 'minor revision', field(0x600b_1850, 18, 4));
    r.put(rev.major, 'major revision', field(0x600b_1850, 22, 2));
    r.put(1, 'temperature grade', field(0x600b_1854, 10, 2));
  },
};

/**
 * The registers (address to word) that give `chip` its revision, package, in-package memory and
 * security features as esptool reads them. Throws `BOARD_OPTIONS_INVALID` for what the chip
 * cannot record.
 */
export function efuseRegisters(
  chip: ChipName,
  silicon: ChipSilicon = {},
): ReadonlyMap<number, number> {
  const registers = new Registers(chip);
  const revision = silicon.revision ?? DEFAULT_CHIP_REVISIONS[chip];
  ENCODERS[chip](registers, revision, silicon);
  const security = SECURITY[chip];
  if (silicon.secureBoot === true) {
    // The ESP32 from v3.0 has Secure Boot v2 (ABS_DONE_1); earlier ones v1 (ABS_DONE_0).
    const bit =
      security.secureBootV2 !== undefined && revision.major >= 3
        ? security.secureBootV2
        : security.secureBoot;
    registers.put(1, 'Secure Boot', bit);
  }
  if (silicon.flashEncryption === true) {
    registers.put(1, 'flash encryption count', security.cryptCntFirstBit);
    registers.put(1, 'manual encrypt disabled', security.disManualEncrypt);
  }
  return registers.words;
}

/** Where a chip keeps its security eFuses: one bit each, and the first bit of the crypt count. */
interface SecurityBits {
  readonly secureBoot: Field;
  /** The ESP32's ABS_DONE_1 (Secure Boot v2), which esptool counts from v3.0. */
  readonly secureBootV2?: Field;
  readonly cryptCntFirstBit: Field;
  readonly disManualEncrypt: Field;
}

/**
 * esptool's `EFUSE_SECURE_BOOT_EN_REG`/`_MASK`, `EFUSE_SPI_BOOT_CRYPT_CNT_REG`/`_MASK` and
 * `EFUSE_DIS_DOWNLOAD_MANUAL_ENCRYPT_REG`/`EFUSE_DIS_DOWNLOAD_MANUAL_ENCRYPT`, from `EFUSE_BASE`:
 * most chips keep them at + 0x38, + 0x34 (bits 18..20) and + 0x30.
 */
function usual(efuseBase: number, secureBoot: number, disManualEncrypt: number): SecurityBits {
  return {
    secureBoot: field(efuseBase + 0x38, secureBoot, 1),
    cryptCntFirstBit: field(efuseBase + 0x34, 18, 1),
    disManualEncrypt: field(efuseBase + 0x30, disManualEncrypt, 1),
  };
}

const SECURITY: Readonly<Record<ChipName, SecurityBits>> = {
  // esptool/targets/esp32.py: EFUSE_RD_REG_BASE 0x3FF5A000; + 0x18 bit 4 ABS_DONE_0, bit 5
  // ABS_DONE_1, bit 7 DISABLE_DL_ENCRYPT; word 0 bits 20..26 FLASH_CRYPT_CNT.
  esp32: {
    secureBoot: field(0x3ff5_a018, 4, 1),
    secureBootV2: field(0x3ff5_a018, 5, 1),
    cryptCntFirstBit: field(0x3ff5_a000, 20, 1),
    disManualEncrypt: field(0x3ff5_a018, 7, 1),
  },
  esp32s2: usual(0x3f41_a000, 20, 19),
  esp32c3: usual(0x6000_8800, 20, 20),
  esp32s3: usual(0x6000_7000, 20, 20),
  // esptool/targets/esp32c2.py: EFUSE_BASE 0x60008800 + 0x30 holds all three (bits 21, 7..9, 6).
  esp32c2: {
    secureBoot: field(0x6000_8830, 21, 1),
    cryptCntFirstBit: field(0x6000_8830, 7, 1),
    disManualEncrypt: field(0x6000_8830, 6, 1),
  },
  esp32c6: usual(0x600b_0800, 20, 20),
  esp32h2: usual(0x600b_0800, 20, 20),
  esp32p4: usual(0x5012_d000, 20, 20),
  // esptool/targets/esp32c61.py: EFUSE_BASE 0x600B4800; + 0x34 bit 26, + 0x30 bits 23..25 and 14.
  esp32c61: {
    secureBoot: field(0x600b_4834, 26, 1),
    cryptCntFirstBit: field(0x600b_4830, 23, 1),
    disManualEncrypt: field(0x600b_4830, 14, 1),
  },
  esp32c5: usual(0x600b_4800, 25, 20),
  esp32h21: usual(0x600b_4000, 20, 20),
  // esptool/targets/esp32h4.py: EFUSE_BASE 0x600B1800; + 0x38 bit 5, + 0x30 bits 23..25 and 14.
  esp32h4: {
    secureBoot: field(0x600b_1838, 5, 1),
    cryptCntFirstBit: field(0x600b_1830, 23, 1),
    disManualEncrypt: field(0x600b_1830, 14, 1),
  },
};
