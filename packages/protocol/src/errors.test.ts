import { describe, expect, it } from 'vitest';
import { jsonForMessage, MESSAGE_VALUE_LIMIT, textForMessage } from './errors.js';

describe('quoting received values in error messages', () => {
  let deep: unknown = 1;
  for (let i = 0; i < 100_000; i++) deep = [deep];
  const cycle: Record<string, unknown> = {};
  cycle.self = cycle;

  it('writes JSON as JSON.stringify does, cut to a bounded length', () => {
    expect(jsonForMessage({ code: 1, data: [true] })).toBe('{"code":1,"data":[true]}');
    expect(jsonForMessage(undefined)).toBeUndefined();
    const long = jsonForMessage('x'.repeat(10_000)) ?? '';
    expect(long.length).toBe(MESSAGE_VALUE_LIMIT + 3);
    expect(long.endsWith('...')).toBe(true);
  });

  it('never throws, whatever JSON.stringify or String would do', () => {
    expect(jsonForMessage(deep)).toBe('[unprintable array]');
    expect(jsonForMessage(cycle)).toBe('[unprintable object]');
    expect(jsonForMessage(10n)).toBe('[unprintable bigint]');
    expect(textForMessage(deep)).toBe('[unprintable array]');
    expect(textForMessage(Object.create(null))).toBe('[unprintable object]');
    expect(textForMessage(Symbol('s'))).toBe('Symbol(s)');
    expect(textForMessage('y'.repeat(5_000)).length).toBe(MESSAGE_VALUE_LIMIT + 3);
  });
});
