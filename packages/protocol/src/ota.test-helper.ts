/**
 * What the OTA tests (request, reply, hazards, versions) share: catching the one error type the
 * OTA code may throw, and the hostile text their properties feed it. Test-only: tsconfig.build.json
 * leaves it out of dist.
 */
import fc from 'fast-check';
import { expect } from 'vitest';
import { ProtocolError } from './errors.js';
import type { OtaFinding } from './ota-hazards.js';

/** Runs `fn`, expects a ProtocolError, and returns it. */
export function catchProtocolError(fn: () => unknown): ProtocolError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ProtocolError);
    return error as ProtocolError;
  }
  throw new Error('expected a ProtocolError, nothing was thrown');
}

/** Runs `fn`: its result, or undefined when it threw a ProtocolError (anything else fails). */
export function onlyProtocolErrors<T>(fn: () => T): T | undefined {
  try {
    return fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ProtocolError);
    return undefined;
  }
}

/** Short text of any UTF-16 units, rich in what versions, URLs and JSON are made of. */
export const anyText = fc.string({
  unit: fc.oneof(
    fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
    fc.constantFrom('.', '/', ':', '-', '0', '9', 'a', ' ', '{', '"'),
  ),
  maxLength: 40,
});

/** The findings that would crash or brick a board. */
export function hazards(findings: OtaFinding[]): OtaFinding[] {
  return findings.filter((f) => f.severity === 'hazard');
}
