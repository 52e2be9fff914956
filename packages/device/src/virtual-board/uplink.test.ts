import { afterEach, describe, expect, it, vi } from 'vitest';
import { startUplink, UPLINK_FRAME_BYTES, uplinkFrame } from './uplink.js';

function run(options: { frames: number; listening: () => boolean; open?: () => boolean }) {
  const sent: number[] = [];
  const done = new Promise<number[]>((resolve) => {
    startUplink({
      frames: options.frames,
      frameMs: 1,
      open: options.open ?? (() => true),
      listening: options.listening,
      send: (frame, timestamp) => {
        expect(frame).toHaveLength(UPLINK_FRAME_BYTES);
        sent.push(timestamp);
        return true;
      },
      done: () => resolve(sent),
    });
  });
  return { sent, done };
}

describe('uplinkFrame', () => {
  it('starts with the Opus TOC byte of a SILK wideband 60 ms mono frame', () => {
    const frame = uplinkFrame();
    expect(frame[0]).toBe(0x58);
    expect(frame).toEqual(uplinkFrame());
  });
});

describe('startUplink', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('sends its frames, then reports done', async () => {
    expect(await run({ frames: 4, listening: () => true }).done).toEqual([0, 0, 0, 0]);
  });

  it('sends nothing while the board is not listening, and resumes after', async () => {
    let ticks = 0;
    const { done } = run({ frames: 2, listening: () => ++ticks > 5 });
    expect(await done).toHaveLength(2);
    expect(ticks).toBe(7);
  });

  it('stops without done once its channel is closed', async () => {
    vi.useFakeTimers();
    let open = true;
    let finished = false;
    const { sent, done } = run({ frames: 100, listening: () => true, open: () => open });
    void done.then(() => {
      finished = true;
    });
    await vi.advanceTimersByTimeAsync(20);
    const count = sent.length;
    expect(count).toBeGreaterThan(0);
    open = false;
    await vi.advanceTimersByTimeAsync(200);
    expect(sent.length).toBe(count);
    expect(count).toBeLessThan(100);
    expect(vi.getTimerCount()).toBe(0);
    expect(finished).toBe(false);
  });
});
