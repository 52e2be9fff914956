import { afterEach, describe, expect, it, vi } from 'vitest';
import { until } from './until.js';

afterEach(() => {
  vi.useRealTimers();
});

describe('until', () => {
  it('resolves with the first truthy value, as soon as it holds', async () => {
    vi.useFakeTimers();
    let looks = 0;
    const found = until(() => (++looks === 3 ? { board: 'desk' } : undefined), { intervalMs: 50 });
    await vi.advanceTimersByTimeAsync(100);
    await expect(found).resolves.toEqual({ board: 'desk' });
    expect(looks).toBe(3);
  });

  it('looks again after a condition that throws (the thing is not there yet)', async () => {
    let looks = 0;
    const value = await until(() => {
      looks += 1;
      if (looks < 3) throw new Error('not yet');
      return 'there';
    });
    expect(value).toBe('there');
  });

  it('fails after its bound, saying what it waited for, what it saw and the last error', async () => {
    vi.useFakeTimers();
    const waited = until(
      () => {
        throw new Error('ECONNREFUSED');
      },
      { what: 'the gateway to accept', timeoutMs: 1000, seen: () => ({ status: 'booting' }) },
    );
    const failed = expect(waited).rejects.toMatchObject({
      name: 'UntilTimeout',
      timeoutMs: 1000,
      message:
        'waited 1000 ms for the gateway to accept; last seen: {"status":"booting"}; last error: ECONNREFUSED',
    });
    await vi.advanceTimersByTimeAsync(1100);
    await failed;
  });

  it('stops at once when its signal aborts', async () => {
    const abort = new AbortController();
    const waited = until(() => false, { signal: abort.signal });
    abort.abort(new Error('test over'));
    await expect(waited).rejects.toThrow('test over');
  });
});
