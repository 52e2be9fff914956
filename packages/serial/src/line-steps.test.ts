import type { BindingInterface, SetOptions } from '@serialport/bindings-cpp';
import fc from 'fast-check';
import { SerialPortMock } from 'serialport';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SerialError } from './errors.js';
import type { LineState, LineStep } from './line-steps.js';
import {
  type LinePlatform,
  lineSetterFor,
  lineWriteOrder,
  pinEffect,
  planLineChange,
  planLineSteps,
  runLineSteps,
  SAFE_LINES,
  safeIntermediate,
} from './line-steps.js';
import { openSafely } from './port-open.js';
import { BOOT_CLICK, defaultResetSequence, RESET_SEQUENCES } from './reset/sequences.js';

const set = (dtr: boolean, rts: boolean): LineStep => ({ set: { dtr, rts } });
const wait = (waitMs: number): LineStep => ({ waitMs });

/** A fake setter and sleep writing one shared log, so the order of sets and waits shows. */
function recorder() {
  const log: Array<LineState | number> = [];
  const sets: LineState[] = [];
  const setter = {
    async set(state: LineState) {
      // Record exactly what set() received, keys and all.
      sets.push(state);
      log.push({ ...state });
    },
  };
  const sleep = async (ms: number) => {
    log.push(ms);
  };
  return { log, sets, setter, sleep };
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

describe('line states', () => {
  it('SAFE_LINES releases both lines', () => {
    expect(SAFE_LINES).toEqual({ dtr: false, rts: false });
    expect(pinEffect(SAFE_LINES)).toEqual({ en: 'high', gpio0: 'high' });
  });

  it('pinEffect follows the auto-reset transistor truth table', () => {
    expect(pinEffect({ dtr: false, rts: false })).toEqual({ en: 'high', gpio0: 'high' });
    expect(pinEffect({ dtr: true, rts: true })).toEqual({ en: 'high', gpio0: 'high' });
    expect(pinEffect({ dtr: false, rts: true })).toEqual({ en: 'low', gpio0: 'high' });
    expect(pinEffect({ dtr: true, rts: false })).toEqual({ en: 'high', gpio0: 'low' });
  });
});

describe('runLineSteps', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('calls set() with both lines every time, waits in between', async () => {
    const { log, sets, setter, sleep } = recorder();
    await runLineSteps(setter, RESET_SEQUENCES.classic, { sleep });
    expect(log).toEqual([
      { dtr: false, rts: false },
      { dtr: false, rts: true },
      100,
      { dtr: true, rts: true },
      { dtr: true, rts: false },
      50,
      { dtr: false, rts: false },
    ]);
    for (const state of sets) {
      expect(Object.keys(state).sort()).toEqual(['dtr', 'rts']);
      expect(typeof state.dtr).toBe('boolean');
      expect(typeof state.rts).toBe('boolean');
    }
  });

  it('hands set() a fresh object, never the shared constant', async () => {
    const { sets, setter, sleep } = recorder();
    await runLineSteps(setter, BOOT_CLICK, { sleep });
    const first = BOOT_CLICK[0];
    expect(first && 'set' in first ? sets[0] !== first.set : false).toBe(true);
  });

  it('waits with real timers by default', async () => {
    vi.useFakeTimers();
    const { log, setter } = recorder();
    let done = false;
    const run = runLineSteps(setter, RESET_SEQUENCES.hard).then(() => {
      done = true;
    });
    await vi.advanceTimersByTimeAsync(99);
    expect(log).toEqual([{ dtr: false, rts: true }]);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    await run;
    expect(log).toEqual([
      { dtr: false, rts: true },
      { dtr: false, rts: false },
    ]);
  });

  it('on abort during a wait, releases both lines and rejects with the reason', async () => {
    vi.useFakeTimers();
    const { log, setter } = recorder();
    const controller = new AbortController();
    const run = rejection(
      runLineSteps(setter, RESET_SEQUENCES.hard, { signal: controller.signal }),
    );
    await vi.advanceTimersByTimeAsync(10);
    const reason = new Error('stop');
    controller.abort(reason);
    expect(await run).toBe(reason);
    expect(log).toEqual([
      { dtr: false, rts: true },
      { dtr: false, rts: false },
    ]);
  });

  it('does not touch the lines when aborted before starting', async () => {
    const { log, setter, sleep } = recorder();
    const controller = new AbortController();
    controller.abort();
    const error = await rejection(
      runLineSteps(setter, BOOT_CLICK, { signal: controller.signal, sleep }),
    );
    expect((error as Error).name).toBe('AbortError');
    expect(log).toEqual([]);
  });

  it('rejects unbounded or negative waits before setting anything', async () => {
    const { log, setter, sleep } = recorder();
    for (const waitMs of [Number.POSITIVE_INFINITY, -1, Number.NaN, 60_000]) {
      const error = await rejection(
        runLineSteps(setter, [set(true, false), wait(waitMs)], { sleep }),
      );
      expect((error as SerialError).code).toBe('OPTION_INVALID');
    }
    expect(log).toEqual([]);
  });

  it('passes a failing set() through without retrying', async () => {
    const calls: LineState[] = [];
    const setter = {
      async set(state: LineState) {
        calls.push(state);
        throw new Error('EIO');
      },
    };
    await expect(
      runLineSteps(setter, RESET_SEQUENCES.classic, { sleep: async () => {} }),
    ).rejects.toThrow('EIO');
    expect(calls).toHaveLength(1);
  });
});

/**
 * What a host's serial driver makes of one `set()`, written out here rather than taken from
 * lines.ts: bindings-cpp 13 on Windows calls EscapeCommFunction for RTS, then for DTR
 * (src/serialport_win.cpp, SetBaton::Execute), so the lines pass through (old DTR, new RTS);
 * on Unix one ioctl(TIOCMSET) changes both (src/serialport_unix.cpp).
 */
function driverTrace(platform: LinePlatform, from: LineState, sets: readonly LineState[]) {
  const trace: LineState[] = [];
  let lines = from;
  for (const next of sets) {
    if (platform === 'win32' && lines.rts !== next.rts)
      trace.push({ dtr: lines.dtr, rts: next.rts });
    if (platform !== 'win32' || lines.dtr !== next.dtr)
      trace.push({ dtr: next.dtr, rts: next.rts });
    lines = next;
  }
  return trace;
}

const setsOf = (steps: readonly LineStep[]): LineState[] =>
  steps.flatMap((step) => ('set' in step ? [step.set] : []));
const same = (a: LineState, b: LineState) => a.dtr === b.dtr && a.rts === b.rts;

describe('line order per platform', () => {
  it('knows which hosts write both lines at once: all but Windows (bindings-cpp SetBaton)', () => {
    expect(lineWriteOrder('linux')).toBe('atomic');
    expect(lineWriteOrder('darwin')).toBe('atomic');
    expect(lineWriteOrder('freebsd')).toBe('atomic');
    expect(lineWriteOrder('win32')).toBe('rts-then-dtr');
  });

  it('passes between reset and strap through (1, 1), between released and asserted through (1, 0)', () => {
    expect(safeIntermediate({ dtr: false, rts: true }, { dtr: true, rts: false })).toEqual({
      dtr: true,
      rts: true,
    });
    expect(safeIntermediate({ dtr: true, rts: false }, { dtr: false, rts: true })).toEqual({
      dtr: true,
      rts: true,
    });
    expect(safeIntermediate({ dtr: false, rts: false }, { dtr: true, rts: true })).toEqual({
      dtr: true,
      rts: false,
    });
    expect(safeIntermediate({ dtr: true, rts: true }, { dtr: false, rts: false })).toEqual({
      dtr: true,
      rts: false,
    });
    expect(safeIntermediate({ dtr: true, rts: true }, { dtr: false, rts: true })).toBeUndefined();
    expect(safeIntermediate(SAFE_LINES, SAFE_LINES)).toBeUndefined();
  });

  it('plays the tight reset unchanged on Unix, each two-line step as two on Windows', () => {
    for (const platform of ['linux', 'darwin'] as const) {
      expect(planLineSteps(RESET_SEQUENCES.tight, { platform, from: SAFE_LINES })).toEqual(
        RESET_SEQUENCES.tight,
      );
    }
    expect(planLineSteps(RESET_SEQUENCES.tight, { platform: 'win32', from: SAFE_LINES })).toEqual([
      set(false, false),
      set(true, false), // via (1, 0): EN never pulled low on the way to (1, 1)
      set(true, true),
      set(false, true), // EN low: reset
      wait(100),
      set(true, true), // via (1, 1): the strap of a USB-Serial-JTAG survives
      set(true, false), // EN high, GPIO0 low: download mode
      wait(50),
      set(false, false),
    ]);
  });

  it('leaves the one-line-at-a-time sequences (classic, usbJtag, hard, BOOT click) alone everywhere', () => {
    for (const platform of ['linux', 'darwin', 'win32'] as const) {
      for (const steps of [
        RESET_SEQUENCES.classic,
        RESET_SEQUENCES.usbJtag,
        RESET_SEQUENCES.hard,
        BOOT_CLICK,
      ]) {
        expect(planLineSteps(steps, { platform, from: SAFE_LINES })).toEqual(steps);
      }
    }
  });

  it('cannot plan the first step from unknown lines, and keeps it', () => {
    expect(planLineChange(undefined, { dtr: true, rts: false }, 'win32')).toEqual([
      { dtr: true, rts: false },
    ]);
    expect(planLineSteps([set(true, true), set(false, false)], { platform: 'win32' })).toEqual([
      set(true, true),
      set(true, false),
      set(false, false),
    ]);
  });

  it('on Windows no ordering holds EN low, or passes (0, 0), unless the step itself does', () => {
    const lines = fc.record({ dtr: fc.boolean(), rts: fc.boolean() });
    fc.assert(
      fc.property(lines, lines, (from, to) => {
        const planned = planLineChange(from, to, 'win32');
        const trace = driverTrace('win32', from, planned);
        let previous = from;
        for (const state of planned) {
          // One line per set(): the driver's order cannot matter.
          expect(
            Number(state.dtr !== previous.dtr) + Number(state.rts !== previous.rts),
          ).toBeLessThanOrEqual(1);
          previous = state;
        }
        expect(planned.at(-1)).toEqual(to);
        const endpointHeld = pinEffect(from).en === 'low' || pinEffect(to).en === 'low';
        const endpointReleased = same(from, SAFE_LINES) || same(to, SAFE_LINES);
        for (const state of trace) {
          if (!endpointHeld) expect(pinEffect(state).en).toBe('high');
          if (!endpointReleased) expect(same(state, SAFE_LINES)).toBe(false);
        }
      }),
    );
    // Without planning, the Windows driver does both: it passes (0, 0) on the way from reset to
    // the strap, and holds EN low on the way from released to both asserted.
    expect(driverTrace('win32', { dtr: false, rts: true }, [{ dtr: true, rts: false }])).toEqual([
      { dtr: false, rts: false },
      { dtr: true, rts: false },
    ]);
    expect(driverTrace('win32', SAFE_LINES, [{ dtr: true, rts: true }])[0]).toEqual({
      dtr: false,
      rts: true,
    });
  });

  it('resets as esptool does by default: USB-JTAG on native USB, tight on Unix, classic on Windows', () => {
    for (const platform of ['linux', 'darwin', 'win32'] as const) {
      expect(defaultResetSequence('usb-serial-jtag', platform)).toBe('usbJtag');
    }
    expect(defaultResetSequence('usb-uart', 'linux')).toBe('tight');
    expect(defaultResetSequence('unknown', 'darwin')).toBe('tight');
    expect(defaultResetSequence('usb-uart', 'win32')).toBe('classic');
    expect(defaultResetSequence('unknown', 'win32')).toBe('classic');
  });

  it('runLineSteps plans for the given platform, from what the setter last wrote', async () => {
    const { log, setter, sleep } = recorder();
    await runLineSteps(setter, RESET_SEQUENCES.tight, { sleep, platform: 'win32' });
    expect(log).toEqual([
      { dtr: false, rts: false },
      { dtr: true, rts: false },
      { dtr: true, rts: true },
      { dtr: false, rts: true },
      100,
      { dtr: true, rts: true },
      { dtr: true, rts: false },
      50,
      { dtr: false, rts: false },
    ]);
    const windows = { ...recorder(), platform: 'win32' as const };
    const known = {
      platform: 'win32' as const,
      lines: { dtr: false, rts: true },
      set: windows.setter.set,
    };
    await runLineSteps(known, [set(true, false)], { sleep: windows.sleep });
    expect(windows.log).toEqual([
      { dtr: true, rts: true },
      { dtr: true, rts: false },
    ]);
    const linux = recorder();
    await runLineSteps(linux.setter, RESET_SEQUENCES.tight, {
      sleep: linux.sleep,
      platform: 'linux',
    });
    expect(linux.log.filter((entry) => typeof entry !== 'number')).toEqual(
      setsOf(RESET_SEQUENCES.tight),
    );
  });
});

describe('lineSetterFor', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('adapts a callback-style set() (SerialPortStream), passing both lines', async () => {
    const seen: unknown[] = [];
    const port = {
      set(options: SetOptions, callback: (error: Error | null) => void): void {
        seen.push(options);
        setImmediate(() => callback(null));
      },
    };
    await lineSetterFor(port).set({ dtr: true, rts: false });
    expect(seen).toEqual([{ dtr: true, rts: false }]);
  });

  it('adapts a promise-style set() (a binding port)', async () => {
    const seen: unknown[] = [];
    const port = {
      async set(options: SetOptions): Promise<void> {
        seen.push(options);
      },
    };
    await lineSetterFor(port).set({ dtr: false, rts: true });
    expect(seen).toEqual([{ dtr: false, rts: true }]);
  });

  it('passes errors through in both styles', async () => {
    const callbackPort = {
      set(_options: SetOptions, callback: (error: Error | null) => void): void {
        callback(new Error('callback failed'));
      },
    };
    const promisePort = {
      set(_options: SetOptions): Promise<void> {
        return Promise.reject(new Error('promise failed'));
      },
    };
    await expect(lineSetterFor(callbackPort).set(SAFE_LINES)).rejects.toThrow('callback failed');
    await expect(lineSetterFor(promisePort).set(SAFE_LINES)).rejects.toThrow('promise failed');
  });

  it('bounds a set() that never answers', async () => {
    vi.useFakeTimers();
    const port = {
      set: (_options: SetOptions, _callback: (error: Error | null) => void) => undefined,
    };
    const result = rejection(lineSetterFor(port, { timeoutMs: 500 }).set(SAFE_LINES));
    await vi.advanceTimersByTimeAsync(500);
    const error = await result;
    expect(error).toBeInstanceOf(SerialError);
    expect((error as SerialError).code).toBe('PORT_NOT_FOUND');
    expect((error as SerialError).message).toContain('500 ms');
  });
});

describe('lineSetterFor on Windows', () => {
  it('splits a change of both lines, remembering per port what it last wrote', async () => {
    const seen: SetOptions[] = [];
    const port = {
      async set(options: SetOptions): Promise<void> {
        seen.push(options);
      },
    };
    const first = lineSetterFor(port, { platform: 'win32' });
    expect(first.platform).toBe('win32');
    expect(first.lines).toBeUndefined();
    await first.set({ dtr: false, rts: true }); // from unknown: as asked
    // Another setter on the same port knows the lines.
    const second = lineSetterFor(port, { platform: 'win32' });
    expect(second.lines).toEqual({ dtr: false, rts: true });
    await second.set({ dtr: true, rts: false });
    expect(seen).toEqual([
      { dtr: false, rts: true },
      { dtr: true, rts: true },
      { dtr: true, rts: false },
    ]);
    expect(lineSetterFor(port).lines).toEqual({ dtr: true, rts: false });
    // On Linux the same change is one set().
    const linux = { ...port, set: port.set };
    await lineSetterFor(linux, { platform: 'linux' }).set({ dtr: false, rts: true });
    await lineSetterFor(linux, { platform: 'linux' }).set({ dtr: true, rts: false });
    expect(seen.slice(3)).toEqual([
      { dtr: false, rts: true },
      { dtr: true, rts: false },
    ]);
  });

  it('forgets the lines when a set() fails halfway', async () => {
    let fail = false;
    const seen: SetOptions[] = [];
    const port = {
      async set(options: SetOptions): Promise<void> {
        if (fail && seen.length > 0) throw new Error('EIO');
        seen.push(options);
      },
    };
    const setter = lineSetterFor(port, { platform: 'win32' });
    await setter.set(SAFE_LINES);
    fail = true;
    await expect(setter.set({ dtr: true, rts: true })).rejects.toThrow('EIO');
    expect(setter.lines).toBeUndefined();
  });
});

// `@serialport/binding-mock`'s MockBinding, reached through `serialport` because the package's
// ESM entry ships no type declarations.
const MockBinding = SerialPortMock.binding;
type MockPort = Awaited<ReturnType<typeof MockBinding.open>>;

/** MockBinding, recording every set() and close() of the ports it opens. */
function recordingBinding(hooks: { set?: (options: SetOptions) => Promise<void> } = {}) {
  const sets: SetOptions[] = [];
  const closes: string[] = [];
  const opened: MockPort[] = [];
  const binding: BindingInterface = {
    list: () => MockBinding.list(),
    async open(options) {
      const port = await MockBinding.open(options);
      const set = port.set.bind(port);
      const close = port.close.bind(port);
      port.set = async (flags) => {
        sets.push({ ...flags });
        return hooks.set ? hooks.set(flags) : set(flags);
      };
      port.close = async () => {
        closes.push(options.path);
        return close();
      };
      opened.push(port);
      return port;
    },
  };
  return { binding, sets, closes, opened };
}

describe("line changes through serialport's MockBinding, per platform", () => {
  beforeEach(() => {
    MockBinding.reset();
  });
  afterEach(() => {
    MockBinding.reset();
  });

  const closePort = (port: { close(callback: (error: Error | null) => void): void }) =>
    new Promise<void>((resolve, reject) =>
      port.close((error) => (error ? reject(error) : resolve())),
    );

  async function record(platform: LinePlatform, steps: readonly LineStep[]) {
    MockBinding.createPort('/dev/ROBOT');
    const { binding, sets } = recordingBinding();
    const port = await openSafely('/dev/ROBOT', { baudRate: 115200, binding });
    await runLineSteps(lineSetterFor(port, { platform }), steps, { sleep: async () => {} });
    await closePort(port);
    MockBinding.reset();
    return sets.map((flags) => ({ dtr: flags.dtr === true, rts: flags.rts === true }));
  }

  it('sends the tight reset as one set() per step on Linux and macOS', async () => {
    for (const platform of ['linux', 'darwin'] as const) {
      expect(await record(platform, RESET_SEQUENCES.tight)).toEqual([
        SAFE_LINES, // openSafely
        ...setsOf(RESET_SEQUENCES.tight),
      ]);
    }
  });

  it("on Windows sends only one-line changes, so the driver's RTS-then-DTR order shows no glitch", async () => {
    const sets = await record('win32', RESET_SEQUENCES.tight);
    expect(sets).toEqual([
      SAFE_LINES,
      { dtr: false, rts: false },
      { dtr: true, rts: false },
      { dtr: true, rts: true },
      { dtr: false, rts: true },
      { dtr: true, rts: true },
      { dtr: true, rts: false },
      { dtr: false, rts: false },
    ]);
    // What the chip sees through the Windows driver: EN low exactly once (the reset), and it is
    // released only to (1, 1), then GPIO0 goes low.
    const pins = driverTrace('win32', SAFE_LINES, sets).map(pinEffect);
    expect(pins.filter((pin) => pin.en === 'low')).toHaveLength(1);
    const held = pins.findIndex((pin) => pin.en === 'low');
    expect(driverTrace('win32', SAFE_LINES, sets)[held + 1]).toEqual({ dtr: true, rts: true });
    expect(pins[held + 2]).toEqual({ en: 'high', gpio0: 'low' });
  });

  it('sends classic, usbJtag, hard and the BOOT click the same on every platform', async () => {
    for (const steps of [
      RESET_SEQUENCES.classic,
      RESET_SEQUENCES.usbJtag,
      RESET_SEQUENCES.hard,
      BOOT_CLICK,
    ]) {
      const linux = await record('linux', steps);
      expect(await record('win32', steps)).toEqual(linux);
      expect(await record('darwin', steps)).toEqual(linux);
    }
  });
});
