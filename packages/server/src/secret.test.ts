import { describe, expect, it } from 'vitest';
import { oneOfSecrets, sameSecret } from './secret.js';

describe('sameSecret', () => {
  it('is true only for the exact secret, whatever the lengths', () => {
    expect(sameSecret('abc', 'abc')).toBe(true);
    expect(sameSecret('abd', 'abc')).toBe(false);
    expect(sameSecret('ab', 'abc')).toBe(false);
    expect(sameSecret('abcd', 'abc')).toBe(false);
    expect(sameSecret('', 'abc')).toBe(false);
    expect(sameSecret(undefined, 'abc')).toBe(false);
  });
});

describe('oneOfSecrets', () => {
  it('finds a secret anywhere in the list and nothing in an empty one', () => {
    expect(oneOfSecrets('b', ['a', 'b', 'c'])).toBe(true);
    expect(oneOfSecrets('d', ['a', 'b', 'c'])).toBe(false);
    expect(oneOfSecrets('a', [])).toBe(false);
  });
});
