import { describe, expect, it } from 'vitest';
import { ReceiveQueue } from './receive-queue.js';

describe('ReceiveQueue', () => {
  it('hands out bytes in order across chunks and partial reads', () => {
    const queue = new ReceiveQueue(100);
    queue.push(Uint8Array.of(1, 2, 3));
    queue.push(Uint8Array.of(4, 5));
    const out = new Uint8Array(8);
    expect(queue.take(out, 1, 2)).toBe(2);
    expect(queue.take(out, 3, 10)).toBe(3);
    expect([...out]).toEqual([0, 1, 2, 3, 4, 5, 0, 0]);
    expect(queue.size).toBe(0);
    expect(queue.take(out, 0, 4)).toBe(0);
  });

  it('keeps at most its limit and counts the rest as overruns', () => {
    const queue = new ReceiveQueue(4);
    expect(queue.push(Uint8Array.of(1, 2, 3))).toBe(3);
    expect(queue.push(Uint8Array.of(4, 5, 6))).toBe(1);
    expect(queue.push(Uint8Array.of(7))).toBe(0);
    expect(queue.size).toBe(4);
    expect(queue.overruns).toBe(3);
    const out = new Uint8Array(4);
    queue.take(out, 0, 4);
    expect([...out]).toEqual([1, 2, 3, 4]);
  });

  it('clears without counting overruns', () => {
    const queue = new ReceiveQueue(10);
    queue.push(Uint8Array.of(1, 2));
    queue.clear();
    expect(queue.size).toBe(0);
    expect(queue.overruns).toBe(0);
  });

  it('answers a read at once with what waits, else with the next bytes to arrive', async () => {
    const queue = new ReceiveQueue(10);
    const out = new Uint8Array(4);
    const waiting = queue.read(out, 0, 4);
    queue.push(Uint8Array.of(9, 8));
    expect(await waiting).toBe(2);
    expect([...out.subarray(0, 2)]).toEqual([9, 8]);
    expect(queue.size).toBe(0);
    queue.push(Uint8Array.of(7));
    expect(await queue.read(out, 0, 4)).toBe(1);
  });

  it('refuses a second waiting read, and fails the waiting one on fail()', async () => {
    const queue = new ReceiveQueue(10);
    const out = new Uint8Array(4);
    const waiting = queue.read(out, 0, 4);
    await expect(queue.read(out, 0, 4, () => new Error('busy'))).rejects.toThrow('busy');
    queue.fail(new Error('port is closed'));
    await expect(waiting).rejects.toThrow('port is closed');
    queue.push(Uint8Array.of(1));
    expect(queue.size).toBe(1);
  });
});
