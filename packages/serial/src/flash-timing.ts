/**
 * esptool's timeouts (`esptool/loader.py`, `esptool/cmds.py`), the flasher's own bounds, and the
 * baud ladder a failed write steps down.
 */

/** esptool `loader.py` DEFAULT_TIMEOUT: "Timeout for most flash operations", the floor of each size-scaled timeout. */
export const ESPTOOL_DEFAULT_TIMEOUT_MS = 3000;
/** esptool `loader.py` ERASE_WRITE_TIMEOUT_PER_MB: 40 s per MB (10^6 bytes) a block inflates to. */
export const ERASE_WRITE_TIMEOUT_PER_MB_MS = 40_000;
/** esptool `loader.py` MD5_TIMEOUT_PER_MB: 8 s per MB hashed (esptool-js's flashMd5sum uses the same). */
export const MD5_TIMEOUT_PER_MB_MS = 8000;
/**
 * esptool `loader.py` ERASE_REGION_TIMEOUT_PER_MB: 40 s per MB for the ROM's erase at
 * FLASH_BEGIN (esptool-js 0.7 has 30 s; set on its loader). The stub erases as it writes, so
 * with the stub (always, here) its FLASH_DEFL_BEGIN waits DEFAULT_TIMEOUT.
 */
export const ERASE_REGION_TIMEOUT_PER_MB_MS = 40_000;
/** esptool `loader.py` WRITE_BLOCK_ATTEMPTS: a block is sent up to three times. */
export const WRITE_BLOCK_ATTEMPTS = 3;
/** esptool `loader.py` DEFAULT_CONNECT_ATTEMPTS (esptool-js's `connect` default too). */
export const DEFAULT_CONNECT_ATTEMPTS = 7;

/** The rates a failed write steps down through (a CH340 often manages 460800, not 921600). */
export const FLASH_BAUD_LADDER: readonly number[] = Object.freeze([921_600, 460_800, 115_200]);

/**
 * esptool's `timeout_per_mb(seconds_per_mb, size_bytes)`: the per-MB time for `bytes`
 * (MB = 10^6 bytes), never below DEFAULT_TIMEOUT (or `floorMs`, for tests).
 */
export function timeoutPerMb(
  msPerMb: number,
  bytes: number,
  floorMs = ESPTOOL_DEFAULT_TIMEOUT_MS,
): number {
  return Math.max(floorMs, (msPerMb * bytes) / 1e6);
}

/**
 * The baud ladder of a flash: `rates` as given (an inventory's `flashBauds`), else `first` and
 * then the rungs of {@link FLASH_BAUD_LADDER} below it. Always at least one rate.
 */
export function flashBaudLadder(first?: number, rates?: readonly number[]): number[] {
  if (rates !== undefined && rates.length > 0) {
    const ladder = first === undefined || rates[0] === first ? [...rates] : [first, ...rates];
    return ladder.filter((rate, i) => ladder.indexOf(rate) === i);
  }
  const top = first ?? FLASH_BAUD_LADDER[0] ?? 921_600;
  return [top, ...FLASH_BAUD_LADDER.filter((rate) => rate < top)];
}

export interface FlasherTimeouts {
  /** Reset, sync, chip detection and stub upload, all connect attempts together. Default 30 s. */
  readonly connectMs: number;
  /**
   * The floor of every size-scaled timeout: each block's, the last block's write, the MD5.
   * Default esptool's DEFAULT_TIMEOUT, 3 s.
   */
  readonly commandMs: number;
  /** Any other step (baud change, register reads, reset, a read of 4 KiB). Default 10 s. */
  readonly stepMs: number;
}

export const DEFAULT_FLASHER_TIMEOUTS: FlasherTimeouts = {
  connectMs: 30_000,
  commandMs: ESPTOOL_DEFAULT_TIMEOUT_MS,
  stepMs: 10_000,
};
