import { describe, expect, it } from 'vitest';
import { BoardPanic } from './errors.js';
import { isNewVersionAvailable } from './ota-client.js';

describe('isNewVersionAvailable (Ota::IsNewVersionAvailable)', () => {
  it.each([
    ['2.4.2', '2.4.3', true],
    ['2.4.2', '2.4.2', false],
    ['2.4.2', '2.4.1', false],
    ['2.4', '2.4.0', true],
    ['2.4.0', '2.4', false],
    ['2.4.2', '2.10.0', true],
    ['2.4.2', '2.04.2', false],
    ['2.4.2', '2.4.2.', false],
    ['1.0.0', '1.0.1rc', true],
  ])('%s → %s: %s', (current, candidate, newer) => {
    expect(isNewVersionAvailable(current, candidate)).toBe(newer);
  });

  it.each(['1.2.beta', 'v2.0', '1..2', '2.99999999999'])(
    'aborts on %s as std::stoi does',
    (candidate) => {
      expect(() => isNewVersionAvailable('2.4.2', candidate)).toThrow(BoardPanic);
    },
  );

  it('panics with the exception the firmware terminates on', () => {
    expect(() => isNewVersionAvailable('2.4.2', '1.2.beta')).toThrow(
      `terminate called after throwing an instance of 'std::invalid_argument' what(): stoi ("beta")`,
    );
    expect(() => isNewVersionAvailable('2.99999999999', '2.4.2')).toThrow(
      `terminate called after throwing an instance of 'std::out_of_range' what(): stoi ("99999999999")`,
    );
  });

  it('reads what std::stoi reads: leading spaces and a sign', () => {
    expect(isNewVersionAvailable('2.4.2', ' 2.4.+3')).toBe(true);
    expect(isNewVersionAvailable('2.4.2', '2.4.-3')).toBe(false);
  });
});
