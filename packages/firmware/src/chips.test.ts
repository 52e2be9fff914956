import { describe, expect, it } from 'vitest';
import {
  CHIP_DETECT_MAGIC_REG,
  CHIP_NAMES,
  CHIPS,
  type ChipName,
  chipById,
  chipByName,
  isChipName,
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
