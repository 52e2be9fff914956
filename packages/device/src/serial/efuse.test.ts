import { CHIP_NAMES } from '@xiaozhi-mcp/firmware';
// esptool-js's chip classes: software nobody here wrote, decoding the words as a flasher does.
import { ESP32ROM } from 'esptool-js/lib/targets/esp32.js';
import { ESP32C2ROM } from 'esptool-js/lib/targets/esp32c2.js';
import { ESP32C3ROM } from 'esptool-js/lib/targets/esp32c3.js';
import { ESP32C5ROM } from 'esptool-js/lib/targets/esp32c5.js';
import { ESP32C6ROM } from 'esptool-js/lib/targets/esp32c6.js';
import { ESP32C61ROM } from 'esptool-js/lib/targets/esp32c61.js';
import { ESP32H2ROM } from 'esptool-js/lib/targets/esp32h2.js';
import { ESP32H4ROM } from 'esptool-js/lib/targets/esp32h4.js';
import { ESP32H21ROM } from 'esptool-js/lib/targets/esp32h21.js';
import { ESP32P4ROM } from 'esptool-js/lib/targets/esp32p4.js';
import { ESP32S2ROM } from 'esptool-js/lib/targets/esp32s2.js';
import { ESP32S3ROM } from 'esptool-js/lib/targets/esp32s3.js';
import { describe, expect, it } from 'vitest';
import { DeviceError } from '../errors.js';
import { efuseRegisters } from './efuse.js';

const S3R8 = { psram: { sizeMb: 8, vendor: 'AP_3v3' } };

/** What esptool-js's `loader` gives a chip class: READ_REG over the words (unset reads 0). */
function loaderOver(words: ReadonlyMap<number, number>) {
  return {
    readReg: async (address: number) => words.get(address >>> 0) ?? 0,
    debug: () => undefined,
    info: () => undefined,
  } as never;
}

describe('eFuse words as esptool reads them', () => {
  it('gives every chip a real revision, as esptool-js 0.7 describes it', async () => {
    const classes = {
      esp32: ESP32ROM,
      esp32s2: ESP32S2ROM,
      esp32c3: ESP32C3ROM,
      esp32s3: ESP32S3ROM,
      esp32c2: ESP32C2ROM,
      esp32c6: ESP32C6ROM,
      esp32h2: ESP32H2ROM,
      esp32p4: ESP32P4ROM,
      esp32c61: ESP32C61ROM,
      esp32c5: ESP32C5ROM,
      esp32h21: ESP32H21ROM,
      esp32h4: ESP32H4ROM,
    };
    const described: Record<string, string> = {};
    for (const name of CHIP_NAMES) {
      const chip = new classes[name]();
      described[name] = await chip.getChipDescription(loaderOver(efuseRegisters(name)));
    }
    // esptool-js prints some revisions as "revision N" (major only) and some as "vX.Y".
    expect(described).toEqual({
      esp32: 'ESP32-D0WD-V3 (revision 3)',
      esp32s2: 'ESP32-S2 (revision v1.0)',
      esp32c3: 'ESP32-C3 (QFN32) (revision v0.4)',
      esp32s3: 'ESP32-S3 (QFN56) (revision v0.2)',
      esp32c2: 'ESP32-C2 (revision 1)',
      esp32c6: 'ESP32-C6 (revision 1)',
      esp32h2: 'ESP32-H2 (revision v0.1)',
      esp32p4: 'ESP32-P4 (revision v1.0)',
      esp32c61: 'ESP32-C61 (revision v1.0)',
      esp32c5: 'ESP32-C5 (revision v1.0)',
      esp32h21: 'ESP32-H21 (revision v0.0)',
      esp32h4: 'ESP32-H4 (QFN40) (revision v0.0)',
    });
  });

  it('reports an ESP32-S3R8 (an N16R8 module) with its 8 MB of PSRAM, as esptool-js does', async () => {
    const s3 = new ESP32S3ROM();
    const loader = loaderOver(efuseRegisters('esp32s3', { inPackage: S3R8 }));
    expect(await s3.getChipFeatures(loader)).toEqual([
      'Wi-Fi',
      'BLE',
      'Embedded PSRAM 8MB (AP_3v3)',
    ]);
    const plain = loaderOver(efuseRegisters('esp32s3'));
    expect(await s3.getChipFeatures(plain)).toEqual(['Wi-Fi', 'BLE']);
  });

  it("sets the ESP32-S3 fields where esptool's esp32s3.py reads them", () => {
    const words = efuseRegisters('esp32s3', {
      inPackage: { flash: { sizeMb: 4, vendor: 'GD' }, psram: { sizeMb: 4, vendor: 'AP_1v8' } },
    });
    const read = (address: number) => words.get(address) ?? 0;
    // EFUSE_BLOCK1_ADDR 0x60007044: words 3, 4, 5 at 0x60007050, 0x60007054, 0x60007058.
    const word3 = read(0x6000_7050);
    const word4 = read(0x6000_7054);
    const word5 = read(0x6000_7058);
    const minor = (((word5 >> 23) & 0x01) << 3) + ((word3 >> 18) & 0x07);
    const major = (word5 >> 24) & 0x03;
    expect({ major, minor, pkg: (word3 >> 21) & 0x07 }).toEqual({ major: 0, minor: 2, pkg: 0 });
    expect({ cap: (word3 >> 27) & 0x07, vendor: word4 & 0x07 }).toEqual({ cap: 2, vendor: 2 });
    const psramCap = (((word5 >> 19) & 0x01) << 2) | ((word4 >> 3) & 0x03);
    expect({ cap: psramCap, vendor: (word4 >> 7) & 0x03 }).toEqual({ cap: 4, vendor: 2 });
    // Nothing lands on the MAC words (0x60007044, 0x60007048).
    expect([read(0x6000_7044), read(0x6000_7048)]).toEqual([0, 0]);
  });

  it("sets the ESP32's revision bits where esptool's esp32.py reads them: v3.0 is 0b111", () => {
    const words = efuseRegisters('esp32');
    const read = (address: number) => words.get(address) ?? 0;
    // read_efuse(n) = 0x3FF5A000 + 4n; APB_CTL_DATE 0x3FF6607C.
    expect((read(0x3ff5_a00c) >> 15) & 1).toBe(1);
    expect((read(0x3ff5_a014) >> 20) & 1).toBe(1);
    expect(read(0x3ff6_607c) >>> 31).toBe(1);
    expect((read(0x3ff5_a014) >> 24) & 3).toBe(0);
    // change_baud: cali_val * 15625 * clk_8M_freq / 40 is the ROM's crystal, 40 MHz.
    const cali = (read(0x3ff5_f06c) >> 7) & 0x1ff_ffff;
    const ck8m = read(0x3ff5_a010) & 0xff;
    expect((cali * 15625 * ck8m) / 40).toBe(40_000_000);
  });

  it("burns Secure Boot and release-mode flash encryption where esptool's write_flash reads them", () => {
    const bits = (chip: Parameters<typeof efuseRegisters>[0], silicon = {}) =>
      Object.fromEntries([...efuseRegisters(chip, silicon)].map(([a, w]) => [a.toString(16), w]));
    const plain = bits('esp32c3');
    const secured = bits('esp32c3', { secureBoot: true, flashEncryption: true });
    // esptool v4.12 targets/esp32c3.py:67-68 EFUSE_SECURE_BOOT_EN_REG = 0x60008800 + 0x038,
    // 1 << 20; :64-65 EFUSE_SPI_BOOT_CRYPT_CNT_REG + 0x034, 0x7 << 18 (one bit: an odd count);
    // :61-62 EFUSE_DIS_DOWNLOAD_MANUAL_ENCRYPT_REG + 0x030, 1 << 20
    expect(secured['60008838']).toBe(1 << 20);
    expect(secured['60008834']).toBe(1 << 18);
    expect(secured['60008830']).toBe(1 << 20);
    expect([plain['60008838'], plain['60008834'], plain['60008830']]).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
    // esp32.py:46-48: ABS_DONE_1 (bit 5, Secure Boot v2) on a v3.0 chip, ABS_DONE_0 before.
    expect(bits('esp32', { secureBoot: true })['3ff5a018']).toBe(1 << 5);
    expect(bits('esp32', { secureBoot: true, revision: { major: 1, minor: 0 } })['3ff5a018']).toBe(
      1 << 4,
    );
    // esp32c5.py:46-47 + 0x038, 1 << 25
    expect(bits('esp32c5', { secureBoot: true })['600b4838']).toBe(1 << 25);
  });

  it('takes another revision, and refuses what a chip cannot record', () => {
    const c3 = efuseRegisters('esp32c3', { revision: { major: 1, minor: 1 } });
    // esp32c3.py: minor low bits word 3 (0x60008850) bits 18..20, major word 5 (0x60008858) 24..25.
    expect(((c3.get(0x6000_8850) ?? 0) >> 18) & 7).toBe(1);
    expect(((c3.get(0x6000_8858) ?? 0) >> 24) & 3).toBe(1);
    const refused = (run: () => unknown) => {
      try {
        run();
      } catch (error) {
        return error instanceof DeviceError ? `${error.code}: ${error.message}` : String(error);
      }
      return 'accepted';
    };
    expect(refused(() => efuseRegisters('esp32c3', { inPackage: S3R8 }))).toBe(
      'BOARD_OPTIONS_INVALID: esp32c3: in-package flash or PSRAM is modelled only for the ESP32-S3',
    );
    expect(
      refused(() =>
        efuseRegisters('esp32s3', { inPackage: { psram: { sizeMb: 32, vendor: 'AP_3v3' } } }),
      ),
    ).toMatch(/^BOARD_OPTIONS_INVALID: esp32s3: no eFuse code for in-package PSRAM MB 32/);
    expect(refused(() => efuseRegisters('esp32s3', { revision: { major: 4, minor: 0 } }))).toMatch(
      /major revision 4 does not fit/,
    );
    expect(refused(() => efuseRegisters('esp32h21', { revision: { major: 1, minor: 0 } }))).toMatch(
      /only v0.0 exists/,
    );
  });
});
