/**
 * Firmware versions as the firmware reads them (docs/protocol.md §7): `Ota::ParseVersion` runs
 * `std::stoi` on each dot-separated segment, and `Ota::IsNewVersionAvailable` compares the
 * segments as integers. A segment `stoi` refuses aborts the board, so a read says which
 * exception it would have thrown instead of throwing.
 */

import { ProtocolError } from './errors.js';

/** Largest value `std::stoi` accepts for a firmware version segment (int32 on the ESP32). */
export const INT32_MAX = 2_147_483_647;
export const INT32_MIN = -2_147_483_648;

/** The `std::stoi` exception a segment throws: no leading number, or past int32. */
export type StoiException = 'invalid_argument' | 'out_of_range';

export type FirmwareVersionRead =
  | {
      readonly ok: true;
      readonly segments: number[];
      /** Segments with text after their number, which `stoi` ignores (`"2rc1"` reads as 2). */
      readonly loose: string[];
    }
  | {
      readonly ok: false;
      /** Why, as a phrase after the version: `"1..2" has an empty segment`. */
      readonly reason: string;
      readonly segment: string;
      readonly exception: StoiException;
    };

export interface FirmwareVersionOptions {
  /**
   * Read exactly as a board does, for code that must behave like one (the virtual board):
   * `std::stoi` also skips leading whitespace and takes a sign, and the `std::getline` loop of
   * `Ota::ParseVersion` adds no segment for a trailing dot, so `" 2.+4."` reads as `[2, 4]`.
   * Off by default: the OTA validator refuses such versions, which parse only by accident.
   */
  readonly lax?: boolean;
}

export type SegmentRead =
  | { ok: true; value: number; exact: boolean }
  | { ok: false; reason: string; exception: StoiException };

// `std::stoi`: isspace(), an optional sign, digits; the strict read wants the digits alone.
const STOI_SEGMENT = /^[ \t\n\v\f\r]*([+-]?)([0-9]+)/;
const STRICT_SEGMENT = /^()([0-9]+)/;

/**
 * One dot-separated segment as `std::stoi` reads it: a leading number, anything after ignored.
 * The firmware reads an MQTT port the same way.
 */
export function readSegment(segment: string, lax: boolean): SegmentRead {
  const match = (lax ? STOI_SEGMENT : STRICT_SEGMENT).exec(segment);
  const digits = match?.[2];
  if (match === null || digits === undefined) {
    return {
      ok: false,
      exception: 'invalid_argument',
      reason:
        segment === ''
          ? 'has an empty segment'
          : `has a segment "${segment}" that does not start with a digit`,
    };
  }
  const negative = match[1] === '-';
  const significant = digits.replace(/^0+/, '');
  const magnitude = significant === '' ? 0 : Number(significant);
  // Past 10 digits Number() may round; the length test keeps the range check exact.
  if (significant.length > 10 || magnitude > (negative ? -INT32_MIN : INT32_MAX)) {
    return {
      ok: false,
      exception: 'out_of_range',
      reason: `has a segment "${segment}" that overflows a 32-bit int`,
    };
  }
  return {
    ok: true,
    value: negative ? -magnitude : magnitude,
    exact: match[0].length === segment.length,
  };
}

/**
 * Reads a firmware version segment by segment without throwing, saying which `std::stoi`
 * exception a board would abort with. Strictly (the default) every dot splits, so `""` and
 * `"1.2."` have an empty segment; see {@link FirmwareVersionOptions.lax} for a board's own read.
 */
export function readFirmwareVersion(
  version: string,
  options: FirmwareVersionOptions = {},
): FirmwareVersionRead {
  const lax = options.lax === true;
  const parts = version.split('.');
  if (lax && parts.at(-1) === '') parts.pop();
  const segments: number[] = [];
  const loose: string[] = [];
  for (const segment of parts) {
    const read = readSegment(segment, lax);
    if (!read.ok) return { ok: false, reason: read.reason, segment, exception: read.exception };
    segments.push(read.value);
    if (!read.exact) loose.push(segment);
  }
  return { ok: true, segments, loose };
}

/**
 * The segments of a firmware version as the firmware parses them (`Ota::ParseVersion`:
 * `std::stoi` on each dot-separated segment). Trailing text in a segment is ignored as `stoi`
 * does (`"2rc1"` reads as 2). Throws `OTA_INVALID` for a version the firmware would abort on,
 * and (unless `lax`) for one it reads only by accident (see {@link FirmwareVersionOptions}).
 */
export function parseFirmwareVersion(
  version: string,
  options: FirmwareVersionOptions = {},
): number[] {
  const read = readFirmwareVersion(version, options);
  if (!read.ok) {
    throw new ProtocolError('OTA_INVALID', `firmware version "${version}" ${read.reason}`);
  }
  return read.segments;
}

/**
 * Compares two firmware versions by the firmware's own rule (`Ota::IsNewVersionAvailable`):
 * segment by segment as integers, the first difference decides; when all common segments are
 * equal, the version with more segments is newer, so `2.4.0` is newer than `2.4`. Returns 1
 * when `a` is newer than `b`, -1 when older, 0 when neither is newer (`2.4.2` vs `2.04.2`).
 * Throws `OTA_INVALID` if either cannot be parsed (see {@link parseFirmwareVersion}).
 */
export function compareFirmwareVersions(a: string, b: string): -1 | 0 | 1 {
  return compareVersionSegments(parseFirmwareVersion(a), parseFirmwareVersion(b));
}

/** `Ota::IsNewVersionAvailable` on parsed segments: 1 when `a` is newer than `b`, -1 when older. */
export function compareVersionSegments(a: readonly number[], b: readonly number[]): -1 | 0 | 1 {
  const common = Math.min(a.length, b.length);
  for (let i = 0; i < common; i++) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    if (x > y) return 1;
    if (x < y) return -1;
  }
  if (a.length === b.length) return 0;
  return a.length > b.length ? 1 : -1;
}

/** True when the device running `current` would upgrade to `candidate` without `force`. */
export function isNewFirmwareVersion(current: string, candidate: string): boolean {
  return compareFirmwareVersions(candidate, current) > 0;
}
