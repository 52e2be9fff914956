import type { BindingInterface, SetOptions } from '@serialport/bindings-cpp';
import fc from 'fast-check';
import { SerialPortMock } from 'serialport';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SerialError } from './errors.js';
import type { LineState, LineStep } from './lines.js';
import {
  BOOT_CLICK,
  defaultResetSequence,
  type LinePlatform,
  lineSetterFor,
  lineWriteOrder,
  OPEN_RETRY_MS,
  openSafely,
  parseResetSequence,
  pinEffect,
  planLineChange,
  planLineSteps,
  RESET_SEQUENCES,
  runLineSteps,
  SAFE_LINES,
  safeIntermediate,
} from './lines.js';

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

describe('RESET_SEQUENCES', () => {
  it('classic is esptool ClassicReset, both lines in every step', () => {
    expect(RESET_SEQUENCES.classic).toEqual([
      set(false, false),
      set(false, true),
      wait(100),
      set(true, true),
      set(true, false),
      wait(50),
      set(false, false),
    ]);
    expect(RESET_SEQUENCES.classic).toEqual(parseResetSequence('D0|R1|W0.1|D1|R0|W0.05|D0'));
  });

  it('tight is esptool UnixTightReset: both lines change in one set() per step', () => {
    expect(RESET_SEQUENCES.tight).toEqual([
      set(false, false),
      set(true, true),
      set(false, true),
      wait(100),
      set(true, false),
      wait(50),
      set(false, false),
    ]);
    expect(RESET_SEQUENCES.tight).toEqual(
      parseResetSequence('U0,0|U1,1|U0,1|W0.1|U1,0|W0.05|U0,0'),
    );
  });

  it('usbJtag is esptool USBJTAGSerialReset', () => {
    expect(RESET_SEQUENCES.usbJtag).toEqual([
      set(false, false),
      set(false, false),
      wait(100),
      set(true, false),
      set(true, false),
      wait(100),
      set(true, true),
      set(false, true),
      set(false, true),
      wait(100),
      set(false, false),
      set(false, false),
    ]);
    expect(RESET_SEQUENCES.usbJtag).toEqual(
      parseResetSequence('R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|W0.1|R0|D0'),
    );
  });

  it('hard is an RTS pulse with GPIO0 high', () => {
    expect(RESET_SEQUENCES.hard).toEqual([set(false, true), wait(100), set(false, false)]);
    const states = RESET_SEQUENCES.hard.flatMap((step) => ('set' in step ? [step.set] : []));
    expect(states.map(pinEffect)).toEqual([
      { en: 'low', gpio0: 'high' },
      { en: 'high', gpio0: 'high' },
    ]);
  });

  it('download-mode sequences hold EN low, then release it with GPIO0 low', () => {
    for (const name of ['classic', 'tight'] as const) {
      const effects = RESET_SEQUENCES[name].flatMap((step) =>
        'set' in step ? [pinEffect(step.set)] : [],
      );
      const reset = effects.findIndex((effect) => effect.en === 'low');
      const download = effects.findIndex((effect) => effect.gpio0 === 'low');
      expect(reset, name).toBeGreaterThanOrEqual(0);
      expect(download, name).toBeGreaterThan(reset);
      expect(effects[download]?.en, name).toBe('high');
    }
  });

  it('every sequence ends with both lines released and is frozen', () => {
    for (const [name, steps] of Object.entries(RESET_SEQUENCES)) {
      expect(steps.at(-1), name).toEqual({ set: SAFE_LINES });
      expect(Object.isFrozen(steps), name).toBe(true);
      for (const step of steps) expect(Object.isFrozen(step), name).toBe(true);
    }
  });

  it('BOOT_CLICK pulls GPIO0 low with EN high for ~100 ms, then releases both', () => {
    expect(BOOT_CLICK).toEqual([set(true, false), wait(100), set(false, false)]);
    const first = BOOT_CLICK[0];
    expect(first && 'set' in first ? pinEffect(first.set) : undefined).toEqual({
      en: 'high',
      gpio0: 'low',
    });
  });
});

describe('parseResetSequence', () => {
  it('keeps the other line in D and R steps', () => {
    expect(parseResetSequence('D1|R1|D0|R0')).toEqual([
      set(true, false),
      set(true, true),
      set(false, true),
      set(false, false),
    ]);
  });

  it('starts from a given state', () => {
    expect(parseResetSequence('R0', { dtr: true, rts: true })).toEqual([set(true, false)]);
  });

  it('converts W seconds to milliseconds, tolerating spaces and lowercase', () => {
    expect(parseResetSequence(' d1 | w0.25 | u 0, 1 |W0')).toEqual([
      set(true, false),
      wait(250),
      set(false, true),
      wait(0),
    ]);
  });

  it.each([
    ['', 'empty'],
    ['D0||R1', "step ''"],
    ['X1', "'X1'"],
    ['D2', 'expected 0 or 1'],
    ['R', 'expected 0 or 1'],
    ['W', 'W<seconds>'],
    ['W-1', 'W<seconds>'],
    ['Wabc', 'W<seconds>'],
    ['W11', 'W<seconds>'],
    ['U1', 'U<dtr>,<rts>'],
    ['U1,0,1', 'U<dtr>,<rts>'],
  ])('rejects %j', (text, fragment) => {
    let caught: unknown;
    try {
      parseResetSequence(text);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(SerialError);
    expect((caught as SerialError).code).toBe('OPTION_INVALID');
    expect((caught as SerialError).message).toContain(fragment);
  });

  it('one set step per D/R/U token, the untouched line carried over', () => {
    const token = fc.oneof(
      fc.record({ kind: fc.constantFrom('D', 'R'), level: fc.boolean() }),
      fc.record({ kind: fc.constant('U'), dtr: fc.boolean(), rts: fc.boolean() }),
      fc.record({ kind: fc.constant('W'), ms: fc.integer({ min: 0, max: 2000 }) }),
    );
    fc.assert(
      fc.property(fc.array(token, { minLength: 1, maxLength: 20 }), (tokens) => {
        const text = tokens
          .map((t) => {
            if ('ms' in t) return `W${t.ms / 1000}`;
            if ('dtr' in t) return `U${Number(t.dtr)},${Number(t.rts)}`;
            return `${t.kind}${Number(t.level)}`;
          })
          .join('|');
        const steps = parseResetSequence(text);
        expect(steps).toHaveLength(tokens.length);
        let state: LineState = { ...SAFE_LINES };
        tokens.forEach((t, index) => {
          if ('ms' in t) {
            expect(steps[index]).toEqual({ waitMs: t.ms });
            return;
          }
          if ('dtr' in t) state = { dtr: t.dtr, rts: t.rts };
          else if (t.kind === 'D') state = { dtr: t.level, rts: state.rts };
          else state = { dtr: state.dtr, rts: t.level };
          expect(steps[index]).toEqual({ set: state });
        });
      }),
    );
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

describe('line order per platform (issue 10, item 4)', () => {
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
    // Without planning, the Windows driver does both: the bug of issue 10, item 4.
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

describe('openSafely (binding-mock)', () => {
  beforeEach(() => {
    MockBinding.reset();
  });
  afterEach(() => {
    MockBinding.reset();
  });

  const close = (port: { close(callback: (error: Error | null) => void): void }) =>
    new Promise<void>((resolve, reject) =>
      port.close((error) => (error ? reject(error) : resolve())),
    );

  it('opens with hupcl false and sets both lines released first thing', async () => {
    MockBinding.createPort('/dev/ROBOT', { record: true });
    const { binding, sets, opened } = recordingBinding();
    const port = await openSafely('/dev/ROBOT', { baudRate: 115200, binding });
    expect(port.isOpen).toBe(true);
    expect(port.baudRate).toBe(115200);
    expect(opened[0]?.openOptions.hupcl).toBe(false);
    expect(sets).toHaveLength(1);
    expect(sets[0]).toMatchObject({ dtr: false, rts: false });
    await close(port);
  });

  it('accepts the mock binding itself', async () => {
    MockBinding.createPort('/dev/ROBOT');
    const port = await openSafely('/dev/ROBOT', { baudRate: 921600, binding: MockBinding });
    expect(port.isOpen).toBe(true);
    await close(port);
  });

  it('leaves a usable port: a BOOT click through lineSetterFor reaches the binding', async () => {
    MockBinding.createPort('/dev/ROBOT');
    const { binding, sets } = recordingBinding();
    const port = await openSafely('/dev/ROBOT', { baudRate: 115200, binding });
    await runLineSteps(lineSetterFor(port), BOOT_CLICK, { sleep: async () => {} });
    expect(sets.map((flags) => ({ dtr: flags.dtr, rts: flags.rts }))).toEqual([
      { dtr: false, rts: false },
      { dtr: true, rts: false },
      { dtr: false, rts: false },
    ]);
    await close(port);
  });

  it('rejects PORT_NOT_FOUND for a missing port', async () => {
    const error = await rejection(
      openSafely('/dev/NOPE', { baudRate: 115200, binding: MockBinding }),
    );
    expect(error).toBeInstanceOf(SerialError);
    expect((error as SerialError).code).toBe('PORT_NOT_FOUND');
    expect((error as SerialError).message).toContain('/dev/NOPE');
  });

  it('rejects PORT_BUSY for a port already open (locked)', async () => {
    MockBinding.createPort('/dev/ROBOT');
    const first = await openSafely('/dev/ROBOT', { baudRate: 115200, binding: MockBinding });
    const error = await rejection(
      openSafely('/dev/ROBOT', { baudRate: 115200, binding: MockBinding }),
    );
    expect((error as SerialError).code).toBe('PORT_BUSY');
    await close(first);
  });

  it('closes the port again when the first set() fails', async () => {
    MockBinding.createPort('/dev/ROBOT');
    const { binding, closes } = recordingBinding({
      set: () => Promise.reject(new Error('ioctl failed')),
    });
    await expect(openSafely('/dev/ROBOT', { baudRate: 115200, binding })).rejects.toThrow(
      'ioctl failed',
    );
    await vi.waitFor(() => expect(closes).toEqual(['/dev/ROBOT']));
  });

  it('bounds an open() that never completes', async () => {
    const hanging: BindingInterface = {
      list: async () => [],
      open: () => new Promise(() => {}),
    };
    const error = await rejection(
      openSafely('/dev/HANG', { baudRate: 115200, binding: hanging, timeoutMs: 20 }),
    );
    expect((error as SerialError).code).toBe('PORT_BUSY');
    expect((error as SerialError).message).toContain('20 ms');
  });
});

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

/** MockBinding whose first opens fail with a given error, as a real driver words it. */
function refusingBinding(failures: string[]) {
  const attempts: string[] = [];
  const binding: BindingInterface = {
    list: () => MockBinding.list(),
    async open(options) {
      attempts.push(options.path);
      const failure = failures.shift();
      if (failure !== undefined) throw new Error(failure.replace('<path>', options.path));
      return MockBinding.open(options);
    },
  };
  return { binding, attempts };
}

const EBUSY = 'Error: Device or resource busy, cannot open <path>';
const EACCES = 'Error: Permission denied, cannot open <path>';
const ENOENT = 'Error: No such file or directory, cannot open <path>';

describe('openSafely retries a port that just came back (issue 10, item 10)', () => {
  beforeEach(() => {
    MockBinding.reset();
    MockBinding.createPort('/dev/ttyACM1');
  });
  afterEach(() => {
    vi.useRealTimers();
    MockBinding.reset();
  });

  const closePort = (port: { close(callback: (error: Error | null) => void): void }) =>
    new Promise<void>((resolve) => port.close(() => resolve()));

  it('retries EBUSY (ModemManager probing) and EACCES (udev not done yet) until it opens', async () => {
    vi.useFakeTimers();
    const { binding, attempts } = refusingBinding([EBUSY, EBUSY, EACCES]);
    const opening = openSafely('/dev/ttyACM1', { baudRate: 115200, binding });
    await vi.advanceTimersByTimeAsync(1000);
    const port = await opening;
    expect(port.isOpen).toBe(true);
    expect(attempts).toHaveLength(4);
    await closePort(port);
  });

  it('gives up after retryMs (default a few seconds) with a PORT_BUSY that says why', async () => {
    vi.useFakeTimers();
    expect(OPEN_RETRY_MS).toBe(3000);
    const { binding, attempts } = refusingBinding(Array(100).fill(EBUSY));
    const opening = rejection(openSafely('/dev/ttyACM1', { baudRate: 115200, binding }));
    await vi.advanceTimersByTimeAsync(2900);
    expect(attempts.length).toBeGreaterThan(3);
    const before = attempts.length;
    await vi.advanceTimersByTimeAsync(1000);
    const error = await opening;
    expect(attempts.length).toBeGreaterThan(before);
    expect(error).toBeInstanceOf(SerialError);
    expect((error as SerialError).code).toBe('PORT_BUSY');
    expect((error as Error).message).toMatch(
      /^\/dev\/ttyACM1 is busy \(still, after retrying for 3 s\): Error: Device or resource busy.*ModemManager/,
    );
  });

  it('names the permission problem when EACCES persists', async () => {
    vi.useFakeTimers();
    const { binding } = refusingBinding(Array(100).fill(EACCES));
    const opening = rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding, retryMs: 500 }),
    );
    await vi.advanceTimersByTimeAsync(1000);
    const error = (await opening) as SerialError;
    expect(error.code).toBe('PORT_BUSY');
    expect(error.message).toMatch(
      /permission denied \(still, after retrying for 0\.5 s\).*dialout/,
    );
  });

  it('retries a missing node only just after the port was found again', async () => {
    const once = refusingBinding([ENOENT]);
    const error = await rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding: once.binding }),
    );
    expect((error as SerialError).code).toBe('PORT_NOT_FOUND');
    expect(once.attempts).toHaveLength(1);

    vi.useFakeTimers();
    const found = refusingBinding([ENOENT, ENOENT]);
    const opening = openSafely('/dev/ttyACM1', {
      baudRate: 115200,
      binding: found.binding,
      justFound: true,
    });
    await vi.advanceTimersByTimeAsync(500);
    const port = await opening;
    expect(found.attempts).toHaveLength(3);
    await closePort(port);
  });

  it('does not retry a port locked by another serialport user, nor with retryMs 0', async () => {
    const first = await openSafely('/dev/ttyACM1', { baudRate: 115200, binding: MockBinding });
    const locked = await rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding: MockBinding }),
    );
    expect((locked as SerialError).code).toBe('PORT_BUSY');
    expect((locked as Error).message).toContain('in use by another process');
    await closePort(first);
    const once = refusingBinding([EBUSY]);
    const error = await rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding: once.binding, retryMs: 0 }),
    );
    expect((error as SerialError).code).toBe('PORT_BUSY');
    expect((error as Error).message).not.toContain('retrying');
    expect(once.attempts).toHaveLength(1);
  });

  it('stops retrying when aborted', async () => {
    vi.useFakeTimers();
    const { binding, attempts } = refusingBinding(Array(100).fill(EBUSY));
    const controller = new AbortController();
    const opening = rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding, signal: controller.signal }),
    );
    await vi.advanceTimersByTimeAsync(200);
    const reason = new Error('stop');
    controller.abort(reason);
    expect(await opening).toBe(reason);
    const tried = attempts.length;
    await vi.advanceTimersByTimeAsync(5000);
    expect(attempts).toHaveLength(tried);
  });
});
