/**
 * The one table of ESP32-family chip facts. Every package that needs a fact about a chip (the
 * image formats here, the virtual board's OTA body, the ROM emulator, the HIL inventory) reads
 * it from {@link CHIPS}, and {@link ChipName} is the one type of a chip's name.
 *
 * Where the facts come from:
 * - `name`, `id`: ESP-IDF `esp_chip_id_t` (`esp_app_format.h`), the u16 at byte 12 of an image
 *   header; esptool's `IMAGE_CHIP_ID`, which GET_SECURITY_INFO also reports.
 * - `model`: ESP-IDF `esp_chip_model_t` (`esp_chip_info.h`), what `esp_chip_info()` puts in
 *   `chip_info.model` of the OTA body (docs/protocol.md §7). It equals `id` except on ESP32.
 * - `description`: esptool's `CHIP_NAME`.
 * - `cores`: ESP-IDF `SOC_CPU_CORES_NUM` (`soc_caps.h`), `chip_info.cores`.
 * - `dromBase`: esptool's `DROM_MAP_START`, where the chip maps flash for read-only data; an
 *   image's first segment loads there, plus the 0x20 bytes of headers before its data.
 * - `bootloaderOffset`: where the second-stage bootloader sits in flash (esptool's
 *   `BOOTLOADER_FLASH_OFFSET`), except where docs/protocol.md §9a (xiaozhi's release images)
 *   says otherwise; each entry says which.
 * - `xiaozhi`: xiaozhi-esp32 has builds for it (docs/protocol.md §9a: esp32, esp32s3, esp32c3,
 *   esp32c5, esp32c6, esp32p4).
 * - `rom`: what the chip's ROM download mode shows a flasher (esptool v4.12's target definitions,
 *   `esptool/targets/<chip>.py`; see {@link ChipRomFacts}): the eFuse fields esptool decodes into
 *   the chip revision ({@link ChipEfuseFacts}), and on every chip with a USB-Serial-JTAG the
 *   registers esptool's `disable_watchdogs` uses there ({@link UsbJtagSerialRomFacts}), some of
 *   them by chip revision. `chips.test.ts` pins each fact to esptool's literal.
 */
import { FirmwareError } from './errors.js';

/** The ROM's serial download mode as esptool's target definitions describe it. */
export interface ChipRomFacts {
  /**
   * The word at {@link CHIP_DETECT_MAGIC_REG} (esptool's `CHIP_DETECT_MAGIC_VALUE`, the first
   * one where esptool lists several revisions). Undefined for chips esptool identifies only by
   * GET_SECURITY_INFO's chip id.
   */
  readonly detectMagic: number | undefined;
  /**
   * GET_SECURITY_INFO: `none` (the ESP32 ROM has no such command), `without-chip-id` (the
   * ESP32-S2 ROM: 12 bytes, flags, flash_crypt_cnt and key purposes), `with-chip-id` (20 bytes,
   * then chip id and eco version).
   */
  readonly securityInfo: 'none' | 'without-chip-id' | 'with-chip-id';
  /** esptool's `MAC_EFUSE_REG`: eFuse MAC word 0 (bytes 2..5); word 1 (bytes 0..1) follows. */
  readonly macEfuse: number;
  /** esptool's `UART_CLKDIV_REG`, the UART0 clock divider the baud rate is derived from. */
  readonly uartClkdivReg: number;
  /**
   * The SPI flash controller: esptool's `SPI_REG_BASE` and its `SPI_*_OFFS` offsets (`mosiDlen`
   * and `misoDlen` are `SPI_MOSI_DLEN_OFFS` and `SPI_MISO_DLEN_OFFS`: the data phases' bit
   * lengths minus one, which esptool's `run_spiflash_command` writes before a user command).
   */
  readonly spi: {
    readonly base: number;
    readonly usr: number;
    readonly usr1: number;
    readonly usr2: number;
    readonly mosiDlen: number;
    readonly misoDlen: number;
    readonly w0: number;
  };
  /** The eFuse fields esptool reads the chip's revision and its security features from. */
  readonly efuse: ChipEfuseFacts;
  /**
   * The ESP32-S3 with Secure Boot on: its ROM does not run an uploaded stub from MEM_END ("Bug in
   * ESP32-S3 ROM prevents stub execution if secure boot is enabled", esptool's `run_stub`), so
   * esptool points the ROM's `rom_spiflash_legacy_funcs.read` at this address to the stub's entry
   * and calls it with READ_FLASH_SLOW, then puts the pointer back.
   */
  readonly secureBootStubHook?: number;
  /**
   * The chip's USB-Serial-JTAG as download mode sees it, and the watchdogs esptool tames on it;
   * absent for chips without one (ESP32, ESP32-S2, ESP32-C2).
   */
  readonly usbJtagSerial?: UsbJtagSerialRomFacts;
}

/** A bit field of one 32-bit register, as esptool reads it: `(read_reg(address) >> shift) & mask`. */
export interface RegisterField {
  readonly address: number;
  readonly shift: number;
  /** Bits in the field: esptool's mask is `2 ** width - 1`. */
  readonly width: number;
}

/** A flag in a register, as esptool tests it: `read_reg(address) & mask`. */
export interface RegisterBits {
  readonly address: number;
  readonly mask: number;
}

/**
 * The eFuse fields esptool reads before it writes (`write_flash` in `esptool/cmds.py`):
 *
 * - the chip revision, as `get_minor_chip_version` and `get_major_chip_version` read it
 *   (esptool's `get_chip_revision()` is `major * 100 + minor`): each the pieces of `minor` /
 *   `major` put together, lowest bits first; no pieces: esptool returns 0;
 * - the security eFuses: `get_secure_boot_enabled`, `get_flash_encryption_enabled` and
 *   `get_encrypted_download_disabled` (the ROM's GET_SECURITY_INFO reports the first two too, but
 *   not on the ESP32, whose ROM lacks the command; esptool's checks read these registers).
 */
export interface ChipEfuseFacts {
  readonly minor: readonly RegisterField[];
  readonly major: readonly RegisterField[];
  /** The ESP32: the major pieces form a code, `{0: 0, 1: 1, 3: 2, 7: 3}`, any other reading 0. */
  readonly majorCodes?: Readonly<Record<number, number>>;
  /**
   * The ESP32-S3's `is_eco0`: a raw minor whose low three bits are 0, with the eFuse block
   * version 1.1 (`get_blk_version_major`, `get_blk_version_minor`), reads as v0.0.
   */
  readonly eco0?: { readonly blockMajor: RegisterField; readonly blockMinor: RegisterField };
  /**
   * `EFUSE_SECURE_BOOT_EN`: Secure Boot is on when any of these is set; one with `fromRevision`
   * counts only on a chip of that revision or later (the ESP32's ABS_DONE_1, Secure Boot v2,
   * from v3.0).
   */
  readonly secureBoot: readonly (RegisterBits & { readonly fromRevision?: number })[];
  /** `EFUSE_SPI_BOOT_CRYPT_CNT`: flash encryption is on while an odd number of its bits are set. */
  readonly flashCryptCnt: RegisterBits;
  /**
   * `EFUSE_DIS_DOWNLOAD_MANUAL_ENCRYPT`: download mode cannot write encrypted (flash encryption in
   * release mode), so whatever it writes lands in flash as plaintext.
   */
  readonly disDownloadManualEncrypt: RegisterBits;
}

/** What a chip's security eFuses say, as esptool's `write_flash` reads them. */
export interface ChipSecurity {
  readonly secureBoot: boolean;
  readonly flashEncryption: boolean;
  readonly encryptedDownloadDisabled: boolean;
}

/** A chip's revision: esptool prints it `v<major>.<minor>`. */
export interface ChipRevision {
  readonly major: number;
  readonly minor: number;
}

/**
 * `UARTDEV_BUF_NO` (where the ROM keeps the console it talks on) and
 * `UARTDEV_BUF_NO_USB_JTAG_SERIAL` (its value on the USB-Serial-JTAG), from one chip revision on.
 */
export interface UartDevBufNo {
  /** esptool's `get_chip_revision()` (major * 100 + minor) from which these hold. */
  readonly fromRevision: number;
  readonly uartDevBufNo: number;
  readonly usbJtagSerial: number;
}

/**
 * esptool's `disable_watchdogs` (in `esptool/targets/esp32s3.py`, `esp32p4.py` and `esp32c3.py`,
 * which the ESP32-C6, -C5, -C61, -H2, -H21 and -H4 targets inherit; run from `_post_connect`
 * unless the stub was already running): "When
 * USB-JTAG/Serial is used, the RTC WDT and SWD watchdog are not reset and can then reset the
 * board during flashing". esptool tells USB-JTAG/Serial by `get_uart_no()`, the byte at
 * `UARTDEV_BUF_NO` (`read_reg(UARTDEV_BUF_NO) & 0xFF`), equal to `UARTDEV_BUF_NO_USB_JTAG_SERIAL`
 * (never in secure download mode). It then writes the RTC WDT's key to its write-protect
 * register, 0 to its config (disabled), 0 to the protect register; and the super watchdog's key
 * to its protect register, its config OR'ed with the auto-feed bit, 0 to the protect register.
 * Names are esptool's.
 */
export interface UsbJtagSerialRomFacts {
  /**
   * `UARTDEV_BUF_NO` and its USB-Serial-JTAG value, by chip revision, oldest first: where the
   * ROM's .bss moved between revisions (the ESP32-C3 from v1.1, the ESP32-P4 from v3.0, the
   * ESP32-C61 after v0.2), esptool picks by `get_chip_revision()`. See {@link uartDevBufNoFor}.
   */
  readonly consoles: readonly UartDevBufNo[];
  /** `RTC_CNTL_WDTCONFIG0_REG`: the RTC watchdog's config; 0 disables it. */
  readonly rtcWdtConfig0: number;
  /** `RTC_CNTL_WDTWPROTECT_REG`: writes to the RTC watchdog take effect only while it holds the key. */
  readonly rtcWdtWprotect: number;
  /** `RTC_CNTL_WDT_WKEY`. */
  readonly rtcWdtKey: number;
  /** `RTC_CNTL_SWD_CONF_REG`: the super watchdog's config. */
  readonly swdConf: number;
  /** `RTC_CNTL_SWD_AUTO_FEED_EN`: the bit of it that makes the hardware feed the super watchdog. */
  readonly swdAutoFeedEn: number;
  /** `RTC_CNTL_SWD_WPROTECT_REG`. */
  readonly swdWprotect: number;
  /** `RTC_CNTL_SWD_WKEY`. */
  readonly swdKey: number;
  /**
   * esptool's `hard_reset` on this chip passes `uses_usb_jtag_serial()` to `HardReset`, which
   * then holds EN low 200 ms and waits 200 ms after releasing it, instead of a 100 ms pulse (the
   * ESP32-C5: "Give the chip some time to come out of reset, to be able to handle further
   * DTR/RTS transitions").
   */
  readonly hardResetUsesUsb: boolean;
}

/** The facts one entry of {@link CHIPS} holds. */
export interface ChipFacts {
  readonly name: string;
  readonly description: string;
  readonly id: number;
  readonly model: number;
  readonly cores: number;
  readonly dromBase: number;
  readonly bootloaderOffset: number;
  readonly xiaozhi: boolean;
  readonly rom: ChipRomFacts;
}

/** Where esptool reads the chip-detect magic word on every chip (`CHIP_DETECT_MAGIC_REG_ADDR`). */
export const CHIP_DETECT_MAGIC_REG = 0x4000_1000;

// SPI controller register layouts (esptool): the ESP32's, and the one every later chip shares.
const SPI_ESP32 = {
  usr: 0x1c,
  usr1: 0x20,
  usr2: 0x24,
  mosiDlen: 0x28,
  misoDlen: 0x2c,
  w0: 0x80,
} as const;
const SPI_LATER = {
  usr: 0x18,
  usr1: 0x1c,
  usr2: 0x20,
  mosiDlen: 0x24,
  misoDlen: 0x28,
  w0: 0x58,
} as const;

const field = (address: number, shift: number, width: number): RegisterField => ({
  address,
  shift,
  width,
});

/**
 * The security eFuses where most chips after the ESP32 keep them, from `EFUSE_BASE`: + 0x30
 * `EFUSE_DIS_DOWNLOAD_MANUAL_ENCRYPT` (BLOCK0's first read register), + 0x34
 * `EFUSE_SPI_BOOT_CRYPT_CNT` (bits 18..20), + 0x38 `EFUSE_SECURE_BOOT_EN`; the bits differ.
 */
function securityAt(
  efuseBase: number,
  bits: { readonly secureBoot: number; readonly disManualEncrypt: number },
): Pick<ChipEfuseFacts, 'secureBoot' | 'flashCryptCnt' | 'disDownloadManualEncrypt'> {
  return {
    secureBoot: [{ address: efuseBase + 0x38, mask: bits.secureBoot }],
    flashCryptCnt: { address: efuseBase + 0x34, mask: 0x7 << 18 },
    disDownloadManualEncrypt: { address: efuseBase + 0x30, mask: bits.disManualEncrypt },
  };
}

export const CHIPS = [
  {
    name: 'esp32',
    description: 'ESP32',
    xiaozhi: true,
    id: 0,
    model: 1,
    cores: 2,
    dromBase: 0x3f40_0000,
    bootloaderOffset: 0x1000, // esptool and docs/protocol.md §9a
    rom: {
      detectMagic: 0x00f0_1d83,
      securityInfo: 'none',
      macEfuse: 0x3ff5_a004, // esptool reads eFuse words 1 and 2 of EFUSE_RD_REG_BASE 0x3FF5A000
      uartClkdivReg: 0x3ff4_0014,
      spi: { base: 0x3ff4_2000, ...SPI_ESP32 },
      // read_efuse(n) is EFUSE_RD_REG_BASE + 4n: minor word 5 bits 24..25; major rev_bit0 word 3
      // bit 15, rev_bit1 word 5 bit 20, rev_bit2 bit 31 of APB_CTL_DATE (0x3FF66000 + 0x7C).
      efuse: {
        minor: [field(0x3ff5_a014, 24, 2)],
        major: [field(0x3ff5_a00c, 15, 1), field(0x3ff5_a014, 20, 1), field(0x3ff6_607c, 31, 1)],
        majorCodes: { 0: 0, 1: 1, 3: 2, 7: 3 },
        // EFUSE_RD_REG_BASE + 0x18: ABS_DONE_0 (bit 4), ABS_DONE_1 (bit 5, counted from v3.0),
        // DISABLE_DL_ENCRYPT (bit 7); FLASH_CRYPT_CNT bits 20..26 of word 0.
        secureBoot: [
          { address: 0x3ff5_a018, mask: 1 << 4 },
          { address: 0x3ff5_a018, mask: 1 << 5, fromRevision: 300 },
        ],
        flashCryptCnt: { address: 0x3ff5_a000, mask: 0x7f << 20 },
        disDownloadManualEncrypt: { address: 0x3ff5_a018, mask: 1 << 7 },
      },
    },
  },
  {
    name: 'esp32s2',
    description: 'ESP32-S2',
    xiaozhi: false,
    id: 2,
    model: 2,
    cores: 1,
    dromBase: 0x3f00_0000,
    bootloaderOffset: 0x1000, // esptool (inherited from ESP32ROM)
    rom: {
      detectMagic: 0x0000_07c6,
      securityInfo: 'without-chip-id',
      macEfuse: 0x3f41_a044,
      uartClkdivReg: 0x3f40_0014,
      spi: { base: 0x3f40_2000, ...SPI_LATER },
      // EFUSE_BLOCK1_ADDR 0x3F41A044: minor word 4 bits 4..6, then word 3 bit 20; major word 3
      // bits 18..19.
      efuse: {
        minor: [field(0x3f41_a054, 4, 3), field(0x3f41_a050, 20, 1)],
        major: [field(0x3f41_a050, 18, 2)],
        ...securityAt(0x3f41_a000, { secureBoot: 1 << 20, disManualEncrypt: 1 << 19 }),
      },
    },
  },
  {
    name: 'esp32c3',
    description: 'ESP32-C3',
    xiaozhi: true,
    id: 5,
    model: 5,
    cores: 1,
    dromBase: 0x3c00_0000,
    bootloaderOffset: 0x0, // esptool and docs/protocol.md §9a
    rom: {
      detectMagic: 0x1b31_506f, // eco3; esptool also lists 0x6921506F (eco1+2)
      securityInfo: 'with-chip-id',
      macEfuse: 0x6000_8844,
      uartClkdivReg: 0x6000_0014,
      spi: { base: 0x6000_2000, ...SPI_LATER },
      // EFUSE_BLOCK1_ADDR 0x60008844: minor word 3 bits 18..20, then word 5 bit 23; major word 5
      // bits 24..25.
      efuse: {
        minor: [field(0x6000_8850, 18, 3), field(0x6000_8858, 23, 1)],
        major: [field(0x6000_8858, 24, 2)],
        ...securityAt(0x6000_8800, { secureBoot: 1 << 20, disManualEncrypt: 1 << 20 }),
      },
      // RTCCNTL_BASE_REG 0x60008000 + 0x90, 0xA8, 0xAC, 0xB0. UARTDEV_BUF_NO is BSS_UART_DEV_ADDR
      // + 24, BSS_UART_DEV_ADDR being 0x3FCDF064 below revision v1.1 and 0x3FCDF060 from it.
      usbJtagSerial: {
        consoles: [
          { fromRevision: 0, uartDevBufNo: 0x3fcd_f07c, usbJtagSerial: 3 },
          { fromRevision: 101, uartDevBufNo: 0x3fcd_f078, usbJtagSerial: 3 },
        ],
        rtcWdtConfig0: 0x6000_8090,
        rtcWdtWprotect: 0x6000_80a8,
        rtcWdtKey: 0x50d8_3aa1,
        swdConf: 0x6000_80ac,
        swdAutoFeedEn: 0x8000_0000, // 1 << 31
        swdWprotect: 0x6000_80b0,
        swdKey: 0x8f1d_312a,
        hardResetUsesUsb: false,
      },
    },
  },
  {
    name: 'esp32s3',
    description: 'ESP32-S3',
    xiaozhi: true,
    id: 9,
    model: 9,
    cores: 2,
    dromBase: 0x3c00_0000,
    bootloaderOffset: 0x0, // esptool and docs/protocol.md §9a
    rom: {
      detectMagic: 0x0000_0009,
      securityInfo: 'with-chip-id',
      macEfuse: 0x6000_7044,
      uartClkdivReg: 0x6000_0014,
      spi: { base: 0x6000_2000, ...SPI_LATER },
      // EFUSE_BLOCK1_ADDR 0x60007044: raw minor word 3 bits 18..20, then word 5 bit 23; major
      // word 5 bits 24..25; the block version: major EFUSE_BLOCK2_ADDR 0x6000705C word 4 bits
      // 0..1, minor BLOCK1 word 3 bits 24..26.
      efuse: {
        minor: [field(0x6000_7050, 18, 3), field(0x6000_7058, 23, 1)],
        major: [field(0x6000_7058, 24, 2)],
        eco0: { blockMajor: field(0x6000_706c, 0, 2), blockMinor: field(0x6000_7050, 24, 3) },
        ...securityAt(0x6000_7000, { secureBoot: 1 << 20, disManualEncrypt: 1 << 20 }),
      },
      // RTCCNTL_BASE_REG 0x60008000 + 0x98, 0xB0, 0xB4, 0xB8. (An older esp32s3.py, which
      // disabled only the RTC watchdog, had WDTCONFIG0 at + 0x90.)
      secureBootStubHook: 0x3fce_f688, // &rom_spiflash_legacy_funcs.read
      usbJtagSerial: {
        consoles: [{ fromRevision: 0, uartDevBufNo: 0x3fce_f14c, usbJtagSerial: 4 }], // 3: USB-OTG
        rtcWdtConfig0: 0x6000_8098,
        rtcWdtWprotect: 0x6000_80b0,
        rtcWdtKey: 0x50d8_3aa1,
        swdConf: 0x6000_80b4,
        swdAutoFeedEn: 0x8000_0000, // 1 << 31
        swdWprotect: 0x6000_80b8,
        swdKey: 0x8f1d_312a,
        hardResetUsesUsb: false, // its hard_reset passes uses_usb_otg(), not the USB-Serial-JTAG
      },
    },
  },
  {
    name: 'esp32c2',
    description: 'ESP32-C2',
    xiaozhi: false,
    id: 12,
    model: 12,
    cores: 1,
    dromBase: 0x3c00_0000,
    bootloaderOffset: 0x0, // esptool
    rom: {
      detectMagic: 0x6f51_306f, // esptool 4.x also lists 0x7C41A06F
      securityInfo: 'with-chip-id',
      macEfuse: 0x6000_8840,
      uartClkdivReg: 0x6000_0014,
      spi: { base: 0x6000_2000, ...SPI_LATER },
      // EFUSE_BLOCK2_ADDR 0x60008840 word 1: minor bits 16..19, major bits 20..21.
      efuse: {
        minor: [field(0x6000_8844, 16, 4)],
        major: [field(0x6000_8844, 20, 2)],
        // EFUSE_BASE 0x60008800 + 0x30 holds all three.
        secureBoot: [{ address: 0x6000_8830, mask: 1 << 21 }],
        flashCryptCnt: { address: 0x6000_8830, mask: 0x7 << 7 },
        disDownloadManualEncrypt: { address: 0x6000_8830, mask: 1 << 6 },
      },
    },
  },
  {
    name: 'esp32c6',
    description: 'ESP32-C6',
    xiaozhi: true,
    id: 13,
    model: 13,
    cores: 1,
    dromBase: 0x4280_0000,
    bootloaderOffset: 0x0, // esptool and docs/protocol.md §9a
    rom: {
      detectMagic: 0x2ce0_806f,
      securityInfo: 'with-chip-id',
      macEfuse: 0x600b_0844,
      uartClkdivReg: 0x6000_0014,
      spi: { base: 0x6000_3000, ...SPI_LATER },
      // EFUSE_BLOCK1_ADDR 0x600B0844 word 3: minor bits 18..21, major bits 22..23.
      efuse: {
        minor: [field(0x600b_0850, 18, 4)],
        major: [field(0x600b_0850, 22, 2)],
        ...securityAt(0x600b_0800, { secureBoot: 1 << 20, disManualEncrypt: 1 << 20 }),
      },
      // The LP watchdog, DR_REG_LP_WDT_BASE 0x600B1C00 + 0x0, 0x18, 0x1C, 0x20; the super
      // watchdog's key is the RTC watchdog's; RTC_CNTL_WDT_WKEY and disable_watchdogs are
      // inherited from ESP32C3ROM.
      usbJtagSerial: {
        consoles: [{ fromRevision: 0, uartDevBufNo: 0x4087_f580, usbJtagSerial: 3 }],
        rtcWdtConfig0: 0x600b_1c00,
        rtcWdtWprotect: 0x600b_1c18,
        rtcWdtKey: 0x50d8_3aa1,
        swdConf: 0x600b_1c1c,
        swdAutoFeedEn: 0x0004_0000, // 1 << 18
        swdWprotect: 0x600b_1c20,
        swdKey: 0x50d8_3aa1,
        hardResetUsesUsb: false,
      },
    },
  },
  {
    name: 'esp32h2',
    description: 'ESP32-H2',
    xiaozhi: false,
    id: 16,
    model: 16,
    cores: 1,
    dromBase: 0x4280_0000,
    bootloaderOffset: 0x0, // esptool
    rom: {
      detectMagic: 0xd7b7_3e80,
      securityInfo: 'with-chip-id',
      macEfuse: 0x600b_0844,
      uartClkdivReg: 0x6000_0014,
      spi: { base: 0x6000_3000, ...SPI_LATER },
      // EFUSE_BLOCK1_ADDR 0x600B0844 (ESP32-C6's) word 3: minor bits 18..20, major bits 21..22.
      efuse: {
        minor: [field(0x600b_0850, 18, 3)],
        major: [field(0x600b_0850, 21, 2)],
        ...securityAt(0x600b_0800, { secureBoot: 1 << 20, disManualEncrypt: 1 << 20 }),
      },
      // DR_REG_LP_WDT_BASE 0x600B1C00 + 0x0, 0x1C, 0x20, 0x24 (not the ESP32-C6's offsets).
      usbJtagSerial: {
        consoles: [{ fromRevision: 0, uartDevBufNo: 0x4084_fefc, usbJtagSerial: 3 }],
        rtcWdtConfig0: 0x600b_1c00,
        rtcWdtWprotect: 0x600b_1c1c,
        rtcWdtKey: 0x50d8_3aa1,
        swdConf: 0x600b_1c20,
        swdAutoFeedEn: 0x0004_0000, // 1 << 18
        swdWprotect: 0x600b_1c24,
        swdKey: 0x50d8_3aa1,
        hardResetUsesUsb: false,
      },
    },
  },
  {
    name: 'esp32p4',
    description: 'ESP32-P4',
    xiaozhi: true,
    id: 18,
    model: 18,
    cores: 2,
    dromBase: 0x4000_0000,
    bootloaderOffset: 0x2000, // esptool and docs/protocol.md §9a
    rom: {
      detectMagic: 0x0add_bad0,
      securityInfo: 'with-chip-id',
      macEfuse: 0x5012_d044,
      // UART0 at 0x500CA000 (esptool's UART_DATE_REG_ADDR - 0x8C) + 0x14; esptool's own
      // UART_CLKDIV_REG is the ESP32's, inherited and never read on this chip.
      uartClkdivReg: 0x500c_a014,
      spi: { base: 0x5008_d000, ...SPI_LATER },
      // EFUSE_BLOCK1_ADDR 0x5012D044 word 2: minor bits 0..3; major bits 4..5, and bit 23 as its
      // bit 2.
      efuse: {
        minor: [field(0x5012_d04c, 0, 4)],
        major: [field(0x5012_d04c, 4, 2), field(0x5012_d04c, 23, 1)],
        ...securityAt(0x5012_d000, { secureBoot: 1 << 20, disManualEncrypt: 1 << 20 }),
      },
      // DR_REG_LP_WDT_BASE 0x50116000 + 0x0, 0x18, 0x1C, 0x20. UARTDEV_BUF_NO is BSS_UART_DEV_ADDR
      // + 24, BSS_UART_DEV_ADDR being 0x4FF3FEB0 below revision v3.0 and 0x4FFBFEB0 from it.
      usbJtagSerial: {
        consoles: [
          { fromRevision: 0, uartDevBufNo: 0x4ff3_fec8, usbJtagSerial: 6 }, // 5: USB-OTG
          { fromRevision: 300, uartDevBufNo: 0x4ffb_fec8, usbJtagSerial: 6 },
        ],
        rtcWdtConfig0: 0x5011_6000,
        rtcWdtWprotect: 0x5011_6018,
        rtcWdtKey: 0x50d8_3aa1, // its disable_watchdogs writes RTC_CNTL_SWD_WKEY, the same value
        swdConf: 0x5011_601c,
        swdAutoFeedEn: 0x0004_0000, // 1 << 18
        swdWprotect: 0x5011_6020,
        swdKey: 0x50d8_3aa1,
        hardResetUsesUsb: false,
      },
    },
  },
  {
    name: 'esp32c61',
    description: 'ESP32-C61',
    xiaozhi: false,
    id: 20,
    model: 20,
    cores: 1,
    dromBase: 0x4280_0000,
    bootloaderOffset: 0x0, // esptool
    rom: {
      detectMagic: 0x33f0_206f, // esptool also lists 0x2421606F
      securityInfo: 'with-chip-id',
      macEfuse: 0x600b_4844,
      uartClkdivReg: 0x6000_0014,
      spi: { base: 0x6000_3000, ...SPI_LATER },
      // EFUSE_BLOCK1_ADDR 0x600B4844 word 2: minor bits 0..3, major bits 4..5.
      efuse: {
        minor: [field(0x600b_484c, 0, 4)],
        major: [field(0x600b_484c, 4, 2)],
        // EFUSE_BASE 0x600B4800: + 0x30 the manual-encrypt bit and the crypt count, + 0x34 Secure Boot.
        secureBoot: [{ address: 0x600b_4834, mask: 1 << 26 }],
        flashCryptCnt: { address: 0x600b_4830, mask: 0x7 << 23 },
        disDownloadManualEncrypt: { address: 0x600b_4830, mask: 1 << 14 },
      },
      // The ESP32-C6's watchdogs (inherited); UARTDEV_BUF_NO and its USB-Serial-JTAG value
      // change after revision v0.2 (`get_chip_revision() <= 2`).
      usbJtagSerial: {
        consoles: [
          { fromRevision: 0, uartDevBufNo: 0x4084_f5ec, usbJtagSerial: 3 },
          { fromRevision: 3, uartDevBufNo: 0x4084_f5e4, usbJtagSerial: 4 },
        ],
        rtcWdtConfig0: 0x600b_1c00,
        rtcWdtWprotect: 0x600b_1c18,
        rtcWdtKey: 0x50d8_3aa1,
        swdConf: 0x600b_1c1c,
        swdAutoFeedEn: 0x0004_0000, // 1 << 18
        swdWprotect: 0x600b_1c20,
        swdKey: 0x50d8_3aa1,
        hardResetUsesUsb: false,
      },
    },
  },
  {
    name: 'esp32c5',
    description: 'ESP32-C5',
    xiaozhi: true,
    id: 23,
    model: 23,
    cores: 1,
    // The ESP32-C6's, as this package has always had it; esptool's ESP32C5ROM and esptool-js
    // 0.7.0 say 0x42000000. Only the load address of a built image's first segment uses it.
    dromBase: 0x4280_0000,
    // docs/protocol.md §9a (xiaozhi's release images) puts it at 0x0; esptool-js 0.7.0's
    // target says 0x2000. The spec wins; reading a merged image finds it at either offset.
    bootloaderOffset: 0x0,
    rom: {
      detectMagic: 0x1101_406f, // esptool(-js) also lists 0x63E1406F, 0x5FD1406F, 0x30E1706F
      securityInfo: 'with-chip-id',
      macEfuse: 0x600b_4844,
      uartClkdivReg: 0x6000_0014,
      spi: { base: 0x6000_3000, ...SPI_LATER },
      // EFUSE_BLOCK1_ADDR 0x600B4844 word 2: minor bits 0..3, major bits 4..5.
      efuse: {
        minor: [field(0x600b_484c, 0, 4)],
        major: [field(0x600b_484c, 4, 2)],
        ...securityAt(0x600b_4800, { secureBoot: 1 << 25, disManualEncrypt: 1 << 20 }),
      },
      // Its own UARTDEV_BUF_NO; the USB-Serial-JTAG value, the watchdogs and disable_watchdogs
      // are the ESP32-C6's (inherited); its hard_reset passes uses_usb_jtag_serial().
      usbJtagSerial: {
        consoles: [{ fromRevision: 0, uartDevBufNo: 0x4085_f514, usbJtagSerial: 3 }],
        rtcWdtConfig0: 0x600b_1c00,
        rtcWdtWprotect: 0x600b_1c18,
        rtcWdtKey: 0x50d8_3aa1,
        swdConf: 0x600b_1c1c,
        swdAutoFeedEn: 0x0004_0000, // 1 << 18
        swdWprotect: 0x600b_1c20,
        swdKey: 0x50d8_3aa1,
        hardResetUsesUsb: true,
      },
    },
  },
  {
    name: 'esp32h21',
    description: 'ESP32-H21',
    xiaozhi: false,
    id: 25,
    model: 25,
    cores: 1,
    dromBase: 0x4280_0000,
    bootloaderOffset: 0x0, // esptool
    rom: {
      detectMagic: undefined,
      securityInfo: 'with-chip-id',
      macEfuse: 0x600b_4044,
      uartClkdivReg: 0x6000_0014,
      spi: { base: 0x6000_3000, ...SPI_LATER },
      // get_minor_chip_version and get_major_chip_version return 0.
      efuse: {
        minor: [],
        major: [],
        ...securityAt(0x600b_4000, { secureBoot: 1 << 20, disManualEncrypt: 1 << 20 }),
      },
      // The ESP32-H2's UARTDEV_BUF_NO and its watchdogs (DR_REG_LP_WDT_BASE 0x600B1C00 + 0x0,
      // 0x1C, 0x20, 0x24).
      usbJtagSerial: {
        consoles: [{ fromRevision: 0, uartDevBufNo: 0x4084_fefc, usbJtagSerial: 3 }],
        rtcWdtConfig0: 0x600b_1c00,
        rtcWdtWprotect: 0x600b_1c1c,
        rtcWdtKey: 0x50d8_3aa1,
        swdConf: 0x600b_1c20,
        swdAutoFeedEn: 0x0004_0000, // 1 << 18
        swdWprotect: 0x600b_1c24,
        swdKey: 0x50d8_3aa1,
        hardResetUsesUsb: false,
      },
    },
  },
  {
    name: 'esp32h4',
    description: 'ESP32-H4',
    xiaozhi: false,
    id: 28,
    model: 28,
    cores: 2,
    dromBase: 0x4280_0000,
    // Not esptool's: its ESP32H4ROM says 0x2000. docs/protocol.md §9a names no H4 (xiaozhi has
    // no H4 build) and this table keeps 0x0 until a real H4 image says which.
    bootloaderOffset: 0x0,
    rom: {
      detectMagic: undefined,
      securityInfo: 'with-chip-id',
      macEfuse: 0x600b_1844,
      uartClkdivReg: 0x6000_0014,
      spi: { base: 0x6009_9000, ...SPI_LATER },
      // esptool v4.12's get_minor_chip_version and get_major_chip_version return 0.
      efuse: {
        minor: [],
        major: [],
        // EFUSE_BASE 0x600B1800: + 0x30 the manual-encrypt bit and the crypt count, + 0x38 Secure Boot.
        secureBoot: [{ address: 0x600b_1838, mask: 1 << 5 }],
        flashCryptCnt: { address: 0x600b_1830, mask: 0x7 << 23 },
        disDownloadManualEncrypt: { address: 0x600b_1830, mask: 1 << 14 },
      },
      // DR_REG_LP_WDT_BASE 0x600B5400 + 0x0, 0x18, 0x1C, 0x20; the RTC watchdog's key and
      // disable_watchdogs are inherited from ESP32C3ROM.
      usbJtagSerial: {
        consoles: [{ fromRevision: 0, uartDevBufNo: 0x4087_f580, usbJtagSerial: 3 }],
        rtcWdtConfig0: 0x600b_5400,
        rtcWdtWprotect: 0x600b_5418,
        rtcWdtKey: 0x50d8_3aa1,
        swdConf: 0x600b_541c,
        swdAutoFeedEn: 0x0004_0000, // 1 << 18
        swdWprotect: 0x600b_5420,
        swdKey: 0x50d8_3aa1,
        hardResetUsesUsb: false,
      },
    },
  },
] as const satisfies readonly ChipFacts[];

export type ChipName = (typeof CHIPS)[number]['name'];

/** One chip's facts, named by a {@link ChipName}. */
export interface ChipInfo extends ChipFacts {
  readonly name: ChipName;
}

/** Every chip name, in table order. */
export const CHIP_NAMES: readonly ChipName[] = Object.freeze(CHIPS.map((chip) => chip.name));

/** A chip xiaozhi-esp32 has builds for (docs/protocol.md §9a): what a rig's boards can be. */
export type XiaozhiChipName = Extract<(typeof CHIPS)[number], { readonly xiaozhi: true }>['name'];

/** The chips xiaozhi-esp32 has builds for, in table order. */
export const XIAOZHI_CHIP_NAMES: readonly XiaozhiChipName[] = Object.freeze(
  CHIPS.flatMap((chip) => (chip.xiaozhi ? [chip.name] : [])),
);

export function isChipName(value: string): value is ChipName {
  return CHIPS.some((chip) => chip.name === value);
}

/** The chip with this image chip id, or undefined for an id this package does not know. */
export function chipById(id: number): ChipInfo | undefined {
  return CHIPS.find((chip) => chip.id === id);
}

/** The chip called `name`; throws `CHIP_UNKNOWN` for any other name. */
export function chipByName(name: string): ChipInfo {
  const chip = CHIPS.find((c) => c.name === name);
  if (chip === undefined) {
    throw new FirmwareError(
      'CHIP_UNKNOWN',
      `unknown chip "${name}"; expected one of ${CHIPS.map((c) => c.name).join(', ')}`,
    );
  }
  return chip;
}

/** esptool's `get_chip_revision()`: major * 100 + minor. */
export function chipRevisionNumber(revision: ChipRevision): number {
  return revision.major * 100 + revision.minor;
}

/** `v0.2`, as esptool prints a revision. */
export function formatChipRevision(revision: ChipRevision): string {
  return `v${revision.major}.${revision.minor}`;
}

/** Every register a flasher reads (READ_REG) to decode the revision, each once. */
export function chipRevisionRegisters(efuse: ChipEfuseFacts): readonly number[] {
  const fields = [
    ...efuse.minor,
    ...efuse.major,
    ...(efuse.eco0 === undefined ? [] : [efuse.eco0.blockMajor, efuse.eco0.blockMinor]),
  ];
  return [...new Set(fields.map((f) => f.address))];
}

function readField(f: RegisterField, words: ReadonlyMap<number, number>): number {
  return ((words.get(f.address) ?? 0) >>> f.shift) & (2 ** f.width - 1);
}

function readPieces(fields: readonly RegisterField[], words: ReadonlyMap<number, number>): number {
  let value = 0;
  let bits = 0;
  for (const f of fields) {
    value += readField(f, words) * 2 ** bits;
    bits += f.width;
  }
  return value;
}

/**
 * The chip revision from the words at {@link chipRevisionRegisters} (an address missing reads
 * 0), decoded as esptool's `get_minor_chip_version` and `get_major_chip_version` do.
 */
export function decodeChipRevision(
  efuse: ChipEfuseFacts,
  words: ReadonlyMap<number, number>,
): ChipRevision {
  const minor = readPieces(efuse.minor, words);
  const rawMajor = readPieces(efuse.major, words);
  const eco0 = efuse.eco0;
  if (
    eco0 !== undefined &&
    (minor & 0x7) === 0 &&
    readField(eco0.blockMajor, words) === 1 &&
    readField(eco0.blockMinor, words) === 1
  )
    return { major: 0, minor: 0 };
  const codes = efuse.majorCodes;
  const major = codes === undefined ? rawMajor : (codes[rawMajor] ?? 0);
  return { major, minor };
}

/** `UARTDEV_BUF_NO` and its USB-Serial-JTAG value on a chip of this `get_chip_revision()`. */
export function uartDevBufNoFor(usb: UsbJtagSerialRomFacts, revision: number): UartDevBufNo {
  let found = usb.consoles[0];
  for (const console of usb.consoles) if (revision >= console.fromRevision) found = console;
  if (found === undefined)
    throw new FirmwareError('CHIP_UNKNOWN', 'no UARTDEV_BUF_NO in the table');
  return found;
}

/** Every register a flasher reads (READ_REG) to decode the security eFuses, each once. */
export function chipSecurityRegisters(efuse: ChipEfuseFacts): readonly number[] {
  const bits = [...efuse.secureBoot, efuse.flashCryptCnt, efuse.disDownloadManualEncrypt];
  return [...new Set(bits.map((b) => b.address))];
}

function popcount(value: number): number {
  let count = 0;
  for (let v = value >>> 0; v !== 0; v >>>= 1) count += v & 1;
  return count;
}

/**
 * The security eFuses from the words at {@link chipSecurityRegisters} (a missing one reads 0), as
 * esptool's `get_secure_boot_enabled`, `get_flash_encryption_enabled` and
 * `get_encrypted_download_disabled` decode them on a chip of this `revision`.
 */
export function decodeChipSecurity(
  efuse: ChipEfuseFacts,
  words: ReadonlyMap<number, number>,
  revision: ChipRevision,
): ChipSecurity {
  const read = (bits: RegisterBits) => ((words.get(bits.address) ?? 0) & bits.mask) >>> 0;
  const number = chipRevisionNumber(revision);
  return {
    secureBoot: efuse.secureBoot.some(
      (bits) =>
        (bits.fromRevision === undefined || number >= bits.fromRevision) && read(bits) !== 0,
    ),
    flashEncryption: popcount(read(efuse.flashCryptCnt)) % 2 === 1,
    encryptedDownloadDisabled: read(efuse.disDownloadManualEncrypt) !== 0,
  };
}
