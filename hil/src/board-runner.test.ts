import { afterEach, describe, expect, it, vi } from 'vitest';
import { type ClosableStream, closeWithin } from './board-runner.js';

afterEach(() => {
  vi.useRealTimers();
});

function stream(closes: boolean): ClosableStream & { destroyed: boolean } {
  return {
    isOpen: true,
    destroyed: false,
    close(callback) {
      if (closes) setTimeout(() => callback(null), 10);
    },
    destroy() {
      this.destroyed = true;
    },
  };
}

describe('closeWithin', () => {
  it('closes a port that closes', async () => {
    vi.useFakeTimers();
    const port = stream(true);
    const closing = closeWithin(port, 5000);
    await vi.advanceTimersByTimeAsync(10);
    expect(await closing).toBe(true);
    expect(port.destroyed).toBe(false);
  });

  it('abandons a port whose close hangs, after the limit and not before', async () => {
    vi.useFakeTimers();
    const port = stream(false);
    let settled = false;
    const closing = closeWithin(port, 5000).then((inTime) => {
      settled = true;
      return inTime;
    });
    await vi.advanceTimersByTimeAsync(4999);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await closing).toBe(false);
    expect(port.destroyed).toBe(true);
  });
});
