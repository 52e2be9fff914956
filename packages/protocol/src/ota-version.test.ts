import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { anyText, catchProtocolError, hazards, onlyProtocolErrors } from './ota.test-helper.js';
import { validateOtaReply } from './ota-hazards.js';
import {
  compareFirmwareVersions,
  isNewFirmwareVersion,
  parseFirmwareVersion,
  readFirmwareVersion,
} from './ota-version.js';

const FW_URL = 'http://192.168.1.10:8003/xiaozhi.bin';

describe('firmware versions', () => {
  it.each([
    ['2.4.2', '2.4.1', 1],
    ['2.4.1', '2.4.2', -1],
    ['2.4.2', '2.4.2', 0],
    ['2.10.0', '2.9.9', 1], // integers, not text
    ['3.0', '2.99.99', 1],
    ['2.4', '2.4.1', -1], // common segments equal: the longer one is newer
    ['2.4.0', '2.4', 1], // even with a zero segment
    ['2.04.2', '2.4.2', 0],
    ['2.4.2-dirty', '2.4.2', 0], // stoi stops at the first non-digit
    ['1.0.0', '0.9.99', 1],
  ] as const)('compare(%s, %s) = %d', (a, b, expected) => {
    expect(compareFirmwareVersions(a, b)).toBe(expected);
  });

  it('matches IsNewVersionAvailable', () => {
    expect(isNewFirmwareVersion('2.4.2', '2.4.3')).toBe(true);
    expect(isNewFirmwareVersion('2.4.2', '2.4.2')).toBe(false);
    expect(isNewFirmwareVersion('2.4.2', '2.4.2.0')).toBe(true);
    expect(isNewFirmwareVersion('2.4.2.0', '2.4.2')).toBe(false);
  });

  it('parses segments like std::stoi', () => {
    expect(parseFirmwareVersion('2.4.2')).toEqual([2, 4, 2]);
    expect(parseFirmwareVersion('007.2rc1')).toEqual([7, 2]);
    expect(parseFirmwareVersion('2147483647')).toEqual([2_147_483_647]);
  });

  it('throws OTA_INVALID for a version the firmware would abort on', () => {
    for (const version of ['v2.0', '1..2', '', '2147483648']) {
      expect(catchProtocolError(() => parseFirmwareVersion(version)).code).toBe('OTA_INVALID');
    }
    expect(catchProtocolError(() => compareFirmwareVersions('1.2.beta', '1.2')).code).toBe(
      'OTA_INVALID',
    );
  });

  it('reads without throwing, naming the std::stoi exception and the segment', () => {
    expect(readFirmwareVersion('2.4rc1.3')).toEqual({
      ok: true,
      segments: [2, 4, 3],
      loose: ['4rc1'],
    });
    expect(readFirmwareVersion('1.2.beta')).toEqual({
      ok: false,
      reason: 'has a segment "beta" that does not start with a digit',
      segment: 'beta',
      exception: 'invalid_argument',
    });
    expect(readFirmwareVersion('1..2')).toMatchObject({
      segment: '',
      exception: 'invalid_argument',
    });
    expect(readFirmwareVersion('2.99999999999')).toMatchObject({
      segment: '99999999999',
      exception: 'out_of_range',
    });
  });

  describe('lax: as a board reads it', () => {
    it.each([
      ['2.4.2.', [2, 4, 2]], // std::getline adds no segment for a trailing dot
      ['', []],
      [' 2.\t4', [2, 4]], // stoi skips leading whitespace
      ['+2.-4', [2, -4]], // and takes a sign
      ['1.0.1rc', [1, 0, 1]],
      ['2.04.2', [2, 4, 2]],
      ['-2147483648', [-2_147_483_648]],
    ] as const)('reads %j as %j', (version, segments) => {
      expect(parseFirmwareVersion(version, { lax: true })).toEqual(segments);
    });

    it.each([
      ['1.2.beta', 'beta', 'invalid_argument'],
      ['v2.0', 'v2', 'invalid_argument'],
      ['1..2', '', 'invalid_argument'],
      ['1.2..', '', 'invalid_argument'], // only the last empty segment is skipped
      ['+.1', '+', 'invalid_argument'],
      ['2.99999999999', '99999999999', 'out_of_range'],
      ['-2147483649', '-2147483649', 'out_of_range'],
    ] as const)('refuses %j at segment %j (std::%s)', (version, segment, exception) => {
      expect(readFirmwareVersion(version, { lax: true })).toMatchObject({
        ok: false,
        segment,
        exception,
      });
      expect(catchProtocolError(() => parseFirmwareVersion(version, { lax: true })).code).toBe(
        'OTA_INVALID',
      );
    });

    it('reads every strictly valid version the same way (property)', () => {
      const version = fc
        .array(fc.stringMatching(/^[0-9]{1,10}[a-z]{0,2}$/), { minLength: 1, maxLength: 5 })
        .map((parts) => parts.join('.'));
      fc.assert(
        fc.property(version, (v) => {
          expect(readFirmwareVersion(v, { lax: true })).toEqual(readFirmwareVersion(v));
        }),
      );
    });
  });

  it('is antisymmetric and agrees with its segments (property)', () => {
    const version = fc
      .array(fc.integer({ min: 0, max: 2_147_483_647 }), { minLength: 1, maxLength: 5 })
      .map((parts) => parts.join('.'));
    fc.assert(
      fc.property(version, version, (a, b) => {
        expect(compareFirmwareVersions(a, b)).toBe(-compareFirmwareVersions(b, a) || 0);
        expect(parseFirmwareVersion(a).join('.')).toBe(a);
        expect(hazards(validateOtaReply({ firmware: { version: a, url: FW_URL } }))).toEqual([]);
      }),
    );
  });
});

// Hostile versions: OTA_INVALID or nothing, whatever comes in.

describe('hostile OTA input', () => {
  it('reads any version text without throwing', () => {
    fc.assert(
      fc.property(anyText, fc.boolean(), (version, lax) => {
        readFirmwareVersion(version, { lax });
        onlyProtocolErrors(() => parseFirmwareVersion(version, { lax }));
      }),
      { seed: 42, numRuns: 1000 },
    );
  });
});
