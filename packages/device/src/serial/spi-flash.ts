/**
 * The board's SPI NOR flash chip as the SPI controller's user commands reach it: the commands
 * esptool runs through `run_spiflash_command` (`esptool/loader.py`) for `flash_id`,
 * `read_flash_status` and `write_flash_status`. Bulk reads, writes and erases go through the
 * ROM's and the stub's own commands, not through here.
 *
 * Commands (esptool's names and codes): RDID 0x9F (JEDEC id, 3 bytes); RDSR 0x05, RDSR2 0x35,
 * RDSR3 0x15 (status register bytes 1..3, `read_status`); WREN 0x06 and WEVSR 0x50 (enable a
 * non-volatile or a volatile status write), WRDI 0x04; WRSR 0x01 (1 byte, or 2: bytes 1 and 2,
 * esptool's 16-bit write), WRSR2 0x31, WRSR3 0x11 (`write_status`). A status write without
 * WREN or WEVSR before it is ignored, and it clears the write enable latch, as JEDEC flash does.
 *
 * The status registers belong to the flash chip, so they outlive a chip reset (kept per
 * `FlashStorage`). Volatile and non-volatile writes look alike here: the emulator never
 * power-cycles the flash alone.
 */
import type { FlashStorage } from '../flash-storage.js';

export const SPIFLASH = {
  WRSR: 0x01,
  WRDI: 0x04,
  RDSR: 0x05,
  WREN: 0x06,
  WRSR3: 0x11,
  RDSR3: 0x15,
  WRSR2: 0x31,
  RDSR2: 0x35,
  WEVSR: 0x50,
  RDID: 0x9f,
} as const;

/** Status register 1: bit 0 WIP (busy), bit 1 WEL (write enable latch), both read-only. */
const SR1_READ_ONLY = 0x03;
const WEL = 0x02;

/** The JEDEC id of the emulated flash: GigaDevice (0xC8), type 0x40, capacity byte log2(size). */
export function spiFlashId(sizeBytes: number): number {
  return 0xc8 | (0x40 << 8) | (Math.round(Math.log2(sizeBytes)) << 16);
}

interface StatusRegisters {
  /** Status bytes 1..3, WIP and WEL left out (they are kept apart). */
  sr: [number, number, number];
  /** WREN or WEVSR was the last command before a status write. */
  writeEnabled: boolean;
}

/**
 * A board's flash as its bootloader leaves it: QE (status bit 9, register 2 bit 1) set, because
 * xiaozhi's ESP32-S3 builds run the flash in QIO mode (`CONFIG_ESPTOOLPY_FLASHMODE_QIO=y` in
 * xiaozhi-esp32's `sdkconfig.defaults.esp32s3`) and ESP-IDF's bootloader sets QE for that; no
 * block protection.
 */
const INITIAL_STATUS: readonly [number, number, number] = [0x00, 0x02, 0x00];

const statuses = new WeakMap<FlashStorage, StatusRegisters>();

function statusOf(flash: FlashStorage): StatusRegisters {
  let status = statuses.get(flash);
  if (status === undefined) {
    status = { sr: [...INITIAL_STATUS], writeEnabled: false };
    statuses.set(flash, status);
  }
  return status;
}

/**
 * Runs one user command on the flash: `mosi` the data bytes sent after the command byte; the
 * result is the first 4 bytes the flash shifts out, the first in the low byte (how the SPI
 * controller's W0 register receives them). Without a flash chip MISO stays high: all ones.
 */
export function runSpiFlashCommand(
  flash: FlashStorage | undefined,
  command: number,
  mosi: Uint8Array,
): number {
  if (flash === undefined) return 0xffff_ffff;
  const status = statusOf(flash);
  const sr1 = () => status.sr[0] | (status.writeEnabled ? WEL : 0);
  const repeat = (byte: number) => (byte * 0x0101_0101) >>> 0;
  switch (command) {
    case SPIFLASH.RDID:
      return spiFlashId(flash.size);
    // A status read repeats the register for as long as the clock runs.
    case SPIFLASH.RDSR:
      return repeat(sr1());
    case SPIFLASH.RDSR2:
      return repeat(status.sr[1]);
    case SPIFLASH.RDSR3:
      return repeat(status.sr[2]);
    case SPIFLASH.WREN:
    case SPIFLASH.WEVSR:
      status.writeEnabled = true;
      return 0;
    case SPIFLASH.WRDI:
      status.writeEnabled = false;
      return 0;
    case SPIFLASH.WRSR:
    case SPIFLASH.WRSR2:
    case SPIFLASH.WRSR3: {
      const [first, second] = mosi;
      if (status.writeEnabled && first !== undefined) {
        if (command === SPIFLASH.WRSR) {
          status.sr[0] = first & ~SR1_READ_ONLY & 0xff;
          if (second !== undefined) status.sr[1] = second;
        } else {
          status.sr[command === SPIFLASH.WRSR2 ? 1 : 2] = first;
        }
      }
      status.writeEnabled = false;
      return 0;
    }
    default:
      // A command the emulated flash does not have: nothing drives MISO but the emulator's 0.
      return 0;
  }
}
