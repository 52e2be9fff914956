import { describe, expect, it } from 'vitest';
import { percentile } from './stats.js';

describe('percentile', () => {
  it('is the nearest rank: the smallest sample with at least q of the samples at or below it', () => {
    const samples = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
    expect(percentile(samples, 0.5)).toBe(5);
    expect(percentile(samples, 0.9)).toBe(9);
    expect(percentile(samples, 0.99)).toBe(10);
    expect(percentile(samples, 0)).toBe(1);
    expect(percentile(samples, 1)).toBe(10);
    expect(percentile([7], 0.5)).toBe(7);
  });

  it('is NaN without samples', () => {
    expect(percentile([], 0.5)).toBeNaN();
  });
});
