/**
 * ESP32-family chips as the app image header names them (`esp_chip_id_t`, u16 at byte 12).
 * `dromBase` is where the chip maps flash for read-only data (esptool's DROM_MAP_START);
 * an image's first segment loads there, plus the 0x20 bytes of headers before its data.
 */
import { FirmwareError } from './errors.js';

export const CHIPS = [
  { name: 'esp32', id: 0, dromBase: 0x3f40_0000 },
  { name: 'esp32s2', id: 2, dromBase: 0x3f00_0000 },
  { name: 'esp32c3', id: 5, dromBase: 0x3c00_0000 },
  { name: 'esp32s3', id: 9, dromBase: 0x3c00_0000 },
  { name: 'esp32c2', id: 12, dromBase: 0x3c00_0000 },
  { name: 'esp32c6', id: 13, dromBase: 0x4280_0000 },
  { name: 'esp32h2', id: 16, dromBase: 0x4280_0000 },
  { name: 'esp32p4', id: 18, dromBase: 0x4000_0000 },
  { name: 'esp32c61', id: 20, dromBase: 0x4280_0000 },
  { name: 'esp32c5', id: 23, dromBase: 0x4280_0000 },
  { name: 'esp32h21', id: 25, dromBase: 0x4280_0000 },
  { name: 'esp32h4', id: 28, dromBase: 0x4280_0000 },
] as const;

export type ChipName = (typeof CHIPS)[number]['name'];
export type ChipInfo = (typeof CHIPS)[number];

/** 0xFFFF is ESP-IDF's ESP_CHIP_ID_INVALID: never a real chip. */
export const INVALID_CHIP_ID = 0xffff;

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
