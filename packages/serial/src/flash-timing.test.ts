/** The baud ladder and esptool's size-scaled timeouts, as data. */
import { describe, expect, it } from 'vitest';
import {
  ERASE_WRITE_TIMEOUT_PER_MB_MS,
  FLASH_BAUD_LADDER,
  flashBaudLadder,
  MD5_TIMEOUT_PER_MB_MS,
  timeoutPerMb,
} from './flash-timing.js';

describe('flashBaudLadder', () => {
  it('steps down from the first rung through the default ladder', () => {
    expect(FLASH_BAUD_LADDER).toEqual([921_600, 460_800, 115_200]);
    expect(flashBaudLadder()).toEqual([921_600, 460_800, 115_200]);
    expect(flashBaudLadder(921_600)).toEqual([921_600, 460_800, 115_200]);
    expect(flashBaudLadder(460_800)).toEqual([460_800, 115_200]);
    expect(flashBaudLadder(1_500_000)).toEqual([1_500_000, 921_600, 460_800, 115_200]);
    expect(flashBaudLadder(230_400)).toEqual([230_400, 115_200]);
    expect(flashBaudLadder(115_200)).toEqual([115_200]);
  });

  it("takes a board's own ladder, with a first rung in front of it", () => {
    expect(flashBaudLadder(undefined, [460_800, 230_400])).toEqual([460_800, 230_400]);
    expect(flashBaudLadder(921_600, [460_800, 115_200])).toEqual([921_600, 460_800, 115_200]);
    expect(flashBaudLadder(460_800, [460_800, 115_200])).toEqual([460_800, 115_200]);
    expect(flashBaudLadder(undefined, [])).toEqual(flashBaudLadder());
  });
});

describe("timeoutPerMb: esptool's size-scaled timeouts", () => {
  it('is the per-MB time (MB = 10^6 bytes), never below DEFAULT_TIMEOUT', () => {
    expect(timeoutPerMb(ERASE_WRITE_TIMEOUT_PER_MB_MS, 16_384)).toBe(3000);
    expect(timeoutPerMb(ERASE_WRITE_TIMEOUT_PER_MB_MS, 3_000_000)).toBe(120_000);
    expect(timeoutPerMb(MD5_TIMEOUT_PER_MB_MS, 4 * 1024 * 1024)).toBeCloseTo(33_554.432);
    expect(timeoutPerMb(ERASE_WRITE_TIMEOUT_PER_MB_MS, 16_384, 200)).toBeCloseTo(655.36);
  });
});
