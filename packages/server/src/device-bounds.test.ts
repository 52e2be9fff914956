import { describe, expect, it } from 'vitest';
import { clip, MAX_DEVICE_JSON_DEPTH, nestsWithin } from './device-bounds.js';

describe('nestsWithin', () => {
  it('counts objects and arrays, not scalars', () => {
    expect(nestsWithin(7, 0)).toBe(true);
    expect(nestsWithin({}, 1)).toBe(true);
    expect(nestsWithin({ a: [1] }, 1)).toBe(false);
    expect(nestsWithin({ a: [1] }, 2)).toBe(true);
  });

  it('answers for any depth without recursing', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 200_000; i++) deep = [deep];
    expect(nestsWithin(deep, MAX_DEVICE_JSON_DEPTH)).toBe(false);
  });
});

describe('clip', () => {
  it('keeps short text and cuts long text, saying how long it was', () => {
    expect(clip('short')).toBe('short');
    expect(clip('abcdef', 3)).toBe('abc… (6 chars)');
    expect(clip('x'.repeat(5000))).toHaveLength(1000 + ' (5000 chars)'.length + 1);
  });
});
